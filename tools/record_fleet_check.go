package tools

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// RecordFleetCheck is the record_fleet_check tool.
func RecordFleetCheck() Tool {
	return New[struct{}, FleetCheckOut](Spec{
		Name:        "record_fleet_check",
		Title:       "Record the fleet kernel check",
		Description: "As fleet_check, recorded in the round: green starts the soak; a node left behind stops the round.",
		Kind:        Write, Idempotent: true, OpenWorld: true,
	}, func(ctx context.Context, d *Deps, _ struct{}, p Progress) (FleetCheckOut, error) {
		s, err := d.OpenRound()
		if err != nil {
			return FleetCheckOut{}, err
		}
		if err := window.AdmitFleetCheck(s.Journal.State()); err != nil {
			return FleetCheckOut{}, err
		}
		if err := s.Admit(round.StepFleetCheck, ""); err != nil {
			return FleetCheckOut{}, err
		}
		out, bad, err := fleetKernels(ctx, d, s, p)
		if err != nil {
			return out, err
		}
		if err := s.Check(round.StepFleetCheck, "", len(bad) == 0, "", strings.Join(bad, "; ")); err != nil {
			return out, err
		}
		if len(bad) > 0 {
			out.Result = Result{Status: StatusFailed, Reasons: bad,
				NextAction: "Stop: the fleet is not consistent. Tell a person; they decide (resume after fixing, or abort)."}
			return out, nil
		}
		out.Reasons = []string{fmt.Sprintf("all %d nodes run the round's kernels", len(out.Nodes))}
		out.NextAction = "Call round_status: it says what remains before close."
		st := s.Journal.State()
		if st.Admit(round.StepSoak, "", d.Clock()) == nil && st.SoakStarted.IsZero() {
			if err := s.Begin(round.StepSoak, ""); err != nil {
				return out, err
			}
			out.Reasons = append(out.Reasons, fmt.Sprintf("the soak of %s starts now", time.Duration(st.Plan.Soak)))
			out.NextAction = "Wait for the soak to end (round_status says when), then autoremove."
		}
		return out, nil
	})
}
