package tools

import (
	"strings"
	"testing"
)

// follow plays an agent that knows nothing but round_status: it makes the
// next_call the status names (signing what needs a signature, letting the
// host finish what runs on it) until the status names no call or stop is
// called. It answers the calls made, "tool node" each.
func (f *fleet) follow(stop string, max int) []string {
	f.t.Helper()
	var made []string
	for range max {
		m := f.must(StatusOK, "round_status", nil)
		nc, _ := m["next_call"].(map[string]any)
		if nc == nil {
			return made
		}
		tool := nc["tool"].(string)
		args, _ := nc["arguments"].(map[string]any)
		node, _ := args["node"].(string)
		made = append(made, strings.TrimSpace(tool+" "+node))
		if tool+" "+node == stop {
			return made
		}
		_, res := f.call(tool, args)
		if res.Status == StatusApprovalRequired {
			_, res = f.approve(tool, args)
		}
		switch {
		case res.Status == StatusInProgress && tool == "install_updates":
			f.host(node).InstallState = "finished"
		case res.Status == StatusInProgress && tool == "trial_boot":
			f.host(node).Boot(false)
		case res.Status == StatusInProgress && tool == "close_window":
			return made
		case res.Status != StatusOK && res.Status != StatusInProgress:
			f.t.Fatalf("%s %v as next_call: %s %v (calls so far %v)", tool, args, res.Status, res.Reasons, made)
		}
	}
	f.t.Fatalf("round_status still names calls after %d: %v", max, made)
	return nil
}

// before says a comes before b in calls.
func before(calls []string, a, b string) bool {
	i, j := -1, -1
	for k, c := range calls {
		if c == a && i < 0 {
			i = k
		}
		if c == b && j < 0 {
			j = k
		}
	}
	return i >= 0 && j > i
}

// An agent that only follows round_status's next_call takes the round
// from its plan through the control-plane window (each step signed on
// its own) to the gate, and through the canary's window, whose one
// signature (approve_window) comes before its drain; a stopped round
// names no call: a person decides.
func TestFleetNextCallLeadsTheRound(t *testing.T) {
	f := newFleet(t)
	f.must(StatusOK, "plan_round", map[string]any{"round": fRound})
	calls := f.follow("", 40)
	for _, pair := range [][2]string{
		{"record_simulation cp-1", "sign_plan"}, {"sign_plan", "drain_node cp-1"}, {"drain_node cp-1", "install_updates cp-1"}, {"install_updates cp-1", "trial_boot cp-1"},
		{"trial_boot cp-1", "promote_kernel cp-1"}, {"promote_kernel cp-1", "close_window cp-1"},
	} {
		if !before(calls, pair[0], pair[1]) {
			t.Errorf("%q does not come before %q in %v", pair[0], pair[1], calls)
		}
	}
	for _, c := range calls {
		if strings.HasSuffix(c, "gpu-1") || strings.HasSuffix(c, "gpu-2") {
			t.Fatalf("a call for another node while cp-1's window is open: %v", calls)
		}
	}
	if f.host("cp-1").Count("promote") != 1 {
		t.Fatalf("cp-1 promoted %d times", f.host("cp-1").Count("promote"))
	}

	// The gate cannot be green here: past its settle time it stops the
	// round, and the status names no call.
	f.advance(f.d.Config.Kube.GateSettle.D() + 1)
	f.must(StatusFailed, "close_window", map[string]any{"node": "cp-1"})
	m := f.must(StatusOK, "round_status", nil)
	if m["next_call"] != nil {
		t.Fatalf("a stopped round names a call: %v", m["next_call"])
	}
	if res := f.decide(map[string]any{"decision": "residual_risk_accepted", "node": "cp-1", "step": "gate",
		"reason": "etcd is watched by hand in this test cluster", "review_trigger": "next-round:2026-12"}); res.Status != StatusOK {
		t.Fatalf("accept the red gate: %s %v", res.Status, res.Reasons)
	}
	if h := f.leaseHolder(); h != "" {
		t.Fatalf("the window Lease is held by %q after the accepted gate closed the window", h)
	}
	if res := f.decide(map[string]any{"decision": "resume", "reason": "risk accepted"}); res.Status != StatusOK {
		t.Fatalf("resume: %s %v", res.Status, res.Reasons)
	}

	calls = f.follow("drain_node gpu-1", 20)
	if !before(append(calls, ""), "approve_window gpu-1", "drain_node gpu-1") {
		t.Fatalf("the canary's window signature is not asked before its drain: %v", calls)
	}
}
