package tools

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mcp-patch/mcp-patch/policy"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// ApprovalArg is embedded in the input of every destructive tool.
type ApprovalArg struct {
	Approval string `json:"approval,omitempty"` // the instructions say how approvals go
}

func (a ApprovalArg) approval() string { return a.Approval }

type approvable interface{ approval() string }

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
}

// needApproval is returned by the chokepoint when no approval was given;
// notes say why an approval the call might have relied on did not cover it.
type needApproval struct {
	ApprovalNeeded
	notes []string
}

func (n *needApproval) Error() string { return "approval required" }

// Steps describes the parts of a destructive tool: the live plan (decide,
// pure), re-entry of a step in flight (observe and complete only), and the
// action (do), which runs only behind a verified, consumed approval and
// receives exactly the plan whose digest was approved.
type Steps[In approvable, Out any, P window.Plan] struct {
	// Target is the node the call works on (window.FleetTarget for the
	// fleet); calls on one target are serialised.
	Target func(in In) string
	// Open opens the call's round, once, before Follow, Plan and Do,
	// which all work on it; nil: the open round (Deps.openRound).
	Open func(d *Deps) (*window.Round, error)
	// Plan re-checks the live system and decides the typed plan. It writes
	// nothing: no file, journal, git or cluster write. The approval binds
	// it to round r.
	Plan func(ctx context.Context, d *Deps, r *window.Round, in In) (plan P, err error)
	// Follow, when set, handles a call on a step already in flight: it
	// observes the host or cluster and records or completes what the
	// journaled approval began. It returns errNotInFlight when no step is
	// in flight, and window.ErrNeedApproval when nothing of the step began
	// on the host: then only a fresh approval goes on.
	Follow func(ctx context.Context, d *Deps, r *window.Round, in In, p Progress) (Out, error)
	// Do performs the step on exactly plan.
	Do func(ctx context.Context, d *Deps, r *window.Round, in In, plan P, a Approved, p Progress) (Out, error)
}

// errNotInFlight is Follow's answer when there is nothing to follow.
var errNotInFlight = errors.New("not in flight")

