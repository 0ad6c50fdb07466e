package window_test

import (
	"slices"
	"testing"
	"time"

	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// trialRun is a trial boot run whose attempts carry an approved plan for
// kernel, the last ending with outcome.
func trialRun(t *testing.T, node, kernel string, outcomes ...round.Outcome) *round.StepRun {
	t.Helper()
	raw, err := window.Encode(window.TrialBootPlan{Node: node, TargetKernel: kernel, NewEntry: "n"})
	if err != nil {
		t.Fatal(err)
	}
	r := &round.StepRun{State: round.Done}
	for _, o := range outcomes {
		r.Attempts = append(r.Attempts, round.Attempt{Outcome: o, PlanDigest: window.TrialBootPlan{Node: node, TargetKernel: kernel, NewEntry: "n"}.Digest(), Plan: raw})
		if o == round.OutcomeFailed {
			r.State = round.Failed
		} else {
			r.State = round.Done
		}
	}
	return r
}

func done() *round.StepRun {
	return &round.StepRun{State: round.Done, Attempts: []round.Attempt{{Outcome: round.OutcomeDone}}}
}

func TestOutcomeOf(t *testing.T) {
	closed := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	st := round.NewState("staging-2026-12")
	st.Closed, st.SoakStarted = true, closed.Add(-49*time.Hour)
	st.RoundSteps[round.StepFleetCheck] = done()
	st.RoundSteps[round.StepSoak] = &round.StepRun{State: round.Done, Attempts: []round.Attempt{{Outcome: round.OutcomeDone, Ended: closed.Add(-time.Hour)}}}
	st.RoundSteps[round.StepClose] = &round.StepRun{State: round.Done, Attempts: []round.Attempt{{Outcome: round.OutcomeDone, Ended: closed}}}
	node := func(name string, steps map[round.Step]*round.StepRun) *round.NodeState {
		return &round.NodeState{Position: round.Position{Node: name}, Steps: steps}
	}
	const k51, k52 = "6.8.0-51-generic", "6.8.0-52-generic"
	st.Nodes = []*round.NodeState{
		node("cp-1", map[round.Step]*round.StepRun{round.StepTrialBoot: trialRun(t, "cp-1", k51, round.OutcomeDone), round.StepPromote: done(), round.StepGate: done()}),
		// Fell back once, then a resumed trial boot came up.
		node("gpu-1", map[round.Step]*round.StepRun{round.StepTrialBoot: trialRun(t, "gpu-1", k51, round.OutcomeFailed, round.OutcomeDone), round.StepPromote: done()}),
		// A red gate a person accepted still counts as red.
		node("gpu-2", map[round.Step]*round.StepRun{round.StepTrialBoot: trialRun(t, "gpu-2", k52, round.OutcomeDone), round.StepPromote: done(),
			round.StepGate: {State: round.Failed, RiskAccepted: true, Attempts: []round.Attempt{{Outcome: round.OutcomeFailed}}}}),
		// Rolled back after its promote.
		node("gpu-3", map[round.Step]*round.StepRun{round.StepTrialBoot: trialRun(t, "gpu-3", k52, round.OutcomeDone), round.StepPromote: done()}),
		// No approved trial boot: no new kernel.
		node("db-1", map[round.Step]*round.StepRun{round.StepTrialBoot: {State: round.Pending}}),
	}
	st.Rollbacks = []round.RollbackRun{{Node: "gpu-3", State: round.Done}}
	o := window.OutcomeOf(st, "staging")
	if o.Environment != "staging" || o.Round != "staging-2026-12" || !o.Closed.Equal(closed) || !o.FleetCheck || o.Aborted ||
		!o.SoakEnded.Equal(closed.Add(-time.Hour)) || len(o.Kernels) != 2 {
		t.Fatalf("outcome %+v", o)
	}
	a, b := o.Kernels[0], o.Kernels[1]
	if a.Kernel != k51 || !slices.Equal(a.Promoted, []string{"cp-1", "gpu-1"}) || !slices.Equal(a.FellBack, []string{"gpu-1"}) || a.Green() {
		t.Fatalf("%s: %+v", k51, a)
	}
	if b.Kernel != k52 || !slices.Equal(b.Promoted, []string{"gpu-2"}) || !slices.Equal(b.RolledBack, []string{"gpu-3"}) ||
		!slices.Equal(b.Red, []string{"gpu-2: gate"}) || b.Green() {
		t.Fatalf("%s: %+v", k52, b)
	}
	st.Aborted = true
	if window.OutcomeOf(st, "staging").Green() {
		t.Fatal("an aborted round is green")
	}
}
