package window_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/window"
)

func decisionState(stop *round.Stop, current string) *round.State {
	return &round.State{RoundID: "2026-11", Current: current, Stop: stop, Nodes: []*round.NodeState{
		{Position: round.Position{Node: "cp-1"}}, {Position: round.Position{Node: "vm-1", VM: true}}, {Position: round.Position{Node: "gpu-1"}},
	}}
}

func TestDecisionNode(t *testing.T) {
	stopped := &round.Stop{Seq: 7, Node: "gpu-1", Step: round.StepInstall, Reason: "apt failed"}
	fleetStop := &round.Stop{Seq: 9, Step: round.StepFleetCheck, Reason: "cp-1 behind"}
	for _, tc := range []struct {
		name    string
		stop    *round.Stop
		current string
		d       round.DecisionName
		node    string
		want    string
	}{
		{name: "named node wins", stop: stopped, d: round.DecisionResume, node: "cp-1", want: "cp-1"},
		{name: "where the round stopped", stop: stopped, d: round.DecisionResume, want: "gpu-1"},
		{name: "accepted risk without a node is fleet-wide", d: round.DecisionResidualRiskAccepted, current: "gpu-1", want: round.FleetWide},
		{name: "fleet stop, accepted risk", stop: fleetStop, d: round.DecisionResidualRiskAccepted, want: round.FleetWide},
		{name: "abort outside a stop: the open window", d: round.DecisionAbort, current: "gpu-1", want: "gpu-1"},
		{name: "abort outside a stop and a window: the first node", d: round.DecisionAbort, want: "cp-1"},
		{name: "snapshot outside a stop names none", d: round.DecisionHypervisorSnapshotTaken, current: "gpu-1", want: ""},
		{name: "snapshot during a fleet-wide stop: the node at hand", stop: fleetStop, d: round.DecisionHypervisorSnapshotTaken, current: "vm-1", want: "vm-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := window.DecisionNode(decisionState(tc.stop, tc.current), tc.d, tc.node); got != tc.want {
				t.Fatalf("node %q, want %q", got, tc.want)
			}
		})
	}
	if got := window.DecisionNode(&round.State{}, round.DecisionAbort, ""); got != "" {
		t.Fatalf("a round without nodes: %q, want none", got)
	}
}

func TestDecideDecision(t *testing.T) {
	stopped := &round.Stop{Seq: 7, Node: "gpu-1", Step: round.StepInstall, Reason: "apt failed"}
	for _, tc := range []struct {
		name     string
		stop     *round.Stop
		closed   bool
		d        round.DecisionName
		node     string
		step     round.Step
		wantStep round.Step
		bound    bool
		refused  string // a reason the refusal names
		rule     round.Rule
	}{
		{name: "resume answers the stop's step", stop: stopped, d: round.DecisionResume, node: "gpu-1", wantStep: round.StepInstall, bound: true},
		{name: "resume naming the stop's step", stop: stopped, d: round.DecisionResume, node: "gpu-1", step: round.StepInstall, wantStep: round.StepInstall, bound: true},
		{name: "resume naming another step", stop: stopped, d: round.DecisionResume, node: "gpu-1", step: round.StepDrain, refused: "the round stopped at install, not drain"},
		{name: "abort naming another step", stop: stopped, d: round.DecisionAbort, node: "gpu-1", step: round.StepPromote, refused: "not promote"},
		{name: "abort while stopped keeps no step", stop: stopped, d: round.DecisionAbort, node: "gpu-1", bound: true},
		{name: "abort while not stopped is bound to no stop", d: round.DecisionAbort, node: "cp-1", bound: true},
		{name: "resume while not stopped", d: round.DecisionResume, node: "cp-1", rule: round.RuleNotStopped},
		{name: "closed round", closed: true, d: round.DecisionAbort, node: "cp-1", rule: round.RuleRoundClosed},
		{name: "snapshot on a VM node", d: round.DecisionHypervisorSnapshotTaken, node: "vm-1"},
		{name: "snapshot on a bare-metal node", d: round.DecisionHypervisorSnapshotTaken, node: "gpu-1", rule: round.RuleDecisionTarget},
		{name: "accepted risk on a non-check", d: round.DecisionResidualRiskAccepted, node: "gpu-1", step: round.StepDrain, wantStep: round.StepDrain, rule: round.RuleDecisionTarget},
		{name: "accepted risk fleet-wide", d: round.DecisionResidualRiskAccepted, node: round.FleetWide},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := decisionState(tc.stop, "")
			st.Closed = tc.closed
			got, err := window.DecideDecision(st, tc.d, tc.node, tc.step)
			var ref *window.Refusal
			var re *round.RuleError
			switch {
			case tc.refused != "":
				if !errors.As(err, &ref) || !strings.Contains(ref.Error(), tc.refused) || !strings.Contains(ref.Next, "Leave step out") {
					t.Fatalf("got %v, want a refusal naming %q", err, tc.refused)
				}
				return
			case tc.rule != "":
				if !errors.As(err, &re) || re.Rule != tc.rule {
					t.Fatalf("got %v, want standing rule %s", err, tc.rule)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			if got.Node != tc.node || got.Step != tc.wantStep || got.Bound != tc.bound {
				t.Fatalf("got %+v, want node %s step %q bound %v", got, tc.node, tc.wantStep, tc.bound)
			}
			if got.Bound && got.Stop != tc.stop {
				t.Fatalf("bound to %v, want the round's stop %v", got.Stop, tc.stop)
			}
		})
	}
}

