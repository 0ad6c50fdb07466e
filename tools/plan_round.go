package tools

import (
	"context"

	"github.com/mcp-patch/mcp-patch/kube"
	"github.com/mcp-patch/mcp-patch/kube/gate"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/service"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// PlanRoundIn names the round.
type PlanRoundIn struct {
	Round string `json:"round" jsonschema:"e.g. 2026-11 (one round a month)"`
}

// PlanRoundOut is the order with its reasons, the placement it rests on,
// the baseline and the compliance clock.
type PlanRoundOut struct {
	Result
	Round     string          `json:"round"`
	Order     *round.Order    `json:"order,omitempty"`
	Placement *kube.Placement `json:"placement,omitempty"`
	Baseline  *gate.Baseline  `json:"baseline,omitempty"`
	ETA       *round.Estimate `json:"eta,omitempty"`
	// Plan is the reviewed plan written to rounds/<id>/plan.md and plan.json.
	Plan *service.PlanStatus `json:"plan,omitempty"`
}

// PlanRound is the plan_round tool.
func PlanRound() Tool {
	return New[PlanRoundIn, PlanRoundOut](Spec{
		Name:  "plan_round",
		Title: "Plan the round",
		Description: "Order with a reason each (control plane first, the Postgres primary's and API VIP's node last of them, a " +
			"canary GPU server, the rest), health baseline, ETA, each node's preflight (packages, kernel, GRUB ids, drain" +
			" preview): plan.md and plan.json, committed. A blocker stops the round before any cordon.",
		Kind: Write, Idempotent: true, OpenWorld: true,
	}, func(ctx context.Context, d *Deps, in PlanRoundIn, p Progress) (PlanRoundOut, error) {
		pr, err := d.PlanOrder(ctx, in.Round, p)
		if err != nil {
			return PlanRoundOut{}, err
		}
		kc, s, settings, order, pl, deadline := pr.Clients, pr.Round, pr.Settings, pr.Order, pr.Placement, pr.Deadline
		j := s.Journal
		out := PlanRoundOut{Round: in.Round, Order: &order, Placement: &pl}
		// Progress: baseline, estimate, preflight, then two steps a node
		// (its preflight, its drain preview), then the commit.
		total := float64(5 + 2*len(order.Positions))
		p(1, total, "baseline")
		if out.Baseline, err = d.TakeBaseline(ctx, kc, s); err != nil {
			return out, err
		}
		p(2, total, "estimate")
		st := j.State()
		if est, err := round.ETA(st, st.WindowDurations(), d.Clock(), deadline, window.ETAConfig(settings)); err == nil {
			out.ETA = &est
		}
		out.Reasons = append(out.Reasons, window.PlanReasons(out.ETA, deadline, order.Notes)...)
		p(3, total, "fleet-wide preflight")
		fl, perr := d.WritePlanDocument(ctx, kc, s, service.PreflightInput{Round: in.Round, Order: order, Inv: pr.Inventory, Placement: pl, Settings: settings}, p.After(3, total))
		if perr == nil {
			out.Plan, perr = d.PlanStatus(ctx, in.Round, nil)
		}
		// The commit comes last, after every record of this call (the
		// blockers' stop and the call's own audit record): the intent
		// repository is clean once plan_round answers.
		p(total-1, total, "commit")
		commitRoundLast(ctx, d, s, "plan", func(c string) string {
			return "plan committed to the intent repository (" + c + "): rounds/" + in.Round + "/plan.md"
		}, "plan not committed: ", &out.Reasons)
		if perr != nil {
			return out, perr
		}
		out.Reasons = append(out.Reasons, fl.Risks...)
		if !fl.Ready() {
			return out, fromWindow(s.StopOnBlockers(fl, out.Reasons))
		}
		out.Reasons = append(out.Reasons, fl.Summary...)
		out.NextAction = window.PlanNext(in.Round, order)
		// sign_plan answers approval_required with the plan's statement.
		out.NextCall = CallTo("sign_plan")
		return out, nil
	})
}
