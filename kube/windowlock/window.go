package windowlock

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/client-go/kubernetes"

	"github.com/mcp-patch/mcp-patch/round/window"
)

// Window is the window Lease as round/window holds it: taken or renewed by
// every window step, released when the window closes.
type Window struct {
	Kube   kubernetes.Interface
	Config Config
}

var _ window.Lease = (*Window)(nil)

// Hold takes the Lease for round and node, or renews it when this identity
// holds it for them (also a one-shot CLI call of the same identity after
// the previous one exited). Held by another: an error wrapping
// window.ErrLeaseHeld and naming the holder.
func (w *Window) Hold(ctx context.Context, round, node string) error {
	_, _, err := Acquire(ctx, w.Kube, w.Config, round, node)
	var held *HeldError
	if errors.As(err, &held) {
		return fmt.Errorf("%w: %s is held by %s for round %s node %s until %s", window.ErrLeaseHeld, held.Lease, held.Holder.Identity,
			held.Holder.Round, held.Holder.Node, held.Holder.ExpiresAt.UTC().Format("2006-01-02T15:04:05Z"))
	}
	if errors.Is(err, ErrHeld) {
		return fmt.Errorf("%w: %v", window.ErrLeaseHeld, err)
	}
	return err
}

// Release clears the holder if this identity holds the Lease for round and
// node; a Lease already lost or free is left alone.
func (w *Window) Release(ctx context.Context, round, node string) error {
	cfg, err := w.Config.withDefaults()
	if err != nil {
		return fmt.Errorf("release window lock: %w", err)
	}
	err = (&Lock{kc: w.Kube, cfg: cfg, round: round, node: node}).Release(ctx)
	if errors.Is(err, ErrLost) {
		return nil
	}
	return err
}
