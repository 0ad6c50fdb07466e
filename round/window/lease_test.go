package window_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-patch/mcp-patch/internal/testsupport/fakes"
	"github.com/mcp-patch/mcp-patch/kube/drain"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/window"
)

func TestDecideRenewal(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	timing := window.LeaseTiming{Renew: 20 * time.Second, Duration: 60 * time.Second}
	down := errors.New("apiserver: connection refused")
	tests := []struct {
		name    string
		renewed time.Time
		now     time.Time
		err     error
		want    window.LeaseVerdict
	}{
		{"renewed", t0, t0.Add(20 * time.Second), nil, window.LeaseRenewed},
		{"renewed late still counts", t0, t0.Add(59 * time.Second), nil, window.LeaseRenewed},
		{"held by another holder", t0, t0.Add(20 * time.Second), fmt.Errorf("%w: server-b", window.ErrLeaseHeld), window.LeaseLost},
		{"a loss found by the API", t0, t0.Add(20 * time.Second), fmt.Errorf("%w: deleted", window.ErrLeaseLost), window.LeaseLost},
		{"unrenewable, the next attempt still within the duration", t0, t0.Add(20 * time.Second), down, window.LeaseRetry},
		{"unrenewable, the next attempt just within", t0, t0.Add(39 * time.Second), down, window.LeaseRetry},
		{"unrenewable, the next attempt after the Lease lapsed", t0, t0.Add(40 * time.Second), down, window.LeaseLost},
		{"unrenewable past the duration", t0, t0.Add(90 * time.Second), down, window.LeaseLost},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := window.DecideRenewal(tt.renewed, tt.now, timing, tt.err); got != tt.want {
				t.Errorf("DecideRenewal = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestLeaseFresh(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	timing := window.LeaseTiming{Renew: 20 * time.Second, Duration: 60 * time.Second}
	tests := []struct {
		name    string
		renewed time.Time
		now     time.Time
		want    bool
	}{
		{"just renewed", t0, t0, true},
		{"within the duration", t0, t0.Add(59 * time.Second), true},
		{"at the duration", t0, t0.Add(60 * time.Second), false},
		{"past the duration", t0, t0.Add(2 * time.Minute), false},
		{"never renewed", time.Time{}, t0, false},
		{"renewed in the future (a clock that went back)", t0.Add(time.Minute), t0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := window.LeaseFresh(tt.renewed, tt.now, timing); got != tt.want {
				t.Errorf("LeaseFresh = %v, want %v", got, tt.want)
			}
		})
	}
}

// countingLease tells each renewal on a channel, and can fail them.
type countingLease struct {
	*fakes.Lease
	mu      sync.Mutex
	failing error
	held    chan struct{}
}

func (l *countingLease) Hold(ctx context.Context, r, n string) error {
	l.mu.Lock()
	failing := l.failing
	l.mu.Unlock()
	err := failing
	if err == nil {
		err = l.Lease.Hold(ctx, r, n)
	}
	select {
	case l.held <- struct{}{}:
	default:
	}
	return err
}

func (l *countingLease) fail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failing = err
}

func newCounting() *countingLease {
	return &countingLease{Lease: &fakes.Lease{Identity: "server-a"}, held: make(chan struct{}, 1)}
}

// A Lease taken by another holder while a step runs cancels the step's
// context with the loss as its cause; Check refuses from then on, and the
// next Hold reports the loss once.
func TestKeeperCancelsTheStepOnALostLease(t *testing.T) {
	l := newCounting()
	k := &window.LeaseKeeper{Lease: l, Timing: window.LeaseTiming{Renew: time.Millisecond, Duration: time.Second}}
	ctx, done, err := k.Hold(context.Background(), "2026-12", "gpu-1")
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	if err := k.Check("2026-12", "gpu-1"); err != nil {
		t.Fatalf("Check while held: %v", err)
	}
	if err := k.Check("2026-12", "gpu-2"); !errors.Is(err, window.ErrLeaseLost) {
		t.Fatalf("Check of another node's window: %v", err)
	}
	l.Steal("server-b")
	<-ctx.Done()
	lost := window.LostLease(ctx)
	if !errors.Is(lost, window.ErrLeaseLost) || !strings.Contains(lost.Error(), "server-b") {
		t.Fatalf("cause of the cancelled step: %v", context.Cause(ctx))
	}
	if err := k.Check("2026-12", "gpu-1"); !errors.Is(err, window.ErrLeaseLost) {
		t.Fatalf("Check after the loss: %v", err)
	}
	if _, _, err := k.Hold(context.Background(), "2026-12", "gpu-1"); !errors.Is(err, window.ErrLeaseLost) {
		t.Fatalf("the next Hold after the loss: %v", err)
	}
}

// A server that stops leading gives its window Lease up as lost: the
// step bound to it is cancelled with the loss as its cause, and Check
// refuses from then on.
func TestKeeperLoseCancelsTheStep(t *testing.T) {
	k := &window.LeaseKeeper{Lease: newCounting(), Timing: window.LeaseTiming{Renew: time.Hour, Duration: 2 * time.Hour}}
	ctx, done, err := k.Hold(context.Background(), "2026-12", "gpu-1")
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	k.Lose("this server no longer leads")
	<-ctx.Done()
	if lost := window.LostLease(ctx); !errors.Is(lost, window.ErrLeaseLost) || !strings.Contains(lost.Error(), "no longer leads") {
		t.Fatalf("cause of the cancelled step: %v", context.Cause(ctx))
	}
	if err := k.Check("2026-12", "gpu-1"); !errors.Is(err, window.ErrLeaseLost) {
		t.Fatalf("Check after Lose: %v", err)
	}
	k.Lose("again") // nothing held: nothing to do
}

// Renewals that keep failing until the Lease would lapse are a loss too;
// failures within the duration are retried.
func TestKeeperGivesUpBeforeTheLeaseLapses(t *testing.T) {
	l := newCounting()
	k := &window.LeaseKeeper{Lease: l, Timing: window.LeaseTiming{Renew: 5 * time.Millisecond, Duration: time.Second}}
	ctx, done, err := k.Hold(context.Background(), "2026-12", "gpu-1")
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	l.fail(errors.New("apiserver: connection refused"))
	<-ctx.Done()
	lost := window.LostLease(ctx)
	if !errors.Is(lost, window.ErrLeaseLost) || !strings.Contains(lost.Error(), "not renewed for") {
		t.Fatalf("cause: %v", context.Cause(ctx))
	}
}

// Without BetweenSteps the keeper stops renewing when the last step ends;
// with it, it renews on until Release.
func TestKeeperRenewsBetweenStepsOnlyWhenAsked(t *testing.T) {
	for _, between := range []bool{false, true} {
		t.Run(fmt.Sprint("between steps ", between), func(t *testing.T) {
			l := newCounting()
			k := &window.LeaseKeeper{Lease: l, Timing: window.LeaseTiming{Renew: time.Millisecond, Duration: time.Second}, BetweenSteps: between}
			_, done, err := k.Hold(context.Background(), "2026-12", "gpu-1")
			if err != nil {
				t.Fatal(err)
			}
			<-l.held // the Hold itself
			done()
			if between {
				<-l.held // a renewal after the step ended
				if err := k.Check("2026-12", "gpu-1"); err != nil {
					t.Fatalf("Check between steps: %v", err)
				}
			} else if err := k.Check("2026-12", "gpu-1"); !errors.Is(err, window.ErrLeaseLost) {
				t.Fatalf("Check after the only step ended: %v", err)
			}
			if err := k.Release(context.Background(), "2026-12", "gpu-1"); err != nil {
				t.Fatal(err)
			}
			if l.Holder != "" {
				t.Fatalf("Release left the Lease held by %q", l.Holder)
			}
			k.Close()
		})
	}
}

// A step whose Lease is lost while it waits stops under the window_lease
// rule and does nothing more: here a drain whose eviction loop the loss
// cuts short.
func TestDrainStopsUnderTheLeaseRuleWhenTheLeaseIsLost(t *testing.T) {
	r := newRig(t)
	r.w.Keeper = &window.LeaseKeeper{Lease: r.lease, Timing: window.LeaseTiming{Renew: time.Millisecond, Duration: time.Second}}
	bd := &blockingDrain{Cluster: r.kube, steal: func() { r.lease.Steal("server-b") }}
	r.w.Cluster = bd
	pv, _ := r.kube.PreviewDrain(context.Background(), node, window.DrainOptions{}.Policy)
	p, err := window.DecideDrain(node, pv)
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.w.StartDrain(context.Background(), p, grant(p, "a-drain"), window.DrainOptions{Identity: "server-a"}, nil)
	var stopped *window.Stopped
	if !errors.As(err, &stopped) || stopped.Journal != nil {
		t.Fatalf("drain after the lost Lease: %v", err)
	}
	st := r.j.State().Stop
	if st == nil || st.Step != round.StepDrain || !strings.Contains(st.Reason, "rule "+string(round.RuleWindowLease)) ||
		!strings.Contains(st.Reason, "no further eviction") {
		t.Fatalf("stop after the lost Lease: %+v", st)
	}
	if bd.evictions != 0 {
		t.Fatalf("%d evictions after the Lease was lost", bd.evictions)
	}
	// The same server's next step finds the window stopped; it holds
	// nothing and executes nothing.
	if _, err := r.w.FollowDrain(context.Background(), node, window.DrainOptions{Identity: "server-a"}, nil); err == nil {
		t.Fatal("a drain was carried on after the stop")
	}
}

// blockingDrain is a drain that waits on its context (pods a PDB keeps),
// another server taking the Lease meanwhile; it evicts nothing.
type blockingDrain struct {
	*fakes.Cluster
	steal     func()
	evictions int
}

func (b *blockingDrain) Drain(ctx context.Context, node string, o drain.Options, progress func(done, total int, msg string)) (drain.Result, error) {
	b.steal()
	<-ctx.Done()
	return drain.Result{}, fmt.Errorf("drain %s: %w", node, ctx.Err())
}

// Nothing destructive starts unless the Lease was renewed within its
// duration: an install whose Lease went stale between the hold and the
// start (a process paused past the duration) stops under the Lease rule
// and starts nothing on the host.
func TestNothingDestructiveStartsOnAStaleLease(t *testing.T) {
	r := newRig(t)
	r.drained(t)
	var mu sync.Mutex
	reads := 0
	stale := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		reads++
		if reads == 1 {
			return t0 // the hold renews it
		}
		return t0.Add(2 * time.Minute) // the guard before the start
	}
	r.w.Keeper = &window.LeaseKeeper{Lease: r.lease, Now: stale}
	p := window.PackagePlan{Node: node, PackageDigest: digest, TargetKernel: target, RunningKernel: running}
	_, err := r.w.StartInstall(context.Background(), p, grant(p, "a-install"))
	var stopped *window.Stopped
	if !errors.As(err, &stopped) {
		t.Fatalf("install on a stale Lease: %v", err)
	}
	st := r.j.State().Stop
	if st == nil || st.Step != round.StepInstall || !strings.Contains(st.Reason, "rule "+string(round.RuleWindowLease)) ||
		!strings.Contains(st.Reason, "the install was not started") {
		t.Fatalf("stop: %+v", st)
	}
	if n := r.host.Count("install"); n != 0 {
		t.Fatalf("%d installs started on a stale Lease", n)
	}
}

