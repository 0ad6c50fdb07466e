package window_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-patch/mcp-patch/host/parse"
	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/kube/gpucheck"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/window"
)

func TestDecideRollback(t *testing.T) {
	now := time.Date(2026, 11, 3, 8, 0, 0, 0, time.UTC)
	j, err := round.Open(filepath.Join(t.TempDir(), "2026-11"), round.WithClock(func() time.Time { now = now.Add(time.Minute); return now }))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	o, err := round.PlanOrder([]round.NodeInfo{{Name: "gpu-a", GPU: true, Canary: true}, {Name: "gpu-b", GPU: true}}, round.Placement{})
	if err != nil {
		t.Fatal(err)
	}
	must := func(_ round.Record, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(j.Plan(o, time.Hour, round.Meta{}))
	must(j.StartStep(round.StepBaseline, "", round.Meta{}))
	must(j.FinishStep(round.StepBaseline, "", round.Meta{}))
	for _, s := range round.PreflightSteps {
		must(j.StartStep(s, "gpu-a", round.Meta{}))
		must(j.FinishStep(s, "gpu-a", round.Meta{Kernel: "6.8.0-40-generic"}))
	}
	before := j.State().Clone()
	for _, s := range []round.Step{round.StepDrain, round.StepInstall} {
		must(j.StartStep(s, "gpu-a", round.Meta{}))
		must(j.FinishStep(s, "gpu-a", round.Meta{Kernel: "6.8.0-40-generic"}))
	}
	must(j.StartStep(round.StepTrialBoot, "gpu-a", round.Meta{}))
	must(j.FinishStep(round.StepTrialBoot, "gpu-a", round.Meta{Kernel: "6.8.0-45-generic"}))
	must(j.StartStep(round.StepVerify, "gpu-a", round.Meta{}))
	must(j.FailStep(round.StepVerify, "gpu-a", round.Meta{Detail: "bond0 has 1 active slave"}))
	red := j.State()

	entries := []parse.GrubEntry{
		{ID: "gnulinux-simple-u", Kernel: "6.8.0-45-generic"},
		{ID: "gnulinux-advanced-u>gnulinux-6.8.0-45-generic-advanced-u", Kernel: "6.8.0-45-generic", Submenu: "Advanced options"},
		{ID: "gnulinux-advanced-u>gnulinux-6.8.0-40-generic-advanced-u", Kernel: "6.8.0-40-generic", Submenu: "Advanced options"},
		{ID: "gnulinux-advanced-u>gnulinux-6.8.0-40-generic-recovery-u", Kernel: "6.8.0-40-generic", Submenu: "Advanced options", Recovery: true},
	}
	onNew := steps.Inspection{Kernel: "6.8.0-45-generic", BootID: "b-2"}
	onNew.Grub.Entries = entries
	onOld := onNew
	onOld.Kernel = "6.8.0-40-generic"
	noOld := onNew
	noOld.Grub.Entries = entries[:2]

	p, err := window.DecideRollback("gpu-a", red, onNew, "6.8.0-45-generic")
	if err != nil {
		t.Fatal(err)
	}
	if p.OldEntry != "gnulinux-advanced-u>gnulinux-6.8.0-40-generic-advanced-u" || p.OldKernel != "6.8.0-40-generic" || p.FromKernel != "6.8.0-45-generic" || p.Promoted {
		t.Fatalf("plan %+v", p)
	}
	q := p
	q.BootID = "b-3"
	if q.Digest() == p.Digest() {
		t.Error("the digest must bind the boot the approval was given for")
	}
	if !strings.Contains(strings.Join(p.Summary(), " "), "keep the trial-boot drop-in") {
		t.Errorf("summary %q", p.Summary())
	}
	for _, tc := range []struct {
		name string
		node string
		st   *round.State
		insp steps.Inspection
		want string
	}{
		{"round not stopped", "gpu-a", before, onNew, "the round is not stopped at gpu-a"},
		{"another node", "gpu-b", red, onNew, "not stopped at gpu-b"},
		{"not in the order", "gpu-z", red, onNew, "not in the round's order"},
		{"already on the old kernel", "gpu-a", red, onOld, "already runs its old kernel"},
		{"old entry gone", "gpu-a", red, noOld, "no GRUB entry boots the old kernel"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := window.DecideRollback(tc.node, tc.st, tc.insp, "6.8.0-45-generic")
			var r *window.Refusal
			if !errors.As(err, &r) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want a refusal containing %q", err, tc.want)
			}
		})
	}
}

