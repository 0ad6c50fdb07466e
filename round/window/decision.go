package window

import (
	"fmt"

	"github.com/mcp-patch/mcp-patch/round"
)

// DecisionTarget is what a person's decision answers: the node and step it
// names and, for a resume or an abort, the stop it is bound to.
type DecisionTarget struct {
	Node string
	Step round.Step
	// Bound is set for a resume or an abort: the statement names Stop, the
	// stop it answers (nil while the round is not stopped).
	Bound bool
	Stop  *round.Stop
	// Failure is the failed check an accepted risk accepts (nil for a
	// note): the statement names it (step and journal record), so it
	// accepts that failure only.
	Failure *round.Failure
}

// DecisionNode is the node a decision names when the caller names none:
// where the round stopped; for an accepted risk, the whole fleet; for a
// hypervisor snapshot outside a stop, none (the caller must name the VM
// node); otherwise the node at hand (the current one, else the first).
func DecisionNode(st *round.State, d round.DecisionName, node string) string {
	if node == "" && st.Stop != nil {
		node = st.Stop.Node
	}
	if node != "" {
		return node
	}
	switch {
	case d == round.DecisionResidualRiskAccepted:
		return round.FleetWide
	case st.Stop != nil || d != round.DecisionHypervisorSnapshotTaken:
		if st.Current != "" {
			return st.Current
		}
		if len(st.Nodes) > 0 {
			return st.Nodes[0].Node
		}
	}
	return ""
}

// DecideDecision admits a decision on node: a resume answers the stop's
// step unless one is named, a resume or abort naming another step than the
// stop's is refused, and the standing rules (round.State.AdmitDecision)
// have the last word. It writes nothing.
func DecideDecision(st *round.State, d round.DecisionName, node string, step round.Step) (DecisionTarget, error) {
	if d == round.DecisionResume && step == "" && st.Stop != nil {
		step = st.Stop.Step
	}
	t := DecisionTarget{Node: node, Step: step}
	if d == round.DecisionResume || d == round.DecisionAbort {
		t.Bound = true
		if st.Stop != nil {
			if step != "" && step != st.Stop.Step {
				return DecisionTarget{}, refuse(fmt.Sprintf("Leave step out: a %s answers the stop at %s.", d, st.Stop.Step),
					fmt.Sprintf("the round stopped at %s, not %s", st.Stop.Step, step))
			}
			t.Stop = st.Stop
		}
	}
	if err := st.AdmitDecision(d, node, step); err != nil {
		return DecisionTarget{}, err
	}
	if d == round.DecisionResidualRiskAccepted && step != "" {
		lookup := node
		if !step.NodeStep() {
			lookup = ""
		}
		if t.Failure = st.LastFailure(step, lookup); t.Failure == nil {
			return DecisionTarget{}, refuse("Call round_status: it names the failed checks.", fmt.Sprintf("no failure of %s is recorded to accept", where(step, lookup)))
		}
	}
	return t, nil
}

// DecisionSummary is what the statement for a decision shows the person
// who signs it: the decision, the failed check an accepted risk accepts
// (or that it accepts none) and, while the round is stopped, the stop.
// The server derives it again when the statement comes back and refuses
// one whose summary differs.
func DecisionSummary(st *round.State, d round.DecisionName, node, roundID string, t DecisionTarget) []string {
	summary := []string{fmt.Sprintf("decision %s on %s in round %s", d, node, roundID)}
	if d == round.DecisionResidualRiskAccepted {
		if f := t.Failure; f != nil {
			summary = append(summary, oneLine(fmt.Sprintf("accepts the failed %s (journal record %d) as green: %s", where(f.Step, f.Node), f.Seq, clip(f.Reason, 400))))
		} else {
			summary = append(summary, "a note for the report: it accepts no failed check")
		}
	}
	if st.Stop != nil {
		summary = append(summary, oneLine("the round stopped at "+where(st.Stop.Step, st.Stop.Node)+": "+clip(st.Stop.Reason, 400)))
	}
	return summary
}

// DecisionDetail is the journal's words for a signed decision.
func DecisionDetail(d round.DecisionName, principal, reason, reviewTrigger string) string {
	detail := fmt.Sprintf("%s by %s", d, principal)
	if reason != "" {
		detail += ": " + reason
	}
	if reviewTrigger != "" {
		detail += " (review at " + reviewTrigger + ")"
	}
	return detail
}

// DecisionNext is what comes after a recorded decision: a resume runs its
// step again; anything else asks round_status.
func DecisionNext(d round.DecisionName, t DecisionTarget) string {
	if d == round.DecisionResume && t.Step != "" {
		return fmt.Sprintf("Run %s on %s again.", t.Step.Tool(), t.Node)
	}
	return "Call round_status: it says what comes next."
}

func where(step round.Step, node string) string {
	if node == "" {
		return string(step)
	}
	return string(step) + " on " + node
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
