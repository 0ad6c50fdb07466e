package window_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/plan"
	"github.com/mcp-patch/mcp-patch/round/window"
)

func TestAdmitPlanRound(t *testing.T) {
	for _, tc := range []struct{ id, open, refused string }{
		{id: "2026-11"},
		{id: "2026-11", open: "2026-11"},
		{id: "../2026-11", refused: `round id "../2026-11" is not valid`},
		{id: "", refused: `round id "" is not valid`},
		{id: "2026-12", open: "2026-11", refused: "round 2026-11 is still open"},
	} {
		err := window.AdmitPlanRound(tc.id, tc.open)
		var ref *window.Refusal
		switch {
		case tc.refused == "" && err != nil:
			t.Errorf("%s (open %q): %v", tc.id, tc.open, err)
		case tc.refused != "" && (!errors.As(err, &ref) || ref.Error() != tc.refused || ref.Next == ""):
			t.Errorf("%s (open %q): got %v, want the refusal %q", tc.id, tc.open, err, tc.refused)
		}
	}
}

func TestDecidePlanOrder(t *testing.T) {
	now := time.Date(2026, 11, 3, 9, 0, 0, 0, time.UTC)
	opened := &round.State{RoundID: "2026-11", Plan: &round.Schedule{}, Current: "cp-1",
		Nodes: []*round.NodeState{{Position: round.Position{Node: "cp-1"}, Window: round.WindowOpen}}}
	for _, tc := range []struct {
		name    string
		st      *round.State
		due     bool
		refused bool
	}{
		{name: "first plan", st: &round.State{RoundID: "2026-11"}, due: true},
		{name: "planned, no window opened: planned again", st: &round.State{RoundID: "2026-11", Plan: &round.Schedule{},
			Nodes: []*round.NodeState{{Position: round.Position{Node: "cp-1"}, Window: round.WindowPending}}}, due: true},
		{name: "a window opened: the order stays", st: opened},
		{name: "closed", st: &round.State{RoundID: "2026-11", Closed: true}, refused: true},
		{name: "aborted", st: &round.State{RoundID: "2026-11", Aborted: true, Plan: &round.Schedule{}}, refused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			due, err := window.DecidePlanOrder(tc.st, now)
			var ref *window.Refusal
			if tc.refused {
				if !errors.As(err, &ref) || ref.Error() != "round 2026-11 is closed or aborted" || !strings.Contains(ref.Next, "new id") {
					t.Fatalf("got %v, want a refusal", err)
				}
				return
			}
			if err != nil || due != tc.due {
				t.Fatalf("due %v err %v, want %v", due, err, tc.due)
			}
		})
	}
}

func TestRoundClocks(t *testing.T) {
	now := time.Date(2026, 11, 3, 9, 0, 0, 0, time.UTC)
	if soak, deadline := window.RoundClocks(0, 0, now); soak != 48*time.Hour || !deadline.IsZero() {
		t.Errorf("defaults: soak %v deadline %v", soak, deadline)
	}
	if soak, deadline := window.RoundClocks(12, 14, now); soak != 12*time.Hour || !deadline.Equal(now.AddDate(0, 0, 14)) {
		t.Errorf("from the intent: soak %v deadline %v", soak, deadline)
	}
}

func TestPlanReasons(t *testing.T) {
	deadline := time.Date(2026, 11, 17, 0, 0, 0, 0, time.UTC)
	miss := "the estimate does not meet the intent's compliance deadline: tell a person (escalate, do not rush)"
	notes := []string{"cp-3 holds the VIP: last of the control plane"}
	for _, tc := range []struct {
		name     string
		est      *round.Estimate
		deadline time.Time
		want     []string
	}{
		{name: "misses the deadline", est: &round.Estimate{Meets: false}, deadline: deadline, want: append([]string{miss}, notes...)},
		{name: "meets it", est: &round.Estimate{Meets: true}, deadline: deadline, want: notes},
		{name: "no deadline", est: &round.Estimate{}, want: notes},
		{name: "no estimate", deadline: deadline, want: notes},
	} {
		if d := cmp.Diff(tc.want, window.PlanReasons(tc.est, tc.deadline, notes)); d != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, d)
		}
	}
	order := round.Order{Positions: []round.Position{{Node: "cp-1"}, {Node: "gpu-1"}}}
	if got := window.PlanNext("2026-11", order); got != "A person reads rounds/2026-11/plan.md and signs the plan (sign_plan); then start with cp-1." {
		t.Errorf("next: %q", got)
	}
}

func TestReplanScope(t *testing.T) {
	run := func(s round.StepState) *round.StepRun { return &round.StepRun{State: s} }
	accepted := &round.StepRun{State: round.Failed, RiskAccepted: true}
	for _, tc := range []struct {
		name    string
		n       *round.NodeState
		keep    []plan.Step
		refused string
	}{
		{name: "not in the round's state yet", n: nil},
		{name: "window pending", n: &round.NodeState{Position: round.Position{Node: "gpu-1"}, Window: round.WindowPending}},
		{name: "drained, install not started", n: &round.NodeState{Position: round.Position{Node: "gpu-1"}, Window: round.WindowOpen,
			Steps: map[round.Step]*round.StepRun{round.StepDrain: run(round.Done)}}, keep: []plan.Step{plan.StepDrain}},
		{name: "drained, install refused before it started", n: &round.NodeState{Position: round.Position{Node: "gpu-1"}, Window: round.WindowOpen,
			Steps: map[round.Step]*round.StepRun{round.StepDrain: run(round.Done), round.StepInstall: run(round.Pending)}}, keep: []plan.Step{plan.StepDrain}},
		{name: "drain failed, risk accepted", n: &round.NodeState{Position: round.Position{Node: "gpu-1"}, Window: round.WindowOpen,
			Steps: map[round.Step]*round.StepRun{round.StepDrain: accepted}}, keep: []plan.Step{plan.StepDrain}},
		{name: "drain in flight", n: &round.NodeState{Position: round.Position{Node: "gpu-1"}, Window: round.WindowOpen,
			Steps: map[round.Step]*round.StepRun{round.StepDrain: run(round.InFlight)}}, refused: "the window of gpu-1 is open past its drain"},
		{name: "install in flight", n: &round.NodeState{Position: round.Position{Node: "gpu-1"}, Window: round.WindowOpen,
			Steps: map[round.Step]*round.StepRun{round.StepDrain: run(round.Done), round.StepInstall: run(round.InFlight)}}, refused: "its plan is fixed"},
		{name: "window closed", n: &round.NodeState{Position: round.Position{Node: "gpu-1"}, Window: round.WindowClosed}, refused: "the window of gpu-1 is closed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keep, err := window.ReplanScope(tc.n)
			if tc.refused != "" {
				var r *window.Refusal
				if !errors.As(err, &r) || !strings.Contains(err.Error(), tc.refused) || keep != nil {
					t.Fatalf("ReplanScope = %v, %v; want a refusal saying %q", keep, err, tc.refused)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.keep, keep); d != "" {
				t.Errorf("steps kept (-want +got):\n%s", d)
			}
		})
	}
}
