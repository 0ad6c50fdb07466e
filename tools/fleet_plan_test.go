package tools

import (
	"github.com/google/go-cmp/cmp"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	for _, name := range []string{fleetPlanFile, fleetPlanMD, baselineFile} {
		if _, err := os.Stat(filepath.Join(f.repo, "rounds", fRound, name)); err != nil {
			t.Errorf("%s not written: %v", name, err)
		}
	}
	if log := gitRun(t, f.repo, "log", "--all", "--format=%s"); !strings.Contains(log, "round "+fRound+": plan") {
		t.Fatalf("plan not committed:\n%s", log)
	}
	md, _ := os.ReadFile(filepath.Join(f.repo, "rounds", fRound, fleetPlanMD))
	for _, want := range []string{"cp-1", "gpu-1", "gpu-2", fTarget, "inference/ReplicaSet/model-5c"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("plan.md lacks %q:\n%s", want, md)
		}
	}
	before, _ := os.ReadFile(filepath.Join(f.repo, "rounds", fRound, fleetPlanFile))
	f.must(StatusOK, "plan_round", map[string]any{"round": fRound})
	after, _ := os.ReadFile(filepath.Join(f.repo, "rounds", fRound, fleetPlanFile))
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
