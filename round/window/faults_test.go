package window_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/internal/testsupport/fakes"
	"github.com/mcp-patch/mcp-patch/kube/drain"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// faulty is a fake host whose answers the test overrides: an error or a
// state the real host steps can answer (a refused start, a lost session,
// a failed apt, an unexpected kernel).
type faulty struct {
	*fakes.Host
	installStatus func() (steps.InstallState, error)
	prepareErr    error
	rebootErr     error
	status        func(steps.TrialBoot, error) (steps.TrialBoot, error)
	promote       func(steps.PromoteResult, error) (steps.PromoteResult, error)
}

func (f *faulty) Install(ctx context.Context, node, action, r, d string) (steps.InstallState, error) {
	if action == "status" && f.installStatus != nil {
		return f.installStatus()
	}
	return f.Host.Install(ctx, node, action, r, d)
}

func (f *faulty) TrialBootPrepare(ctx context.Context, node string, in steps.TrialBootInput) (steps.TrialBoot, error) {
	if f.prepareErr != nil {
		return steps.TrialBoot{}, f.prepareErr
	}
	return f.Host.TrialBootPrepare(ctx, node, in)
}

func (f *faulty) TrialBootReboot(ctx context.Context, node, r string) (steps.TrialBoot, error) {
	if f.rebootErr != nil {
		return steps.TrialBoot{}, f.rebootErr
	}
	return f.Host.TrialBootReboot(ctx, node, r)
}

func (f *faulty) TrialBootStatus(ctx context.Context, node, r string) (steps.TrialBoot, error) {
	tb, err := f.Host.TrialBootStatus(ctx, node, r)
	if f.status != nil {
		return f.status(tb, err)
	}
	return tb, err
}

func (f *faulty) Promote(ctx context.Context, node string, in steps.PromoteInput) (steps.PromoteResult, error) {
	res, err := f.Host.Promote(ctx, node, in)
	if f.promote != nil {
		return f.promote(res, err)
	}
	return res, err
}

func (r *rig) faulty() *faulty {
	f := &faulty{Host: r.host}
	r.w.Host = f
	return f
}

// stopped wants err to be a journaled stop whose reasons contain want, the
// step's last attempt failed and the round stopped.
func (r *rig) stopped(t *testing.T, err error, step round.Step, want string) {
	t.Helper()
	var st *window.Stopped
	if !errors.As(err, &st) || !strings.Contains(st.Error(), want) {
		t.Fatalf("%s: %v, want a stop saying %q", step, err, want)
	}
	if st.Journal != nil {
		t.Fatalf("%s: the stop was not journaled: %v", step, st.Journal)
	}
	if run := r.run(step); run == nil || run.State != round.Failed {
		t.Fatalf("%s after the stop: %+v", step, run)
	}
	if r.j.State().Stop == nil {
		t.Fatalf("%s failed but the round is not stopped", step)
	}
}

func (r *rig) inFlight(t *testing.T, step round.Step) {
	t.Helper()
	if run := r.run(step); run == nil || run.State != round.InFlight {
		t.Fatalf("%s is not in flight: %+v", step, run)
	}
	if r.j.State().Stop != nil {
		t.Fatalf("round stopped: %+v", r.j.State().Stop)
	}
}

