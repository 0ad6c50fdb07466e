package windowlock_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/internal/testsupport/fakes"
	"github.com/mcp-patch/mcp-patch/internal/testsupport/labkube"
	"github.com/mcp-patch/mcp-patch/kube/drain"
	"github.com/mcp-patch/mcp-patch/kube/windowlock"
	"github.com/mcp-patch/mcp-patch/lab/cluster"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// The window Lease on a real API server, kept by round/window's keeper,
// taken by another server while a window step waits: during a drain with
// pods still to evict, during the wait on an install, during a trial
// boot's reboot wait. Each time the step stops at once under the
// window_lease rule, nothing destructive follows, and the new holder
// takes over by observing what the window left.

const (
	leaseRound = "2026-12"
	running    = "6.8.0-40-generic"
	target     = "6.8.0-45-generic"
	pkgDigest  = "sha256:1111111111111111111111111111111111111111111111111111111111111111"
)

// leaseRig is one window of one round on the real API server: server A
// holds the window Lease through its keeper, server B is the other.
type leaseRig struct {
	kc   kubernetes.Interface
	ns   string
	node string
	j    *round.Journal
	a, b windowlock.Config
	host *stallingHost
}

func newLeaseRig(t *testing.T, node string) *leaseRig {
	t.Helper()
	c := labkube.Cluster(t)
	ns := labkube.Namespace(t, c)
	a, b := configs(ns, "mcp-patch-window", 2*time.Second)
	j, err := round.Open(filepath.Join(t.TempDir(), leaseRound))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := j.Close(); err != nil {
			t.Error(err)
		}
	})
	order := round.Order{Positions: []round.Position{{Node: node, Role: round.RoleGPU, GPU: true, Canary: true, Reason: "canary"}}}
	if _, err := j.Plan(order, time.Hour, round.Meta{}); err != nil {
		t.Fatal(err)
	}
	r := &leaseRig{kc: c.Client(), ns: ns, node: node, j: j, a: a, b: b,
		host: &stallingHost{Host: &fakes.Host{Running: running, Target: target, Digest: pkgDigest}}}
	r.green(t, round.StepBaseline, "")
	for _, st := range round.PreflightSteps {
		r.green(t, st, node)
	}
	return r
}

func (r *leaseRig) green(t *testing.T, st round.Step, node string) {
	t.Helper()
	if _, err := r.j.StartStep(st, node, round.Meta{}); err != nil {
		t.Fatalf("start %s: %v", st, err)
	}
	if _, err := r.j.FinishStep(st, node, round.Meta{}); err != nil {
		t.Fatalf("finish %s: %v", st, err)
	}
}

// server is cfg's window machinery: the Lease on the API server, kept
// renewed by a server's keeper (between steps too).
func (r *leaseRig) server(t *testing.T, cfg windowlock.Config) *window.Window {
	t.Helper()
	k := &window.LeaseKeeper{Lease: &windowlock.Lease{Kube: r.kc, Config: cfg},
		Timing: window.LeaseTiming{Renew: 100 * time.Millisecond, Duration: cfg.LeaseDuration}, BetweenSteps: true}
	t.Cleanup(k.Close)
	return &window.Window{Round: r.j.RoundID(), Rec: &window.Recorder{J: r.j}, Host: r.host, Cluster: drain.Cluster{Kube: r.kc},
		Keeper: k, Bounds: window.DefaultBounds(10*time.Minute, 15*time.Minute)}
}

