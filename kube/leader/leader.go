// Package leader elects one leader among the servers of a cluster on a
// coordination.k8s.io Lease, with client-go's leaderelection, and fences
// each destructive step of the leader: leaderelection alone does not
// guarantee one leader at a time (a leader whose renewals are held back
// may still believe it leads after another took over), so the step reads
// the Leases again from the API server just before it acts (Admit, then
// Check; the rule is DecideFence).
//
// The package owns the leader Lease and the reading of the Leases a step
// is fenced on; it must not know what a step does, nor take or renew the
// window Lease (kube/windowlock and round/window's LeaseKeeper do).
package leader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// Config names the leader Lease, the window Lease fenced with it and this
// server, and times the election. Every field is required.
type Config struct {
	// Namespace holds both Leases (kube.lease_namespace).
	Namespace string
	// Name is the leader Lease (leader_election.lease_name).
	Name string
	// WindowLease is the window Lease (kube/windowlock's), fenced with the
	// leader Lease.
	WindowLease string
	// Identity names this server on the Lease; two servers must never
	// share one (the window Lease's identity).
	Identity string
	// LeaseDuration is how long a candidate waits without seeing a
	// renewal before it takes over (whole seconds on the Lease).
	LeaseDuration time.Duration
	// RenewDeadline is how long the leader tries to renew before it gives
	// leadership up; shorter than LeaseDuration.
	RenewDeadline time.Duration
	// RetryPeriod is the pause between attempts; RenewDeadline must
	// exceed 1.2 of it.
	RetryPeriod time.Duration
	// OnStopped, when set, runs each time this server stops leading (its
	// renewals ran past RenewDeadline, or it stepped down): the work it
	// had in flight stops at its next safe point.
	OnStopped func()
}

func (c Config) validate() error {
	var errs []error
	for what, v := range map[string]string{"namespace": c.Namespace, "lease name": c.Name, "window Lease": c.WindowLease, "identity": c.Identity} {
		if v == "" {
			errs = append(errs, fmt.Errorf("%s is required", what))
		}
	}
	if c.Name != "" && c.Name == c.WindowLease {
		errs = append(errs, fmt.Errorf("the leader Lease %q is the window Lease", c.Name))
	}
	if c.LeaseDuration < time.Second || c.LeaseDuration%time.Second != 0 {
		errs = append(errs, fmt.Errorf("lease duration %v is not a whole number of seconds", c.LeaseDuration))
	}
	return errors.Join(errs...)
}

// Elector is this server's place in the election. Start runs it; Stop
// ends it and lets the Lease go when this server leads. The zero value is
// not usable: use New.
type Elector struct {
	kc  kubernetes.Interface
	cfg Config
	log *slog.Logger
	now func() time.Time
	le  *leaderelection.LeaderElector

	mu sync.Mutex
	// term is the context of this server's leadership term, nil when it
	// does not lead; it ends when leaderelection stops renewing.
	term context.Context
	// observed is closed once the election has seen the leader Lease.
	observed     chan struct{}
	observedOnce sync.Once
	// changed is closed and replaced whenever the election changes
	// (started, stopped, a new leader seen): Wait's signal.
	changed chan struct{}
	stop    context.CancelFunc
	done    chan struct{}
	// endCampaign ends the running campaign (StepDown); campaignEnded is
	// closed when it has ended; sitOut is how long the next campaign
	// waits. Set while a campaign runs.
	endCampaign   context.CancelFunc
	campaignEnded chan struct{}
	sitOut        time.Duration
}

// New makes the elector of cfg.Identity over kc. log gets the election's
// changes (nil: discarded); now is the clock of the fence (nil:
// time.Now).
func New(kc kubernetes.Interface, cfg Config, log *slog.Logger, now func() time.Time) (*Elector, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("leader election: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if now == nil {
		now = time.Now
	}
	e := &Elector{kc: kc, cfg: cfg, log: log.With("lease", cfg.Namespace+"/"+cfg.Name, "identity", cfg.Identity), now: now,
		observed: make(chan struct{}), changed: make(chan struct{})}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: cfg.Namespace, Name: cfg.Name},
			Client:     kc.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: cfg.Identity},
		},
		LeaseDuration:   cfg.LeaseDuration,
		RenewDeadline:   cfg.RenewDeadline,
		RetryPeriod:     cfg.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            cfg.Name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: e.started,
			OnStoppedLeading: e.stopped,
			OnNewLeader:      e.newLeader,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("leader election: %w", err)
	}
	e.le = le
	return e, nil
}

