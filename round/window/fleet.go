package window

import (
	"fmt"
	"strings"

	"github.com/mcp-patch/mcp-patch/round"
)

// AdmitFleetCheck refuses the fleet check before its phase: the round has
// an order and every window of it is closed. "Not yet" is a refusal, never
// a failure: nothing is checked or recorded.
func AdmitFleetCheck(st *round.State) error {
	if st.Plan == nil {
		return refuse("Plan the round first (plan_round).", "not yet: the round has no order")
	}
	var open []string
	for _, n := range st.Nodes {
		if n.Window != round.WindowClosed {
			open = append(open, fmt.Sprintf("%s (%s)", n.Node, n.Window))
		}
	}
	if len(open) > 0 {
		return refuse("Not yet: finish every node's window first (round_status names the next step).",
			"not yet: the fleet check runs after every window closed; not closed: "+strings.Join(open, ", "), "nothing was checked or recorded")
	}
	return nil
}

// FleetKernel is one node's running kernel as the fleet check read it
// (Err: it could not be read) and the kernel the round installed there
// ("" when it installed none).
type FleetKernel struct {
	Node   string
	Kernel string
	Target string
	Err    error
}

// OK says the node runs what the round installed there.
func (k FleetKernel) OK() bool { return k.Err == nil && (k.Target == "" || k.Kernel == k.Target) }

// JudgeFleet names each node left behind: unreachable, or running another
// kernel than the round installed. None named: the fleet is consistent.
func JudgeFleet(ks []FleetKernel) []string {
	var bad []string
	for _, k := range ks {
		switch {
		case k.Err != nil:
			bad = append(bad, fmt.Sprintf("%s: not reachable (%v)", k.Node, k.Err))
		case !k.OK():
			bad = append(bad, fmt.Sprintf("%s runs %s, the round installed %s", k.Node, k.Kernel, k.Target))
		}
	}
	return bad
}
