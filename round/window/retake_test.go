package window_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// After a restart, the window the journal shows open gets its Lease back
// (it lapsed while no process held it); with no window open nothing is
// taken; another holder's Lease is reported, not taken, and nothing is
// written: the window's next step judges it.
func TestRetakeAfterRestart(t *testing.T) {
	ctx := context.Background()

	t.Run("no window open", func(t *testing.T) {
		r := newRig(t)
		got, err := r.w.Retake(ctx)
		if err != nil || got != "" || r.lease.Holds != 0 || r.lease.Holder != "" {
			t.Fatalf("Retake = %q, %v; Lease %+v", got, err, r.lease)
		}
	})

	t.Run("open window, Lease lapsed", func(t *testing.T) {
		r := newRig(t)
		r.drained(t)
		r.lease.Steal("") // the process stopped; its Lease expired
		r.crash(t)
		before := journalBytes(t, r)
		got, err := r.w.Retake(ctx)
		if err != nil || got != node {
			t.Fatalf("Retake = %q, %v; want %s", got, err, node)
		}
		if r.lease.Holder != "server-a" || r.lease.Node != node || r.lease.Round != r.j.RoundID() {
			t.Fatalf("Lease after Retake: %+v", r.lease)
		}
		if !bytes.Equal(before, journalBytes(t, r)) {
			t.Error("Retake wrote the journal")
		}
	})

	t.Run("open window, Lease held by another server", func(t *testing.T) {
		r := newRig(t)
		r.drained(t)
		r.lease.Steal("server-b")
		r.crash(t)
		before := journalBytes(t, r)
		got, err := r.w.Retake(ctx)
		if got != node || !errors.Is(err, window.ErrLeaseHeld) {
			t.Fatalf("Retake = %q, %v; want %s and ErrLeaseHeld", got, err, node)
		}
		if r.lease.Holder != "server-b" {
			t.Fatalf("Retake took another server's Lease: %+v", r.lease)
		}
		if !bytes.Equal(before, journalBytes(t, r)) || r.j.State().Stop != nil {
			t.Error("a refused Retake wrote the journal or stopped the round")
		}
	})

	t.Run("no Lease configured", func(t *testing.T) {
		r := newRig(t)
		r.drained(t)
		r.w.Lease = nil
		if got, err := r.w.Retake(ctx); got != "" || err != nil {
			t.Fatalf("Retake without a Lease = %q, %v", got, err)
		}
	})
}

func journalBytes(t *testing.T, r *rig) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(r.dir, round.JournalFile))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
