package windowlock

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/client-go/kubernetes"
)

// Lease is the window Lease as a window holds it: taken or renewed by
// every window step (Hold), released when the window closes.
type Lease struct {
	Kube   kubernetes.Interface
	Config Config
}

// Hold takes the Lease for round and node, or renews it when this identity
// holds it for them (also a one-shot CLI call of the same identity after
// the previous one exited). Held by another: an error wrapping ErrHeld and
// naming the holder.
func (l *Lease) Hold(ctx context.Context, round, node string) error {
	_, _, err := Acquire(ctx, l.Kube, l.Config, round, node)
	var held *HeldError
	if errors.As(err, &held) {
		return fmt.Errorf("%w: %s is held by %s for round %s node %s until %s", ErrHeld, held.Lease, held.Holder.Identity,
			held.Holder.Round, held.Holder.Node, held.Holder.ExpiresAt.UTC().Format("2006-01-02T15:04:05Z"))
	}
	return err
}

// Release clears the holder if this identity holds the Lease for round and
// node; a Lease already lost or free is left alone.
func (l *Lease) Release(ctx context.Context, round, node string) error {
	cfg, err := l.Config.withDefaults()
	if err != nil {
		return fmt.Errorf("release window lock: %w", err)
	}
	err = (&Lock{kc: l.Kube, cfg: cfg, round: round, node: node}).Release(ctx)
	if errors.Is(err, ErrLost) {
		return nil
	}
	return err
}
