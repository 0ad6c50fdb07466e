package tools

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/mcp-patch/mcp-patch/round/plan"
	"github.com/mcp-patch/mcp-patch/round/service"
	"github.com/mcp-patch/mcp-patch/round/window"
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
		s, err := d.OpenRound()
		if err != nil {
			return SignPlanOut{}, err
		}
		f, ok, err := d.FleetPlan(s.ID)
		if err != nil {
			return SignPlanOut{}, Refuse("Call plan_round again: it writes the plan afresh.", err.Error())
		}
		if !ok {
			return SignPlanOut{}, Refuse("Call plan_round first: it writes the plan to sign.", "round "+s.ID+" has no plan document")
		}
		if !f.Ready() {
			var why []string
			for _, b := range f.Blockers {
				why = append(why, b.String())
			}
			return SignPlanOut{}, Refuse("Fix the blockers and call plan_round again; a plan with blockers cannot be signed.", why...)
		}
		// Signed means a kept signature of this digest verifies now; the
		// report in plan-signatures.json is not asked.
		sp, signed, err := d.PlanProof(ctx, s.ID)
		if err != nil {
			d.Log.Warn("the round's plan signature does not verify again", "round", s.ID, "error", err)
			signed = false
		}
		if signed && sp.Digest == f.Digest {
			st, err := d.PlanStatus(ctx, s.ID, s.Journal.Shared())
			if err != nil {
				return SignPlanOut{}, err
			}
			return SignPlanOut{Plan: st, Result: Result{Reasons: []string{"the plan " + f.Digest + " is already signed by " + sp.Principal}}}, nil
		}
		// What people read is what they sign: plan.md must be the render
		// of plan.json, whose digest the person signs.
		if err := d.CheckPlanMD(s.ID, f); err != nil {
			return SignPlanOut{}, err
		}
		// What changed since the last signature this server verified (its
		// step digests as this server kept them with it).
		ps, err := d.KeptPlanSignatures(s.ID)
		if err != nil && signed {
			return SignPlanOut{}, err
		}
		var changed []string
		if signed {
			if last, ok := ps.SignedFor(sp.Digest); ok {
				changed = plan.Changes(last.Nodes, f)
			}
		}
		bind := service.Binding{Node: window.FleetTarget, Round: s.ID, Digest: f.Digest, Summary: plan.SigningSummary(f, changed)}
		if d.Approvals == nil {
			return SignPlanOut{}, Refuse("Ask the operator to configure approvals.allowed_signers.", "no allowed_signers file is configured")
		}
		if in.Approval == "" {
			return SignPlanOut{}, d.RequestApproval("sign_plan", bind)
		}
		a, err := d.Approvals.Verify(ctx, in.Approval, "sign_plan", bind)
		if err != nil {
			return SignPlanOut{}, Refuse("Ask a person to sign a new request: call sign_plan without the approval to get it.", "approval refused: "+err.Error(), "nothing was recorded")
		}
		// The kept signature carries what the report says of it: the
		// report is rendered from what the server kept.
		sig := service.PlanSignature{Digest: f.Digest, Revision: f.Revision, Principal: a.Principal, ApprovalID: a.ID,
			Time: d.Clock().UTC(), Nodes: plan.StepDigests(f), Changed: changed}
		kept, err := json.Marshal(sig)
		if err != nil {
			return SignPlanOut{}, fmt.Errorf("record the plan signature: %w", err)
		}
		if err := d.KeepProof(s.ID, service.Proof{Tool: "sign_plan", Node: window.FleetTarget, ApprovalID: a.ID, Approval: a.Text, Plan: kept}); err != nil {
			return SignPlanOut{}, Refuse("Ask the operator to check the server's state directory.", err.Error(), "nothing was recorded")
		}
		if err := d.Approvals.Consume(ctx, a); err != nil {
			return SignPlanOut{}, Refuse("Ask a person to sign a new request.", "approval could not be used: "+err.Error(), "nothing was recorded")
		}
		if ps, err = d.KeptPlanSignatures(s.ID); err != nil {
			return SignPlanOut{}, fmt.Errorf("record the plan signature: %w", err)
		}
		if err := d.WritePlanSignatures(s.ID, ps); err != nil {
			return SignPlanOut{}, fmt.Errorf("record the plan signature: %w", err)
		}
		out := SignPlanOut{Result: Result{Reasons: []string{fmt.Sprintf("plan %s (revision %d) signed by %s", f.Digest, f.Revision, a.Principal)}}}
		out.approvalID = a.ID
		commitRoundLast(ctx, d, s, "plan signed", func(c string) string { return "signature committed (" + c + ")" },
			"signature not committed: ", &out.Reasons)
		if out.Plan, err = d.PlanStatus(ctx, s.ID, s.Journal.Shared()); err != nil {
			return out, err
		}
		out.NextAction = "Call round_status: the first window may start."
		return out, nil
	})
}
