package window

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/mcp-patch/mcp-patch/round"
)

// ErrLeaseLost is the cause of a step context cancelled by the keeper: the
// window Lease now names another holder, or could not be renewed within
// its duration. The work in flight stops at its next safe point and the
// window stops under the window_lease rule.
var ErrLeaseLost = errors.New("window Lease lost")

// LeaseTiming is how the keeper holds the window Lease.
type LeaseTiming struct {
	// Renew is the period between renewals. Zero: Duration/3.
	Renew time.Duration
	// Duration is how long a renewal holds (the Lease's
	// leaseDurationSeconds): nothing destructive starts unless the Lease
	// was renewed within it. Zero: 60s.
	Duration time.Duration
}

// DefaultLeaseTiming: the Lease holds 60s and is renewed every 20s.
var DefaultLeaseTiming = LeaseTiming{Renew: 20 * time.Second, Duration: 60 * time.Second}

func (t LeaseTiming) withDefaults() LeaseTiming {
	if t.Duration <= 0 {
		t.Duration = DefaultLeaseTiming.Duration
	}
	if t.Renew <= 0 || t.Renew >= t.Duration {
		t.Renew = t.Duration / 3
	}
	return t
}

// LeaseVerdict is what one renewal attempt means for the window.
type LeaseVerdict int

const (
	// LeaseRenewed: the Lease is ours for another duration.
	LeaseRenewed LeaseVerdict = iota
	// LeaseRetry: the renewal failed, but the last one still holds past
	// the next attempt: try again at the next period.
	LeaseRetry
	// LeaseLost: another holder has it, or the last renewal would lapse
	// before the next attempt: the window stops.
	LeaseLost
)

// DecideRenewal judges one renewal attempt made at now whose error is err
// (nil: renewed), the last successful renewal being renewed.
func DecideRenewal(renewed, now time.Time, t LeaseTiming, err error) LeaseVerdict {
	t = t.withDefaults()
	switch {
	case err == nil:
		return LeaseRenewed
	case errors.Is(err, ErrLeaseHeld), errors.Is(err, ErrLeaseLost):
		return LeaseLost
	case now.Sub(renewed)+t.Renew >= t.Duration:
		return LeaseLost // the next attempt would come after the Lease lapsed
	}
	return LeaseRetry
}

// LeaseFresh reports whether a Lease last renewed at renewed still holds at
// now: what a destructive action needs before it starts.
func LeaseFresh(renewed, now time.Time, t LeaseTiming) bool {
	t = t.withDefaults()
	return !renewed.IsZero() && !now.Before(renewed) && now.Sub(renewed) < t.Duration
}

// LeaseKeeper is the one keeper of the window Lease in a process. A step
// holds the Lease through it (Hold) and runs in the context Hold returns;
// while the step runs the keeper renews the Lease every Timing.Renew, and
// when the Lease is lost (another holder has it, or it could not be
// renewed within its duration) it cancels every step context with the
// cause ErrLeaseLost. Check is the guard before each destructive action.
// The zero value is not usable: set Lease.
type LeaseKeeper struct {
	Lease  Lease
	Timing LeaseTiming
	// BetweenSteps keeps the Lease renewed after a step ends, until the
	// window is released or the Lease lost: a server holds its window
	// while people and the agent work between calls. False (a one-shot CLI
	// call): renewed only while a step runs; it lapses after, and the
	// next step of the same identity takes it again.
	BetweenSteps bool
	// Now is the clock of the freshness checks; nil: time.Now.
	Now func() time.Time
	// Log gets failed renewals and the loss; nil: discarded.
	Log *slog.Logger

	mu  sync.Mutex
	cur *keptLease
}

// keptLease is the window whose Lease the keeper holds.
type keptLease struct {
	round, node string
	renewed     time.Time
	lost        error
	steps       map[int]context.CancelCauseFunc
	nextStep    int
	stop        context.CancelFunc // ends the renewal loop
	done        chan struct{}
}

func (k *LeaseKeeper) now() time.Time {
	if k.Now != nil {
		return k.Now()
	}
	return time.Now()
}

func (k *LeaseKeeper) log() *slog.Logger {
	if k.Log != nil {
		return k.Log
	}
	return slog.New(slog.DiscardHandler)
}

