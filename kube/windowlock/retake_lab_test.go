package windowlock_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcp-patch/mcp-patch/internal/testsupport/labkube"
	"github.com/mcp-patch/mcp-patch/kube/windowlock"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// A server restarting while its journal shows a window open takes the
// window Lease again on a real API server; a second server with the same
// journal is refused while the first holds it, and neither writes the
// journal.
func TestRetakeOpenWindowLease(t *testing.T) {
	c := labkube.Cluster(t)
	kc := c.Client()
	ns := labkube.Namespace(t, c)
	a, b := configs(ns, "mcp-patch-window", time.Minute)
	dir := filepath.Join(t.TempDir(), "2026-11")
	j, err := round.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := j.Close(); err != nil {
			t.Error(err)
		}
	}()
	order := round.Order{Positions: []round.Position{{Node: "gpu-1", Role: round.RoleGPU, GPU: true, Canary: true, Reason: "canary"}}}
	if _, err := j.Plan(order, time.Hour, round.Meta{}); err != nil {
		t.Fatal(err)
	}
	green := func(st round.Step, node string) {
		t.Helper()
		if _, err := j.StartStep(st, node, round.Meta{}); err != nil {
			t.Fatalf("start %s: %v", st, err)
		}
		if _, err := j.FinishStep(st, node, round.Meta{}); err != nil {
			t.Fatalf("finish %s: %v", st, err)
		}
	}
	green(round.StepBaseline, "")
	for _, st := range round.PreflightSteps {
		green(st, "gpu-1")
	}
	green(round.StepDrain, "gpu-1") // the window is open; the process stops here
	before, err := os.ReadFile(filepath.Join(dir, round.JournalFile))
	if err != nil {
		t.Fatal(err)
	}

	server := func(cfg windowlock.Config) *window.Window {
		return &window.Window{Round: j.RoundID(), Rec: &window.Recorder{J: j}, Lease: &windowlock.Lease{Kube: kc, Config: cfg}}
	}
	if node, err := server(a).Retake(t.Context()); err != nil || node != "gpu-1" {
		t.Fatalf("restarted server: %q %v", node, err)
	}
	if h, held, err := windowlock.Inspect(t.Context(), kc, a); err != nil || !held || h.Identity != a.Identity || h.Round != "2026-11" || h.Node != "gpu-1" {
		t.Fatalf("Lease after the restart: %+v held=%v %v", h, held, err)
	}
	if _, err := server(b).Retake(t.Context()); !errors.Is(err, window.ErrLeaseHeld) {
		t.Fatalf("second server: %v, want ErrLeaseHeld", err)
	}
	if node, err := server(a).Retake(t.Context()); err != nil || node != "gpu-1" {
		t.Fatalf("the holder restarting again: %q %v", node, err)
	}
	after, err := os.ReadFile(filepath.Join(dir, round.JournalFile))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) || j.State().Stop != nil {
		t.Error("taking the Lease again wrote the journal or stopped the round")
	}
}
