package tools

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-patch/mcp-patch/round/service"
)

// replan_node on the fleet rig: a node whose package set changed after
// the signature gets a new plan revision, committed; sign_plan then asks
// only for what changed, and the window runs under the re-signed plan. A
// drained node is re-planned for the steps ahead; once its install
// started, its plan is fixed.
func TestFleetReplanSignsOnlyTheChange(t *testing.T) {
	f := newFleet(t)
	if _, res := f.call("replan_node", map[string]any{"node": "gpu-2"}); res.Status != StatusRefused {
		t.Fatalf("replan before plan_round: %s %v", res.Status, res.Reasons)
	}
	f.planned()
	planFile := filepath.Join(f.repo, "rounds", fRound, service.FleetPlanFile)
	signed, _ := os.ReadFile(planFile)

	m := f.must(StatusOK, "replan_node", map[string]any{"node": "gpu-2"})
	if ch, _ := m["changed"].([]any); len(ch) != 0 || !strings.Contains(strings.Join(f.lastReasons(m), " "), "nothing changed") {
		t.Fatalf("replan of an unchanged node: %v", m)
	}
	if now, _ := os.ReadFile(planFile); string(now) != string(signed) {
		t.Fatal("a replan that changed nothing rewrote plan.json")
	}
	if _, res := f.call("replan_node", map[string]any{"node": "gpu-9"}); res.Status != StatusRefused {
		t.Fatalf("replan of a node not in the plan: %s %v", res.Status, res.Reasons)
	}
	if _, res := f.call("replan_node", map[string]any{"node": "-rf"}); res.Status != StatusRefused {
		t.Fatalf("replan of a bad node name: %s %v", res.Status, res.Reasons)
	}

	// A security update landed in the archive after the signature.
	f.host("gpu-2").Digest = "sha256:" + strings.Repeat("d", 64)
	commits := gitRun(t, f.repo, "rev-list", "--all", "--count")
	m = f.must(StatusOK, "replan_node", map[string]any{"node": "gpu-2"})
	ch, _ := m["changed"].([]any)
	if len(ch) != 1 || ch[0] != "install" {
		t.Fatalf("changed %v, want [install]", m["changed"])
	}
	if !strings.Contains(strings.Join(f.lastReasons(m), " "), "gpu-2 re-planned: revision 1") {
		t.Fatalf("replan reasons: %v", m["reasons"])
	}
	if gitRun(t, f.repo, "rev-list", "--all", "--count") == commits {
		t.Fatal("the re-plan was not committed")
	}
	if now, _ := os.ReadFile(planFile); !strings.Contains(string(now), strings.Repeat("d", 64)) {
		t.Fatal("plan.json lacks the new package digest")
	}
	_, res := f.call("sign_plan", nil)
	if res.Status != StatusApprovalRequired || res.Approval == nil {
		t.Fatalf("sign_plan after the re-plan: %s %v", res.Status, res.Reasons)
	}
	if sum := strings.Join(res.Approval.Summary, "\n"); !strings.Contains(sum, "gpu-2: install") || strings.Contains(sum, "cp-1") {
		t.Fatalf("the re-sign lists more than the change:\n%s", sum)
	}
	// Before it is signed again, no window step runs.
	f.preflight("cp-1")
	if _, res := f.call("drain_node", map[string]any{"node": "cp-1", "approval": "x"}); res.Status == StatusOK {
		t.Fatal("a drain ran under a plan revision nobody signed")
	}
	if _, res := f.approve("sign_plan", nil); res.Status != StatusOK {
		t.Fatalf("sign the re-plan: %s %v", res.Status, res.Reasons)
	}

	if _, res := f.approve("drain_node", map[string]any{"node": "cp-1"}); res.Status != StatusOK {
		t.Fatalf("drain after the re-sign: %s %v", res.Status, res.Reasons)
	}
	// Drained, install not started: the steps ahead are re-planned, the
	// drain stays as reviewed.
	f.host("cp-1").Digest = "sha256:" + strings.Repeat("e", 64)
	m = f.must(StatusOK, "replan_node", map[string]any{"node": "cp-1"})
	if ch, _ := m["changed"].([]any); len(ch) != 1 || ch[0] != "install" {
		t.Fatalf("replan of a drained node changed %v, want [install]", m["changed"])
	}
	if _, res := f.approve("sign_plan", nil); res.Status != StatusOK {
		t.Fatalf("sign the second re-plan: %s %v", res.Status, res.Reasons)
	}
	f.must(StatusOK, "record_simulation", map[string]any{"node": "cp-1"})
	if _, res := f.approve("install_updates", map[string]any{"node": "cp-1"}); res.Status != StatusInProgress {
		t.Fatalf("install under the re-signed plan: %s %v", res.Status, res.Reasons)
	}
	// Once the install started, the node's plan is fixed.
	f.host("cp-1").Digest = "sha256:" + strings.Repeat("f", 64)
	before, _ := os.ReadFile(planFile)
	if _, res := f.call("replan_node", map[string]any{"node": "cp-1"}); res.Status != StatusRefused || !strings.Contains(reasons(res), "its plan is fixed") {
		t.Fatalf("replan of a node whose install started: %s %v", res.Status, res.Reasons)
	}
	if now, _ := os.ReadFile(planFile); string(now) != string(before) {
		t.Fatal("a refused replan rewrote plan.json")
	}
}

func (f *fleet) lastReasons(m map[string]any) []string {
	var out []string
	rs, _ := m["reasons"].([]any)
	for _, r := range rs {
		out = append(out, r.(string))
	}
	return out
}
