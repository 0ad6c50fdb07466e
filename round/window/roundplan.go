package window

import (
	"fmt"
	"time"

	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/plan"
)

// DefaultSoak is how long the fleet soaks on its new kernels when the
// intent names no soak.
const DefaultSoak = 48 * time.Hour

// AdmitPlanRound refuses to plan round id when the id is not a round's, or
// while another round is open (one round at a time).
func AdmitPlanRound(id, open string) error {
	if !round.ValidRoundID(id) {
		return refuse("Use a round id such as 2026-11.", fmt.Sprintf("round id %q is not valid", id))
	}
	if open != "" && open != id {
		return refuse("Finish (close or abort) round "+open+" first.", "round "+open+" is still open")
	}
	return nil
}

// DecidePlanOrder says whether plan_round journals the order: the round's
// first plan, or a plan again where the standing rules admit one (before
// any window opened). A closed or aborted round is refused.
func DecidePlanOrder(st *round.State, now time.Time) (bool, error) {
	if st.Closed || st.Aborted {
		return false, refuse("Plan a new round with a new id.", "round "+st.RoundID+" is closed or aborted")
	}
	return st.Plan == nil || st.Admit(round.StepPlan, "", now) == nil, nil
}

// RoundClocks are the round's soak (DefaultSoak unless the intent names
// hours) and its compliance deadline, deadlineDays from now (zero when the
// intent names none).
func RoundClocks(soakHours, deadlineDays int, now time.Time) (soak time.Duration, deadline time.Time) {
	soak = DefaultSoak
	if soakHours > 0 {
		soak = time.Duration(soakHours) * time.Hour
	}
	if deadlineDays > 0 {
		deadline = now.Add(time.Duration(deadlineDays) * 24 * time.Hour)
	}
	return soak, deadline
}

// PlanReasons are what plan_round tells of its order: an estimate (nil:
// none could be made) that misses the compliance deadline, then the
// order's own notes.
func PlanReasons(est *round.Estimate, deadline time.Time, notes []string) []string {
	var out []string
	if est != nil && !deadline.IsZero() && !est.Meets {
		out = append(out, "the estimate does not meet the intent's compliance deadline: tell a person (escalate, do not rush)")
	}
	return append(out, notes...)
}

// PlanNext is what comes after a plan without blockers: a person reads
// plan.md and signs it, then the first node of the order.
func PlanNext(roundID string, order round.Order) string {
	first := ""
	if len(order.Positions) > 0 {
		first = order.Positions[0].Node
	}
	return "A person reads rounds/" + roundID + "/plan.md and signs the plan (sign_plan); then start with " + first + "."
}

// ReplanScope says which steps of a node's window are done and stay as
// reviewed when the node is planned again: none before its window opens,
// the drain once the node is drained and its install has not started (an
// install refused for drift is re-planned there). Any later point is a
// refusal: the plan is fixed.
func ReplanScope(n *round.NodeState) ([]plan.Step, error) {
	if n == nil || n.Window == round.WindowPending {
		return nil, nil
	}
	if n.Window == round.WindowOpen && n.Steps[round.StepDrain].Green() &&
		(n.Steps[round.StepInstall] == nil || n.Steps[round.StepInstall].State == round.Pending) {
		return []plan.Step{plan.StepDrain}, nil
	}
	return nil, refuse("Finish this node's window as approved, or ask a person to abort.",
		"the window of "+n.Node+" is "+string(n.Window)+" past its drain: its plan is fixed")
}
