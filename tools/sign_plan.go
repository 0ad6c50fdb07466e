package tools

import (
	"context"
	"fmt"

	"github.com/mcp-patch/mcp-patch/round/service"
)

// SignPlanIn carries the person's signature of the plan digest.
type SignPlanIn struct {
	ApprovalArg
}

// SignPlanOut is the recorded signature.
type SignPlanOut struct {
	Result
	Plan *service.PlanStatus `json:"plan,omitempty"`
}

// SignPlan is the sign_plan tool.
func SignPlan() Tool {
	return New[SignPlanIn, SignPlanOut](Spec{
		Name:  "sign_plan",
		Title: "Sign the round's plan",
		Description: "A person's signature of the plan digest, which the first cordon needs. Without approval: the plan in plain " +
			"words to sign (after a re-plan, only what changed).",
		Kind: Write, Idempotent: true, OpenWorld: false,
	}, func(ctx context.Context, d *Deps, in SignPlanIn, p Progress) (SignPlanOut, error) {
		o, err := d.SignPlan(ctx, in.Approval)
		if err != nil {
			return SignPlanOut{}, err
		}
		s, f, a := o.Round, o.Plan, o.Approved
		if o.Already {
			st, err := d.PlanStatus(ctx, s.ID, s.Journal.Shared())
			if err != nil {
				return SignPlanOut{}, err
			}
			return SignPlanOut{Plan: st, Result: Result{Reasons: []string{"the plan " + f.Digest + " is already signed by " + a.Principal}}}, nil
		}
		out := SignPlanOut{Result: Result{Reasons: []string{fmt.Sprintf("plan %s (revision %d) signed by %s", f.Digest, f.Revision, a.Principal)}}}
		out.ApprovalID = a.ID
		commitRoundLast(ctx, d, s, "plan signed", func(c string) string { return "signature committed (" + c + ")" },
			"signature not committed: ", &out.Reasons)
		if out.Plan, err = d.PlanStatus(ctx, s.ID, s.Journal.Shared()); err != nil {
			return out, err
		}
		out.NextAction = "Call round_status: the first window may start."
		return out, nil
	})
}
