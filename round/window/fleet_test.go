package window_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/window"
)

func TestAdmitFleetCheck(t *testing.T) {
	closed := func(n string) *round.NodeState {
		return &round.NodeState{Position: round.Position{Node: n}, Window: round.WindowClosed}
	}
	open := closed("gpu-2")
	open.Window = round.WindowOpen
	pending := closed("gpu-3")
	pending.Window = round.WindowPending
	for _, tc := range []struct {
		name    string
		st      *round.State
		refused []string // reasons named; none: admitted
		next    string
	}{
		{name: "no order yet", st: &round.State{}, refused: []string{"not yet: the round has no order"}, next: "plan_round"},
		{name: "a window open, one pending", st: &round.State{Plan: &round.Schedule{}, Nodes: []*round.NodeState{closed("gpu-1"), open, pending}},
			refused: []string{"not closed: gpu-2 (" + string(round.WindowOpen) + "), gpu-3 (" + string(round.WindowPending) + ")", "nothing was checked or recorded"}, next: "Not yet"},
		{name: "every window closed", st: &round.State{Plan: &round.Schedule{}, Nodes: []*round.NodeState{closed("gpu-1"), closed("cp-1")}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := window.AdmitFleetCheck(tc.st)
			if len(tc.refused) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var ref *window.Refusal
			if !errors.As(err, &ref) || !strings.Contains(ref.Next, tc.next) {
				t.Fatalf("got %v, want a refusal", err)
			}
			for _, r := range tc.refused {
				if !strings.Contains(ref.Error(), r) {
					t.Errorf("refusal %q does not name %q", ref.Error(), r)
				}
			}
		})
	}
}

func TestJudgeFleet(t *testing.T) {
	ks := []window.FleetKernel{
		{Node: "cp-1", Kernel: "6.8.0-51-generic", Target: "6.8.0-51-generic"},
		{Node: "cpu-1", Kernel: "6.8.0-48-generic"}, // the round installed nothing there
		{Node: "gpu-1", Kernel: "6.8.0-48-generic", Target: "6.8.0-51-generic"},
		{Node: "gpu-2", Err: errors.New("dial tcp: refused"), Target: "6.8.0-51-generic"},
	}
	if d := cmp.Diff([]bool{true, true, false, false}, []bool{ks[0].OK(), ks[1].OK(), ks[2].OK(), ks[3].OK()}); d != "" {
		t.Errorf("OK (-want +got):\n%s", d)
	}
	want := []string{"gpu-1 runs 6.8.0-48-generic, the round installed 6.8.0-51-generic", "gpu-2: not reachable (dial tcp: refused)"}
	if d := cmp.Diff(want, window.JudgeFleet(ks)); d != "" {
		t.Errorf("left behind (-want +got):\n%s", d)
	}
	if bad := window.JudgeFleet(ks[:2]); len(bad) != 0 {
		t.Errorf("a consistent fleet: %q", bad)
	}
}
