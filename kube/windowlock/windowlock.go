// Package windowlock keeps two patch windows from running at once, across
// servers, with a coordination.k8s.io/v1 Lease. Every change is an update
// guarded by the Lease's resourceVersion, so of two servers racing, the API
// server lets exactly one write win.
//
// The rules:
//   - A Lease with no holder is free.
//   - A Lease held by another identity is free only once expired: its
//     renewTime + leaseDurationSeconds + ClockSkew is in the past by this
//     server's clock. ClockSkew covers clocks that disagree; keep server
//     clocks in NTP sync and ClockSkew above their worst drift.
//   - A Lease held by this identity for the same round and node is taken
//     back (a restarted server resuming its window); held by this identity
//     for another window, it is refused like any holder: one window at a
//     time holds even for one server.
//   - Release clears the holder (the Lease stays, with its transition
//     count); a server that finds another holder when renewing or releasing
//     has lost the lock and must stop its window.
//   - The Lease also carries the journal head the round's leader last
//     pushed to the git remote (Publish, ReadPublished). The leader
//     writes it whether or not it holds a window, and it outlives every
//     holder: taking, renewing and releasing the Lease keep it.
//
// The package owns only its Lease: taking, renewing and releasing it, and
// the journal head on it, one guarded update each (read again and retried
// on a conflict). It must not know what a window does, nor keep the Lease
// renewed (round/window's LeaseKeeper does, through Lease.Hold), nor read
// a journal or the git remote.
package windowlock

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

// Annotations on the Lease saying which window holds it.
const (
	AnnotationRound = "mcp-patch.io/round"
	AnnotationNode  = "mcp-patch.io/node"
)

// Defaults.
const (
	DefaultNamespace = "kube-system"
	DefaultName      = "mcp-patch-window"
)

// updateAttempts bounds the read-judge-write rounds of one change: each
// conflict means another writer got in between our read and our write.
const updateAttempts = 5

var (
	// ErrHeld is wrapped by *HeldError.
	ErrHeld = errors.New("window lock held")
	// ErrLost: the Lease now names another holder (or is gone); the window
	// must stop.
	ErrLost = errors.New("window lock lost")
)

// Config names the Lease and its timing. Identity is required.
type Config struct {
	// Namespace and Name of the Lease. Empty: kube-system, mcp-patch-window.
	Namespace string
	Name      string
	// Identity names this server, e.g. "<host>/<pid>"; two servers must
	// never share one.
	Identity string
	// LeaseDuration is how long the Lease stays valid without renewal
	// (whole seconds on the Lease). Zero: 60s. Who renews it, and how
	// often, is the holder's business (round/window's LeaseKeeper).
	LeaseDuration time.Duration
	// ClockSkew is added to another holder's expiry before takeover. Zero:
	// 5s.
	ClockSkew time.Duration
	// Supersedes, when set, says whether this server may take the window
	// over from holder before the Lease expires: with leader election, the
	// leader takes the window of the node in flight from a server that no
	// longer leads (whose every step is fenced off from then on). Only the
	// same round and node are taken over this way.
	Supersedes func(holder string) bool
}

func (c Config) withDefaults() (Config, error) {
	if c.Identity == "" {
		return c, errors.New("identity is required")
	}
	if c.LeaseDuration < 0 || c.ClockSkew < 0 {
		return c, errors.New("negative duration")
	}
	if c.Namespace == "" {
		c.Namespace = DefaultNamespace
	}
	if c.Name == "" {
		c.Name = DefaultName
	}
	if c.LeaseDuration == 0 {
		c.LeaseDuration = 60 * time.Second
	}
	if c.LeaseDuration < time.Second {
		return c, fmt.Errorf("lease duration %v is under a second", c.LeaseDuration)
	}
	if c.ClockSkew == 0 {
		c.ClockSkew = 5 * time.Second
	}
	return c, nil
}

// Holder is who holds the Lease, as recorded on it.
type Holder struct {
	Identity    string    `json:"identity,omitempty"`
	Round       string    `json:"round,omitempty"`
	Node        string    `json:"node,omitempty"`
	AcquiredAt  time.Time `json:"acquired_at,omitzero"`
	RenewedAt   time.Time `json:"renewed_at,omitzero"`
	ExpiresAt   time.Time `json:"expires_at,omitzero"`
	Transitions int32     `json:"transitions"`
}

