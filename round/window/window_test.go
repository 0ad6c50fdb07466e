package window_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-patch/mcp-patch/internal/testsupport/fakes"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/window"
)

const (
	node    = "gpu-1"
	running = "6.8.0-48-generic"
	target  = "6.8.0-51-generic"
	digest  = "sha256:0000000000000000000000000000000000000000000000000000000000000051"
)

var t0 = time.Date(2026, 11, 3, 8, 0, 0, 0, time.UTC)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

type rig struct {
	j     *round.Journal
	dir   string
	clk   *clock
	host  *fakes.Host
	kube  *fakes.Cluster
	lease *fakes.Lease
	w     *window.Window
}

// newRig is a round of one GPU server, planned, with its preflight green.
func newRig(t *testing.T) *rig {
	t.Helper()
	r := &rig{dir: t.TempDir(), clk: &clock{t: t0},
		host:  &fakes.Host{Running: running, Target: target, Digest: digest},
		kube:  &fakes.Cluster{Pods: podsByNode{}.nodePods()},
		lease: &fakes.Lease{Identity: "server-a"}}
	r.open(t)
	order := round.Order{Positions: []round.Position{{Node: node, Role: round.RoleGPU, GPU: true, Canary: true, Reason: "canary"}}}
	if _, err := r.j.Plan(order, time.Hour, round.Meta{}); err != nil {
		t.Fatal(err)
	}
	for _, st := range []round.Step{round.StepBaseline} {
		r.green(t, st, "")
	}
	for _, st := range round.PreflightSteps {
		r.green(t, st, node)
	}
	return r
}

