package tools

import (
	"context"
	"fmt"
	"time"

	"github.com/mcp-patch/mcp-patch/policy"
	"github.com/mcp-patch/mcp-patch/round"
)

// DecisionIn is a decision that belongs to a person.
type DecisionIn struct {
	Decision      string `json:"decision"`
	Node          string `json:"node,omitempty" jsonschema:"default: where the round stopped"`
	Step          string `json:"step,omitempty" jsonschema:"for residual_risk_accepted: the failed check"`
	Reason        string `json:"reason,omitempty" jsonschema:"plain ASCII"`
	ReviewTrigger string `json:"review_trigger,omitempty" jsonschema:"for residual_risk_accepted: <event>:<value>, e.g. driver-version-change:550.90.07"`
	Attestation   string `json:"attestation,omitempty" jsonschema:"a person's signed statement; omit it to get the text to sign"`
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
		node := in.Node
		if node == "" && st.Stop != nil {
			node = st.Stop.Node
		}
		if node == "" {
			if dk.kind == policy.KindResidualRiskAccepted {
				node = round.FleetWide
			} else if st.Stop != nil || dk.kind != policy.KindHypervisorSnapshotTaken {
				node = firstNode(st)
			}
		}
		if node != round.FleetWide {
			if err := ValidNode(node); err != nil {
				return DecisionOut{}, err
			}
		}
		step := round.Step(in.Step)
		if dk.name == round.DecisionResume && step == "" && st.Stop != nil {
			step = st.Stop.Step
		}
		binding := policy.AttestationFields{Node: node, Round: s.id, Reason: in.Reason, ReviewTrigger: in.ReviewTrigger}
		if dk.kind == policy.KindRoundResume || dk.kind == policy.KindRoundAbort {
			binding.Step, binding.Stop = policy.NoStop, policy.NoStop
			if st.Stop != nil {
				if step != "" && step != st.Stop.Step {
					return DecisionOut{}, Refuse(fmt.Sprintf("Leave step out: a %s answers the stop at %s.", in.Decision, st.Stop.Step),
						fmt.Sprintf("the round stopped at %s, not %s", st.Stop.Step, step))
				}
				binding.Step, binding.Stop = string(st.Stop.Step), st.Stop.Binding()
			}
		}
		if err := st.AdmitDecision(dk.name, node, step); err != nil {
			return DecisionOut{}, ruleRefusal(err)
		}
		if d.Approvals == nil {
			return DecisionOut{}, Refuse("Ask the operator to configure approvals.allowed_signers.", "no allowed_signers file is configured")
		}
		if in.Attestation == "" {
			summary := []string{fmt.Sprintf("decision %s on %s in round %s", in.Decision, node, s.id)}
			if st.Stop != nil {
				summary = append(summary, oneLine("the round stopped at "+where(st.Stop.Step, st.Stop.Node)+": "+clipText(st.Stop.Reason, 400)))
			}
			text, exp, err := d.Approvals.Attestation(dk.kind, binding, summary)
			if err != nil {
				return DecisionOut{}, Refuse("Give a reason (plain ASCII) and, for accepted risk, a review trigger like driver-version-change:550.90.07.", "cannot build the statement: "+err.Error())
			}
			return DecisionOut{}, &needApproval{ApprovalNeeded{Request: text, Summary: summary,
				Command:    "mcp-patch approve statement.txt   (save the text as statement.txt)",
				AltCommand: "ssh-keygen -Y sign -n mcp-patch -f ~/.ssh/id_ed25519 statement.txt && cat statement.txt statement.txt.sig",
				ExpiresAt:  exp.UTC().Format(time.RFC3339)}}
		}
		a, req, err := d.Approvals.VerifyAttestation(ctx, in.Attestation, dk.kind, binding)
		if err != nil {
			return DecisionOut{}, Refuse("Ask the person to sign a fresh statement (call again without attestation).", "statement refused: "+err.Error(), "nothing was recorded")
		}
		if err := d.Approvals.Consume(ctx, a); err != nil {
			return DecisionOut{}, Refuse("Ask the person to sign a fresh statement.", "statement could not be used: "+err.Error(), "nothing was recorded")
		}
		detail := fmt.Sprintf("%s by %s", in.Decision, a.Principal)
		if req.Reason != "" {
			detail += ": " + req.Reason
		}
		if req.ReviewTrigger != "" {
			detail += " (review at " + req.ReviewTrigger + ")"
		}
		if _, err := s.j.Decide(dk.name, node, step, round.Meta{ApprovalID: a.ID, Detail: detail}); err != nil {
			return DecisionOut{}, ruleRefusal(err)
		}
		next := "Call round_status: it says what comes next."
		if dk.name == round.DecisionResume && step != "" {
			next = fmt.Sprintf("Run %s on %s again.", step.Tool(), node)
		}
		return DecisionOut{Principal: a.Principal, Result: Result{Reasons: []string{detail}, NextAction: next}}, nil
	})
}

func firstNode(st *round.State) string {
	if st.Current != "" {
		return st.Current
	}
	if len(st.Nodes) > 0 {
		return st.Nodes[0].Node
	}
	return ""
}

func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