// HeldError says who holds the lock.
type HeldError struct {
	Lease  string
	Holder Holder
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("window lock %s is held by %s (round %s, node %s) until %s",
		e.Lease, e.Holder.Identity, e.Holder.Round, e.Holder.Node, e.Holder.ExpiresAt.UTC().Format(time.RFC3339))
}

// Unwrap makes errors.Is(err, ErrHeld) true.
func (e *HeldError) Unwrap() error { return ErrHeld }

// Lock is a held window lock. It keeps the client and names, never a
// context.
type Lock struct {
	kc    kubernetes.Interface
	cfg   Config
	round string
	node  string
}

func holderOf(l *coordinationv1.Lease) Holder {
	h := Holder{Round: l.Annotations[AnnotationRound], Node: l.Annotations[AnnotationNode]}
	if l.Spec.HolderIdentity != nil {
		h.Identity = *l.Spec.HolderIdentity
	}
	if l.Spec.AcquireTime != nil {
		h.AcquiredAt = l.Spec.AcquireTime.Time
	}
	if l.Spec.RenewTime != nil {
		h.RenewedAt = l.Spec.RenewTime.Time
		if l.Spec.LeaseDurationSeconds != nil {
			h.ExpiresAt = h.RenewedAt.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second)
		}
	}
	if l.Spec.LeaseTransitions != nil {
		h.Transitions = *l.Spec.LeaseTransitions
	}
	return h
}

// Inspect reads the Lease. held is false when it is absent, has no holder
// or has expired (by this server's clock, skew allowance included).
func Inspect(ctx context.Context, kc kubernetes.Interface, cfg Config) (h Holder, held bool, err error) {
	if cfg.Identity == "" {
		cfg.Identity = "inspect" // only the names and skew are used
	}
	cfg, err = cfg.withDefaults()
	if err != nil {
		return Holder{}, false, fmt.Errorf("inspect window lock: %w", err)
	}
	l, err := kc.CoordinationV1().Leases(cfg.Namespace).Get(ctx, cfg.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return Holder{}, false, nil
	}
	if err != nil {
		return Holder{}, false, fmt.Errorf("inspect window lock %s/%s: %w", cfg.Namespace, cfg.Name, err)
	}
	h = holderOf(l)
	return h, h.Identity != "" && !expired(h, cfg.ClockSkew, time.Now()), nil
}

// superseded: cur holds the window of round and node for another server
// that this server may take it over from (Config.Supersedes).
func superseded(cfg Config, cur Holder, round, node string) bool {
	return cfg.Supersedes != nil && cur.Identity != cfg.Identity && cur.Round == round && cur.Node == node && cfg.Supersedes(cur.Identity)
}

func expired(h Holder, skew time.Duration, now time.Time) bool {
	return h.ExpiresAt.IsZero() || now.After(h.ExpiresAt.Add(skew))
}

// Acquire takes the window lock for round and node, or returns a
// *HeldError naming the holder. See the package rules for takeover.
func Acquire(ctx context.Context, kc kubernetes.Interface, cfg Config, round, node string) (*Lock, Holder, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, Holder{}, fmt.Errorf("acquire window lock: %w", err)
	}
	if round == "" || node == "" {
		return nil, Holder{}, errors.New("acquire window lock: round and node are required")
	}
	name := cfg.Namespace + "/" + cfg.Name
	leases := kc.CoordinationV1().Leases(cfg.Namespace)
	for range updateAttempts {
		now := metav1.NewMicroTime(time.Now())
		l, err := leases.Get(ctx, cfg.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			fresh := &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: cfg.Name, Namespace: cfg.Namespace},
			}
			fill(fresh, cfg, round, node, now, true)
			created, err := leases.Create(ctx, fresh, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				continue
			}
			if err != nil {
				return nil, Holder{}, fmt.Errorf("acquire window lock %s: create: %w", name, err)
			}
			return &Lock{kc: kc, cfg: cfg, round: round, node: node}, holderOf(created), nil
		}
		if err != nil {
			return nil, Holder{}, fmt.Errorf("acquire window lock %s: %w", name, err)
		}
		cur := holderOf(l)
		resuming := cur.Identity == cfg.Identity && cur.Round == round && cur.Node == node
		free := cur.Identity == "" || expired(cur, cfg.ClockSkew, now.Time) || superseded(cfg, cur, round, node)
		if !resuming && !free {
			return nil, Holder{}, &HeldError{Lease: name, Holder: cur}
		}
		l = l.DeepCopy()
		fill(l, cfg, round, node, now, !resuming)
		updated, err := leases.Update(ctx, l, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return nil, Holder{}, fmt.Errorf("acquire window lock %s: update: %w", name, err)
		}
		return &Lock{kc: kc, cfg: cfg, round: round, node: node}, holderOf(updated), nil
	}
	return nil, Holder{}, fmt.Errorf("acquire window lock %s: still contended after %d attempts: %w", name, updateAttempts, ErrHeld)
}

