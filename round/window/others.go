package window

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/mcp-patch/mcp-patch/kube/actors"
	"github.com/mcp-patch/mcp-patch/round"
)

// Others says who else maintains a node now (kube/actors' holders), each
// with when the hold began: the cluster's time where it has one, else
// when this server first saw it.
type Others interface {
	Holders(ctx context.Context, node string) ([]actors.Holder, error)
}

// Waiting is the answer while another party holds the node and lets go by
// itself: nothing was done or recorded; the same call later looks again.
type Waiting struct {
	Node    string
	Holders []actors.Holder
	// Until is when the wait runs out and the round stops for a person.
	Until time.Time
}

func (w *Waiting) Error() string {
	return fmt.Sprintf("%s is held by another party until it lets go (at most until %s): %s",
		w.Node, w.Until.UTC().Format(time.RFC3339), strings.Join(holderLines(w.Holders), "; "))
}

// OthersVerdict is DecideOthers' answer.
type OthersVerdict int

// Verdicts.
const (
	OthersNone OthersVerdict = iota // nobody else: the cordon may go ahead
	OthersWait                      // wait, within the bound
	OthersStop                      // stop for a person
)

// DecideOthers is the pure rule over the holders of a node: none, go;
// any that needs a person, or a wait longer than bound counted from the
// earliest hold, stop; otherwise wait until then.
func DecideOthers(hs []actors.Holder, now time.Time, bound time.Duration) (OthersVerdict, time.Time, string) {
	if len(hs) == 0 {
		return OthersNone, time.Time{}, ""
	}
	if actors.AnyStop(hs) {
		return OthersStop, time.Time{}, "another party holds the node and a person must look"
	}
	first := now
	for _, h := range hs {
		if !h.Since.IsZero() && h.Since.Before(first) {
			first = h.Since
		}
	}
	until := first.Add(bound)
	if !now.Before(until) {
		return OthersStop, until, fmt.Sprintf("another party has held the node since %s, longer than the round waits (%s)", first.UTC().Format(time.RFC3339), bound)
	}
	return OthersWait, until, ""
}

const othersNext = "Stop: another party maintains this node. A person finds out who (the reasons name them), lets them finish or agrees with them, and removes only what they made (the round never lifts a cordon or taint it did not make); then signs resume or abort."

// OthersLetGo is othersLetGo under the window's bound: the drain's plan
// asks it before a person is asked to sign (a wait costs no signature),
// and the drain asks it again just before the cordon.
func (w *Window) OthersLetGo(ctx context.Context, node string) error {
	return w.othersClear(ctx, node, w.othersBound(), false)
}

func (w *Window) othersBound() time.Duration {
	if w.OthersWait > 0 {
		return w.OthersWait
	}
	return 30 * time.Minute
}

// othersLetGo checks, before the cordon, that nobody else maintains node:
// nil when nobody does; *Waiting while a holder that lets go by itself
// holds it within bound; a journaled stop under rule other_actor
// otherwise. A cluster that cannot say is a stop too, never a pass.
func (w *Window) othersLetGo(ctx context.Context, node string, bound time.Duration) error {
	if w.Others == nil {
		return nil
	}
	hs, err := w.Others.Holders(ctx, node)
	if err != nil {
		return w.Rec.StopWith(round.StepDrain, node, othersNext,
			fmt.Sprintf("rule %s: could not tell who else maintains %s before its cordon: %v", round.RuleOtherActor, node, err),
			"nothing was cordoned or evicted")
	}
	switch v, until, why := DecideOthers(hs, w.now(), bound); v {
	case OthersWait:
		return &Waiting{Node: node, Holders: hs, Until: until}
	case OthersStop:
		reasons := append([]string{fmt.Sprintf("rule %s: %s: %s", round.RuleOtherActor, node, why)}, holderLines(hs)...)
		return w.Rec.StopWith(round.StepDrain, node, othersNext, append(reasons, "nothing was cordoned or evicted, and nothing of theirs was changed")...)
	}
	return nil
}

func holderLines(hs []actors.Holder) []string {
	out := make([]string, 0, len(hs))
	for _, h := range hs {
		out = append(out, h.String())
	}
	return out
}

// Requestor asks, where the maintenance operator runs, for the node's
// maintenance as one requestor among others (kube/actors'
// RequestMaintenance), and lets go of the request when the window ends.
type Requestor interface {
	// Request makes or finds this server's request; served is false where
	// no maintenance operator runs; ready once the operator made it Ready.
	Request(ctx context.Context, node string) (served, ready bool, phase string, err error)
	// Release removes this server's request; gone says it was there.
	Release(ctx context.Context, node string) (gone bool, err error)
}

// requestMaintenance asks for node before its cordon: nil once the
// request is Ready (or no operator runs); *Waiting while the operator
// schedules it, within bound counted from when this server first asked;
// a journaled stop when the operator cannot be asked or the wait runs out.
func (w *Window) requestMaintenance(ctx context.Context, node string, bound time.Duration) error {
	if w.Requestor == nil {
		return nil
	}
	served, ready, phase, err := w.Requestor.Request(ctx, node)
	if err != nil {
		return w.Rec.StopWith(round.StepDrain, node, othersNext,
			fmt.Sprintf("rule %s: could not ask the maintenance operator for %s: %v", round.RuleOtherActor, node, err),
			"nothing was cordoned or evicted")
	}
	if !served || ready {
		return nil
	}
	if phase == "" {
		phase = "not yet scheduled"
	}
	h := actors.Holder{Actor: actors.NodeMaintenance, Who: "the maintenance operator", Verdict: actors.Wait,
		Since: w.firstAsked(node), What: "this round's NodeMaintenance request is not Ready yet (phase " + phase + "): the operator lets other maintenance finish first"}
	switch v, until, why := DecideOthers([]actors.Holder{h}, w.now(), bound); v {
	case OthersWait:
		return &Waiting{Node: node, Holders: []actors.Holder{h}, Until: until}
	default:
		return w.Rec.StopWith(round.StepDrain, node, othersNext,
			fmt.Sprintf("rule %s: %s: %s", round.RuleOtherActor, node, why), h.String(), "nothing was cordoned or evicted; the request stays for the operator")
	}
}

// firstAsked is when this process first asked for node's maintenance.
func (w *Window) firstAsked(node string) time.Time {
	if w.Asked == nil {
		return w.now()
	}
	return w.Asked(node)
}
