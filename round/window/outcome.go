package window

import (
	"slices"
	"strings"

	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/promotion"
)

// OutcomeOf is what a closed round did with each kernel, from the round's
// own journal (the state the server rebuilt from its anchored records):
// the record a person certifies for the environments downstream. A node's
// kernel is the target of its approved trial boot; a node whose trial boot
// never had an approved plan moved to no new kernel.
func OutcomeOf(st *round.State, environment string) promotion.Outcome {
	o := promotion.Outcome{Version: promotion.Version, Environment: environment, Round: st.RoundID,
		Aborted: st.Aborted, FleetCheck: st.RoundSteps[round.StepFleetCheck].Green(), Kernels: []promotion.Kernel{}}
	if a := st.RoundSteps[round.StepClose].Last(); a != nil && st.Closed {
		o.Closed = a.Ended
	}
	if soak := st.RoundSteps[round.StepSoak]; soak != nil && !st.SoakStarted.IsZero() {
		o.SoakStarted = st.SoakStarted
		if a := soak.Last(); a != nil && soak.State == round.Done {
			o.SoakEnded = a.Ended
		}
	}
	byKernel := map[string]*promotion.Kernel{}
	for _, n := range st.Nodes {
		tb := n.Steps[round.StepTrialBoot]
		target := trialTarget(tb)
		if target == "" {
			continue
		}
		k := byKernel[target]
		if k == nil {
			k = &promotion.Kernel{Kernel: target, Promoted: []string{}, FellBack: []string{}, RolledBack: []string{}, Red: []string{}}
			byKernel[target] = k
		}
		if failedOnce(tb) {
			k.FellBack = append(k.FellBack, n.Node)
		}
		for _, step := range []round.Step{round.StepVerify, round.StepGPUAcceptance, round.StepGate} {
			if failedOnce(n.Steps[step]) {
				k.Red = append(k.Red, n.Node+": "+string(step))
			}
		}
		if slices.ContainsFunc(st.Rollbacks, func(r round.RollbackRun) bool { return r.Node == n.Node }) {
			k.RolledBack = append(k.RolledBack, n.Node)
		} else if n.Steps[round.StepPromote].Green() {
			k.Promoted = append(k.Promoted, n.Node)
		}
	}
	for _, k := range byKernel {
		slices.Sort(k.Promoted)
		slices.Sort(k.FellBack)
		slices.Sort(k.RolledBack)
		slices.Sort(k.Red)
		o.Kernels = append(o.Kernels, *k)
	}
	slices.SortFunc(o.Kernels, func(a, b promotion.Kernel) int { return strings.Compare(a.Kernel, b.Kernel) })
	return o
}

// trialTarget is the kernel a node's trial boot was approved for, from its
// latest attempt that carries an approved plan.
func trialTarget(tb *round.StepRun) string {
	if tb == nil {
		return ""
	}
	for i := len(tb.Attempts) - 1; i >= 0; i-- {
		if p, err := Approved[TrialBootPlan](&tb.Attempts[i]); err == nil {
			return p.TargetKernel
		}
	}
	return ""
}

// failedOnce reports whether any attempt of the step failed (a failure a
// person accepted as residual risk still counts: the kernel was red).
func failedOnce(r *round.StepRun) bool {
	return r != nil && slices.ContainsFunc(r.Attempts, func(a round.Attempt) bool { return a.Outcome == round.OutcomeFailed })
}