func TestInstallFaults(t *testing.T) {
	ctx := context.Background()
	p := window.PackagePlan{Node: node, PackageDigest: digest, TargetKernel: target, RunningKernel: running}
	started := func(t *testing.T) (*rig, *faulty) {
		r := newRig(t)
		r.drained(t)
		f := r.faulty()
		if _, err := r.w.StartInstall(ctx, p, grant(p, "a-install")); err != nil {
			t.Fatal(err)
		}
		return r, f
	}

	t.Run("the node refuses the start", func(t *testing.T) {
		r := newRig(t)
		r.drained(t)
		r.host.FailStart = fmt.Errorf("install: %w: dpkg is locked by another process", steps.ErrRefused)
		_, err := r.w.StartInstall(ctx, p, grant(p, "a-install"))
		r.stopped(t, err, round.StepInstall, "dpkg is locked")
		if r.host.Count("install") != 0 {
			t.Fatal("a refused start counted as an install")
		}
	})
	t.Run("state unreadable: in progress, nothing recorded", func(t *testing.T) {
		r, f := started(t)
		f.installStatus = func() (steps.InstallState, error) { return steps.InstallState{}, errors.New("ssh: connection reset") }
		o, err := r.w.FollowInstall(ctx, node)
		if err != nil || !o.InProgress || !strings.Contains(strings.Join(o.Reasons, " "), "connection reset") {
			t.Fatalf("unreadable: %+v %v", o, err)
		}
		r.inFlight(t, round.StepInstall)
	})
	t.Run("apt running: progress", func(t *testing.T) {
		r, f := started(t)
		f.installStatus = func() (steps.InstallState, error) {
			st := steps.InstallState{State: "running"}
			st.Progress.Unpacked, st.Progress.SetUp = 12, 3
			return st, nil
		}
		o, err := r.w.FollowInstall(ctx, node)
		if err != nil || !o.InProgress || !strings.Contains(o.Reasons[0], "12 unpacked, 3 set up") {
			t.Fatalf("running: %+v %v", o, err)
		}
		r.inFlight(t, round.StepInstall)
	})
	t.Run("apt failed", func(t *testing.T) {
		r, f := started(t)
		code := 100
		f.installStatus = func() (steps.InstallState, error) {
			st := steps.InstallState{State: "finished", ExitCode: &code}
			st.Progress.DpkgErrors = []string{"dpkg: error processing package nvidia-dkms-550"}
			return st, nil
		}
		_, err := r.w.FollowInstall(ctx, node)
		r.stopped(t, err, round.StepInstall, "failed (exit 100): dpkg: error processing package nvidia-dkms-550")
	})
	t.Run("exit 0 with dpkg errors is a failure", func(t *testing.T) {
		r, f := started(t)
		code := 0
		f.installStatus = func() (steps.InstallState, error) {
			st := steps.InstallState{State: "finished", ExitCode: &code}
			st.Progress.DpkgErrors = []string{"dpkg: warning: files list file for package x missing"}
			return st, nil
		}
		_, err := r.w.FollowInstall(ctx, node)
		r.stopped(t, err, round.StepInstall, "(exit 0)")
	})
	t.Run("finished without an exit code", func(t *testing.T) {
		r, f := started(t)
		f.installStatus = func() (steps.InstallState, error) { return steps.InstallState{State: "finished"}, nil }
		_, err := r.w.FollowInstall(ctx, node)
		r.stopped(t, err, round.StepInstall, "(exit ?)")
	})
	t.Run("a state this round did not start", func(t *testing.T) {
		r, f := started(t)
		f.installStatus = func() (steps.InstallState, error) { return steps.InstallState{State: "lost"}, nil }
		_, err := r.w.FollowInstall(ctx, node)
		r.stopped(t, err, round.StepInstall, `in state "lost"`)
	})
	t.Run("not in flight", func(t *testing.T) {
		r := newRig(t)
		r.drained(t)
		if _, err := r.w.FollowInstall(ctx, node); err == nil || !strings.Contains(err.Error(), "not in flight") {
			t.Fatalf("follow of an install never started: %v", err)
		}
	})
	t.Run("the Lease lost while apt runs", func(t *testing.T) {
		r, _ := started(t)
		r.lease.Steal("server-b")
		if _, err := r.w.FollowInstall(ctx, node); err == nil {
			t.Fatal("followed an install under another server's Lease")
		}
		if r.j.State().Stop == nil {
			t.Fatal("a lost Lease did not stop the window")
		}
	})
}

