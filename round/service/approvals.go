package service

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/mcp-patch/mcp-patch/answer"
	"github.com/mcp-patch/mcp-patch/policy"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// Binding is what an approval binds: the step's target node, its round,
// the digest of the plan the step would carry out (computed from the live
// host and cluster just before acting) and the summary a person reads.
type Binding struct {
	Node    string
	Round   string
	Digest  string
	Summary []string
	// Principals, when set, are those one of whom must have signed (the
	// intent's approvals.principals for this kind of step).
	Principals []string
}

// Approved identifies a verified approval.
type Approved struct {
	ID          string // the request's id
	Principal   string
	Fingerprint string
	LabOnly     bool // signed with a key labelled lab-only
	// Digest is the plan digest the approval was verified against.
	Digest string
	// Text is the approval as signed (the request and its signature): what
	// the server keeps to verify it again.
	Text string
	// Summary is what the person was shown, as signed (set by Reverify).
	Summary []string

	verified policy.Verified
}

// Approvals issues requests and checks signed approvals (policy package).
type Approvals interface {
	// Request returns the canonical request text a person signs, its
	// plain-words summary and its expiry.
	Request(tool string, p Binding) (text string, expires time.Time, err error)
	// Verify checks an approval against what this call would do. It does not
	// use the approval up; a refused call leaves it valid.
	Verify(ctx context.Context, approval, tool string, p Binding) (Approved, error)
	// Consume makes the approval single-use, durably (where every server of
	// the cluster looks), just before acting.
	Consume(ctx context.Context, a Approved) error
	// Reverify checks again an approval that was used before and stands
	// for what it signed (the signed plan, a window approval): its
	// signature against allowed_signers now and its binding to tool and p
	// (Node, Round, Digest; an empty Digest takes the one it signed, in
	// the answer's Digest). A record of an approval is never enough.
	Reverify(ctx context.Context, approval, tool string, p Binding) (Approved, error)
	// ConsumePart uses up one part of a standing approval (a step of a
	// window approval), once, durably: a second use is refused.
	ConsumePart(ctx context.Context, a Approved, part string) error
	// Attestation and VerifyAttestation do the same for statements of
	// decisions that belong to people (resume, abort, accepted risk …).
	// VerifyAttestation checks the statement against want's Node, Round,
	// Step and Stop (a resume or abort answers exactly one stop, an
	// accepted risk one failed check) and its summary against the one the
	// server derives now, line for line.
	Attestation(kind policy.Kind, f policy.AttestationFields, summary []string) (string, time.Time, error)
	VerifyAttestation(ctx context.Context, text string, kind policy.Kind, want policy.AttestationFields, summary []string) (Approved, policy.Request, error)
	// ReverifyAttestation checks a kept statement of kind again, when the
	// round's state is rebuilt: its signature against allowed_signers now,
	// the stop it was bound to as signed, and that it was used while
	// valid. The caller compares its node and round with the record's.
	ReverifyAttestation(ctx context.Context, text string, kind policy.Kind) (Approved, policy.Request, error)
	// VerifyRecord checks a signed record of kind (a round's outcome, a
	// kernel's promotion; policy.Verifier.VerifyRecord): its signature
	// with a key allowed_signers admits now, its kind and lifetime; it
	// never expires and uses no nonce. The caller compares what it binds.
	VerifyRecord(ctx context.Context, text string, kind policy.Kind) (Approved, policy.Request, error)
}

// KeepStep keeps the signed bytes of the approval a step is about to run
// under (tool: what the request was signed for) with the plan it runs.
func (d *Service) KeepStep(roundID, step, tool string, a Approved, plan window.Plan) error {
	raw, err := window.Encode(plan)
	if err != nil {
		return err
	}
	node := plan.Target()
	return d.KeepProof(roundID, Proof{Tool: tool, Step: step, Node: node, ApprovalID: a.ID, Approval: a.Text, Plan: raw})
}

// Grant is the approval as the window journals it.
func (a Approved) Grant() window.Approval { return window.Approval{ID: a.ID, Digest: a.Digest} }

// NeedApproval is the answer that a person must sign Request before the
// step runs; Notes say why an approval the call might have relied on did
// not cover it.
type NeedApproval struct {
	Request string
	Summary []string
	Expires time.Time
	// Command and AltCommand, when set, replace the words of how to sign
	// an approval request (a statement is signed the same way, under
	// another file name).
	Command, AltCommand string
	Notes               []string
}

func (n *NeedApproval) Error() string { return "approval required" }

