package window

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/mcp-patch/mcp-patch/kube/windowlock"
	"github.com/mcp-patch/mcp-patch/round"
)

// ErrLeaseHeld is wrapped by Lease.Hold when another holder has the Lease
// (windowlock.ErrHeld: the window Lease on the cluster says so).
var ErrLeaseHeld = windowlock.ErrHeld

// Bounds are how long each step may stay in flight before a re-entry
// records it as failed. Zero fields take DefaultBounds' values.
type Bounds struct {
	Drain, Install, TrialBoot, Promote, Autoremove time.Duration
	// Rollback is how long a rollback may take to come back on the old
	// kernel (0: no bound).
	Rollback time.Duration
}

// DefaultBounds: a drain twice its timeout, an install two hours, a trial
// boot and a rollback the reboot timeout, promote and autoremove half an
// hour.
func DefaultBounds(drainTimeout, rebootTimeout time.Duration) Bounds {
	return Bounds{Drain: 2 * drainTimeout, Install: 2 * time.Hour, TrialBoot: rebootTimeout,
		Promote: 30 * time.Minute, Autoremove: 30 * time.Minute, Rollback: rebootTimeout}
}

// For is the bound of step (0: none).
func (b Bounds) For(step round.Step) time.Duration {
	switch step {
	case round.StepDrain:
		return b.Drain
	case round.StepInstall:
		return b.Install
	case round.StepTrialBoot:
		return b.TrialBoot
	case round.StepPromote:
		return b.Promote
	case round.StepAutoremove:
		return b.Autoremove
	}
	return 0
}

// Serial lets one call at a time work on a node's window in this process
// (across processes, the Lease and the journal's lock do). The zero value
// is ready.
type Serial struct {
	mu    sync.Mutex
	nodes map[string]chan struct{}
}

// Lock waits for the node's turn, bounded by ctx; call the returned func
// to hand it on.
func (s *Serial) Lock(ctx context.Context, node string) (func(), error) {
	s.mu.Lock()
	if s.nodes == nil {
		s.nodes = map[string]chan struct{}{}
	}
	ch, ok := s.nodes[node]
	if !ok {
		ch = make(chan struct{}, 1)
		s.nodes[node] = ch
	}
	s.mu.Unlock()
	select {
	case ch <- struct{}{}:
		return func() { <-ch }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("wait for the other call on %s: %w", node, ctx.Err())
	}
}

// Window is one round's window machinery for the calls of one request: the
// journal's recorder, the hosts, the cluster and the Lease. Build one per
// call; Serial is shared by the process.
type Window struct {
	Round   string
	Rec     *Recorder
	Host    Host
	Cluster Cluster
	// Lease is the window Lease on the cluster; nil: none (no cluster).
	Lease Lease
	// Keeper keeps the Lease while steps run (LeaseKeeper); a process
	// shares one. Nil with Lease set: one for this Window alone.
	Keeper *LeaseKeeper
	own    *LeaseKeeper
	// Silencer ends the node's Alertmanager silence when its window ends;
	// nil: none is set.
	Silencer Silencer
	Bounds   Bounds
	Now      func() time.Time
	Log      *slog.Logger
	// Forget drops a node's pooled connection after a reboot; nil: no-op.
	Forget func(node string)
	// Others says who else maintains a node, looked at before its cordon;
	// nil: nobody is looked for. OthersWait bounds the wait for a holder
	// that lets go by itself (default 30 min).
	Others     Others
	OthersWait time.Duration
	// Requestor asks the maintenance operator for the node before its
	// cordon and lets go when the window ends; nil: none is asked. Asked
	// says when this process first asked for a node (nil: now).
	Requestor Requestor
	Asked     func(node string) time.Time
	// Driver waits for a GPU node's driver pod (the GPU Operator's driver
	// container) on the kernel it runs: after a trial boot fell back, or
	// a rollback, to the old kernel, it runs again there; nil: no node's
	// driver is the driver container.
	Driver DriverProbe
	// Claims takes kured's lock for the round before a cordon and the
	// GPU Operator's driver-upgrade skip for a GPU node's window, and
	// gives each back; nil: neither is taken.
	Claims Claims
}

func (w *Window) now() time.Time {
	if w.Now != nil {
		return w.Now()
	}
	return time.Now()
}

func (w *Window) forget(node string) {
	if w.Forget != nil {
		w.Forget(node)
	}
}

