package window_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/window"
)

func TestNextCall(t *testing.T) {
	inFlight := func(step round.Step) map[round.Step]*round.StepRun {
		return map[round.Step]*round.StepRun{step: {State: round.InFlight}}
	}
	for _, tc := range []struct {
		name   string
		next   *round.Next
		nodes  []*round.NodeState
		rsteps map[round.Step]*round.StepRun
		want   *window.Call
	}{
		{name: "a decision is no call", next: &round.Next{Decision: round.DecisionResume, Node: "gpu-1"}},
		{name: "a wait is no call", next: &round.Next{Step: round.StepFleetCheck, Tool: "record_fleet_check", WaitUntil: time.Unix(1, 0)}},
		{name: "close", next: &round.Next{Step: round.StepClose, Tool: "whatever"}, want: &window.Call{Tool: "close_round"}},
		{name: "plan", next: &round.Next{Step: round.StepPlan}, want: &window.Call{Tool: "plan_round", Round: "2026-11"}},
		{name: "baseline", next: &round.Next{Step: round.StepBaseline}, want: &window.Call{Tool: "plan_round", Round: "2026-11"}},
		{name: "the next step's tool on its node", next: &round.Next{Step: round.StepDrain, Tool: "drain_node", Node: "gpu-1"},
			want: &window.Call{Tool: "drain_node", Node: "gpu-1"}},
		{name: "a round step's tool", next: &round.Next{Step: round.StepFleetCheck, Tool: "record_fleet_check"}, want: &window.Call{Tool: "record_fleet_check"}},
		{name: "a step without a tool", next: &round.Next{Step: round.StepSoak}},
		{name: "nothing next, a node step in flight",
			nodes: []*round.NodeState{{Position: round.Position{Node: "cp-1"}}, {Position: round.Position{Node: "gpu-1"}, Steps: inFlight(round.StepInstall)}},
			want:  &window.Call{Tool: "install_updates", Node: "gpu-1"}},
		{name: "nothing next, a round step in flight", rsteps: inFlight(round.StepAutoremove), want: &window.Call{Tool: "autoremove"}},
		{name: "the soak in flight is no call", rsteps: inFlight(round.StepSoak)},
		{name: "nothing at all"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &round.State{RoundID: "2026-11", Nodes: tc.nodes, RoundSteps: tc.rsteps}
			if d := cmp.Diff(tc.want, window.NextCall(st, round.Status{Next: tc.next})); d != "" {
				t.Fatalf("next call (-want +got):\n%s", d)
			}
		})
	}
}

func TestStatusReasons(t *testing.T) {
	got := window.StatusReasons(round.Status{Stop: &round.Stop{Node: "gpu-1", Step: round.StepInstall, Reason: "apt failed"},
		NeedsRecheck: []round.Target{{Node: "gpu-1", Step: round.StepInstall}}})
	want := []string{"stopped at install on gpu-1: apt failed",
		"install on gpu-1 was in flight when the server stopped: call its tool again to re-check it"}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("reasons (-want +got):\n%s", d)
	}
	if got := window.StatusReasons(round.Status{}); len(got) != 0 {
		t.Fatalf("nothing held up: %q", got)
	}
	since := time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)
	got = window.StatusReasons(round.Status{
		Waits: []round.Wait{{Node: "gpu-2", Since: since, Until: since.Add(30 * time.Minute),
			Holders: []round.Holder{{Actor: "kured", Who: "gpu-7"}, {Actor: "node-maintenance", Who: "network-operator"}}}},
		KuredLock: &round.KuredLockState{Held: true, Failure: "forbidden"}})
	want = []string{"the drain of gpu-2 waits for another party since 2026-12-07T03:00:00Z, at most until 2026-12-07T03:30:00Z, then stops for a person: kured (gpu-7), node-maintenance (network-operator)",
		"kured's reboot lock was not given back: forbidden"}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("reasons with a wait (-want +got):\n%s", d)
	}
}