var nodeName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$`)

// ValidNode refuses a node name that is not a Kubernetes node name.
func ValidNode(name string) error {
	if name == "" {
		return answer.Refuse("Name a node from plan_round's order.", "node is required")
	}
	if len(name) > 253 || !nodeName.MatchString(name) {
		return answer.Refuse("Use the node's Kubernetes name (lower-case letters, digits, '-' and '.').",
			fmt.Sprintf("node %q is not a valid node name (DNS-1123, no leading dash)", name))
	}
	return nil
}

// RequirePrincipals refuses an approval signed by none of names (none:
// anyone allowed_signers admits).
func (a Approved) RequirePrincipals(names []string) error { return a.verified.RequirePrincipals(names) }

// Authorize is the rule every destructive step on plan in round roundID
// runs behind: the round's reviewed plan, signed before the first cordon
// and equal to the live plan, and a verified approval bound to the plan's
// digest, kept and used up before the step acts: the node's window
// approval when no approval is given and it covers tool, else approval.
// With neither it answers a NeedApproval with the request to sign.
func (d *Service) Authorize(ctx context.Context, roundID, tool string, plan window.Plan, approval string) (Approved, error) {
	// The round's reviewed plan: signed before the first cordon, and
	// this step's live plan equal to its node's reviewed plan.
	if err := d.CheckReviewed(ctx, roundID, tool, plan); err != nil {
		return Approved{}, err
	}
	if d.Approvals == nil {
		return Approved{}, answer.Refuse("Ask the operator to configure approvals.allowed_signers and restart the server.",
			"no allowed_signers file is configured, so no approval can be verified and no destructive step can run")
	}
	rule, err := d.StepPrincipals(roundID, plan.Target())
	if err != nil {
		return Approved{}, err
	}
	bind := Binding{Node: plan.Target(), Round: roundID, Digest: plan.Digest(), Summary: plan.Summary(), Principals: rule.Names}
	var notes []string
	fromInbox := false
	if approval == "" {
		// A person's approval signed in the inbox for exactly this step.
		approval, fromInbox = d.inboxApproval(roundID, bind.Node, tool)
	}
	if approval == "" {
		// A per-window approval covers the step when its signature
		// verifies again now and binds the live digest, once per step.
		a, ok, note, err := d.WindowApproval(ctx, roundID, tool, plan)
		if err != nil {
			return Approved{}, err
		}
		if note != "" {
			notes = append(notes, note)
		}
		if ok {
			// A window approval signed by someone the intent does not
			// (or no longer) lets sign this kind of step leaves the
			// step to a signature of its own.
			if err := a.RequirePrincipals(rule.Names); err != nil {
				ok = false
				notes = append(notes, "the window approval "+a.ID+" of "+bind.Node+" does not cover "+tool+": "+err.Error()+"; "+rule.Words())
			}
		}
		if ok {
			a.Digest = bind.Digest
			if err := d.KeepStep(roundID, tool, "approve_window", a, plan); err != nil {
				return Approved{}, answer.Refuse("Ask the operator to check the server's state directory.", err.Error(), "nothing was executed")
			}
			switch err := d.Approvals.ConsumePart(ctx, a, tool); {
			case errors.Is(err, policy.ErrReplayed):
				ok = false
				notes = append(notes, "the window approval "+a.ID+" of "+bind.Node+" covered "+tool+" once already: running it again needs a new signature")
			case err != nil:
				return Approved{}, answer.Refuse("Ask a person to sign a new request.", "window approval could not be used: "+err.Error(), "nothing was executed")
			}
		}
		if ok {
			d.inboxUsed(roundID, bind.Node, tool)
			d.Log.Info("step covered by its window approval", "tool", tool, "node", bind.Node, "round", roundID, "principal", a.Principal, "approval", a.ID, "digest", a.Digest)
			return a, nil
		}
		if len(rule.Names) > 0 {
			notes = append(notes, "who signs: "+rule.Words())
		}
		return Approved{}, d.askApproval(tool, bind, notes)
	}
	a, err := d.Approvals.Verify(ctx, approval, tool, bind)
	if err != nil && fromInbox {
		why := d.inboxRefused(roundID, bind.Node, tool, err)
		if errors.Is(err, policy.ErrPrincipalNotAllowed) {
			return Approved{}, answer.Refuse("Ask "+strings.Join(rule.Names, " or ")+" to sign the request: call again without the approval to get it.", why, rule.Words(), "nothing was executed")
		}
		return Approved{}, answer.Refuse("Ask a person to sign a new request: call again without the approval to get it.", why, "nothing was executed")
	}
	if errors.Is(err, policy.ErrPrincipalNotAllowed) {
		return Approved{}, answer.Refuse("Ask "+strings.Join(rule.Names, " or ")+" to sign the request: call again without the approval to get it.",
			"approval refused: "+err.Error(), rule.Words(), "nothing was executed")
	}
	if err != nil {
		return Approved{}, answer.Refuse("Ask a person to sign a new request: call again without the approval to get it.",
			"approval refused: "+err.Error(), "nothing was executed")
	}
	a.Digest = bind.Digest
	// The signed bytes are kept before the approval is used: what a
	// later step (a drain carried on) holds this one to is verified
	// again from them, never taken from a record the agent can write.
	if err := d.KeepStep(roundID, tool, tool, a, plan); err != nil {
		return Approved{}, answer.Refuse("Ask the operator to check the server's state directory.", err.Error(), "nothing was executed")
	}
	if err := d.Approvals.Consume(ctx, a); err != nil {
		why := "approval could not be used: " + err.Error()
		if fromInbox {
			why = d.inboxRefused(roundID, bind.Node, tool, err)
		}
		return Approved{}, answer.Refuse("Ask a person to sign a new request.", why, "nothing was executed")
	}
	d.Ops.ApprovalUsed(tool, bind.Node)
	d.inboxUsed(roundID, bind.Node, tool)
	d.Log.Info("approved step", "tool", tool, "node", bind.Node, "round", roundID, "principal", a.Principal, "approval", a.ID, "digest", a.Digest, "from_inbox", fromInbox)
	return a, nil
}