func TestTrialBootFaults(t *testing.T) {
	ctx := context.Background()
	prepared := func(t *testing.T) (*rig, *faulty, window.TrialBootPlan) {
		r := newRig(t)
		r.installed(t)
		return r, r.faulty(), r.trialPlan(t)
	}

	t.Run("prepare fails: not rebooted", func(t *testing.T) {
		r, f, tp := prepared(t)
		f.prepareErr = errors.New("grub-editenv: /boot/grub/grubenv: read-only file system")
		_, err := r.w.StartTrialBoot(ctx, tp, grant(tp, "a-trial"), nop)
		r.stopped(t, err, round.StepTrialBoot, "read-only file system")
		if r.host.Count("reboot") != 0 {
			t.Fatal("rebooted after a failed prepare")
		}
	})
	t.Run("reboot request lost, then completed by re-entry", func(t *testing.T) {
		r, f, tp := prepared(t)
		f.rebootErr = errors.New("ssh: session closed")
		_, err := r.w.StartTrialBoot(ctx, tp, grant(tp, "a-trial"), nop)
		var unc *window.Uncertain
		if !errors.As(err, &unc) {
			t.Fatalf("lost reboot request: %v, want Uncertain", err)
		}
		r.inFlight(t, round.StepTrialBoot)
		// Still failing on re-entry: a host error, nothing recorded.
		_, err = r.w.FollowTrialBoot(ctx, node)
		var he *window.HostError
		if !errors.As(err, &he) || he.Action != "request the trial reboot" {
			t.Fatalf("re-entry with the reboot failing: %v", err)
		}
		r.inFlight(t, round.StepTrialBoot)
		f.rebootErr = nil
		r.crash(t)
		r.w.Host = f
		o, err := r.w.FollowTrialBoot(ctx, node)
		if err != nil || !o.InProgress || r.host.Count("reboot") != 1 {
			t.Fatalf("re-entry after the crash: %+v %v (reboots %d)", o, err, r.host.Count("reboot"))
		}
	})
	refusal := fmt.Errorf("trial_boot on node %s: %w: /etc/default/grub.d/99-trial-boot.cfg no longer sets GRUB_DEFAULT=\"%s\"; run ACTION=prepare again", node, steps.ErrRefused, "gnulinux-advanced-x>gnulinux-old")
	t.Run("reboot refused by the host: the round stops, no retry", func(t *testing.T) {
		r, f, tp := prepared(t)
		f.rebootErr = refusal
		_, err := r.w.StartTrialBoot(ctx, tp, grant(tp, "a-trial"), nop)
		r.stopped(t, err, round.StepTrialBoot, "refused the trial reboot")
		if !strings.Contains(err.Error(), "no longer sets GRUB_DEFAULT") || r.host.Count("reboot") != 0 {
			t.Fatalf("refused reboot: %v (reboots %d)", err, r.host.Count("reboot"))
		}
	})
	t.Run("reboot request lost, then refused on re-entry: the round stops", func(t *testing.T) {
		r, f, tp := prepared(t)
		f.rebootErr = errors.New("ssh: session closed")
		if _, err := r.w.StartTrialBoot(ctx, tp, grant(tp, "a-trial"), nop); err == nil {
			t.Fatal("a lost reboot request answered no error")
		}
		r.inFlight(t, round.StepTrialBoot)
		f.rebootErr = refusal
		_, err := r.w.FollowTrialBoot(ctx, node)
		r.stopped(t, err, round.StepTrialBoot, "refused the trial reboot")
	})
	t.Run("no watchdog is said", func(t *testing.T) {
		r, _, tp := prepared(t)
		w := &noWatchdog{r.host}
		r.w.Host = w
		o, err := r.w.StartTrialBoot(ctx, tp, grant(tp, "a-trial"), nop)
		if err != nil || !strings.Contains(strings.Join(o.Reasons, " "), "no hardware watchdog") {
			t.Fatalf("without a watchdog: %+v %v", o, err)
		}
	})
	t.Run("rebooting: unreadable is in progress", func(t *testing.T) {
		r, f, tp := prepared(t)
		if _, err := r.w.StartTrialBoot(ctx, tp, grant(tp, "a-trial"), nop); err != nil {
			t.Fatal(err)
		}
		f.status = func(tb steps.TrialBoot, _ error) (steps.TrialBoot, error) {
			return steps.TrialBoot{}, errors.New("dial tcp 10.0.0.5:22: connect: no route to host")
		}
		o, err := r.w.FollowTrialBoot(ctx, node)
		if err != nil || !o.InProgress || !strings.Contains(o.Reasons[0], "no route to host") {
			t.Fatalf("unreachable while rebooting: %+v %v", o, err)
		}
		r.inFlight(t, round.StepTrialBoot)
	})
	t.Run("booted an unexpected kernel", func(t *testing.T) {
		r, f, tp := prepared(t)
		if _, err := r.w.StartTrialBoot(ctx, tp, grant(tp, "a-trial"), nop); err != nil {
			t.Fatal(err)
		}
		r.host.Boot(false)
		f.status = func(tb steps.TrialBoot, err error) (steps.TrialBoot, error) {
			tb.Outcome, tb.Kernel = "other", "6.8.0-31-generic"
			return tb, err
		}
		_, err := r.w.FollowTrialBoot(ctx, node)
		r.stopped(t, err, round.StepTrialBoot, "booted 6.8.0-31-generic, which is neither")
	})
	t.Run("fell back to the old kernel", func(t *testing.T) {
		r, _, tp := prepared(t)
		if _, err := r.w.StartTrialBoot(ctx, tp, grant(tp, "a-trial"), nop); err != nil {
			t.Fatal(err)
		}
		r.host.Boot(true)
		_, err := r.w.FollowTrialBoot(ctx, node)
		r.stopped(t, err, round.StepTrialBoot, "came back on the OLD kernel")
	})
	t.Run("a state file without a one-shot entry needs approval", func(t *testing.T) {
		r, f, tp := prepared(t)
		if err := r.w.Rec.Start(tp, grant(tp, "a-trial")); err != nil {
			t.Fatal(err)
		}
		f.status = func(steps.TrialBoot, error) (steps.TrialBoot, error) {
			return steps.TrialBoot{OldEntry: tp.OldEntry}, nil
		}
		if _, err := r.w.FollowTrialBoot(ctx, node); !errors.Is(err, window.ErrNeedApproval) {
			t.Fatalf("unprepared: %v, want ErrNeedApproval", err)
		}
		if r.host.Count("reboot") != 0 {
			t.Fatal("rebooted an unprepared node")
		}
	})
	t.Run("not in flight", func(t *testing.T) {
		r, _, _ := prepared(t)
		if _, err := r.w.FollowTrialBoot(ctx, node); err == nil || !strings.Contains(err.Error(), "not in flight") {
			t.Fatalf("follow of a trial boot never started: %v", err)
		}
	})
}