// takeOver makes cfg's identity the Lease's holder behind A's back, as a
// server whose clock ran ahead would take it.
func (r *leaseRig) takeOver(ctx context.Context, cfg windowlock.Config) error {
	leases := r.kc.CoordinationV1().Leases(cfg.Namespace)
	for {
		l, err := leases.Get(ctx, cfg.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		id, now := cfg.Identity, metav1.NewMicroTime(time.Now())
		secs := int32(cfg.LeaseDuration / time.Second)
		l.Spec.HolderIdentity, l.Spec.AcquireTime, l.Spec.RenewTime, l.Spec.LeaseDurationSeconds = &id, &now, &now, &secs
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		if !apierrors.IsConflict(err) {
			return err
		}
	}
}

// stoppedUnderTheLeaseRule checks the journal's stop and the answer.
func (r *leaseRig) stoppedUnderTheLeaseRule(t *testing.T, step round.Step, err error, left string) {
	t.Helper()
	var stopped *window.Stopped
	if !errors.As(err, &stopped) || stopped.Journal != nil {
		t.Fatalf("%s after the Lease was taken: %v, want a journaled stop", step, err)
	}
	st := r.j.State().Stop
	if st == nil || st.Step != step || st.Node != r.node || !strings.Contains(st.Reason, "rule "+string(round.RuleWindowLease)) ||
		!strings.Contains(st.Reason, r.b.Identity) || !strings.Contains(st.Reason, left) {
		t.Fatalf("journaled stop: %+v, want %s on %s under %s naming %s and %q", st, step, r.node, round.RuleWindowLease, r.b.Identity, left)
	}
}

// resumeAsB records a person's resume and has server B hold the window
// Lease for the step: the Lease is B's, so it holds.
func (r *leaseRig) resumeAsB(t *testing.T, step round.Step) *window.Window {
	t.Helper()
	if _, err := r.j.Decide(round.DecisionResume, r.node, step, round.Meta{}); err != nil {
		t.Fatal(err)
	}
	wb := r.server(t, r.b)
	if err := wb.HoldLease(t.Context(), step, r.node); err != nil {
		t.Fatalf("the new holder's step: %v", err)
	}
	if h, held, err := windowlock.Inspect(t.Context(), r.kc, r.b); err != nil || !held || h.Identity != r.b.Identity {
		t.Fatalf("Lease after the new holder's step: %+v held=%v %v", h, held, err)
	}
	return wb
}

// stallingHost is the fake host whose status reads wait, as a read of a
// host that is rebooting or busy does, until the caller gives up; stall
// runs when such a read begins.
type stallingHost struct {
	*fakes.Host
	mu    sync.Mutex
	stall func()
}

func (h *stallingHost) stalled(ctx context.Context) bool {
	h.mu.Lock()
	stall := h.stall
	h.stall = nil
	h.mu.Unlock()
	if stall == nil {
		return false
	}
	stall()
	<-ctx.Done()
	return true
}

func (h *stallingHost) Install(ctx context.Context, node, action, r, d string) (steps.InstallState, error) {
	if action == "status" && h.stalled(ctx) {
		return steps.InstallState{}, fmt.Errorf("read the install state on %s: %w", node, ctx.Err())
	}
	return h.Host.Install(ctx, node, action, r, d)
}

func (h *stallingHost) TrialBootStatus(ctx context.Context, node, r string) (steps.TrialBoot, error) {
	if h.stalled(ctx) {
		return steps.TrialBoot{}, fmt.Errorf("dial %s: %w", node, ctx.Err())
	}
	return h.Host.TrialBootStatus(ctx, node, r)
}

func (h *stallingHost) onNextStatus(f func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stall = f
}

func TestLeaseTakenDuringADrainStopsTheEvictions(t *testing.T) {
	c := labkube.Cluster(t)
	node := fmt.Sprintf("lease-drain-%d", time.Now().UnixNano()%100000)
	labkube.Nodes(t, c, cluster.Node{Name: node})
	r := newLeaseRig(t, node)
	ctx := t.Context()
	// Two pods a PDB keeps (they stay to evict) and one free to go.
	pinned(t, r.kc, r.ns, "kept", node, 2)
	pinned(t, r.kc, r.ns, "free", node, 1)
	budget(t, r.kc, r.ns, "kept", 2)

	wa := r.server(t, r.a)
	pv, err := wa.Cluster.PreviewDrain(ctx, node, drain.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := window.DecideDrain(node, pv)
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	taken := make(chan error, 1)
	progress := func(done, total int, msg string) {
		// The drain is evicting: the free pod goes, the kept ones are
		// refused by their PDB and retried. Another server takes the
		// Lease now.
		once.Do(func() { taken <- r.takeOver(context.WithoutCancel(ctx), r.b) })
	}
	_, err = wa.StartDrain(ctx, p, window.Approval{ID: "a-drain", Digest: p.Digest()}, window.DrainOptions{Identity: r.a.Identity,
		Options: drain.Options{Timeout: 2 * time.Minute, EvictRetryDelay: 100 * time.Millisecond}}, progress)
	select {
	case terr := <-taken:
		if terr != nil {
			t.Fatalf("take the Lease over: %v", terr)
		}
	default:
		t.Fatalf("the drain ended before it evicted anything: %v", err)
	}
	r.stoppedUnderTheLeaseRule(t, round.StepDrain, err, "no further eviction")

	// The drain returned: nothing evicts the kept pods any more.
	kept, err := r.kc.CoreV1().Pods(r.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=kept"})
	if err != nil {
		t.Fatal(err)
	}
	if len(kept.Items) != 2 {
		t.Fatalf("%d kept pods after the stop, want 2", len(kept.Items))
	}
	for _, p := range kept.Items {
		if p.DeletionTimestamp != nil || p.Spec.NodeName != node {
			t.Fatalf("kept pod %s was evicted after the Lease was lost", p.Name)
		}
	}

	// The new holder observes what the window left: the node cordoned and
	// recorded as A's, the pods still to evict.
	wb := r.resumeAsB(t, round.StepDrain)
	st, err := wb.Cluster.CordonState(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Unschedulable || st.Owner == nil || st.Owner.Identity != r.a.Identity {
		t.Fatalf("cordon as the new holder sees it: %+v", st)
	}
	left, err := wb.Cluster.PreviewDrain(ctx, node, drain.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	still := 0
	for _, pod := range left.Evict {
		if strings.HasPrefix(pod.Name, "kept-") {
			still++
		}
	}
	if still != 2 {
		t.Fatalf("the new holder's preview evicts %v, want the 2 kept pods among them", left.Evict)
	}
}

func TestLeaseTakenDuringTheWaitOnAnInstallStopsTheWait(t *testing.T) {
	r := newLeaseRig(t, "lease-install-1")
	ctx := t.Context()
	r.green(t, round.StepDrain, r.node)
	wa := r.server(t, r.a)
	p := window.PackagePlan{Node: r.node, PackageDigest: pkgDigest, TargetKernel: target, RunningKernel: running}
	if o, err := wa.StartInstall(ctx, p, window.Approval{ID: "a-install", Digest: p.Digest()}); err != nil || !o.InProgress {
		t.Fatalf("start the install: %+v %v", o, err)
	}
	taken := make(chan error, 1)
	r.host.onNextStatus(func() { taken <- r.takeOver(context.WithoutCancel(ctx), r.b) })
	_, err := wa.FollowInstall(ctx, r.node)
	select {
	case terr := <-taken:
		if terr != nil {
			t.Fatalf("take the Lease over: %v", terr)
		}
	default:
		t.Fatalf("the status was not read: %v", err)
	}
	r.stoppedUnderTheLeaseRule(t, round.StepInstall, err, "no further wait")
	if n := r.host.Count("install"); n != 1 {
		t.Fatalf("%d install starts, want the 1 before the loss", n)
	}

	// The install ran on, detached, and the step stayed in flight: the
	// new holder, after a person's resume, follows it by observing the
	// node and never starts it again.
	if run := r.j.StepRun(round.StepInstall, r.node); run == nil || run.State != round.InFlight || !run.NeedsRecheck {
		t.Fatalf("install after the Lease stop: %+v, want in flight, to be re-checked", run)
	}
	r.host.Host.InstallState = "finished"
	wb := r.resumeAsB(t, round.StepInstall)
	o, err := wb.FollowInstall(ctx, r.node)
	if err != nil || o.InProgress || o.Install == nil || o.Install.State != "finished" {
		t.Fatalf("install as the new holder follows it: %+v %v", o, err)
	}
	if run := r.j.StepRun(round.StepInstall, r.node); run == nil || run.State != round.Done || len(run.Attempts) != 1 {
		t.Fatalf("install after the new holder followed it: %+v, want done in its one attempt", run)
	}
	if n := r.host.Count("install"); n != 1 {
		t.Fatalf("%d install starts after the new holder observed, want 1", n)
	}
}

func TestLeaseTakenDuringTheRebootWaitStopsTheWait(t *testing.T) {
	r := newLeaseRig(t, "lease-boot-1")
	ctx := t.Context()
	r.green(t, round.StepDrain, r.node)
	r.green(t, round.StepInstall, r.node)
	wa := r.server(t, r.a)
	insp, err := r.host.Inspect(ctx, r.node, steps.InspectInput{TargetKernel: target})
	if err != nil {
		t.Fatal(err)
	}
	p, err := window.DecideTrialBoot(r.node, insp, target, true, 10)
	if err != nil {
		t.Fatal(err)
	}
	if o, err := wa.StartTrialBoot(ctx, p, window.Approval{ID: "a-trial", Digest: p.Digest()}, func(float64, float64, string) {}); err != nil || !o.InProgress {
		t.Fatalf("start the trial boot: %+v %v", o, err)
	}
	taken := make(chan error, 1)
	r.host.onNextStatus(func() { taken <- r.takeOver(context.WithoutCancel(ctx), r.b) })
	_, err = wa.FollowTrialBoot(ctx, r.node)
	select {
	case terr := <-taken:
		if terr != nil {
			t.Fatalf("take the Lease over: %v", terr)
		}
	default:
		t.Fatalf("the status was not read: %v", err)
	}
	r.stoppedUnderTheLeaseRule(t, round.StepTrialBoot, err, "no further wait on the reboot")
	if n := r.host.Count("reboot"); n != 1 {
		t.Fatalf("%d reboots requested, want the 1 before the loss", n)
	}

	// The node came up on the trial kernel meanwhile, the step still in
	// flight; the new holder, after a person's resume, follows the trial
	// boot by observing the node's boot.
	if run := r.j.StepRun(round.StepTrialBoot, r.node); run == nil || run.State != round.InFlight || !run.NeedsRecheck {
		t.Fatalf("trial boot after the Lease stop: %+v, want in flight, to be re-checked", run)
	}
	r.host.Boot(false)
	wb := r.resumeAsB(t, round.StepTrialBoot)
	o, err := wb.FollowTrialBoot(ctx, r.node)
	if err != nil || o.InProgress {
		t.Fatalf("trial boot as the new holder follows it: %+v %v", o, err)
	}
	if run := r.j.StepRun(round.StepTrialBoot, r.node); run == nil || run.State != round.Done || len(run.Attempts) != 1 || run.Attempts[0].Kernel != target {
		t.Fatalf("trial boot after the new holder followed it: %+v, want done on %s in its one attempt", run, target)
	}
	if n := r.host.Count("reboot"); n != 1 {
		t.Fatalf("%d reboots requested after the new holder observed, want 1", n)
	}
}

// pinned runs n replicas of app on node and waits until they run.
func pinned(t *testing.T, kc kubernetes.Interface, ns, app, node string, n int32) {
	t.Helper()
	grace := int64(1)
	lbl := map[string]string{"app": app}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: app},
		Spec: appsv1.DeploymentSpec{Replicas: &n, Selector: &metav1.LabelSelector{MatchLabels: lbl},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: lbl}, Spec: corev1.PodSpec{
				NodeSelector:                  map[string]string{"kubernetes.io/hostname": node},
				TerminationGracePeriodSeconds: &grace,
				Containers:                    []corev1.Container{{Name: "app", Image: "registry.example/app:1"}},
			}}},
	}
	if _, err := kc.AppsV1().Deployments(ns).Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labkube.Eventually(t, 2*time.Minute, fmt.Sprintf("%d pods of %s running", n, app), func(ctx context.Context) (bool, error) {
		l, err := kc.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
		if err != nil {
			return false, err
		}
		up := 0
		for _, p := range l.Items {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				up++
			}
		}
		return up == int(n), fmt.Errorf("%d of %d running", up, n)
	})
}

// budget keeps minAvailable pods of app: their evictions are refused.
func budget(t *testing.T, kc kubernetes.Interface, ns, app string, minAvailable int) {
	t.Helper()
	m := intstr.FromInt(minAvailable)
	b := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: app},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &m, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}}}
	if _, err := kc.PolicyV1().PodDisruptionBudgets(ns).Create(context.Background(), b, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labkube.Eventually(t, time.Minute, "PDB "+app+" observed", func(ctx context.Context) (bool, error) {
		got, err := kc.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, app, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return got.Status.ObservedGeneration == got.Generation && got.Status.CurrentHealthy == int32(minAvailable), nil
	})
}