// rbHost is a node's host side during a rollback: it reboots into the old
// kernel once Boot is called.
type rbHost struct {
	running, old, bootID  string
	prepared, requested   bool
	verifyRed, prepareErr bool
	actions               []string
}

func (h *rbHost) Inspect(ctx context.Context, node string, in steps.InspectInput) (steps.Inspection, error) {
	return steps.Inspection{Kernel: h.running, BootID: h.bootID}, nil
}

func (h *rbHost) RollbackPrepare(ctx context.Context, node string, in steps.RollbackInput) (steps.Rollback, error) {
	if h.prepareErr {
		return steps.Rollback{}, errors.New("grub-reboot: no such entry")
	}
	h.actions = append(h.actions, "prepare "+in.OldEntry)
	h.prepared = true
	return steps.Rollback{NextEntry: in.OldEntry, OldKernel: in.OldKernel}, nil
}

func (h *rbHost) RollbackReboot(ctx context.Context, node, round string) (steps.Rollback, error) {
	h.actions = append(h.actions, "reboot")
	h.requested = true
	return steps.Rollback{RebootRequestedAt: "now", Method: "systemd-run"}, nil
}

func (h *rbHost) RollbackStatus(ctx context.Context, node, round string) (steps.Rollback, error) {
	st := steps.Rollback{Kernel: h.running, BootID: h.bootID, OldKernel: h.old, RecordedBootID: "b-2", Outcome: steps.OutcomeNotRebooted}
	if h.requested {
		st.RebootRequestedAt = "now"
	}
	if h.running == h.old {
		st.Outcome, st.Rebooted = steps.OutcomeRolledBack, true
	}
	return st, nil
}

func (h *rbHost) Verify(ctx context.Context, node string, in steps.VerifyInput) (steps.NodeVerification, error) {
	v := steps.NodeVerification{Kernel: h.running, Passed: h.running == in.TargetKernel && !h.verifyRed}
	if !v.Passed {
		v.Problems = []string{"bond0 has 1 active slave"}
	}
	return v, nil
}

func (h *rbHost) boot() { h.running, h.bootID = h.old, "b-3" }

// stoppedAfterTrialBoot is a round stopped at gpu-a by a red verify after
// its new kernel booted.
func stoppedAfterTrialBoot(t *testing.T, clk *clock) *round.Journal {
	t.Helper()
	j, err := round.Open(filepath.Join(t.TempDir(), "2026-11"), round.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := j.Close(); err != nil {
			t.Error(err)
		}
	})
	o, err := round.PlanOrder([]round.NodeInfo{{Name: "gpu-a", GPU: true, Canary: true}}, round.Placement{})
	if err != nil {
		t.Fatal(err)
	}
	must := func(_ round.Record, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(j.Plan(o, time.Hour, round.Meta{}))
	must(j.StartStep(round.StepBaseline, "", round.Meta{}))
	must(j.FinishStep(round.StepBaseline, "", round.Meta{}))
	for _, s := range append(append([]round.Step{}, round.PreflightSteps...), round.StepDrain, round.StepInstall) {
		must(j.StartStep(s, "gpu-a", round.Meta{}))
		must(j.FinishStep(s, "gpu-a", round.Meta{Kernel: "6.8.0-40-generic"}))
	}
	must(j.StartStep(round.StepTrialBoot, "gpu-a", round.Meta{}))
	must(j.FinishStep(round.StepTrialBoot, "gpu-a", round.Meta{Kernel: "6.8.0-45-generic"}))
	must(j.StartStep(round.StepVerify, "gpu-a", round.Meta{}))
	must(j.FailStep(round.StepVerify, "gpu-a", round.Meta{Detail: "bond0 has 1 active slave"}))
	return j
}

