package tools

import (
	"github.com/mcp-patch/mcp-patch/round/service"

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
	Do func(ctx context.Context, d *Deps, r *window.Round, in In, plan P, a service.Approved, p Progress) (Out, error)
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
		unlock, err := d.Serial.Lock(ctx, target)
		if err != nil {
			return zero, err
		}
		defer unlock()
		open := t.Open
		if open == nil {
			open = (*Deps).OpenRound
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
			return zero, d.RecordStop(r, err)
		}
		roundID := r.ID
		// The round's reviewed plan: signed before the first cordon, and
		// this step's live plan equal to its node's reviewed plan.
		if err := d.CheckReviewed(ctx, roundID, spec.Name, plan); err != nil {
			return zero, err
		}
		if d.Approvals == nil {
			return zero, Refuse("Ask the operator to configure approvals.allowed_signers and restart the server.",
				"no allowed_signers file is configured, so no approval can be verified and no destructive step can run")
		}
		rule, err := d.StepPrincipals(roundID, plan.Target())
		if err != nil {
			return zero, err
		}
		bind := service.Binding{Node: plan.Target(), Round: roundID, Digest: plan.Digest(), Summary: plan.Summary(), Principals: rule.Names}
		var notes []string
		if in.approval() == "" {
			// A per-window approval covers the step when its signature
			// verifies again now and binds the live digest, once per step.
			a, ok, note, err := d.WindowApproval(ctx, roundID, spec.Name, plan)
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
				if err := a.RequirePrincipals(rule.Names); err != nil {
					ok = false
					notes = append(notes, "the window approval "+a.ID+" of "+bind.Node+" does not cover "+spec.Name+": "+err.Error()+"; "+rule.Words())
				}
			}
			if ok {
				a.Digest = bind.Digest
				if err := d.KeepStep(roundID, spec.Name, "approve_window", a, plan); err != nil {
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
				PO(&out).result().approvalID = a.ID
				if err != nil {
					err = &approvedErr{err: err, id: a.ID}
				}
				return out, err
			}
			text, exp, err := d.Approvals.Request(spec.Name, bind)
			if err != nil {
				return zero, fmt.Errorf("build approval request: %w", err)
			}
			if len(rule.Names) > 0 {
				notes = append(notes, "who signs: "+rule.Words())
			}
			d.Ops.ApprovalNeeded(spec.Name, bind.Round, bind.Node, bind.Summary, exp, d.Clock())
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
			return zero, Refuse("Ask "+strings.Join(rule.Names, " or ")+" to sign the request: call again without the approval to get it.",
				"approval refused: "+err.Error(), rule.Words(), "nothing was executed")
		}
		if err != nil {
			return zero, Refuse("Ask a person to sign a new request: call again without the approval to get it.",
				"approval refused: "+err.Error(), "nothing was executed")
		}
		a.Digest = bind.Digest
		// The signed bytes are kept before the approval is used: what a
		// later step (a drain carried on) holds this one to is verified
		// again from them, never taken from a record the agent can write.
		if err := d.KeepStep(roundID, spec.Name, spec.Name, a, plan); err != nil {
			return zero, Refuse("Ask the operator to check the server's state directory.", err.Error(), "nothing was executed")
		}
		if err := d.Approvals.Consume(ctx, a); err != nil {
			return zero, Refuse("Ask a person to sign a new request.", "approval could not be used: "+err.Error(), "nothing was executed")
		}
		d.Ops.ApprovalUsed(spec.Name, bind.Node)
		d.Log.Info("approved step", "tool", spec.Name, "node", bind.Node, "round", roundID, "principal", a.Principal, "approval", a.ID, "digest", a.Digest)
		out, err := t.Do(ctx, d, r, in, plan, a, p)
		PO(&out).result().approvalID = a.ID
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

// fromWindow words the round's answers as tool results
// (service.FromWindow), keeping the approval id of a step that ran and
// an approval the step needs as the framework answers them.
func fromWindow(err error) error {
	if ae, ok := err.(*approvedErr); ok {
		return &approvedErr{err: fromWindow(ae.err), id: ae.id}
	}
	var n *service.NeedApproval
	if errors.As(err, &n) {
		var ref *Refusal
		var fail *Failure
		if !errors.As(err, &ref) && !errors.As(err, &fail) {
			return approvalNeeded(n)
		}
	}
	return service.FromWindow(err)
}

// approvalNeeded is the framework's approval_required answer for n.
func approvalNeeded(n *service.NeedApproval) *needApproval {
	a := ApprovalNeeded{Request: n.Request, Summary: n.Summary, Command: n.Command, AltCommand: n.AltCommand,
		ExpiresAt: n.Expires.UTC().Format(time.RFC3339)}
	if a.Command == "" {
		a.Command = "mcp-patch approve request.txt   (save the request text as request.txt; prints the approval to hand back)"
		a.AltCommand = "ssh-keygen -Y sign -n mcp-patch -f ~/.ssh/id_ed25519 request.txt && cat request.txt request.txt.sig   (hand back the whole output)"
	}
	return &needApproval{ApprovalNeeded: a, notes: n.Notes}
}