// Hold takes or renews the Lease for round and node and binds a step to
// it: the returned context is ctx, cancelled with the cause ErrLeaseLost
// when the keeper finds the Lease lost; done ends the step. Held by
// another holder (now, or found by a renewal since the last step): an
// error wrapping ErrLeaseHeld or ErrLeaseLost, and nothing is bound.
func (k *LeaseKeeper) Hold(ctx context.Context, roundID, node string) (context.Context, func(), error) {
	k.mu.Lock()
	if c := k.cur; c != nil && c.round == roundID && c.node == node && c.lost != nil {
		// Found lost between steps: the window stops; a later step (after
		// a person's resume) takes the Lease afresh.
		lost := c.lost
		k.cur = nil
		k.mu.Unlock()
		return ctx, func() {}, lost
	}
	k.mu.Unlock()
	if err := k.Lease.Hold(ctx, roundID, node); err != nil {
		if errors.Is(err, ErrLeaseHeld) {
			// Lost, found by this hold: stop renewing, so the loss is
			// answered once (the step stops the window), not again after
			// a person's resume.
			k.mu.Lock()
			if c := k.cur; c != nil && c.round == roundID && c.node == node {
				k.cur = nil
				k.endLocked(c)
			}
			k.mu.Unlock()
		}
		return ctx, func() {}, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	c := k.cur
	if c == nil || c.round != roundID || c.node != node || c.lost != nil {
		if c != nil {
			k.endLocked(c)
		}
		c = &keptLease{round: roundID, node: node, steps: map[int]context.CancelCauseFunc{}, done: make(chan struct{})}
		// The loop outlives no step unless BetweenSteps: it ends with the
		// last step, on Release or Close, or when the Lease is lost.
		lctx, stop := context.WithCancel(context.WithoutCancel(ctx))
		c.stop = stop
		k.cur = c
		go k.keep(lctx, c)
	}
	c.renewed = k.now()
	sctx, cancel := context.WithCancelCause(ctx)
	id := c.nextStep
	c.nextStep++
	c.steps[id] = cancel
	return sctx, func() {
		k.mu.Lock()
		defer k.mu.Unlock()
		delete(c.steps, id)
		cancel(nil)
		if len(c.steps) == 0 && !k.BetweenSteps && k.cur == c {
			k.cur = nil
			k.endLocked(c)
		}
	}, nil
}

// endLocked stops c's renewal loop; k.mu is held.
func (k *LeaseKeeper) endLocked(c *keptLease) {
	c.stop()
}

// keep renews c's Lease every period until its loop ends or the Lease is
// lost.
func (k *LeaseKeeper) keep(ctx context.Context, c *keptLease) {
	defer close(c.done)
	t := k.Timing.withDefaults()
	tick := time.NewTicker(t.Renew)
	defer tick.Stop()
	log := k.log().With("round", c.round, "node", c.node, "step", "window-lease")
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		rctx, cancel := context.WithTimeout(ctx, t.Renew)
		err := k.Lease.Hold(rctx, c.round, c.node)
		cancel()
		if ctx.Err() != nil {
			return
		}
		k.mu.Lock()
		now := k.now()
		switch DecideRenewal(c.renewed, now, t, err) {
		case LeaseRenewed:
			c.renewed = now
		case LeaseRetry:
			log.Warn("window Lease renewal failed; trying again", "err", err)
		case LeaseLost:
			if errors.Is(err, ErrLeaseHeld) || errors.Is(err, ErrLeaseLost) {
				c.lost = fmt.Errorf("%w: %v", ErrLeaseLost, err)
			} else {
				c.lost = fmt.Errorf("%w: not renewed for %v (Lease duration %v): %v", ErrLeaseLost, now.Sub(c.renewed).Round(time.Millisecond), t.Duration, err)
			}
			log.Error("window Lease lost: the work in flight stops", "err", c.lost)
			for _, cancelStep := range c.steps {
				cancelStep(c.lost)
			}
			k.mu.Unlock()
			return
		}
		k.mu.Unlock()
	}
}