// fill writes our holding into l; transition marks a change of holder.
// Only the holder's annotations change: the published journal head and
// any other annotation stay.
func fill(l *coordinationv1.Lease, cfg Config, round, node string, now metav1.MicroTime, transition bool) {
	// A Lease never held (new, or made by Publish) has had no transition
	// yet.
	heldBefore := l.Spec.LeaseTransitions != nil || l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != ""
	id := cfg.Identity
	secs := int32(cfg.LeaseDuration / time.Second)
	l.Spec.HolderIdentity = &id
	l.Spec.LeaseDurationSeconds = &secs
	l.Spec.RenewTime = &now
	if transition {
		l.Spec.AcquireTime = &now
		var n int32
		if l.Spec.LeaseTransitions != nil {
			n = *l.Spec.LeaseTransitions
		}
		if heldBefore {
			n++
		}
		l.Spec.LeaseTransitions = &n
	}
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[AnnotationRound] = round
	l.Annotations[AnnotationNode] = node
}

// mine reads the Lease and returns it when we still hold it, else ErrLost.
func (k *Lock) mine(ctx context.Context) (*coordinationv1.Lease, error) {
	l, err := k.kc.CoordinationV1().Leases(k.cfg.Namespace).Get(ctx, k.cfg.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%w: Lease %s/%s was deleted", ErrLost, k.cfg.Namespace, k.cfg.Name)
	}
	if err != nil {
		return nil, err
	}
	h := holderOf(l)
	if h.Identity != k.cfg.Identity || h.Round != k.round || h.Node != k.node {
		return nil, fmt.Errorf("%w: Lease %s/%s now held by %q (round %s, node %s)", ErrLost, k.cfg.Namespace, k.cfg.Name, h.Identity, h.Round, h.Node)
	}
	return l, nil
}

// Renew extends the Lease by one duration, if we still hold it. A
// conflict (a journal head published in between) is read again and
// retried.
func (k *Lock) Renew(ctx context.Context) (Holder, error) {
	for range updateAttempts {
		l, err := k.mine(ctx)
		if err != nil {
			return Holder{}, fmt.Errorf("renew window lock: %w", err)
		}
		l = l.DeepCopy()
		now := metav1.NewMicroTime(time.Now())
		l.Spec.RenewTime = &now
		secs := int32(k.cfg.LeaseDuration / time.Second)
		l.Spec.LeaseDurationSeconds = &secs
		updated, err := k.kc.CoordinationV1().Leases(k.cfg.Namespace).Update(ctx, l, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return Holder{}, fmt.Errorf("renew window lock: %w", err)
		}
		return holderOf(updated), nil
	}
	return Holder{}, fmt.Errorf("renew window lock %s/%s: still contended after %d attempts", k.cfg.Namespace, k.cfg.Name, updateAttempts)
}

// Release clears the holder if we still hold the Lease, keeping the
// published journal head and every other annotation. Releasing a lock
// already lost returns ErrLost and changes nothing. A conflict is read
// again and retried.
func (k *Lock) Release(ctx context.Context) error {
	for range updateAttempts {
		l, err := k.mine(ctx)
		if err != nil {
			return fmt.Errorf("release window lock: %w", err)
		}
		l = l.DeepCopy()
		empty := ""
		l.Spec.HolderIdentity = &empty
		l.Spec.RenewTime = nil
		l.Spec.AcquireTime = nil
		delete(l.Annotations, AnnotationRound)
		delete(l.Annotations, AnnotationNode)
		_, err = k.kc.CoordinationV1().Leases(k.cfg.Namespace).Update(ctx, l, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("release window lock: %w", err)
		}
		return nil
	}
	return fmt.Errorf("release window lock %s/%s: still contended after %d attempts", k.cfg.Namespace, k.cfg.Name, updateAttempts)
}