// keeper is the window's Lease keeper: Keeper when set (one per
// process), else one for this Window alone; nil without a Lease.
func (w *Window) keeper() *LeaseKeeper {
	switch {
	case w.Keeper != nil:
		return w.Keeper
	case w.Lease == nil:
		return nil
	case w.own == nil || w.own.Lease != w.Lease:
		w.own = &LeaseKeeper{Lease: w.Lease, Log: w.Log}
	}
	return w.own
}

// HoldLease takes or renews the window Lease for a step of node's window
// that binds no work to it (a gate being recorded). Held by someone else
// while the journal shows this round's window of node open: the Lease was
// lost, and the window stops under the window_lease rule (journaled).
// Without a Lease configured (no cluster), it holds trivially.
func (w *Window) HoldLease(ctx context.Context, step round.Step, node string) error {
	_, done, err := w.holdStep(ctx, step, node)
	done()
	return err
}

// holdStep is HoldLease for a step whose work runs in the returned
// context: the keeper cancels it (cause ErrLeaseLost) when the Lease is
// lost; done ends the step.
func (w *Window) holdStep(ctx context.Context, step round.Step, node string) (context.Context, func(), error) {
	k := w.keeper()
	if k == nil {
		return ctx, func() {}, nil
	}
	sctx, done, err := k.Hold(ctx, w.Round, node)
	if err == nil {
		return sctx, done, nil
	}
	if !errors.Is(err, ErrLeaseHeld) && !errors.Is(err, ErrLeaseLost) {
		return ctx, done, fmt.Errorf("take the window Lease: %w", err)
	}
	n := w.Rec.J.Shared().Node(node)
	if n == nil || n.Window != round.WindowOpen {
		return ctx, done, refuse("Another operator's window is open: wait until it closes (its gate turns green), then call again.", err.Error(), "nothing was executed")
	}
	why := fmt.Sprintf("rule %s: the window Lease of %s was lost while its window is open: %v", round.RuleWindowLease, node, err)
	return ctx, done, w.Rec.StopWith(step, node, leaseNext, why, "nothing was executed")
}

// LeaseHeld is the guard before each destructive action of node's
// window: nil while the Lease is held and was renewed within its
// duration (or no Lease is configured); else the loss.
func (w *Window) LeaseHeld(ctx context.Context, node string) error {
	if lost := LostLease(ctx); lost != nil {
		return lost
	}
	if k := w.keeper(); k != nil {
		return k.Check(w.Round, node)
	}
	return nil
}

// Retake takes the window Lease again for the window the journal shows
// open, as a server does when it starts: the Lease of a window left open
// by a process that stopped lapses, and another server could take it
// between the restart and the window's next step. It writes nothing: held
// by another holder, the error wraps ErrLeaseHeld and the window's next
// step stops under the window_lease rule (HoldLease). It answers the node
// whose window is open; "" and nil when none is (or no Lease is
// configured).
func (w *Window) Retake(ctx context.Context) (string, error) {
	st := w.Rec.J.Shared()
	k := w.keeper()
	if k == nil || st.Closed || st.Aborted || st.Current == "" {
		return "", nil
	}
	_, done, err := k.Hold(ctx, w.Round, st.Current)
	done() // a server's keeper renews it on (LeaseKeeper.BetweenSteps)
	if err != nil {
		return st.Current, fmt.Errorf("take the window Lease of %s again: %w", st.Current, err)
	}
	return st.Current, nil
}

// ReleaseLease stops renewing and lets the Lease go once the node's
// window closed.
func (w *Window) ReleaseLease(ctx context.Context, node string) error {
	k := w.keeper()
	if k == nil {
		return nil
	}
	return k.Release(ctx, w.Round, node)
}

// Overdue records a step in flight past its bound as failed.
func (w *Window) Overdue(step round.Step, node string, run *round.StepRun, seen string) error {
	bound := w.Bounds.For(step)
	why := fmt.Sprintf("rule %s: %s", round.RuleStepOverdue, OverdueReason(step, node, run.Last(), w.now(), bound, seen))
	return w.Rec.FailWith(step, node, "Stop: a person checks the node (console, logs) and signs resume or abort.", why)
}

// Outcome is where a window step stands after a call.
type Outcome struct {
	// InProgress: call again to follow it.
	InProgress bool
	Reasons    []string
	Next       string
}

// ErrNeedApproval is returned by a Follow function when the host shows
// that nothing of the step in flight began: only a fresh approval may
// start it.
var ErrNeedApproval = errors.New("nothing of the step in flight began on the host: a fresh approval is needed to start it")
