package service

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/mcp-patch/mcp-patch/answer"
	"github.com/mcp-patch/mcp-patch/policy"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/window"
)

var decisionKinds = map[string]struct {
	kind policy.Kind
	name round.DecisionName
}{
	"resume":                    {policy.KindRoundResume, round.DecisionResume},
	"abort":                     {policy.KindRoundAbort, round.DecisionAbort},
	"hypervisor_snapshot_taken": {policy.KindHypervisorSnapshotTaken, round.DecisionHypervisorSnapshotTaken},
	"residual_risk_accepted":    {policy.KindResidualRiskAccepted, round.DecisionResidualRiskAccepted},
}

// decisionTool is the tool name a decision's kept statement is filed
// under in the proofs (Step names the decision).
const decisionTool = "record_decision"

// decisionProven is the check a round's journal runs, when its state is
// rebuilt, on every decision record it replays (round.WithDecisionCheck):
// the record counts only as the person's statement kept in the state
// directory under its approval id, verified again now and bound to the
// record's decision, node and round.
func (d *Service) decisionProven(roundID string) func(round.Record) error {
	return func(rec round.Record) error {
		if rec.ApprovalID == "" {
			return errors.New("it names no signed statement")
		}
		ps, err := d.proofs(roundID)
		if err != nil {
			return fmt.Errorf("the kept statements cannot be read: %w", err)
		}
		i := slices.IndexFunc(ps, func(p Proof) bool { return p.Tool == decisionTool && p.ApprovalID == rec.ApprovalID })
		if i < 0 {
			return fmt.Errorf("no signed statement %s is kept in the server's state directory", rec.ApprovalID)
		}
		p := ps[i]
		var kind policy.Kind
		for name, dk := range decisionKinds {
			if dk.name == rec.Decision && p.Step == name {
				kind = dk.kind
			}
		}
		if kind == "" {
			return fmt.Errorf("the kept statement %s is a %s, not a %s", rec.ApprovalID, p.Step, rec.Decision)
		}
		if d.Approvals == nil {
			return errors.New("no allowed_signers file is configured to verify it")
		}
		_, req, err := d.Approvals.ReverifyAttestation(context.Background(), p.Approval, kind)
		if err != nil {
			return fmt.Errorf("the kept statement %s no longer verifies: %w", rec.ApprovalID, err)
		}
		if req.Round != roundID || req.Node != rec.Node || p.Node != rec.Node {
			return fmt.Errorf("the kept statement %s was signed for %s in round %s", rec.ApprovalID, req.Node, req.Round)
		}
		return nil
	}
}

// statementToSign is the answer that a person signs statement text (a
// decision, a record) before the call goes on.
func statementToSign(text string, summary []string, expires time.Time) *NeedApproval {
	return &NeedApproval{Request: text, Summary: summary, Expires: expires,
		Command:    "mcp-patch approve statement.txt   (save the text as statement.txt)",
		AltCommand: "ssh-keygen -Y sign -n mcp-patch -f ~/.ssh/id_ed25519 statement.txt && cat statement.txt statement.txt.sig"}
}

// A Decision is a person's decision as record_decision takes it.
type Decision struct {
	Decision, Node, Step, Reason, ReviewTrigger string
	// Attestation is the person's signed statement; empty: the answer is
	// a NeedApproval with the text to sign.
	Attestation string
}

// Decided is a recorded decision: who signed it, what the record and the
// release of the window it ended say, and what comes next.
type Decided struct {
	Principal string
	Reasons   []string
	Next      string
}

// Decide records a person's signed decision in the open round: resume or
// abort a stopped round, a hypervisor snapshot taken, a residual risk
// accepted. Without an attestation it answers the statement to sign.
func (d *Service) Decide(ctx context.Context, in Decision) (Decided, error) {
	dk, ok := decisionKinds[in.Decision]
	if !ok {
		return Decided{}, answer.Refuse("Use resume, abort, hypervisor_snapshot_taken or residual_risk_accepted.", fmt.Sprintf("unknown decision %q", in.Decision))
	}
	s, err := d.OpenRound()
	if err != nil {
		return Decided{}, err
	}
	st := s.Journal.State()
	node := window.DecisionNode(st, dk.name, in.Node)
	if node != round.FleetWide {
		if err := ValidNode(node); err != nil {
			return Decided{}, err
		}
	}
	t, err := window.DecideDecision(st, dk.name, node, round.Step(in.Step))
	if err != nil {
		return Decided{}, err
	}
	binding := policy.AttestationFields{Node: node, Round: s.ID, Reason: in.Reason, ReviewTrigger: in.ReviewTrigger}
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
		return Decided{}, answer.Refuse("Ask the operator to configure approvals.allowed_signers.", "no allowed_signers file is configured")
	}
	// The summary is the server's, now: a statement whose summary was
	// rewritten before it was signed is refused, as approvals are.
	summary := window.DecisionSummary(st, dk.name, node, s.ID, t)
	if in.Attestation == "" {
		text, exp, err := d.Approvals.Attestation(dk.kind, binding, summary)
		if err != nil {
			return Decided{}, answer.Refuse("Give a reason (plain ASCII) and, for accepted risk, a review trigger like driver-version-change:550.90.07.", "cannot build the statement: "+err.Error())
		}
		return Decided{}, statementToSign(text, summary, exp)
	}
	a, req, err := d.Approvals.VerifyAttestation(ctx, in.Attestation, dk.kind, binding, summary)
	if err != nil {
		return Decided{}, answer.Refuse("Ask the person to sign a fresh statement (call again without attestation).", "statement refused: "+err.Error(), "nothing was recorded")
	}
	// Kept before it is used: the decision counts, now and whenever
	// the round's state is rebuilt, only as this kept signature.
	if err := d.KeepProof(s.ID, Proof{Tool: decisionTool, Step: in.Decision, Node: node, ApprovalID: a.ID, Approval: in.Attestation}); err != nil {
		return Decided{}, answer.Refuse("Ask the operator to fix the server's state directory.", "the statement could not be kept: "+err.Error(), "nothing was recorded")
	}
	if err := d.Approvals.Consume(ctx, a); err != nil {
		return Decided{}, answer.Refuse("Ask the person to sign a fresh statement.", "statement could not be used: "+err.Error(), "nothing was recorded")
	}
	detail := window.DecisionDetail(dk.name, a.Principal, req.Reason, req.ReviewTrigger)
	rec, err := s.Journal.Decide(dk.name, node, t.Step, round.Meta{ApprovalID: a.ID, Detail: detail})
	if err != nil {
		return Decided{}, RuleRefusal(err)
	}
	released, err := d.releaseEnded(ctx, s, rec)
	if err != nil {
		return Decided{Principal: a.Principal, Reasons: append([]string{detail}, released...)}, err
	}
	if dk.name == round.DecisionAbort {
		// The round has ended: kured may reboot nodes again.
		kured, err := d.ReleaseKuredLock(ctx, s)
		released = append(released, kured...)
		if err != nil {
			return Decided{Principal: a.Principal, Reasons: append([]string{detail}, released...)}, err
		}
	}
	return Decided{Principal: a.Principal, Reasons: append([]string{detail}, released...), Next: window.DecisionNext(dk.name, t)}, nil
}