type noWatchdog struct{ *fakes.Host }

func (n *noWatchdog) TrialBootPrepare(ctx context.Context, node string, in steps.TrialBootInput) (steps.TrialBoot, error) {
	tb, err := n.Host.TrialBootPrepare(ctx, node, in)
	tb.WatchdogArmed = false
	return tb, err
}

func TestPromoteFaults(t *testing.T) {
	ctx := context.Background()
	ready := func(t *testing.T) (*rig, *faulty, window.PromotePlan) {
		r := newRig(t)
		r.installed(t)
		tp := r.trialPlan(t)
		if _, err := r.w.StartTrialBoot(ctx, tp, grant(tp, "a-trial"), nop); err != nil {
			t.Fatal(err)
		}
		r.host.Boot(false)
		if _, err := r.w.FollowTrialBoot(ctx, node); err != nil {
			t.Fatal(err)
		}
		r.checked(t, round.StepVerify)
		r.green(t, round.StepUncordon, node)
		r.checked(t, round.StepGPUAcceptance)
		pp, err := r.w.PlanPromote(ctx, node, "")
		if err != nil {
			t.Fatal(err)
		}
		return r, r.faulty(), pp
	}
	t.Run("the host errs", func(t *testing.T) {
		r, f, pp := ready(t)
		f.promote = func(steps.PromoteResult, error) (steps.PromoteResult, error) {
			return steps.PromoteResult{}, errors.New("grub-set-default: no such entry")
		}
		_, err := r.w.Promote(ctx, pp, grant(pp, "a-promote"))
		r.stopped(t, err, round.StepPromote, "no such entry")
	})
	t.Run("the default is another kernel", func(t *testing.T) {
		r, f, pp := ready(t)
		f.promote = func(res steps.PromoteResult, err error) (steps.PromoteResult, error) {
			res.Promoted, res.NextBootKernel, res.NextBootEntry = false, running, fakes.Entry(running)
			return res, err
		}
		_, err := r.w.Promote(ctx, pp, grant(pp, "a-promote"))
		r.stopped(t, err, round.StepPromote, `default is now "`+running+`"`)
	})
	t.Run("the Lease held by another server: nothing promoted", func(t *testing.T) {
		r, _, pp := ready(t)
		r.lease.Steal("server-b")
		if _, err := r.w.Promote(ctx, pp, grant(pp, "a-promote")); err == nil || r.host.Count("promote") != 0 {
			t.Fatalf("promote under another server's Lease: %v, promotes %d", err, r.host.Count("promote"))
		}
		if run := r.run(round.StepPromote); run != nil && run.State == round.InFlight {
			t.Fatal("a promote refused by the Lease was journaled as started")
		}
	})
	t.Run("not in flight", func(t *testing.T) {
		r, _, _ := ready(t)
		if err := r.w.FollowUnobservable(round.StepPromote, node, "GRUB's default is not known"); err == nil || !strings.Contains(err.Error(), "not in flight") {
			t.Fatalf("follow of a promote never started: %v", err)
		}
	})
}

