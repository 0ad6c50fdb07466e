package leader

import (
	"context"
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// ErrFenced is wrapped by every failed fence: the step must do nothing.
var ErrFenced = errors.New("fence failed")

// LeaseState is a Lease as the API server holds it, read for a fence.
type LeaseState struct {
	// Exists is false when the API server has no such Lease.
	Exists bool
	// Holder is spec.holderIdentity; "" when released or never held.
	Holder string
	// Transitions is spec.leaseTransitions: it grows each time the Lease
	// changes hands.
	Transitions int32
	// RenewTime is spec.renewTime (the holder's clock); zero when unset.
	RenewTime time.Time
	// Duration is spec.leaseDurationSeconds; zero when unset.
	Duration time.Duration
}

// String names the Lease's holding for a person: holder and transitions.
func (s LeaseState) String() string {
	switch {
	case !s.Exists:
		return "absent"
	case s.Holder == "":
		return fmt.Sprintf("free (%d transitions)", s.Transitions)
	}
	return fmt.Sprintf("held by %q (%d transitions)", s.Holder, s.Transitions)
}

// sameHolding is true when a and b name the same holder after the same
// number of transitions: the Lease has not changed hands between them
// (renewals change neither).
func sameHolding(a, b LeaseState) bool {
	return a.Exists == b.Exists && a.Holder == b.Holder && a.Transitions == b.Transitions
}

// Fence is what a destructive step was admitted under: the leader Lease
// and the window Lease as the API server held them then, read for the
// server Identity.
type Fence struct {
	Identity string
	Leader   LeaseState
	Window   LeaseState
}

// DecideFence is the rule just before a destructive step acts: this
// server still leads by its own elector (leading), held the leader Lease
// when the step was admitted and holds it now, after no transition, and
// not expired by this server's clock (now); and the window Lease has not
// changed hands since admission. The window Lease's freshness is its
// keeper's (round/window LeaseKeeper checks it before each action); a
// window Lease free at admission (a drain about to take it) must still be
// free. nil: the step may act; else an error wrapping ErrFenced that says
// why it must not.
func DecideFence(f Fence, leader, window LeaseState, leading bool, now time.Time) error {
	fail := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrFenced, fmt.Sprintf(format, a...))
	}
	switch {
	case f.Identity == "":
		return fail("the step was admitted without this server's identity")
	case f.Leader.Holder != f.Identity:
		return fail("this server did not hold the leader Lease when the step was admitted (it was %s)", f.Leader)
	case !leading:
		return fail("this server no longer leads: its elector gave the leader Lease up or could not renew it")
	case !leader.Exists:
		return fail("the leader Lease is gone")
	case leader.Holder != f.Identity:
		return fail("the leader Lease is now %s, not this server (%q)", leader, f.Identity)
	case leader.Transitions != f.Leader.Transitions:
		return fail("the leader Lease changed hands since the step was admitted (transitions %d, now %d)", f.Leader.Transitions, leader.Transitions)
	case leader.RenewTime.IsZero() || leader.Duration <= 0:
		return fail("the leader Lease carries no renew time or duration")
	case !now.Before(leader.RenewTime.Add(leader.Duration)):
		return fail("the leader Lease was last renewed at %s and its %v have passed by this server's clock",
			leader.RenewTime.UTC().Format(time.RFC3339Nano), leader.Duration)
	case !sameHolding(f.Window, window):
		return fail("the window Lease changed since the step was admitted: it was %s, it is %s", f.Window, window)
	}
	return nil
}

// ReadLease reads the Lease namespace/name from the API server.
func ReadLease(ctx context.Context, kc kubernetes.Interface, namespace, name string) (LeaseState, error) {
	l, err := kc.CoordinationV1().Leases(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return LeaseState{}, nil
	}
	if err != nil {
		return LeaseState{}, fmt.Errorf("read Lease %s/%s: %w", namespace, name, err)
	}
	return stateOf(l), nil
}

func stateOf(l *coordinationv1.Lease) LeaseState {
	s := LeaseState{Exists: true}
	if l.Spec.HolderIdentity != nil {
		s.Holder = *l.Spec.HolderIdentity
	}
	if l.Spec.LeaseTransitions != nil {
		s.Transitions = *l.Spec.LeaseTransitions
	}
	if l.Spec.RenewTime != nil {
		s.RenewTime = l.Spec.RenewTime.Time
	}
	if l.Spec.LeaseDurationSeconds != nil {
		s.Duration = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	return s
}
