package tools

import (
	"context"

	"github.com/mcp-patch/mcp-patch/round/service"
)

// DecisionIn is a decision that belongs to a person.
type DecisionIn struct {
	Decision      string `json:"decision"`
	Node          string `json:"node,omitempty" jsonschema:"default: where the round stopped"`
	Step          string `json:"step,omitempty" jsonschema:"for residual_risk_accepted: the failed check"`
	Kernel        string `json:"kernel,omitempty" jsonschema:"for kernel_promoted: uname -r"`
	Reason        string `json:"reason,omitempty" jsonschema:"plain ASCII"`
	ReviewTrigger string `json:"review_trigger,omitempty" jsonschema:"for residual_risk_accepted: <event>:<value>, e.g. driver-version-change:550.90.07"`
	Attestation   string `json:"attestation,omitempty" jsonschema:"a person's signed statement"`
}

// DecisionOut is the recorded decision.
type DecisionOut struct {
	Result
	Principal string `json:"principal,omitempty"`
}

// RecordDecision is the record_decision tool.
func RecordDecision() Tool {
	return New[DecisionIn, DecisionOut](Spec{
		Name:  "record_decision",
		Title: "Record a person's decision",
		Description: "A person's signed decision: resume or abort a stopped round, hypervisor_snapshot_taken (VM node), " +
			"residual_risk_accepted (a failed check, with reason and review trigger), outcome_certified (a closed round, for " +
			"downstream environments), kernel_promoted (past the promotion gate). Without attestation: the text to sign.",
		Kind: Write, Idempotent: false, OpenWorld: false,
	}, func(ctx context.Context, d *Deps, in DecisionIn, p Progress) (DecisionOut, error) {
		switch in.Decision {
		case "outcome_certified":
			c, err := d.CertifyOutcome(ctx, "", in.Attestation)
			if err != nil {
				return DecisionOut{}, err
			}
			return DecisionOut{Principal: c.Principal, Result: Result{
				Reasons:    append([]string{"outcome certified by " + c.Principal + ": " + c.Record + " and " + c.Statement + " (" + c.Commit + ")"}, c.Lines...),
				NextAction: "Ask people to merge the working branch: the environments downstream plan from the committed record."}}, nil
		case "kernel_promoted":
			o, err := d.PromoteUnproven(ctx, "", in.Kernel, in.Reason, in.Attestation)
			if err != nil {
				return DecisionOut{}, err
			}
			return DecisionOut{Principal: o.Principal, Result: Result{Reasons: []string{o.Verdict.Why, "residual risk: " + o.Verdict.Risk},
				NextAction: "Plan the round (plan_round; resume first if its plan stopped on this kernel)."}}, nil
		}
		o, err := d.Decide(ctx, service.Decision{Decision: in.Decision, Node: in.Node, Step: in.Step, Reason: in.Reason,
			ReviewTrigger: in.ReviewTrigger, Attestation: in.Attestation})
		return DecisionOut{Principal: o.Principal, Result: Result{Reasons: o.Reasons, NextAction: o.Next}}, err
	})
}