// changedLocked wakes every Wait; e.mu is held.
func (e *Elector) changedLocked() {
	close(e.changed)
	e.changed = make(chan struct{})
}

func (e *Elector) started(term context.Context) {
	e.mu.Lock()
	e.term = term
	e.changedLocked()
	e.mu.Unlock()
	e.seen()
	e.log.Info("this server leads: it runs the round's destructive steps")
}

func (e *Elector) stopped() {
	e.mu.Lock()
	was := e.term != nil
	e.term = nil
	e.changedLocked()
	e.mu.Unlock()
	if was {
		e.log.Warn("this server no longer leads: it refuses destructive steps")
		if e.cfg.OnStopped != nil {
			e.cfg.OnStopped()
		}
	}
}

func (e *Elector) newLeader(identity string) {
	e.mu.Lock()
	e.changedLocked()
	e.mu.Unlock()
	e.seen()
	if identity != e.cfg.Identity {
		e.log.Info("the leader is another server: this one follows", "leader", identity)
	}
}

func (e *Elector) seen() { e.observedOnce.Do(func() { close(e.observed) }) }

// Start runs the election in the background until Stop or ctx ends: this
// server campaigns, leads while it renews, and campaigns again after it
// lost the Lease.
func (e *Elector) Start(ctx context.Context) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.done != nil {
		return
	}
	ctx, e.stop = context.WithCancel(klog.NewContext(ctx, logr.FromSlogHandler(e.log.Handler())))
	e.done = make(chan struct{})
	go func() {
		defer close(e.done)
		for ctx.Err() == nil {
			e.campaign(ctx)
		}
	}()
}

