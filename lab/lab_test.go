package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-patch/mcp-patch/round/plan"
)

func testLog(t *testing.T) *slog.Logger {
	if os.Getenv("LAB_VERBOSE") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

type tw struct{ t *testing.T }

func (w tw) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// upLab starts a lab for the test, on a control plane an earlier test of
// this package has finished with when one is idle (Reset returns it to
// its state after start and makes the rest anew), else on a new one. The
// test's lab is parked (fleet, workloads and the rest stopped) when it
// ends; TestMain closes the control planes.
func upLab(t *testing.T, opts Options) *Lab {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	opts.Dir = t.TempDir()
	opts.Logger = testLog(t)
	opts.Progress = func(s string) { t.Log("lab: " + s) }
	start := time.Now()
	l, reused := controlPlanes.take()
	var err error
	if reused {
		err = l.Reset(ctx, opts)
	} else {
		if opts.ControlPlaneDir, err = os.MkdirTemp("", "mcp-patch-lab-cp-"); err != nil {
			t.Fatal(err)
		}
		l, err = Up(ctx, opts)
		if err != nil {
			os.RemoveAll(opts.ControlPlaneDir)
		} else {
			controlPlanes.add(l, opts.ControlPlaneDir)
		}
	}
	if err != nil {
		if reused {
			controlPlanes.drop(l)
		}
		t.Fatal(err)
	}
	t.Logf("lab up in %s (control plane reused: %v)", time.Since(start).Round(time.Millisecond), reused)
	t.Cleanup(func() {
		if err := l.Park(); err != nil {
			t.Errorf("park the lab: %v", err)
			controlPlanes.drop(l)
			return
		}
		controlPlanes.put(l)
	})
	return l
}

// controlPlanes holds the labs whose etcd and control plane this package's
// tests share, one test at a time each.
var controlPlanes labPool

type labPool struct {
	mu   sync.Mutex
	idle []*Lab
	dirs map[*Lab]string
}

func (p *labPool) take() (*Lab, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.idle) == 0 {
		return nil, false
	}
	l := p.idle[len(p.idle)-1]
	p.idle = p.idle[:len(p.idle)-1]
	return l, true
}

func (p *labPool) add(l *Lab, dir string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dirs == nil {
		p.dirs = map[*Lab]string{}
	}
	p.dirs[l] = dir
}

func (p *labPool) put(l *Lab) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.idle = append(p.idle, l)
}

// drop closes a lab that cannot be reused and removes its directory.
func (p *labPool) drop(l *Lab) {
	l.Close()
	p.mu.Lock()
	dir := p.dirs[l]
	delete(p.dirs, l)
	p.mu.Unlock()
	os.RemoveAll(dir)
}

// closeAll closes every control plane (TestMain, after the tests).
func (p *labPool) closeAll() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for l, dir := range p.dirs {
		errs = append(errs, l.Close(), os.RemoveAll(dir))
	}
	p.idle, p.dirs = nil, nil
	return errors.Join(errs...)
}

// TestDemoRound runs the whole demo round on the lab, driven by the agent
// client, and checks what it left: every node on the new kernel, the
// report and timeline committed, every window closed; and what a person
// following it reads: a line per window step as it ends and the summary,
// in about a hundred lines.
func TestDemoRound(t *testing.T) {
	l := upLab(t, Options{ControlPlanes: 3, Canary: 1, GPUServers: 2, OtherActors: true})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	var out bytes.Buffer
	res, err := l.RunRound(ctx, "2026-11", io.MultiWriter(&out, tw{t}), testLog(t))
	if err != nil {
		t.Fatalf("round: %v (after %d calls; every call in %s)", err, res.Outcome.Calls, res.CallsLog)
	}
	if !res.Outcome.Closed {
		t.Fatalf("round did not close: %+v", res.Outcome)
	}
	if err := l.WriteSummary(io.MultiWriter(&out, tw{t}), "2026-11", res); err != nil {
		t.Fatal(err)
	}
	checkDemoOutput(t, out.String(), res.State)
	for _, want := range []string{"fallback drill on gpu-canary-1 passed", "report.md", "timeline.svg", "plan.md", res.CallsLog} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the demo's output does not name %q", want)
		}
	}
	t.Logf("round closed in %s: %d calls, %d approvals", res.Duration, res.Outcome.Calls, res.Outcome.Approvals)
	// The demo's GPU servers take their driver from the driver container:
	// each one's GPU acceptance found its driver pod Ready on the new kernel.
	for _, n := range []string{"gpu-canary-1", "gpu-1", "gpu-2"} {
		if !driverReadyIn(t, l, n) {
			t.Errorf("%s's GPU acceptance did not find its driver pod Ready on the new kernel", n)
		}
	}
	for _, h := range l.Fleet.Hosts() {
		st, err := h.State()
		if err != nil {
			t.Fatal(err)
		}
		if st.Kernel == "" || strings.Contains(st.Kernel, "6.8.0-48") {
			t.Errorf("%s still runs %s", h.Name, st.Kernel)
		}
	}
	if !strings.Contains(res.Log, "report") {
		t.Errorf("no report commit on %s:\n%s", res.Branch, res.Log)
	}
	// The reviewed plan is committed on the working branch: every node with
	// its packages, kernel, GRUB ids and drain preview, and the signatures
	// sized per window for the GPU servers.
	js, err := exec.Command("git", "-C", l.IntentRepo, "show", res.Branch+":rounds/2026-11/plan.json").Output()
	if err != nil {
		t.Fatalf("plan.json not committed on %s: %v", res.Branch, err)
	}
	md, err := exec.Command("git", "-C", l.IntentRepo, "show", res.Branch+":rounds/2026-11/plan.md").Output()
	if err != nil {
		t.Fatalf("plan.md not committed on %s: %v", res.Branch, err)
	}
	f, err := plan.Decode(js)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Nodes) != 6 {
		t.Errorf("plan lists %d nodes, want 6", len(f.Nodes))
	}
	for _, n := range f.Nodes {
		if n.Target == "" || n.Packages.Count() == 0 || n.Grub.Old == "" || n.Grub.New == "" || n.Steps[plan.StepDrain] == "" {
			t.Errorf("%s: incomplete plan: target %q, %d packages, GRUB %q -> %q", n.Node, n.Target, n.Packages.Count(), n.Grub.Old, n.Grub.New)
		}
		if !strings.Contains(string(md), "## "+fmt.Sprint(n.Position)+". "+n.Node+"\n") || !strings.Contains(string(md), n.Grub.New) {
			t.Errorf("plan.md lacks %s or its GRUB entry", n.Node)
		}
	}
	if f.Signatures >= f.PerStepSignatures || res.Outcome.Approvals > f.PerStepSignatures {
		t.Errorf("signatures: plan %d, per step %d, asked %d", f.Signatures, f.PerStepSignatures, res.Outcome.Approvals)
	}
	t.Logf("signatures: %d per window for GPU servers, %d per step, %d asked", f.Signatures, f.PerStepSignatures, res.Outcome.Approvals)
}