func (r *rig) open(t *testing.T) {
	t.Helper()
	j, err := round.Open(r.dir, round.WithClock(r.clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	r.j = j
	r.w = &window.Window{Round: j.RoundID(), Rec: &window.Recorder{J: j}, Host: r.host, Cluster: r.kube, Lease: r.lease,
		Bounds: window.DefaultBounds(10*time.Minute, 15*time.Minute), Now: r.clk.Now}
}

// crash closes the journal as a killed process would leave it and opens
// it again.
func (r *rig) crash(t *testing.T) {
	t.Helper()
	if err := r.j.Close(); err != nil {
		t.Fatal(err)
	}
	r.open(t)
}

func (r *rig) green(t *testing.T, st round.Step, n string) {
	t.Helper()
	if _, err := r.j.StartStep(st, n, round.Meta{}); err != nil {
		t.Fatalf("start %s: %v", st, err)
	}
	if _, err := r.j.FinishStep(st, n, round.Meta{}); err != nil {
		t.Fatalf("finish %s: %v", st, err)
	}
}

func (r *rig) run(st round.Step) *round.StepRun { return window.StepRun(r.j.State(), st, node) }

// checked records a check st green on the boot the fake host runs now, as
// record_verification and gpu_acceptance record it.
func (r *rig) checked(t *testing.T, st round.Step) {
	t.Helper()
	if _, err := r.j.StartStep(st, node, round.Meta{}); err != nil {
		t.Fatalf("start %s: %v", st, err)
	}
	if _, err := r.j.FinishStep(st, node, round.Meta{Kernel: r.host.Running, BootID: r.host.CurrentBoot()}); err != nil {
		t.Fatalf("finish %s: %v", st, err)
	}
}

func grant(p window.Plan, id string) window.Approval {
	return window.Approval{ID: id, Digest: p.Digest()}
}

func (r *rig) drained(t *testing.T) {
	t.Helper()
	pv, _ := r.kube.PreviewDrain(context.Background(), node, window.DrainOptions{}.Policy)
	p, err := window.DecideDrain(node, pv)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.w.StartDrain(context.Background(), p, grant(p, "a-drain"), window.DrainOptions{Identity: "server-a"}, nil); err != nil {
		t.Fatal(err)
	}
}

func (r *rig) installed(t *testing.T) {
	t.Helper()
	r.drained(t)
	p := window.PackagePlan{Node: node, PackageDigest: digest, TargetKernel: target, RunningKernel: running}
	if _, err := r.w.StartInstall(context.Background(), p, grant(p, "a-install")); err != nil {
		t.Fatal(err)
	}
	r.host.InstallState = "finished"
	if _, err := r.w.FollowInstall(context.Background(), node); err != nil {
		t.Fatal(err)
	}
}

func (r *rig) trialPlan(t *testing.T) window.TrialBootPlan {
	t.Helper()
	insp, _ := r.host.Inspect(context.Background(), node, stepsInspect())
	p, err := window.DecideTrialBoot(node, insp, target, true, 10)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func nop(float64, float64, string) {}

func TestWindowRunsWholeOnFakes(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.installed(t)
	if got := r.run(round.StepInstall).Last(); got.ApprovalID != "a-install" || got.PlanDigest != digest {
		t.Fatalf("install start journaled approval %q digest %q", got.ApprovalID, got.PlanDigest)
	}
	tp := r.trialPlan(t)
	o, err := r.w.StartTrialBoot(ctx, tp, grant(tp, "a-trial"), nop)
	if err != nil || !o.InProgress {
		t.Fatalf("trial boot: %+v %v", o, err)
	}
	r.host.Boot(false)
	if o, err := r.w.FollowTrialBoot(ctx, node); err != nil || o.InProgress {
		t.Fatalf("follow trial boot: %+v %v", o, err)
	}
	r.checked(t, round.StepVerify)
	r.green(t, round.StepUncordon, node)
	r.checked(t, round.StepGPUAcceptance)
	pp, err := r.w.PlanPromote(ctx, node, "")
	if err != nil || pp.NewEntry != fakes.Entry(target) || pp.Kernel != target || pp.BootID != r.host.CurrentBoot() {
		t.Fatalf("promote plan from the approved trial boot: %+v %v", pp, err)
	}
	if _, err := r.w.Promote(ctx, pp, grant(pp, "a-promote")); err != nil {
		t.Fatal(err)
	}
	for _, what := range []string{"install", "prepare", "reboot", "promote"} {
		if n := r.host.Count(what); n != 1 {
			t.Errorf("%s ran %d times, want once", what, n)
		}
	}
	if r.lease.Holder != "server-a" || r.lease.Holds < 5 {
		t.Errorf("Lease held by %q after %d holds; every window step holds it", r.lease.Holder, r.lease.Holds)
	}
}

func TestReentryAfterFailedStartNeedsApproval(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.drained(t)
	r.host.FailStart = errors.New("ssh: connection lost")
	p := window.PackagePlan{Node: node, PackageDigest: digest}
	_, err := r.w.StartInstall(ctx, p, grant(p, "a-1"))
	var unc *window.Uncertain
	if !errors.As(err, &unc) {
		t.Fatalf("start with a lost answer: %v, want Uncertain", err)
	}
	r.host.FailStart = nil
	r.crash(t)
	_, err = r.w.FollowInstall(ctx, node)
	if !errors.Is(err, window.ErrNeedApproval) {
		t.Fatalf("re-entry on a not-started install: %v, want ErrNeedApproval", err)
	}
	if n := r.host.Count("install"); n != 0 {
		t.Fatalf("re-entry started apt %d times without an approval", n)
	}
	if _, err := r.w.StartInstall(ctx, p, grant(p, "a-2")); err != nil {
		t.Fatalf("restart under a fresh approval: %v", err)
	}
	if n := r.host.Count("install"); n != 1 {
		t.Fatalf("install ran %d times, want once", n)
	}
	run := r.run(round.StepInstall)
	if len(run.Attempts) != 2 || run.Attempts[0].Outcome != round.OutcomeAbandoned || run.Last().ApprovalID != "a-2" {
		t.Fatalf("attempts %+v", run.Attempts)
	}
}

func TestReentryUsesTheJournaledPlanNotAFile(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.installed(t)
	tp := r.trialPlan(t)
	if err := r.w.Rec.Start(tp, grant(tp, "a-trial")); err != nil {
		t.Fatal(err)
	}
	// Prepared on the host with other entries than approved (as a rewritten
	// plan file would have it), reboot request lost.
	if _, err := r.host.TrialBootPrepare(ctx, node, stepsTB("gnulinux-other", tp.OldEntry)); err != nil {
		t.Fatal(err)
	}
	_, err := r.w.FollowTrialBoot(ctx, node)
	var st *window.Stopped
	if !errors.As(err, &st) || !strings.Contains(st.Error(), "the approval was for") {
		t.Fatalf("follow of a trial boot prepared differently: %v", err)
	}
	if r.host.Count("reboot") != 0 {
		t.Fatal("rebooted a node prepared differently from the approval")
	}
}

func TestReentryCompletesWhatTheApprovalBegan(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.installed(t)
	tp := r.trialPlan(t)
	if err := r.w.Rec.Start(tp, grant(tp, "a-trial")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.host.TrialBootPrepare(ctx, node, stepsTB(tp.NewEntry, tp.OldEntry)); err != nil {
		t.Fatal(err)
	}
	r.crash(t) // the process died between prepare and reboot
	o, err := r.w.FollowTrialBoot(ctx, node)
	if err != nil || !o.InProgress || r.host.Count("reboot") != 1 {
		t.Fatalf("follow: %+v %v, reboots %d", o, err, r.host.Count("reboot"))
	}
}

func TestStepInFlightPastItsBoundFails(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.drained(t)
	p := window.PackagePlan{Node: node, PackageDigest: digest}
	if _, err := r.w.StartInstall(ctx, p, grant(p, "a-1")); err != nil {
		t.Fatal(err)
	}
	r.clk.Add(3 * time.Hour)
	_, err := r.w.FollowInstall(ctx, node)
	var st *window.Stopped
	if !errors.As(err, &st) || !strings.Contains(st.Error(), string(round.RuleStepOverdue)) {
		t.Fatalf("overdue install: %v", err)
	}
	if s := r.j.State().Stop; s == nil || s.Step != round.StepInstall {
		t.Fatalf("round not stopped at install: %+v", s)
	}
}

func TestLostLeaseStopsTheWindow(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.drained(t)
	r.lease.Steal("server-b")
	p := window.PackagePlan{Node: node, PackageDigest: digest}
	_, err := r.w.StartInstall(ctx, p, grant(p, "a-1"))
	var st *window.Stopped
	if !errors.As(err, &st) || !strings.Contains(st.Error(), string(round.RuleWindowLease)) {
		t.Fatalf("install after the Lease was stolen: %v", err)
	}
	if r.host.Count("install") != 0 {
		t.Fatal("installed without the Lease")
	}
	if s := r.j.State().Stop; s == nil || !strings.Contains(s.Reason, "window_lease") {
		t.Fatalf("stop not journaled under window_lease: %+v", s)
	}
}

func TestPromoteReentryNeedsApproval(t *testing.T) {
	r := newRig(t)
	r.installed(t)
	pp := window.PromotePlan{Node: node, Kernel: target, BootID: "boot-2"}
	// promote's start journaled, then the process died before it ran
	r.green(t, round.StepTrialBoot, node)
	r.green(t, round.StepVerify, node)
	r.green(t, round.StepUncordon, node)
	r.green(t, round.StepGPUAcceptance, node)
	if err := r.w.Rec.Start(pp, grant(pp, "a-p")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.w.FollowPromote(context.Background(), node); !errors.Is(err, window.ErrNeedApproval) {
		t.Fatalf("promote re-entry: %v", err)
	}
	if r.host.Count("promote") != 0 {
		t.Fatal("re-entry promoted without an approval")
	}
}

func TestRecorderNeverDropsAJournalError(t *testing.T) {
	r := newRig(t)
	if err := r.j.Close(); err != nil {
		t.Fatal(err)
	}
	rec := &window.Recorder{J: r.j}
	err := rec.StopWith(round.StepDrain, node, "stop", "pods block")
	var st *window.Stopped
	if !errors.As(err, &st) || st.Journal == nil || !strings.Contains(st.Error(), "could not be recorded") {
		t.Fatalf("stop on a closed journal: %v", err)
	}
	if err := rec.Finish(round.StepDrain, node, "", ""); err == nil {
		t.Fatal("finish on a closed journal: no error")
	}
	if err := rec.Lesson("x"); err == nil {
		t.Fatal("lesson on a closed journal: no error")
	}
}

func TestRecorderRefusesAnApprovalForAnotherPlan(t *testing.T) {
	r := newRig(t)
	p := window.PackagePlan{Node: node, PackageDigest: digest}
	if err := r.w.Rec.Start(p, window.Approval{ID: "a", Digest: "sha256:other"}); err == nil {
		t.Fatal("started under an approval of another digest")
	}
	if err := r.w.Rec.Start(p, window.Approval{Digest: digest}); err == nil {
		t.Fatal("started without an approval id")
	}
}

func TestEventsOnEveryTransition(t *testing.T) {
	r := newRig(t)
	var got []window.EventKind
	r.w.Rec.Events = func(e window.Event) { got = append(got, e.Kind) }
	r.drained(t)
	if err := r.w.Rec.StopWith(round.StepInstall, node, "stop", "dpkg broke"); err == nil {
		t.Fatal("no stop")
	}
	want := []window.EventKind{window.EventStarted, window.EventFinished, window.EventFailed, window.EventStopped}
	if strings.Join(kinds(got), ",") != strings.Join(kinds(want), ",") {
		t.Fatalf("events %v, want %v", got, want)
	}
}

func kinds(ks []window.EventKind) []string {
	var out []string
	for _, k := range ks {
		out = append(out, string(k))
	}
	return out
}

func TestSerialOnePerNode(t *testing.T) {
	var s window.Serial
	unlock, err := s.Lock(context.Background(), node)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Lock(ctx, node); err == nil {
		t.Fatal("second lock of the same node while held")
	}
	other, err := s.Lock(context.Background(), "cp-1")
	if err != nil {
		t.Fatal(err)
	}
	other()
	unlock()
	again, err := s.Lock(context.Background(), node)
	if err != nil {
		t.Fatal(err)
	}
	again()
}
