package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mcp-patch/mcp-patch/policy"
)

// PolicyApprovals is the Approvals the server uses: SSHSIG approvals checked
// against an allowed_signers file, used nonces kept in the state directory
// and, with a cluster, where every server of the cluster looks.
type PolicyApprovals struct {
	Verifier *policy.Verifier
	TTL      time.Duration
	Clock    func() time.Time
}

var _ Approvals = (*PolicyApprovals)(nil)

// Request builds the canonical request for one destructive call.
func (p *PolicyApprovals) Request(tool string, plan Binding) (string, time.Time, error) {
	r, err := policy.NewRequest(tool, plan.Node, plan.Round, plan.Digest, plan.Summary, p.TTL, p.Clock, nil)
	if err != nil {
		return "", time.Time{}, err
	}
	return r.String(), r.Expires, nil
}

// Verify checks an approval against the plan computed now.
func (p *PolicyApprovals) Verify(ctx context.Context, approval, tool string, plan Binding) (Approved, error) {
	v, err := p.Verifier.Verify(ctx, approval, policy.Expectation{Tool: tool, Node: plan.Node, Round: plan.Round,
		PlanDigest: plan.Digest, Summary: plan.Summary, Principals: plan.Principals})
	if err != nil {
		return Approved{}, explainRefusal(err)
	}
	return Approved{ID: v.ApprovalID, Principal: v.Principal, Fingerprint: v.KeyFingerprint, LabOnly: v.LabOnly, Text: approval, verified: v}, nil
}

// reverify checks a kept approval again (policy.Verifier.Reverify): the
// signature against allowed_signers now and its binding to tool, node,
// round and digest; it must have been used while valid.
func (p *PolicyApprovals) Reverify(ctx context.Context, approval, tool string, plan Binding) (Approved, error) {
	digest := plan.Digest
	if digest == "" {
		a, err := policy.ParseApproval(approval)
		if err != nil {
			return Approved{}, explainRefusal(err)
		}
		digest = a.Request.PlanDigest
	}
	v, err := p.Verifier.Reverify(ctx, approval, policy.Expectation{Tool: tool, Node: plan.Node, Round: plan.Round, PlanDigest: digest, Principals: plan.Principals})
	if err != nil {
		return Approved{}, explainRefusal(err)
	}
	return Approved{ID: v.ApprovalID, Principal: v.Principal, Fingerprint: v.KeyFingerprint, LabOnly: v.LabOnly, Digest: digest,
		Summary: v.Request.Summary, Text: approval, verified: v}, nil
}

// ConsumePart uses up one part (a step) of a standing approval, once.
func (p *PolicyApprovals) ConsumePart(ctx context.Context, a Approved, part string) error {
	return explainRefusal(p.Verifier.ConsumePart(ctx, a.verified, part))
}

// Consume uses the approval up, durably.
func (p *PolicyApprovals) Consume(ctx context.Context, a Approved) error {
	return explainRefusal(p.Verifier.Consume(ctx, a.verified))
}

// Attestation builds a statement of a decision that belongs to a person.
func (p *PolicyApprovals) Attestation(kind policy.Kind, f policy.AttestationFields, summary []string) (string, time.Time, error) {
	r, err := policy.NewAttestation(kind, f, summary, p.TTL, p.Clock, nil)
	if err != nil {
		return "", time.Time{}, err
	}
	return r.String(), r.Expires, nil
}

// VerifyAttestation checks a signed statement of the given kind against
// the node, round and (resume, abort) stop it must name.
func (p *PolicyApprovals) VerifyAttestation(ctx context.Context, text string, kind policy.Kind, want policy.AttestationFields, summary []string) (Approved, policy.Request, error) {
	v, err := p.Verifier.Verify(ctx, text, policy.Expectation{Kind: kind, Node: want.Node, Round: want.Round, Step: want.Step, Stop: want.Stop, Summary: summary})
	if err != nil {
		return Approved{}, policy.Request{}, explainRefusal(err)
	}
	return Approved{ID: v.ApprovalID, Principal: v.Principal, Fingerprint: v.KeyFingerprint, LabOnly: v.LabOnly, Text: text, verified: v}, v.Request, nil
}

// ReverifyAttestation checks a kept statement again
// (policy.Verifier.Reverify), bound to what it signed.
func (p *PolicyApprovals) ReverifyAttestation(ctx context.Context, text string, kind policy.Kind) (Approved, policy.Request, error) {
	a, err := policy.ParseApproval(text)
	if err != nil {
		return Approved{}, policy.Request{}, explainRefusal(err)
	}
	r := a.Request
	v, err := p.Verifier.Reverify(ctx, text, policy.Expectation{Kind: kind, Node: r.Node, Round: r.Round, Step: r.Step, Stop: r.Stop})
	if err != nil {
		return Approved{}, policy.Request{}, explainRefusal(err)
	}
	return Approved{ID: v.ApprovalID, Principal: v.Principal, Fingerprint: v.KeyFingerprint, LabOnly: v.LabOnly, Text: text, verified: v}, v.Request, nil
}

// VerifyRecord checks a signed record (policy.Verifier.VerifyRecord).
func (p *PolicyApprovals) VerifyRecord(ctx context.Context, text string, kind policy.Kind) (Approved, policy.Request, error) {
	v, req, err := p.Verifier.VerifyRecord(ctx, text, kind)
	if err != nil {
		return Approved{}, policy.Request{}, explainRefusal(err)
	}
	return Approved{ID: v.ApprovalID, Principal: v.Principal, Fingerprint: v.KeyFingerprint, LabOnly: v.LabOnly, Text: text, Summary: req.Summary, verified: v}, req, nil
}

func explainRefusal(err error) error {
	if err == nil {
		return nil
	}
	var r *policy.RefusalError
	if errors.As(err, &r) {
		if h := r.Hint(); h != "" {
			return fmt.Errorf("%w (%s)", err, h)
		}
	}
	return err
}
