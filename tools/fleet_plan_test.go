package tools

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mcp-patch/mcp-patch/round/service"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// plan_round on the cluster: the order (control plane first, the canary
// next), the baseline, the reviewed plan written and committed with the
// real git; the person signs it with ssh-keygen; calling plan_round again
// changes nothing.
func TestFleetPlanRoundWritesAndCommitsThePlan(t *testing.T) {
	f := newFleet(t)
	m := f.must(StatusOK, "plan_round", map[string]any{"round": fRound})
	var order []string
	for _, p := range m["order"].(map[string]any)["positions"].([]any) {
		order = append(order, p.(map[string]any)["node"].(string))
	}
	if strings.Join(order, " ") != "cp-1 gpu-1 gpu-2" {
		t.Fatalf("order %v, want cp-1 (control plane), gpu-1 (canary), gpu-2", order)
	}
	st := f.state()
	if !st.BaselineTaken || st.Plan == nil {
		t.Fatalf("baseline taken %v, plan %v", st.BaselineTaken, st.Plan)
	}
	for _, name := range []string{service.FleetPlanFile, service.FleetPlanMD, window.BaselineFile} {
		if _, err := os.Stat(filepath.Join(f.repo, "rounds", fRound, name)); err != nil {
			t.Errorf("%s not written: %v", name, err)
		}
	}
	if log := gitRun(t, f.repo, "log", "--all", "--format=%s"); !strings.Contains(log, "round "+fRound+": plan") {
		t.Fatalf("plan not committed:\n%s", log)
	}
	md, _ := os.ReadFile(filepath.Join(f.repo, "rounds", fRound, service.FleetPlanMD))
	for _, want := range []string{"cp-1", "gpu-1", "gpu-2", fTarget, "inference/ReplicaSet/model-5c"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("plan.md lacks %q:\n%s", want, md)
		}
	}
	before, _ := os.ReadFile(filepath.Join(f.repo, "rounds", fRound, service.FleetPlanFile))
	f.must(StatusOK, "plan_round", map[string]any{"round": fRound})
	after, _ := os.ReadFile(filepath.Join(f.repo, "rounds", fRound, service.FleetPlanFile))
	if string(before) != string(after) {
		t.Fatalf("plan_round again on an unchanged cluster rewrote the plan (-before +after):\n%s", cmp.Diff(string(before), string(after)))
	}

	_, res := f.call("sign_plan", nil)
	if res.Status != StatusApprovalRequired {
		t.Fatalf("sign_plan without approval: %s %v", res.Status, res.Reasons)
	}
	stranger := newSigner(t, t.TempDir(), "mallory@example.org")
	if _, res := f.call("sign_plan", map[string]any{"approval": stranger.sign(t, res.Approval.Request)}); res.Status != StatusRefused {
		t.Fatalf("a plan signed by a key not in allowed_signers: %s %v", res.Status, res.Reasons)
	}
	if _, res := f.approve("sign_plan", nil); res.Status != StatusOK {
		t.Fatalf("sign_plan: %s %v", res.Status, res.Reasons)
	}
	m = f.must(StatusOK, "show_plan", nil)
	if p, _ := m["plan"].(map[string]any); p == nil || p["signed"] != true {
		t.Fatalf("show_plan after signing: %v", m["plan"])
	}
}

// The archive changes after the plan was signed and cp-1 was drained: its
// install is refused with the diff against the reviewed plan and nothing
// runs on the host; replan_node re-plans the steps ahead (the drain,
// done, stays as reviewed), sign_plan asks a person for only the change,
// and, once the window's simulation is recorded again, the install runs
// the re-planned set. Once install has started
// the node's plan is fixed.
func TestFleetDriftAfterTheDrainIsRePlannedAndReSigned(t *testing.T) {
	f := newFleet(t)
	f.planned()
	f.preflight("cp-1")
	if _, res := f.approve("drain_node", map[string]any{"node": "cp-1"}); res.Status != StatusOK {
		t.Fatalf("drain: %s %v", res.Status, reasons(res))
	}
	reviewed := f.host("cp-1").Digest
	f.host("cp-1").Digest = "sha256:" + strings.Repeat("d", 64) // a package published since
	_, res := f.call("install_updates", map[string]any{"node": "cp-1"})
	why := strings.Join(res.Reasons, "\n")
	if res.Status != StatusRefused || !strings.Contains(why, "the package plan changed") || !strings.Contains(why, "- "+reviewed) ||
		!strings.Contains(res.NextAction, "replan_node") || f.host("cp-1").Count("install") != 0 {
		t.Fatalf("install of a drifted package set: %s %q next %q, installs %d", res.Status, why, res.NextAction, f.host("cp-1").Count("install"))
	}
	m := f.must(StatusOK, "replan_node", map[string]any{"node": "cp-1"})
	if diff := cmp.Diff([]any{"install"}, m["changed"]); diff != "" {
		t.Fatalf("re-plan of a drained node changed (-want +got):\n%s", diff)
	}
	_, res = f.call("sign_plan", nil)
	if res.Status != StatusApprovalRequired || res.Approval == nil || !strings.Contains(strings.Join(res.Approval.Summary, "\n"), "cp-1: install") ||
		strings.Contains(strings.Join(res.Approval.Summary, "\n"), "cp-1: drain") {
		t.Fatalf("sign_plan after the re-plan: %s %v", res.Status, res.Approval)
	}
	if _, res := f.approve("sign_plan", nil); res.Status != StatusOK {
		t.Fatalf("sign the re-plan: %s %v", res.Status, res.Reasons)
	}
	// The window's own record of the simulation is taken again, as install
	// asks of a package set that changed since it was recorded.
	f.must(StatusOK, "record_simulation", map[string]any{"node": "cp-1"})
	if _, res := f.approve("install_updates", map[string]any{"node": "cp-1"}); res.Status != StatusInProgress || f.host("cp-1").Count("install") != 1 {
		t.Fatalf("install of the re-planned set: %s %v", res.Status, reasons(res))
	}
	if _, res := f.call("replan_node", map[string]any{"node": "cp-1"}); res.Status != StatusRefused || !strings.Contains(reasons(res), "its plan is fixed") {
		t.Fatalf("re-plan once install started: %s %v", res.Status, res.Reasons)
	}
}