// A loss the step's own hold finds is answered once: after a person's
// resume, the next hold takes the Lease afresh when it is free again.
func TestKeeperAnswersALossOnce(t *testing.T) {
	l := newCounting()
	k := &window.LeaseKeeper{Lease: l, Timing: window.LeaseTiming{Renew: time.Hour, Duration: 2 * time.Hour}, BetweenSteps: true}
	defer k.Close()
	_, done, err := k.Hold(context.Background(), "2026-12", "gpu-1")
	if err != nil {
		t.Fatal(err)
	}
	done()
	l.Steal("server-b")
	if _, _, err := k.Hold(context.Background(), "2026-12", "gpu-1"); !errors.Is(err, window.ErrLeaseHeld) {
		t.Fatalf("hold while server-b holds it: %v", err)
	}
	if err := k.Check("2026-12", "gpu-1"); !errors.Is(err, window.ErrLeaseLost) {
		t.Fatalf("Check after the loss: %v", err)
	}
	l.Steal("") // server-b let it go; a person resumed
	_, done, err = k.Hold(context.Background(), "2026-12", "gpu-1")
	if err != nil {
		t.Fatalf("hold after the resume: %v", err)
	}
	done()
	if err := k.Check("2026-12", "gpu-1"); err != nil {
		t.Fatalf("Check after the Lease was taken afresh: %v", err)
	}
}
