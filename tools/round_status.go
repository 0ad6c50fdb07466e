package tools

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/mcp-patch/mcp-patch/round"
)

// RoundStatusIn optionally names a round.
type RoundStatusIn struct {
	Round string `json:"round,omitempty" jsonschema:"default: the open round"`
}

// RoundStatusOut is where the round stands.
type RoundStatusOut struct {
	Result
	Round *round.Status   `json:"round,omitempty"`
	ETA   *round.Estimate `json:"eta,omitempty"`
	Table string          `json:"table" jsonschema:"the per-node step table as text"`
	// Maintenance is set when the intent declares maintenance windows.
	Maintenance *MaintenanceView `json:"maintenance,omitempty" jsonschema:"where the round stands against the intent's maintenance windows"`
	// Plan is the reviewed plan: its digest, signature and signature count.
	Plan *PlanStatus `json:"plan,omitempty"`
}

// RoundStatus is the round_status tool.
func RoundStatus() Tool {
	return New[RoundStatusIn, RoundStatusOut](Spec{
		Name:  "round_status",
		Title: "Round status",
		Description: "Where the round stands, from its journal: phase, open window, each node's steps, a stop and why, steps a " +
			"crash left in flight, the soak's end, the ETA; the next step as next_call.",
		Kind: ReadOnly, Idempotent: true, OpenWorld: false,
	}, func(ctx context.Context, d *Deps, in RoundStatusIn, p Progress) (RoundStatusOut, error) {
		if d.Book == nil {
			return RoundStatusOut{}, Refuse("Start the server with --intent-repo.", "no intent repository is configured")
		}
		var st *round.State
		var sess *session
		if in.Round != "" {
			if !round.ValidRoundID(in.Round) {
				return RoundStatusOut{}, Refuse("Use a round id such as 2026-11.", fmt.Sprintf("round id %q is not valid", in.Round))
			}
			s, _, err := round.ReadState(d.Book.dir(in.Round))
			if err != nil {
				return RoundStatusOut{}, Refuse("Name a round that exists under rounds/ in the intent repository.", "round "+in.Round+": "+err.Error())
			}
			st = s
		} else {
			s, err := d.openSession()
			if err != nil {
				return RoundStatusOut{}, err
			}
			st, sess = s.j.State(), s
		}
		status := st.Status(d.now())
		_, mv, restricted, merr := sess.maintenance(d.now())
		if merr != nil {
			return RoundStatusOut{}, Refuse("Fix the maintenance section of os-layer/settings.yaml.", merr.Error())
		}
		if restricted {
			applyMaintenance(&status, mv)
		}
		var tb strings.Builder
		_ = round.RenderStatusText(&tb, status)
		out := RoundStatusOut{Round: &status, Table: tb.String(), Result: Result{NextAction: status.NextAction, NextCall: nextCall(st, status)}}
		if restricted {
			out.Maintenance = &mv
		}
		if nc, why := d.planNextCall(st, out.NextCall); why != "" {
			out.NextCall, out.NextAction = nc, why
		}
		if ps, err := d.planStatus(st.RoundID); err == nil && ps != nil {
			out.Plan = ps
			out.Reasons = append(out.Reasons, fmt.Sprintf("the plan (revision %d) needs %d signatures (%d with one per step); signed: %v", ps.Revision, ps.Signatures, ps.PerStepSignatures, ps.Signed))
		}
		if st.Plan != nil {
			if est, err := round.ETA(st, st.WindowDurations(), d.now(), time.Time{}, etaConfig(sess.settingsOrZero())); err == nil {
				out.ETA = &est
			}
		}
		if status.Stop != nil {
			out.Reasons = append(out.Reasons, "stopped at "+where(status.Stop.Step, status.Stop.Node)+": "+status.Stop.Reason)
		}
		for _, t := range status.NeedsRecheck {
			out.Reasons = append(out.Reasons, fmt.Sprintf("%s on %s was in flight when the server stopped: call its tool again to re-check it", t.Step, t.Node))
		}
		return out, nil
	})
}

// nextCall turns the status's next step into a call: the next step's tool,
// or a step left in flight (call it again to follow or re-check it). A
// decision or a wait is not a call: a person or the clock comes first.
func nextCall(st *round.State, status round.Status) *Call {
	if nx := status.Next; nx != nil {
		switch {
		case nx.Decision != "" || !nx.WaitUntil.IsZero():
			return nil
		case nx.Step == round.StepClose:
			return CallTo("close_round")
		case nx.Step == round.StepPlan || nx.Step == round.StepBaseline:
			return CallTo("plan_round", "round", st.RoundID)
		case nx.Tool != "":
			return CallTo(nx.Tool, "node", nx.Node)
		}
		return nil
	}
	for _, n := range st.Nodes {
		for _, step := range round.NodeSteps {
			if r := n.Steps[step]; r != nil && r.State == round.InFlight {
				return CallTo(step.Tool(), "node", n.Node)
			}
		}
	}
	for _, step := range round.RoundSteps {
		if r := st.RoundSteps[step]; r != nil && r.State == round.InFlight && step != round.StepSoak && step.Tool() != "" {
			return CallTo(step.Tool())
		}
	}
	return nil
}
