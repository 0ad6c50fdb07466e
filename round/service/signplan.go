package service

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/mcp-patch/mcp-patch/answer"
	"github.com/mcp-patch/mcp-patch/round/plan"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// PlanSigned is the open round's plan as sign_plan signed it.
type PlanSigned struct {
	Round *window.Round
	Plan  plan.Fleet
	// Approved is the signature used (Principal alone when Already).
	Approved Approved
	// Already is set when a kept signature of this plan's digest verifies
	// now: nothing was signed or recorded.
	Already bool
}

// SignPlan records a person's signature of the open round's plan digest,
// which the first cordon needs: the plan must be free of blockers and its
// plan.md the render of plan.json. Without an approval it answers a
// NeedApproval with the plan in plain words to sign (after a re-plan, only
// what changed); with one it verifies it, keeps it, uses it up and writes
// plan-signatures.json.
func (d *Service) SignPlan(ctx context.Context, approval string) (PlanSigned, error) {
	s, err := d.OpenRound()
	if err != nil {
		return PlanSigned{}, err
	}
	f, ok, err := d.FleetPlan(s.ID)
	if err != nil {
		return PlanSigned{}, answer.Refuse("Call plan_round again: it writes the plan afresh.", err.Error())
	}
	if !ok {
		return PlanSigned{}, answer.Refuse("Call plan_round first: it writes the plan to sign.", "round "+s.ID+" has no plan document")
	}
	if !f.Ready() {
		var why []string
		for _, b := range f.Blockers {
			why = append(why, b.String())
		}
		return PlanSigned{}, answer.Refuse("Fix the blockers and call plan_round again; a plan with blockers cannot be signed.", why...)
	}
	// Signed means a kept signature of this digest verifies now; the
	// report in plan-signatures.json is not asked.
	sp, signed, err := d.PlanProof(ctx, s.ID)
	if err != nil {
		d.Log.Warn("the round's plan signature does not verify again", "round", s.ID, "error", err)
		signed = false
	}
	if signed && sp.Digest == f.Digest {
		return PlanSigned{Round: s, Plan: f, Approved: Approved{Principal: sp.Principal}, Already: true}, nil
	}
	// What people read is what they sign: plan.md must be the render
	// of plan.json, whose digest the person signs.
	if err := d.CheckPlanMD(s.ID, f); err != nil {
		return PlanSigned{}, err
	}
	// What changed since the last signature this server verified (its
	// step digests as this server kept them with it).
	ps, err := d.KeptPlanSignatures(s.ID)
	if err != nil && signed {
		return PlanSigned{}, err
	}
	var changed []string
	if signed {
		if last, ok := ps.SignedFor(sp.Digest); ok {
			changed = plan.Changes(last.Nodes, f)
		}
	}
	bind := Binding{Node: window.FleetTarget, Round: s.ID, Digest: f.Digest, Summary: plan.SigningSummary(f, changed)}
	if d.Approvals == nil {
		return PlanSigned{}, answer.Refuse("Ask the operator to configure approvals.allowed_signers.", "no allowed_signers file is configured")
	}
	approval, fromInbox := d.givenOrInbox(approval, s.ID, bind.Node, "sign_plan")
	if approval == "" {
		return PlanSigned{}, d.RequestApproval("sign_plan", bind)
	}
	a, err := d.Approvals.Verify(ctx, approval, "sign_plan", bind)
	if err != nil {
		why := "approval refused: " + err.Error()
		if fromInbox {
			why = d.inboxRefused(s.ID, bind.Node, "sign_plan", err)
		}
		return PlanSigned{}, answer.Refuse("Ask a person to sign a new request: call sign_plan without the approval to get it.", why, "nothing was recorded")
	}
	// The kept signature carries what the report says of it: the
	// report is rendered from what the server kept.
	sig := PlanSignature{Digest: f.Digest, Revision: f.Revision, Principal: a.Principal, ApprovalID: a.ID,
		Time: d.Clock().UTC(), Nodes: plan.StepDigests(f), Changed: changed}
	kept, err := json.Marshal(sig)
	if err != nil {
		return PlanSigned{}, fmt.Errorf("record the plan signature: %w", err)
	}
	if err := d.KeepProof(s.ID, Proof{Tool: "sign_plan", Node: window.FleetTarget, ApprovalID: a.ID, Approval: a.Text, Plan: kept}); err != nil {
		return PlanSigned{}, answer.Refuse("Ask the operator to check the server's state directory.", err.Error(), "nothing was recorded")
	}
	if err := d.Approvals.Consume(ctx, a); err != nil {
		why := "approval could not be used: " + err.Error()
		if fromInbox {
			why = d.inboxRefused(s.ID, bind.Node, "sign_plan", err)
		}
		return PlanSigned{}, answer.Refuse("Ask a person to sign a new request.", why, "nothing was recorded")
	}
	d.inboxUsed(s.ID, bind.Node, "sign_plan")
	if ps, err = d.KeptPlanSignatures(s.ID); err != nil {
		return PlanSigned{}, fmt.Errorf("record the plan signature: %w", err)
	}
	if err := d.WritePlanSignatures(s.ID, ps); err != nil {
		return PlanSigned{}, fmt.Errorf("record the plan signature: %w", err)
	}
	return PlanSigned{Round: s, Plan: f, Approved: a}, nil
}
