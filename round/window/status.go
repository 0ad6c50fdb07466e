package window

import (
	"fmt"
	"strings"
	"time"

	"github.com/mcp-patch/mcp-patch/round"
)

// Call is a tool call a decision names: the tool and, where it takes
// them, the node or round it is called on ("" is not passed).
type Call struct {
	Tool  string
	Node  string
	Round string
}

// NextCall turns the round's status into the next call: the next step's
// tool, or a step left in flight (call it again to follow or re-check it).
// A decision or a wait is not a call: a person or the clock comes first,
// and nil says so.
func NextCall(st *round.State, status round.Status) *Call {
	if nx := status.Next; nx != nil {
		switch {
		case nx.Decision != "" || !nx.WaitUntil.IsZero():
			return nil
		case nx.Step == round.StepClose:
			return &Call{Tool: "close_round"}
		case nx.Step == round.StepPlan || nx.Step == round.StepBaseline:
			return &Call{Tool: "plan_round", Round: st.RoundID}
		case nx.Tool != "":
			return &Call{Tool: nx.Tool, Node: nx.Node}
		}
		return nil
	}
	for _, n := range st.Nodes {
		for _, step := range round.NodeSteps {
			if r := n.Steps[step]; r != nil && r.State == round.InFlight {
				return &Call{Tool: step.Tool(), Node: n.Node}
			}
		}
	}
	for _, step := range round.RoundSteps {
		if r := st.RoundSteps[step]; r != nil && r.State == round.InFlight && step != round.StepSoak && step.Tool() != "" {
			return &Call{Tool: step.Tool()}
		}
	}
	return nil
}

// StatusReasons names what the status holds up: the stop and why, and
// each step a crash left in flight (its tool re-checks it).
func StatusReasons(status round.Status) []string {
	var out []string
	if status.Stop != nil {
		out = append(out, "stopped at "+where(status.Stop.Step, status.Stop.Node)+": "+status.Stop.Reason)
	}
	for _, t := range status.NeedsRecheck {
		out = append(out, fmt.Sprintf("%s on %s was in flight when the server stopped: call its tool again to re-check it", t.Step, t.Node))
	}
	for _, w := range status.Waits {
		who := make([]string, 0, len(w.Holders))
		for _, h := range w.Holders {
			who = append(who, h.Actor+" ("+h.Who+")")
		}
		out = append(out, fmt.Sprintf("the drain of %s waits for another party since %s, at most until %s, then stops for a person: %s",
			w.Node, w.Since.UTC().Format(time.RFC3339), w.Until.UTC().Format(time.RFC3339), strings.Join(who, ", ")))
	}
	if k := status.KuredLock; k != nil && k.Failure != "" {
		out = append(out, "kured's reboot lock was not given back: "+k.Failure)
	}
	return out
}