func TestDecisionWords(t *testing.T) {
	long := strings.Repeat("x", 500)
	st := decisionState(&round.Stop{Seq: 7, Node: "gpu-1", Step: round.StepInstall, Reason: "apt\n  failed " + long}, "gpu-1")
	sum := window.DecisionSummary(st, round.DecisionResume, "gpu-1", "2026-11", window.DecisionTarget{})
	if len(sum) != 2 || sum[0] != "decision resume on gpu-1 in round 2026-11" ||
		!strings.HasPrefix(sum[1], "the round stopped at install on gpu-1: apt failed xxx") || !strings.HasSuffix(sum[1], "...") || len(sum[1]) > 460 {
		t.Fatalf("summary %q", sum)
	}
	if sum := window.DecisionSummary(decisionState(&round.Stop{Step: round.StepFleetCheck, Reason: "r"}, ""), round.DecisionAbort, "cp-1", "2026-11", window.DecisionTarget{}); sum[1] != "the round stopped at fleet_check: r" {
		t.Fatalf("fleet-wide stop: %q", sum)
	}
	if sum := window.DecisionSummary(decisionState(nil, ""), round.DecisionResidualRiskAccepted, round.FleetWide, "2026-11", window.DecisionTarget{}); len(sum) != 2 || sum[1] != "a note for the report: it accepts no failed check" {
		t.Fatalf("a note, not stopped: %q", sum)
	}
	failed := &round.Failure{Seq: 9, Node: "gpu-1", Step: round.StepGate, Reason: "etcd: no leader"}
	if sum := window.DecisionSummary(decisionState(nil, ""), round.DecisionResidualRiskAccepted, "gpu-1", "2026-11", window.DecisionTarget{Node: "gpu-1", Step: round.StepGate, Failure: failed}); len(sum) != 2 || sum[1] != "accepts the failed gate on gpu-1 (journal record 9) as green: etcd: no leader" {
		t.Fatalf("an accepted gate: %q", sum)
	}
	for _, tc := range []struct{ reason, trigger, want string }{
		{"", "", "resume by alice"},
		{"fixed apt", "", "resume by alice: fixed apt"},
		{"known", "driver-version-change:550.90.07", "resume by alice: known (review at driver-version-change:550.90.07)"},
	} {
		if got := window.DecisionDetail(round.DecisionResume, "alice", tc.reason, tc.trigger); got != tc.want {
			t.Errorf("detail %q, want %q", got, tc.want)
		}
	}
	if got := window.DecisionNext(round.DecisionResume, window.DecisionTarget{Node: "gpu-1", Step: round.StepInstall}); got != "Run install_updates on gpu-1 again." {
		t.Errorf("next after resume: %q", got)
	}
	for _, d := range []round.DecisionName{round.DecisionAbort, round.DecisionResume} {
		if got := window.DecisionNext(d, window.DecisionTarget{Node: "gpu-1"}); !strings.Contains(got, "round_status") {
			t.Errorf("next after %s without a step: %q", d, got)
		}
	}
}