// NewDestructive builds a destructive tool whose action runs only behind a
// valid approval bound to the freshly decided plan: the one chokepoint
// every destructive step goes through.
func NewDestructive[In approvable, Out any, P window.Plan, PO interface {
	*Out
	output
}](spec Spec, t Steps[In, Out, P]) Tool {
	spec.Kind = Destructive
	h := func(ctx context.Context, d *Deps, in In, p Progress) (Out, error) {
		var zero Out
		target := window.FleetTarget
		if t.Target != nil {
			target = t.Target(in)
			if err := ValidNode(target); err != nil {
				return zero, err
			}
		}
		unlock, err := d.serial.Lock(ctx, target)
		if err != nil {
			return zero, err
		}
		defer unlock()
		open := t.Open
		if open == nil {
			open = (*Deps).openRound
		}
		r, err := open(d)
		if err != nil {
			return zero, err
		}
		if t.Follow != nil {
			out, err := t.Follow(ctx, d, r, in, p)
			switch {
			case errors.Is(err, errNotInFlight):
			case errors.Is(err, window.ErrNeedApproval):
				if in.approval() == "" {
					d.Log.Info("re-entry found nothing begun on the host: a fresh approval is needed", "tool", spec.Name, "node", target)
				}
			default:
				return out, err
			}
		}
		plan, err := t.Plan(ctx, d, r, in)
		if err != nil {
			return zero, d.recordStop(r, err)
		}
		roundID := r.ID
		// The round's reviewed plan: signed before the first cordon, and
		// this step's live plan equal to its node's reviewed plan.
		if err := d.checkReviewed(ctx, roundID, spec.Name, plan); err != nil {
			return zero, err
		}
		if d.Approvals == nil {
			return zero, Refuse("Ask the operator to configure approvals.allowed_signers and restart the server.",
				"no allowed_signers file is configured, so no approval can be verified and no destructive step can run")
		}
		rule, err := d.stepPrincipals(roundID, plan.Target())
		if err != nil {
			return zero, err
		}
		bind := Binding{Node: plan.Target(), Round: roundID, Digest: plan.Digest(), Summary: plan.Summary(), Principals: rule.names}
		var notes []string
		if in.approval() == "" {
			// A per-window approval covers the step when its signature
			// verifies again now and binds the live digest, once per step.
			a, ok, note, err := d.windowApproval(ctx, roundID, spec.Name, plan)
			if err != nil {
				return zero, err
			}
			if note != "" {
				notes = append(notes, note)
			}
			if ok {
				// A window approval signed by someone the intent does not
				// (or no longer) lets sign this kind of step leaves the
				// step to a signature of its own.
				if err := a.verified.RequirePrincipals(rule.names); err != nil {
					ok = false
					notes = append(notes, "the window approval "+a.ID+" of "+bind.Node+" does not cover "+spec.Name+": "+err.Error()+"; "+rule.words())
				}
			}
			if ok {
				a.Digest = bind.Digest
				if err := d.keepStep(roundID, spec.Name, "approve_window", a, plan); err != nil {
					return zero, Refuse("Ask the operator to check the server's state directory.", err.Error(), "nothing was executed")
				}
				switch err := d.Approvals.ConsumePart(ctx, a, spec.Name); {
				case errors.Is(err, policy.ErrReplayed):
					ok = false
					notes = append(notes, "the window approval "+a.ID+" of "+bind.Node+" covered "+spec.Name+" once already: running it again needs a new signature")
				case err != nil:
					return zero, Refuse("Ask a person to sign a new request.", "window approval could not be used: "+err.Error(), "nothing was executed")
				}
			}
			if ok {
				d.Log.Info("step covered by its window approval", "tool", spec.Name, "node", bind.Node, "round", roundID, "principal", a.Principal, "approval", a.ID, "digest", a.Digest)
				out, err := t.Do(ctx, d, r, in, plan, a, p)
				PO(&out).Contract().ApprovalID = a.ID
				if err != nil {
					err = &approvedErr{err: err, id: a.ID}
				}
				return out, err
			}
			text, exp, err := d.Approvals.Request(spec.Name, bind)
			if err != nil {
				return zero, fmt.Errorf("build approval request: %w", err)
			}
			if len(rule.names) > 0 {
				notes = append(notes, "who signs: "+rule.words())
			}
			d.Ops.ApprovalNeeded(spec.Name, bind.Round, bind.Node, bind.Summary, exp, d.now())
			return zero, &needApproval{ApprovalNeeded: ApprovalNeeded{
				Request:    text,
				Summary:    bind.Summary,
				Command:    "mcp-patch approve request.txt   (save the request text as request.txt; prints the approval to hand back)",
				AltCommand: "ssh-keygen -Y sign -n mcp-patch -f ~/.ssh/id_ed25519 request.txt && cat request.txt request.txt.sig   (hand back the whole output)",
				ExpiresAt:  exp.UTC().Format(time.RFC3339),
			}, notes: notes}
		}
		a, err := d.Approvals.Verify(ctx, in.approval(), spec.Name, bind)
		if errors.Is(err, policy.ErrPrincipalNotAllowed) {
			return zero, Refuse("Ask "+strings.Join(rule.names, " or ")+" to sign the request: call again without the approval to get it.",
				"approval refused: "+err.Error(), rule.words(), "nothing was executed")
		}
		if err != nil {
			return zero, Refuse("Ask a person to sign a new request: call again without the approval to get it.",
				"approval refused: "+err.Error(), "nothing was executed")
		}
		a.Digest = bind.Digest
		// The signed bytes are kept before the approval is used: what a
		// later step (a drain carried on) holds this one to is verified
		// again from them, never taken from a record the agent can write.
		if err := d.keepStep(roundID, spec.Name, spec.Name, a, plan); err != nil {
			return zero, Refuse("Ask the operator to check the server's state directory.", err.Error(), "nothing was executed")
		}
		if err := d.Approvals.Consume(ctx, a); err != nil {
			return zero, Refuse("Ask a person to sign a new request.", "approval could not be used: "+err.Error(), "nothing was executed")
		}
		d.Ops.ApprovalUsed(spec.Name, bind.Node)
		d.Log.Info("approved step", "tool", spec.Name, "node", bind.Node, "round", roundID, "principal", a.Principal, "approval", a.ID, "digest", a.Digest)
		out, err := t.Do(ctx, d, r, in, plan, a, p)
		PO(&out).Contract().ApprovalID = a.ID
		if err != nil {
			err = &approvedErr{err: err, id: a.ID}
		}
		return out, err
	}
	return New[In, Out, PO](spec, h)
}

// approvedErr carries the approval id of a step that ran and failed.
type approvedErr struct {
	err error
	id  string
}

func (e *approvedErr) Error() string { return e.err.Error() }
func (e *approvedErr) Unwrap() error { return e.err }

func isNeedApproval(err error) (*needApproval, bool) {
	var n *needApproval
	ok := errors.As(err, &n)
	return n, ok
}

// keepStep keeps the signed bytes of the approval a step is about to run
// under (tool: what the request was signed for) with the plan it runs.
func (d *Deps) keepStep(roundID, step, tool string, a Approved, plan window.Plan) error {
	raw, err := window.Encode(plan)
	if err != nil {
		return err
	}
	node := plan.Target()
	return d.keepProof(roundID, proof{Tool: tool, Step: step, Node: node, ApprovalID: a.ID, Approval: a.Text, Plan: raw})
}

// grant is the approval as the window journals it.
func (a Approved) grant() window.Approval { return window.Approval{ID: a.ID, Digest: a.Digest} }