func TestRollbackOnFakes(t *testing.T) {
	ctx := context.Background()
	entries := []parse.GrubEntry{
		{ID: "gnulinux-advanced-u>gnulinux-6.8.0-45-generic-advanced-u", Kernel: "6.8.0-45-generic"},
		{ID: "gnulinux-advanced-u>gnulinux-6.8.0-40-generic-advanced-u", Kernel: "6.8.0-40-generic"},
	}
	setup := func(t *testing.T) (*window.Window, *rbHost, *clock, window.RollbackPlan) {
		clk := &clock{t: t0}
		j := stoppedAfterTrialBoot(t, clk)
		h := &rbHost{running: "6.8.0-45-generic", old: "6.8.0-40-generic", bootID: "b-2"}
		insp, _ := h.Inspect(ctx, "gpu-a", steps.InspectInput{})
		insp.Grub.Entries = entries
		p, err := window.DecideRollback("gpu-a", j.State(), insp, "6.8.0-45-generic")
		if err != nil {
			t.Fatal(err)
		}
		w := &window.Window{Round: j.RoundID(), Rec: &window.Recorder{J: j}, Bounds: window.DefaultBounds(time.Minute, 15*time.Minute), Now: clk.Now}
		return w, h, clk, p
	}
	uncordons := 0
	uncordon := func(context.Context) (bool, string) {
		uncordons++
		return true, "uncordoned (this round had cordoned it)"
	}

	t.Run("back on the old kernel, verified, uncordoned", func(t *testing.T) {
		w, h, _, p := setup(t)
		uncordons = 0
		o, err := w.StartRollback(ctx, h, p, grant(p, "a-rb"))
		if err != nil || !o.InProgress || len(h.actions) != 2 {
			t.Fatalf("start: %+v %v, host %v", o, err, h.actions)
		}
		run := w.Rec.J.State().Rollback("gpu-a")
		if run == nil || run.State != round.InFlight || run.ApprovalID != "a-rb" {
			t.Fatalf("journal after start: %+v", run)
		}
		if o, err := w.FollowRollback(ctx, h, "gpu-a", steps.VerifyInput{}, uncordon); err != nil || !o.InProgress || uncordons != 0 {
			t.Fatalf("before the reboot: %+v %v", o, err)
		}
		h.boot()
		o, err = w.FollowRollback(ctx, h, "gpu-a", steps.VerifyInput{}, uncordon)
		if err != nil || !o.RolledBack || !o.Uncordoned || uncordons != 1 || !strings.Contains(o.Detail, "b-2 → b-3") {
			t.Fatalf("after the reboot: %+v %v (uncordons %d)", o, err, uncordons)
		}
		if run := w.Rec.J.State().Rollback("gpu-a"); run.State != round.Done || run.Kernel != "6.8.0-40-generic" {
			t.Fatalf("journal after the rollback: %+v", run)
		}
		if w.Rec.J.State().Stop == nil {
			t.Error("the rollback resumed the round: a person decides")
		}
	})

	t.Run("verify red on the old kernel too", func(t *testing.T) {
		w, h, _, p := setup(t)
		uncordons = 0
		h.verifyRed = true
		if _, err := w.StartRollback(ctx, h, p, grant(p, "a-rb")); err != nil {
			t.Fatal(err)
		}
		h.boot()
		_, err := w.FollowRollback(ctx, h, "gpu-a", steps.VerifyInput{}, uncordon)
		var st *window.Stopped
		if !errors.As(err, &st) || !strings.Contains(err.Error(), "verify is red there too") || uncordons != 0 {
			t.Fatalf("red verify: %v (uncordons %d)", err, uncordons)
		}
		if run := w.Rec.J.State().Rollback("gpu-a"); run.State != round.Failed {
			t.Fatalf("journal: %+v", run)
		}
	})

	// A driver-container node: the driver pod's wait runs again on the
	// old kernel; a driver that does not come back is a red check that
	// stops for a person, the node left cordoned.
	for _, tc := range []struct {
		name   string
		probe  *driverProbe
		rolled bool
		words  string
	}{
		{name: "driver back on the old kernel", probe: &driverProbe{applies: true, res: gpucheck.DriverPodResult{State: gpucheck.DriverReady, Pod: "nvidia-driver-daemonset-x", Waited: 40 * time.Second}},
			rolled: true, words: "the driver pod nvidia-driver-daemonset-x is Ready on the old kernel"},
		{name: "driver not back on the old kernel", probe: &driverProbe{applies: true, res: gpucheck.DriverPodResult{State: gpucheck.DriverFailed, Reason: "CrashLoopBackOff: no precompiled image for 6.8.0-40-generic"}},
			words: "the driver did not come back on the old kernel: CrashLoopBackOff"},
		{name: "the wait cannot run", probe: &driverProbe{applies: true, err: errors.New("connection refused")},
			words: "the driver pod's wait on the old kernel could not run: connection refused"},
		{name: "the driver comes from host packages", probe: &driverProbe{}, rolled: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, h, _, p := setup(t)
			w.Driver = tc.probe
			uncordons = 0
			if _, err := w.StartRollback(ctx, h, p, grant(p, "a-rb")); err != nil {
				t.Fatal(err)
			}
			h.boot()
			o, err := w.FollowRollback(ctx, h, "gpu-a", steps.VerifyInput{}, uncordon)
			if tc.probe.calls != 1 {
				t.Fatalf("the driver pod's wait ran %d times", tc.probe.calls)
			}
			run := w.Rec.J.State().Rollback("gpu-a")
			if tc.rolled {
				if err != nil || !o.RolledBack || uncordons != 1 || !strings.Contains(run.Detail, tc.words) {
					t.Fatalf("rollback: %+v %v (uncordons %d), journal %q", o, err, uncordons, run.Detail)
				}
				return
			}
			var st *window.Stopped
			if !errors.As(err, &st) || o.RolledBack || uncordons != 0 || run.State != round.Failed || !strings.Contains(run.Detail, tc.words) || o.Driver == nil || !o.Driver.Red {
				t.Fatalf("rollback: %+v %v (uncordons %d), journal %+v", o, err, uncordons, run)
			}
		})
	}

	t.Run("not back within the reboot bound", func(t *testing.T) {
		w, h, clk, p := setup(t)
		if _, err := w.StartRollback(ctx, h, p, grant(p, "a-rb")); err != nil {
			t.Fatal(err)
		}
		clk.Add(16 * time.Minute)
		_, err := w.FollowRollback(ctx, h, "gpu-a", steps.VerifyInput{}, uncordon)
		if err == nil || !strings.Contains(err.Error(), "not back on the old kernel after") {
			t.Fatalf("overdue: %v", err)
		}
		if _, err := w.FollowRollback(ctx, h, "gpu-a", steps.VerifyInput{}, uncordon); err == nil {
			t.Error("a failed rollback is still followed")
		}
	})

	t.Run("an approval for another plan", func(t *testing.T) {
		w, h, _, p := setup(t)
		other := p
		other.BootID = "b-9"
		if _, err := w.StartRollback(ctx, h, p, grant(other, "a-rb")); err == nil || len(h.actions) != 0 {
			t.Fatalf("start under another plan's approval: %v, host %v", err, h.actions)
		}
		if w.Rec.J.State().Rollback("gpu-a") != nil {
			t.Error("journaled a rollback the approval does not cover")
		}
	})

	t.Run("prepare fails: nothing rebooted", func(t *testing.T) {
		w, h, _, p := setup(t)
		h.prepareErr = true
		_, err := w.StartRollback(ctx, h, p, grant(p, "a-rb"))
		if err == nil || !strings.Contains(err.Error(), "prepare: grub-reboot") || h.requested {
			t.Fatalf("prepare error: %v, reboot requested %v", err, h.requested)
		}
		if run := w.Rec.J.State().Rollback("gpu-a"); run.State != round.Failed {
			t.Fatalf("journal: %+v", run)
		}
	})
}

// driverProbe answers the driver pod's wait.
type driverProbe struct {
	applies bool
	res     gpucheck.DriverPodResult
	err     error
	calls   int
}

func (p *driverProbe) DriverPod(context.Context, string) (gpucheck.DriverPodResult, bool, error) {
	p.calls++
	return p.res, p.applies, p.err
}