// campaign runs one campaign: this server takes the Lease or follows,
// leads while it renews, and lets the Lease go when StepDown or ctx ends
// it (ReleaseOnCancel). After a step-down it sits out before it returns,
// so the next campaign starts once another server had time to take over.
func (e *Elector) campaign(ctx context.Context) {
	run, end := context.WithCancel(ctx)
	ended := make(chan struct{})
	e.mu.Lock()
	e.endCampaign, e.campaignEnded, e.sitOut = end, ended, 0
	e.mu.Unlock()
	e.le.Run(run) // returns when the term ends, or run does
	end()
	e.mu.Lock()
	e.endCampaign = nil
	sitOut := e.sitOut
	e.mu.Unlock()
	close(ended)
	if sitOut <= 0 {
		return
	}
	e.log.Info("this server stepped down: it sits out before it campaigns again", "sit_out", sitOut)
	t := time.NewTimer(sitOut)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// ErrNotLeading is StepDown's answer on a server that does not lead.
var ErrNotLeading = errors.New("this server does not lead")

// StepDown hands leadership over: the leader lets its Lease go at once
// (ReleaseOnCancel), so another server takes it within a retry period,
// and campaigns again only after sitOut (at least a lease duration, so
// the others had their turn). It waits, bounded by ctx, until the term
// has ended, and returns the leader Lease as the API server holds it
// then: free, another's, or still this server's where the release failed
// (it lapses after the lease duration). ErrNotLeading: this server did
// not lead, and nothing changed.
func (e *Elector) StepDown(ctx context.Context, sitOut time.Duration) (LeaseState, error) {
	if sitOut < e.cfg.LeaseDuration {
		sitOut = e.cfg.LeaseDuration
	}
	e.mu.Lock()
	end, ended := e.endCampaign, e.campaignEnded
	if end == nil || e.term == nil {
		e.mu.Unlock()
		return LeaseState{}, ErrNotLeading
	}
	e.sitOut = sitOut
	e.mu.Unlock()
	end()
	select {
	case <-ended:
	case <-ctx.Done():
		return LeaseState{}, fmt.Errorf("step down: the term did not end: %w", context.Cause(ctx))
	}
	e.log.Warn("this server stepped down: another server takes the lead", "sit_out", sitOut)
	l, err := ReadLease(ctx, e.kc, e.cfg.Namespace, e.cfg.Name)
	if err != nil {
		return LeaseState{}, fmt.Errorf("step down: %w", err)
	}
	return l, nil
}

// Stop ends the election and waits until it has ended; a leader lets its
// Lease go first (ReleaseOnCancel), so another server takes over without
// waiting for it to lapse. Call it once no step of this server acts.
func (e *Elector) Stop() {
	e.mu.Lock()
	stop, done := e.stop, e.done
	e.mu.Unlock()
	if stop == nil {
		return
	}
	stop()
	<-done
}

// Identity is this server's identity on the Lease.
func (e *Elector) Identity() string { return e.cfg.Identity }

// IsLeader reports whether this server leads now, by its own elector:
// its term is running and the record it last saw names it. Only the
// fence (Check) is sure.
func (e *Elector) IsLeader() bool {
	e.mu.Lock()
	term := e.term
	e.mu.Unlock()
	return term != nil && term.Err() == nil && e.le.IsLeader()
}

// Wait waits, bounded by ctx, until IsLeader is leading.
func (e *Elector) Wait(ctx context.Context, leading bool) error {
	for {
		e.mu.Lock()
		changed := e.changed
		e.mu.Unlock()
		if e.IsLeader() == leading {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("wait until leading is %v: %w", leading, context.Cause(ctx))
		}
	}
}

// Leader is the identity of the leader this server last saw; "" before it
// saw one.
func (e *Elector) Leader() string { return e.le.GetLeader() }

// Observed waits, bounded by ctx, until the election has seen the leader
// Lease once (this server took it, or found who holds it).
func (e *Elector) Observed(ctx context.Context) error {
	select {
	case <-e.observed:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("the leader Lease %s/%s was not read yet: %w", e.cfg.Namespace, e.cfg.Name, context.Cause(ctx))
	}
}

// read reads the leader Lease and the window Lease.
func (e *Elector) read(ctx context.Context) (leader, window LeaseState, err error) {
	leader, err = ReadLease(ctx, e.kc, e.cfg.Namespace, e.cfg.Name)
	if err != nil {
		return LeaseState{}, LeaseState{}, err
	}
	window, err = ReadLease(ctx, e.kc, e.cfg.Namespace, e.cfg.WindowLease)
	if err != nil {
		return LeaseState{}, LeaseState{}, err
	}
	return leader, window, nil
}

// Admit reads, from the API server, the Leases a destructive step is
// fenced on, when it is admitted. An error wraps ErrFenced: this server
// does not lead, or the Leases could not be read.
func (e *Elector) Admit(ctx context.Context) (Fence, error) {
	leader, window, err := e.read(ctx)
	if err != nil {
		return Fence{}, fmt.Errorf("%w: %v", ErrFenced, err)
	}
	f := Fence{Identity: e.cfg.Identity, Leader: leader, Window: window}
	// The step is admitted only as the fence would let it act now.
	if err := DecideFence(f, leader, window, e.IsLeader(), e.now()); err != nil {
		return Fence{}, err
	}
	return f, nil
}

// Check is the fence just before the step admitted under f acts: the
// Leases read again from the API server, judged by DecideFence. nil: act;
// an error (wrapping ErrFenced): do nothing.
func (e *Elector) Check(ctx context.Context, f Fence) error {
	return e.checkAs(ctx, f, e.IsLeader())
}

// checkAs is Check with this server's belief that it leads given: a
// leader whose clock is held back believes it still leads after another
// took over, and the Leases read again must fence it all the same.
func (e *Elector) checkAs(ctx context.Context, f Fence, leading bool) error {
	leader, window, err := e.read(ctx)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrFenced, err)
	}
	return DecideFence(f, leader, window, leading, e.now())
}