// blockingCluster is the fake cluster whose drain is blocked by a PDB, as
// the real drain answers when evictions are refused past its timeout.
type blockingCluster struct {
	*fakes.Cluster
	stateErr error
}

func (b *blockingCluster) Drain(ctx context.Context, node string, o drain.Options, progress func(done, total int, msg string)) (drain.Result, error) {
	if _, err := b.Cluster.Drain(ctx, node, o, progress); err != nil {
		return drain.Result{}, err
	}
	res := drain.Result{Blocked: []drain.BlockedPod{{PodRef: drain.PodRef{Namespace: "ml", Name: "trainer-0"}, Reason: "eviction refused",
		PDBs: []drain.PDBRef{{Name: "trainer", DisruptionsAllowed: 0}}}}}
	return res, errors.New("drain timed out")
}

func (b *blockingCluster) CordonState(ctx context.Context, node string) (drain.State, error) {
	if b.stateErr != nil {
		return drain.State{}, b.stateErr
	}
	return b.Cluster.CordonState(ctx, node)
}

func TestDrainFaults(t *testing.T) {
	ctx := context.Background()
	plan := func(t *testing.T, r *rig) window.DrainPlan {
		pv, _ := r.kube.PreviewDrain(ctx, node, window.DrainOptions{}.Policy)
		p, err := window.DecideDrain(node, pv)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	t.Run("blocked by a PDB: stopped, the pods and PDBs named", func(t *testing.T) {
		r := newRig(t)
		r.w.Cluster = &blockingCluster{Cluster: r.kube}
		p := plan(t, r)
		_, err := r.w.StartDrain(ctx, p, grant(p, "a-drain"), window.DrainOptions{Identity: "server-a"}, nil)
		r.stopped(t, err, round.StepDrain, "ml/trainer-0: eviction refused (PDB trainer allows 0 disruptions)")
	})
	t.Run("cordon unreadable on re-entry", func(t *testing.T) {
		r := newRig(t)
		p := plan(t, r)
		if err := r.w.Rec.Start(p, grant(p, "a-drain")); err != nil {
			t.Fatal(err)
		}
		r.w.Cluster = &blockingCluster{Cluster: r.kube, stateErr: errors.New("apiserver: connection refused")}
		_, err := r.w.FollowDrain(ctx, node, window.DrainOptions{Identity: "server-a"}, nil)
		var he *window.HostError
		if !errors.As(err, &he) || !strings.Contains(err.Error(), "connection refused") {
			t.Fatalf("unreadable cordon: %v", err)
		}
		r.inFlight(t, round.StepDrain)
	})
	t.Run("not in flight", func(t *testing.T) {
		r := newRig(t)
		if _, err := r.w.FollowDrain(ctx, node, window.DrainOptions{}, nil); err == nil || !strings.Contains(err.Error(), "not in flight") {
			t.Fatalf("follow of a drain never started: %v", err)
		}
	})
	t.Run("the Lease held by another: nothing cordoned", func(t *testing.T) {
		r := newRig(t)
		r.lease.Holder, r.lease.Round, r.lease.Node = "server-b", "2026-10", "gpu-9"
		p := plan(t, r)
		if _, err := r.w.StartDrain(ctx, p, grant(p, "a-drain"), window.DrainOptions{Identity: "server-a"}, nil); err == nil || len(r.kube.Actions) != 0 {
			t.Fatalf("drain under another window's Lease: %v, actions %v", err, r.kube.Actions)
		}
	})
}
