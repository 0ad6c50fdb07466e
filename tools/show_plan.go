package tools

import (
	"bytes"
	"context"
	"fmt"

	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/plan"
	"github.com/mcp-patch/mcp-patch/round/service"
)

// ShowPlanIn optionally names a round.
type ShowPlanIn struct {
	Round string `json:"round,omitempty" jsonschema:"default: the open round"`
}

// ShowPlanOut is the reviewed plan.
type ShowPlanOut struct {
	Result
	Plan   *service.PlanStatus `json:"plan,omitempty"`
	Nodes  []plan.Node         `json:"nodes"`
	Table  string              `json:"table" jsonschema:"the plan as a readable table"`
	Detail string              `json:"markdown" jsonschema:"plan.md as committed"`
}

// ShowPlan is the show_plan tool.
func ShowPlan() Tool {
	return New[ShowPlanIn, ShowPlanOut](Spec{
		Name:  "show_plan",
		Title: "Show the round's plan",
		Description: "The plan people review (plan.md, plan.json): order with reasons; per node kernels, moving packages, GRUB " +
			"entries, drain preview, risks, blockers; whether it is signed.",
		Kind: ReadOnly, Idempotent: true, OpenWorld: false,
	}, func(ctx context.Context, d *Deps, in ShowPlanIn, p Progress) (ShowPlanOut, error) {
		if d.Book == nil {
			return ShowPlanOut{}, Refuse("Start the server with --intent-repo.", "no intent repository is configured")
		}
		id := in.Round
		if id == "" {
			if id = d.Book.CurrentID(); id == "" {
				return ShowPlanOut{}, Refuse("Name the round, or plan one first (plan_round).", "no round is open")
			}
		} else if !round.ValidRoundID(id) {
			return ShowPlanOut{}, Refuse("Use a round id such as 2026-11.", fmt.Sprintf("round id %q is not valid", id))
		}
		f, ok, err := d.FleetPlan(id)
		if err != nil {
			return ShowPlanOut{}, Refuse("Call plan_round again: it writes the plan afresh.", err.Error())
		}
		if !ok {
			return ShowPlanOut{}, Refuse("Call plan_round: it runs the fleet-wide preflight and writes the plan.", "round "+id+" has no plan document")
		}
		st, err := d.PlanStatus(ctx, id, nil)
		if err != nil {
			return ShowPlanOut{}, err
		}
		var tb, md bytes.Buffer
		if err := plan.Text(&tb, f); err != nil {
			return ShowPlanOut{}, err
		}
		if err := plan.Markdown(&md, f); err != nil {
			return ShowPlanOut{}, err
		}
		out := ShowPlanOut{Plan: st, Nodes: f.Nodes, Table: tb.String(), Detail: md.String()}
		out.Reasons = append(out.Reasons, f.Summary...)
		switch {
		case !f.Ready():
			out.NextAction = "Fix the blockers, then call plan_round again."
		case !st.Signed:
			out.NextAction = "A person reads plan.md and signs the plan: call sign_plan."
		default:
			out.NextAction = "The plan is signed (" + st.SignedBy + "): call round_status for the next step."
		}
		return out, nil
	})
}
