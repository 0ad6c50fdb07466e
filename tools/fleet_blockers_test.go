package tools

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A node the preflight cannot read is a blocker of the plan: plan_round
// writes and commits the plan with it, named in plan.md, and stops the
// round before its first window; sign_plan will not sign it, no drain
// runs, round_status names no call (a person decides); once the node
// answers and a person signed resume, plan_round writes a ready plan and
// it is signed.
func TestFleetPlanWithAnUnreachableNode(t *testing.T) {
	f := newFleet(t)
	f.host("gpu-2").Unreachable = true
	_, res := f.call("plan_round", map[string]any{"round": fRound})
	if res.Status != StatusFailed || !strings.Contains(reasons(res), "gpu-2: not reachable") {
		t.Fatalf("plan_round with gpu-2 down: %s %v", res.Status, res.Reasons)
	}
	md, err := os.ReadFile(filepath.Join(f.repo, "rounds", fRound, fleetPlanMD))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "gpu-2") || !strings.Contains(string(md), "connection refused") {
		t.Fatalf("plan.md does not name gpu-2's unread preflight:\n%s", md)
	}
	if st := f.state(); st.Stop == nil {
		t.Fatal("a plan with a blocker did not stop the round")
	}
	if _, res := f.call("sign_plan", nil); res.Status == StatusOK || res.Status == StatusApprovalRequired {
		t.Fatalf("sign_plan with blockers: %s %v", res.Status, res.Reasons)
	}
	if st := f.must(StatusOK, "round_status", nil); st["next_call"] != nil {
		t.Fatalf("round_status of a stopped round names %v", st["next_call"])
	}
	if _, res := f.call("drain_node", map[string]any{"node": "cp-1"}); res.Status != StatusRefused {
		t.Fatalf("a drain under a blocked plan: %s %v", res.Status, res.Reasons)
	}

	f.host("gpu-2").Unreachable = false
	if res := f.decide(map[string]any{"decision": "resume", "reason": "gpu-2 is back"}); res.Status != StatusOK {
		t.Fatalf("resume: %s %v", res.Status, res.Reasons)
	}
	f.must(StatusOK, "plan_round", map[string]any{"round": fRound})
	if _, res := f.approve("sign_plan", nil); res.Status != StatusOK {
		t.Fatalf("sign_plan: %s %v", res.Status, res.Reasons)
	}
}
