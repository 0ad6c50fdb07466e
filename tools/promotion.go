package tools

import (
	"context"

	"github.com/mcp-patch/mcp-patch/round/promotion"
)

// CertifyOutcomeIn names the closed round whose outcome a person certifies.
type CertifyOutcomeIn struct {
	Round       string `json:"round,omitempty" jsonschema:"default: the open or last round of this server's environment"`
	Attestation string `json:"attestation,omitempty" jsonschema:"a person's signed statement of the outcome"`
}

// CertifyOutcomeOut is the committed outcome record.
type CertifyOutcomeOut struct {
	Result
	Principal string   `json:"principal,omitempty"`
	Record    string   `json:"record,omitempty" jsonschema:"repository path of outcome.json"`
	Statement string   `json:"statement,omitempty" jsonschema:"repository path of the signed statement"`
	Commit    string   `json:"commit,omitempty"`
	Outcome   []string `json:"outcome,omitempty" jsonschema:"the record in words, as the person signs it"`
}

// CertifyOutcome is the certify_outcome tool.
func CertifyOutcome() Tool {
	return New[CertifyOutcomeIn, CertifyOutcomeOut](Spec{
		Name:  "certify_outcome",
		Title: "Certify a closed round's outcome",
		Description: "A closed round's outcome per kernel (promoted, fell back, rolled back, red; the soak), from the round's own " +
			"record, for the environments downstream: without attestation the statement a person signs; with it, " +
			"outcome.json and its signed statement committed beside the round.",
		Kind: Write, Idempotent: true, OpenWorld: false,
	}, func(ctx context.Context, d *Deps, in CertifyOutcomeIn, p Progress) (CertifyOutcomeOut, error) {
		c, err := d.CertifyOutcome(ctx, in.Round, in.Attestation)
		out := CertifyOutcomeOut{Principal: c.Principal, Record: c.Record, Statement: c.Statement, Commit: c.Commit, Outcome: c.Lines}
		if err != nil {
			return out, err
		}
		out.Reasons = []string{"outcome certified by " + c.Principal + ": " + c.Record + " (" + c.Commit + ")"}
		out.NextAction = "Ask people to merge the working branch: the environments downstream plan from the committed record."
		return out, nil
	})
}

// PromoteUnprovenIn is a kernel a person promotes without proof upstream.
type PromoteUnprovenIn struct {
	Kernel      string `json:"kernel" jsonschema:"kernel release, as uname -r says it"`
	Reason      string `json:"reason,omitempty" jsonschema:"plain ASCII: why it may run here without the proof"`
	Round       string `json:"round,omitempty" jsonschema:"default: the open round, else this month's round of this environment"`
	Attestation string `json:"attestation,omitempty" jsonschema:"a person's signed statement"`
}

// PromoteUnprovenOut is the promotion recorded.
type PromoteUnprovenOut struct {
	Result
	Principal string             `json:"principal,omitempty"`
	Verdict   *promotion.Verdict `json:"verdict,omitempty"`
}

// AcceptUnprovenKernel is the accept_unproven_kernel tool.
func AcceptUnprovenKernel() Tool {
	return New[PromoteUnprovenIn, PromoteUnprovenOut](Spec{
		Name:  "accept_unproven_kernel",
		Title: "Accept a kernel not proven upstream",
		Description: "A person's signed promotion of a kernel the promotion gate blocks (not run, still soaking or red " +
			"upstream): the plan then takes it as a residual risk. Without attestation: the statement to sign.",
		Kind: Write, Idempotent: false, OpenWorld: false,
	}, func(ctx context.Context, d *Deps, in PromoteUnprovenIn, p Progress) (PromoteUnprovenOut, error) {
		o, err := d.PromoteUnproven(ctx, in.Round, in.Kernel, in.Reason, in.Attestation)
		out := PromoteUnprovenOut{Principal: o.Principal}
		if o.Verdict.Kernel != "" {
			v := o.Verdict
			out.Verdict = &v
		}
		if err != nil {
			return out, err
		}
		out.Reasons = []string{in.Kernel + " promoted by " + o.Principal + ": " + o.Verdict.Risk}
		out.NextAction = "Plan the round (plan_round), or re-plan the blocked nodes (replan_node) and have the plan signed again."
		return out, nil
	})
}
