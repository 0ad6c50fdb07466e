package tools

import (
	"context"
	"fmt"
	"time"

	"github.com/mcp-patch/mcp-patch/policy"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// DecisionIn is a decision that belongs to a person.
type DecisionIn struct {
	Decision      string `json:"decision"`
	Node          string `json:"node,omitempty" jsonschema:"default: where the round stopped"`
	Step          string `json:"step,omitempty" jsonschema:"for residual_risk_accepted: the failed check"`
	Reason        string `json:"reason,omitempty" jsonschema:"plain ASCII"`
	ReviewTrigger string `json:"review_trigger,omitempty" jsonschema:"for residual_risk_accepted: <event>:<value>, e.g. driver-version-change:550.90.07"`
	Attestation   string `json:"attestation,omitempty" jsonschema:"a person's signed statement"`
}

// DecisionOut is the recorded decision.
type DecisionOut struct {
	Result
	Principal string `json:"principal,omitempty"`
}

var decisionKinds = map[string]struct {
	kind policy.Kind
	name round.DecisionName
}{
	"resume":                    {policy.KindRoundResume, round.DecisionResume},
	"abort":                     {policy.KindRoundAbort, round.DecisionAbort},
	"hypervisor_snapshot_taken": {policy.KindHypervisorSnapshotTaken, round.DecisionHypervisorSnapshotTaken},
	"residual_risk_accepted":    {policy.KindResidualRiskAccepted, round.DecisionResidualRiskAccepted},
}

// RecordDecision is the record_decision tool.
func RecordDecision() Tool {
	return New[DecisionIn, DecisionOut](Spec{
		Name:  "record_decision",
		Title: "Record a person's decision",
		Description: "A person's signed decision: resume or abort a stopped round, hypervisor_snapshot_taken (VM node), " +
			"residual_risk_accepted (a failed check, with reason and review trigger). Without attestation: the text to " +
			"sign.",
		Kind: Write, Idempotent: false, OpenWorld: false,
	}, func(ctx context.Context, d *Deps, in DecisionIn, p Progress) (DecisionOut, error) {
		dk, ok := decisionKinds[in.Decision]
		if !ok {
			return DecisionOut{}, Refuse("Use resume, abort, hypervisor_snapshot_taken or residual_risk_accepted.", fmt.Sprintf("unknown decision %q", in.Decision))
		}
		s, err := d.openSession()
		if err != nil {
			return DecisionOut{}, err
		}
		st := s.j.State()
		node := window.DecisionNode(st, dk.name, in.Node)
		if node != round.FleetWide {
			if err := ValidNode(node); err != nil {
				return DecisionOut{}, err
			}
		}
		t, err := window.DecideDecision(st, dk.name, node, round.Step(in.Step))
		if err != nil {
			return DecisionOut{}, err
		}
		binding := policy.AttestationFields{Node: node, Round: s.id, Reason: in.Reason, ReviewTrigger: in.ReviewTrigger}
		if t.Bound {
			binding.Step, binding.Stop = policy.NoStop, policy.NoStop
			if t.Stop != nil {
				binding.Step, binding.Stop = string(t.Stop.Step), t.Stop.Binding()
			}
		}
		if dk.kind == policy.KindResidualRiskAccepted {
			// A note accepts no check and says so; an accepted check names
			// its failure's record.
			binding.Step, binding.Stop = policy.NoStop, policy.NoStop
			if t.Failure != nil {
				binding.Step, binding.Stop = string(t.Step), t.Failure.Binding()
			}
		}
		if d.Approvals == nil {
			return DecisionOut{}, Refuse("Ask the operator to configure approvals.allowed_signers.", "no allowed_signers file is configured")
		}
		// The summary is the server's, now: a statement whose summary was
		// rewritten before it was signed is refused, as approvals are.
		summary := window.DecisionSummary(st, dk.name, node, s.id, t)
		if in.Attestation == "" {
			text, exp, err := d.Approvals.Attestation(dk.kind, binding, summary)
			if err != nil {
				return DecisionOut{}, Refuse("Give a reason (plain ASCII) and, for accepted risk, a review trigger like driver-version-change:550.90.07.", "cannot build the statement: "+err.Error())
			}
			return DecisionOut{}, &needApproval{ApprovalNeeded: ApprovalNeeded{Request: text, Summary: summary,
				Command:    "mcp-patch approve statement.txt   (save the text as statement.txt)",
				AltCommand: "ssh-keygen -Y sign -n mcp-patch -f ~/.ssh/id_ed25519 statement.txt && cat statement.txt statement.txt.sig",
				ExpiresAt:  exp.UTC().Format(time.RFC3339)}}
		}
		a, req, err := d.Approvals.VerifyAttestation(ctx, in.Attestation, dk.kind, binding, summary)
		if err != nil {
			return DecisionOut{}, Refuse("Ask the person to sign a fresh statement (call again without attestation).", "statement refused: "+err.Error(), "nothing was recorded")
		}
		if err := d.Approvals.Consume(ctx, a); err != nil {
			return DecisionOut{}, Refuse("Ask the person to sign a fresh statement.", "statement could not be used: "+err.Error(), "nothing was recorded")
		}
		detail := window.DecisionDetail(dk.name, a.Principal, req.Reason, req.ReviewTrigger)
		rec, err := s.j.Decide(dk.name, node, t.Step, round.Meta{ApprovalID: a.ID, Detail: detail})
		if err != nil {
			return DecisionOut{}, ruleRefusal(err)
		}
		released, err := d.releaseEnded(ctx, s, rec)
		if err != nil {
			return DecisionOut{Principal: a.Principal, Result: Result{Reasons: append([]string{detail}, released...)}}, err
		}
		return DecisionOut{Principal: a.Principal, Result: Result{Reasons: append([]string{detail}, released...), NextAction: window.DecisionNext(dk.name, t)}}, nil
	})
}