// Check is the guard before a destructive action of round and node's
// window: nil while the keeper holds their Lease, not lost, renewed within
// its duration; else an error wrapping ErrLeaseLost.
func (k *LeaseKeeper) Check(roundID, node string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	c := k.cur
	switch {
	case c == nil || c.round != roundID || c.node != node:
		return fmt.Errorf("%w: this server does not hold the window Lease of %s now", ErrLeaseLost, node)
	case c.lost != nil:
		return c.lost
	case !LeaseFresh(c.renewed, k.now(), k.Timing):
		return fmt.Errorf("%w: last renewed at %s, longer ago than its duration %v", ErrLeaseLost, c.renewed.UTC().Format(time.RFC3339), k.Timing.withDefaults().Duration)
	}
	return nil
}

// Release stops renewing and lets the Lease of round and node go.
func (k *LeaseKeeper) Release(ctx context.Context, roundID, node string) error {
	k.mu.Lock()
	c := k.cur
	if c != nil && c.round == roundID && c.node == node {
		k.cur = nil
		k.endLocked(c)
	} else {
		c = nil
	}
	k.mu.Unlock()
	if c != nil {
		<-c.done // a renewal in flight must not take the Lease back after the release
	}
	return k.Lease.Release(ctx, roundID, node)
}

// Lose ends the holding as lost for why (with leader election, this
// server no longer leads): the steps bound to it are cancelled with
// ErrLeaseLost at their next safe point, and it is renewed no more; the
// next leader takes the window over.
func (k *LeaseKeeper) Lose(why string) {
	k.mu.Lock()
	c := k.cur
	k.cur = nil
	if c != nil {
		if c.lost == nil {
			c.lost = fmt.Errorf("%w: %s", ErrLeaseLost, why)
		}
		for _, cancelStep := range c.steps {
			cancelStep(c.lost)
		}
		k.endLocked(c)
	}
	k.mu.Unlock()
	if c != nil {
		k.log().Warn("window Lease given up: the work in flight stops", "round", c.round, "node", c.node, "why", why)
		<-c.done
	}
}

// Close stops renewing without releasing (a server shutting down: the
// Lease lapses, and the same identity takes it again when it starts).
func (k *LeaseKeeper) Close() {
	k.mu.Lock()
	c := k.cur
	k.cur = nil
	if c != nil {
		k.endLocked(c)
	}
	k.mu.Unlock()
	if c != nil {
		<-c.done
	}
}

// LostLease is the loss that cancelled ctx when the keeper cancelled it
// for a lost window Lease; nil otherwise.
func LostLease(ctx context.Context) error {
	if cause := context.Cause(ctx); cause != nil && errors.Is(cause, ErrLeaseLost) {
		return cause
	}
	return nil
}

// leaseNext is the next action after a window stopped for its Lease.
const leaseNext = "Stop: another server holds the window Lease now (or it could not be renewed). A person finds out who (the Lease's holder), makes sure only one server works on the cluster, then signs resume or abort."

// leaseStop records the stop of step on node under the window_lease rule
// after the Lease was lost while the step was in flight; left says what
// was left as it was.
func (w *Window) leaseStop(step round.Step, node string, lost error, left string) error {
	why := fmt.Sprintf("rule %s: the window Lease of %s was lost while %s was in flight: %v", round.RuleWindowLease, node, step, lost)
	return w.Rec.StopWith(step, node, leaseNext, why, left)
}

// leaseInterrupt is leaseStop for a step whose work on the host may run
// on (a detached install, a prepared or requested reboot): the step stays
// in flight, so that after a person's resume the next holder of the Lease
// follows it by observing the node (FollowInstall, FollowTrialBoot) and
// never starts it again.
func (w *Window) leaseInterrupt(step round.Step, node string, lost error, left string) error {
	why := fmt.Sprintf("rule %s: the window Lease of %s was lost while %s was in flight: %v", round.RuleWindowLease, node, step, lost)
	reasons := []string{why, left}
	err := w.Rec.Interrupt(step, node, strings.Join(reasons, "; "))
	if err != nil {
		reasons = append(reasons, "the stop could not be recorded in the journal: "+err.Error())
	}
	return &Stopped{Reasons: reasons, Next: leaseNext, Journal: err}
}
