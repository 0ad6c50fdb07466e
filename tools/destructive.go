package tools

import (
	"context"
	"errors"
	"time"

	"github.com/mcp-patch/mcp-patch/round/service"
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
		// With leader election on, only the leader gets here (the
		// framework refused a follower), and it is fenced: the Leases it
		// holds, read now, are read again just before Follow or Do acts.
		// No server works on the node it runs on: a leader hands over.
		fence, err := d.AdmitLeader(ctx, spec.Name, target)
		if err != nil {
			return zero, err
		}
		open := t.Open
		if open == nil {
			open = (*Deps).OpenRound
		}
		r, err := open(d)
		if err != nil {
			return zero, err
		}
		// Nothing destructive runs past a record the intent remote does
		// not hold, when the config requires it (another server resumes
		// from the remote).
		if err := d.RequirePushed(ctx, r.ID); err != nil {
			return zero, err
		}
		if t.Follow != nil {
			if err := d.CheckFence(ctx, spec.Name, target, fence); err != nil {
				return zero, err
			}
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
		// Fenced before the approval is used up too, so a server that
		// lost the lead does not spend a person's signature.
		if err := d.CheckFence(ctx, spec.Name, target, fence); err != nil {
			return zero, err
		}
		a, err := d.Authorize(ctx, r.ID, spec.Name, plan, in.approval())
		if err != nil {
			return zero, err
		}
		if err := d.CheckFence(ctx, spec.Name, target, fence); err != nil {
			return zero, fenceAfterApproval(err, a.ID)
		}
		out, err := t.Do(ctx, d, r, in, plan, a, p)
		PO(&out).Contract().ApprovalID = a.ID
		if err != nil {
			err = &approvedErr{err: err, id: a.ID}
		}
		return out, err
	}
	return New[In, Out, PO](spec, h)
}

// fenceAfterApproval is a fence failed after the approval was used up:
// nothing was executed, and the next try needs a new signature.
func fenceAfterApproval(err error, id string) error {
	var ref *Refusal
	if errors.As(err, &ref) {
		r := *ref
		r.Reasons = append(append([]string{}, ref.Reasons...), "approval "+id+" was used up: calling the step on the leader needs a new signature")
		return &r
	}
	return err
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
