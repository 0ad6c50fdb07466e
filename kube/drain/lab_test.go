package drain_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/mcp-patch/mcp-patch/internal/testsupport/labkube"
	"github.com/mcp-patch/mcp-patch/kube"
	"github.com/mcp-patch/mcp-patch/kube/drain"
	"github.com/mcp-patch/mcp-patch/lab/cluster"
)

// These tests drive a real API server, controller manager (ReplicaSets,
// DaemonSets, PDB status), scheduler and kwok-run nodes.

func TestMain(m *testing.M) { labkube.Main(m) }

const (
	round = "2025-07"
	us    = "mcp-patch@ops-1"
	them  = "mcp-patch@ops-2"
)

func labels(app string) map[string]string { return map[string]string{"app": app} }

func podSpec(node string, emptyDir bool) corev1.PodSpec {
	grace := int64(1)
	s := corev1.PodSpec{
		NodeSelector:                  map[string]string{"kubernetes.io/hostname": node},
		TerminationGracePeriodSeconds: &grace,
		Containers:                    []corev1.Container{{Name: "app", Image: "registry.example/app:1"}},
	}
	if emptyDir {
		s.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	}
	return s
}

// deploy creates a Deployment pinned to node and waits for its pods to run.
func deploy(t testing.TB, kc kubernetes.Interface, ns, name, node string, replicas int32, emptyDir bool) {
	t.Helper()
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels(name)},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels(name)}, Spec: podSpec(node, emptyDir)},
		},
	}
	if _, err := kc.AppsV1().Deployments(ns).Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, kc, ns, "app="+name, int(replicas))
}

func waitRunning(t testing.TB, kc kubernetes.Interface, ns, selector string, n int) {
	t.Helper()
	labkube.Eventually(t, 2*time.Minute, fmt.Sprintf("%d pods %s running in %s", n, selector, ns), func(ctx context.Context) (bool, error) {
		l, err := kc.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err
		}
		running := 0
		for _, p := range l.Items {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				running++
			}
		}
		return running == n, fmt.Errorf("%d of %d running", running, n)
	})
}

func daemonSet(t testing.TB, kc kubernetes.Interface, ns, name, node string) {
	t.Helper()
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels(name)},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels(name)}, Spec: podSpec(node, false)},
		},
	}
	if _, err := kc.AppsV1().DaemonSets(ns).Create(context.Background(), ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, kc, ns, "app="+name, 1)
}

func barePod(t testing.TB, kc kubernetes.Interface, ns, name, node string) {
	t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels(name)}, Spec: podSpec(node, false)}
	p.Spec.NodeName = node
	if _, err := kc.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, kc, ns, "app="+name, 1)
}

func pdb(t testing.TB, kc kubernetes.Interface, ns, name, app string, minAvailable int) {
	t.Helper()
	m := intstr.FromInt(minAvailable)
	b := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &m, Selector: &metav1.LabelSelector{MatchLabels: labels(app)}},
	}
	if _, err := kc.PolicyV1().PodDisruptionBudgets(ns).Create(context.Background(), b, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Evictions are judged on the PDB's status; wait for the disruption
	// controller to have observed it.
	labkube.Eventually(t, time.Minute, "PDB "+name+" observed", func(ctx context.Context) (bool, error) {
		got, err := kc.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return got.Status.ObservedGeneration == got.Generation && got.Status.ExpectedPods > 0, nil
	})
}

func node(t testing.TB, c *cluster.Cluster, name string) {
	t.Helper()
	labkube.Nodes(t, c, cluster.Node{Name: name})
}

func nodeState(t testing.TB, kc kubernetes.Interface, name string) (unschedulable bool, annotations map[string]string) {
	t.Helper()
	n, err := kc.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ours := map[string]string{}
	for k, v := range n.Annotations {
		if strings.HasPrefix(k, "mcp-patch.io/") {
			ours[k] = v
		}
	}
	return n.Spec.Unschedulable, ours
}

func podNames(refs []drain.PodRef) []string {
	var out []string
	for _, r := range refs {
		out = append(out, r.String())
	}
	return out
}

func TestPreview(t *testing.T) {
	c := labkube.Cluster(t)
	kc := c.Client()
	ns := labkube.Namespace(t, c)
	name := "preview-1"
	node(t, c, name)
	daemonSet(t, kc, ns, "agent", name)
	deploy(t, kc, ns, "web", name, 2, false)
	deploy(t, kc, ns, "cache", name, 1, true)
	barePod(t, kc, ns, "debug", name)

	t.Run("cautious policy: emptyDir and bare pods block", func(t *testing.T) {
		p, err := drain.Preview(t.Context(), kc, name, drain.Policy{})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Evict) != 2 || p.Evict[0].OwnerKind != "ReplicaSet" || !strings.HasPrefix(p.Evict[0].Name, "web-") {
			t.Errorf("evict = %+v, want the two web pods", p.Evict)
		}
		want := []string{
			"cannot delete Pods that declare no controller (policy delete_unmanaged_pods is false): " + ns + "/debug",
			"cannot delete Pods with local storage (policy delete_emptydir_data is false): " + ns + "/" + podOf(t, kc, ns, "cache"),
		}
		if d := cmp.Diff(want, p.Blockers); d != "" {
			t.Errorf("blockers (-want +got):\n%s", d)
		}
		reasons := map[string]string{}
		for _, s := range p.Skipped {
			reasons[s.Name] = s.Reason
		}
		wantSkipped := map[string]string{podOf(t, kc, ns, "agent"): drain.SkipDaemonSet, "debug": drain.SkipBlocked, podOf(t, kc, ns, "cache"): drain.SkipBlocked}
		if d := cmp.Diff(wantSkipped, reasons); d != "" {
			t.Errorf("skipped (-want +got):\n%s", d)
		}
	})

	t.Run("permissive policy: all but the DaemonSet pod", func(t *testing.T) {
		pol := drain.Policy{DeleteEmptyDirData: true, DeleteUnmanagedPods: true}
		p, err := drain.Preview(t.Context(), kc, name, pol)
		if err != nil {
			t.Fatal(err)
		}
		wantEvict := []string{ns + "/" + podOf(t, kc, ns, "cache"), ns + "/debug"}
		for _, w := range podsOf(t, kc, ns, "web") {
			wantEvict = append(wantEvict, ns+"/"+w)
		}
		if d := cmp.Diff(wantEvict, podNames(p.Evict)); d != "" {
			t.Errorf("evict (-want +got):\n%s", d)
		}
		var cache drain.PodRef
		for _, r := range p.Evict {
			if strings.HasPrefix(r.Name, "cache-") {
				cache = r
			}
		}
		if !cache.EmptyDir || cache.OwnerKind != "ReplicaSet" {
			t.Errorf("cache pod %+v: want emptyDir and ReplicaSet owner", cache)
		}
		if len(p.Blockers) != 0 {
			t.Errorf("blockers %q", p.Blockers)
		}
		want := []string{
			"deleting Pods that declare no controller: " + ns + "/debug",
			"ignoring DaemonSet-managed Pods: " + ns + "/" + podOf(t, kc, ns, "agent"),
		}
		if d := cmp.Diff(want, p.Warnings); d != "" {
			t.Errorf("warnings (-want +got):\n%s", d)
		}
		again, err := drain.Preview(t.Context(), kc, name, pol)
		if err != nil {
			t.Fatal(err)
		}
		if again.Digest != p.Digest {
			t.Errorf("digest not stable: %s then %s", p.Digest, again.Digest)
		}
		barePod(t, kc, ns, "debug-2", name)
		changed, err := drain.Preview(t.Context(), kc, name, pol)
		if err != nil {
			t.Fatal(err)
		}
		if changed.Digest == p.Digest {
			t.Error("digest did not change when a pod was added")
		}
	})
}

func podsOf(t testing.TB, kc kubernetes.Interface, ns, app string) []string {
	t.Helper()
	l, err := kc.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range l.Items {
		out = append(out, p.Name)
	}
	return out
}

func podOf(t testing.TB, kc kubernetes.Interface, ns, app string) string {
	t.Helper()
	p := podsOf(t, kc, ns, app)
	if len(p) != 1 {
		t.Fatalf("%d pods of %s, want 1", len(p), app)
	}
	return p[0]
}

func TestDrainSucceeds(t *testing.T) {
	c := labkube.Cluster(t)
	kc := c.Client()
	ns := labkube.Namespace(t, c)
	name := "drain-ok-1"
	node(t, c, name)
	daemonSet(t, kc, ns, "agent", name)
	deploy(t, kc, ns, "web", name, 3, false)
	plan, err := drain.Preview(t.Context(), kc, name, drain.Policy{})
	if err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var progress []string
	res, err := drain.Drain(t.Context(), kc, name, drain.Options{
		Round: round, Identity: us, ExpectDigest: plan.Digest, Timeout: time.Minute,
	}, func(done, total int, msg string) {
		mu.Lock()
		defer mu.Unlock()
		progress = append(progress, fmt.Sprintf("%d/%d", done, total))
	})
	if err != nil {
		t.Fatalf("Drain: %v (result %+v)", err, res)
	}
	if d := cmp.Diff(plan.Evict, res.Evicted); d != "" {
		t.Errorf("evicted (-plan +got):\n%s", d)
	}
	if res.Cordon == nil || res.Cordon.Outcome != drain.OutcomeCordoned || len(res.Blocked) != 0 {
		t.Errorf("cordon %+v, blocked %+v", res.Cordon, res.Blocked)
	}
	if d := cmp.Diff([]string{"0/3", "1/3", "2/3", "3/3"}, progress); d != "" {
		t.Errorf("progress (-want +got):\n%s", d)
	}
	for _, p := range plan.Evict {
		if _, err := kc.CoreV1().Pods(ns).Get(t.Context(), p.Name, metav1.GetOptions{}); err == nil {
			t.Errorf("pod %s still exists", p)
		}
	}
	if n := len(podsOf(t, kc, ns, "agent")); n != 1 {
		t.Errorf("%d DaemonSet pods after drain, want 1 (left alone)", n)
	}
	cordoned, ann := nodeState(t, kc, name)
	if !cordoned || ann[drain.AnnotationCordonedBy] != "identity="+us+",round="+round {
		t.Errorf("after drain: unschedulable=%v annotations %v", cordoned, ann)
	}
	if _, err := time.Parse(time.RFC3339, ann[drain.AnnotationCordonedAt]); err != nil {
		t.Errorf("cordoned-at %q: %v", ann[drain.AnnotationCordonedAt], err)
	}

	u, err := drain.Uncordon(t.Context(), kc, name, us)
	if err != nil || !u.WasCordoned || u.Owner.Round != round {
		t.Fatalf("Uncordon = %+v, %v", u, err)
	}
	cordoned, ann = nodeState(t, kc, name)
	if cordoned || len(ann) != 0 {
		t.Errorf("after uncordon: unschedulable=%v annotations %v", cordoned, ann)
	}
}

func TestDrainBlockedByPDBThenUnblocked(t *testing.T) {
	c := labkube.Cluster(t)
	kc := c.Client()
	ns := labkube.Namespace(t, c)
	name := "drain-pdb-1"
	node(t, c, name)
	deploy(t, kc, ns, "db", name, 2, false)
	pdb(t, kc, ns, "db-pdb", "db", 2)

	opts := drain.Options{Round: round, Identity: us, Timeout: 4 * time.Second, EvictRetryDelay: 200 * time.Millisecond}
	var refused []string
	res, err := drain.Drain(t.Context(), kc, name, opts, func(_, _ int, msg string) {
		if strings.Contains(msg, "will retry") {
			refused = append(refused, msg)
		}
	})
	if !errors.Is(err, drain.ErrIncomplete) {
		t.Fatalf("Drain = %v, want ErrIncomplete", err)
	}
	t.Logf("blocked drain: %v", err)
	if len(res.Blocked) != 2 || len(res.Evicted) != 0 {
		t.Fatalf("blocked %+v evicted %+v, want both db pods blocked", res.Blocked, res.Evicted)
	}
	for _, b := range res.Blocked {
		if !strings.Contains(b.Reason, "Cannot evict pod as it would violate the pod's disruption budget") ||
			!strings.Contains(b.Reason, "The disruption budget db-pdb needs 2 healthy pods and has 2 currently") {
			t.Errorf("blocked %s reason %q", b, b.Reason)
		}
		want := []drain.PDBRef{{Name: "db-pdb", DisruptionsAllowed: 0, CurrentHealthy: 2, DesiredHealthy: 2, ExpectedPods: 2}}
		if d := cmp.Diff(want, b.PDBs); d != "" {
			t.Errorf("blocked %s PDBs (-want +got):\n%s", b, d)
		}
	}
	if len(refused) != 2 {
		t.Errorf("progress told %d refusals, want one per pod: %q", len(refused), refused)
	}
	if cordoned, ann := nodeState(t, kc, name); !cordoned || ann[drain.AnnotationCordonedBy] == "" {
		t.Errorf("after a failed drain the node must stay cordoned and recorded: unschedulable=%v %v", cordoned, ann)
	}

	// Drain again; while it waits on the PDB, relax it.
	opts.Timeout = time.Minute
	relaxed := make(chan struct{})
	var once sync.Once
	res, err = drain.Drain(t.Context(), kc, name, opts, func(_, _ int, msg string) {
		if !strings.Contains(msg, "will retry") {
			return
		}
		once.Do(func() {
			go func() {
				defer close(relaxed)
				p, err := kc.PolicyV1().PodDisruptionBudgets(ns).Get(context.Background(), "db-pdb", metav1.GetOptions{})
				if err != nil {
					t.Error(err)
					return
				}
				zero := intstr.FromInt(0)
				p.Spec.MinAvailable = &zero
				if _, err := kc.PolicyV1().PodDisruptionBudgets(ns).Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
					t.Error(err)
				}
			}()
		})
	})
	<-relaxed
	if err != nil {
		t.Fatalf("Drain after relaxing the PDB: %v (blocked %+v)", err, res.Blocked)
	}
	if len(res.Evicted) != 2 || res.Cordon.Outcome != drain.OutcomeAlreadyOurs {
		t.Errorf("evicted %v, cordon %+v", res.Evicted, res.Cordon)
	}
}

func TestDrainRefusesBeforeChangingAnything(t *testing.T) {
	c := labkube.Cluster(t)
	kc := c.Client()
	ns := labkube.Namespace(t, c)
	name := "drain-refuse-1"
	node(t, c, name)
	deploy(t, kc, ns, "web", name, 1, false)
	barePod(t, kc, ns, "debug", name)

	tests := []struct {
		name   string
		node   string
		opts   drain.Options
		wantIs error
	}{
		{"bare pod under the cautious policy", name, drain.Options{Round: round, Identity: us}, drain.ErrBlocked},
		{"digest drifted", name, drain.Options{Round: round, Identity: us, Policy: drain.Policy{DeleteUnmanagedPods: true}, ExpectDigest: "sha256:0000"}, drain.ErrPlanDrift},
		{"node not in the cluster", "gpu-404", drain.Options{Round: round, Identity: us}, kube.ErrNodeNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := drain.Drain(t.Context(), kc, tt.node, tt.opts, nil)
			if !errors.Is(err, tt.wantIs) {
				t.Fatalf("Drain = %v, want %v", err, tt.wantIs)
			}
			t.Logf("refused: %v", err)
			if cordoned, ann := nodeState(t, kc, name); cordoned || len(ann) != 0 {
				t.Errorf("refused drain changed the node: unschedulable=%v %v", cordoned, ann)
			}
			if n := len(podsOf(t, kc, ns, "web")) + len(podsOf(t, kc, ns, "debug")); n != 2 {
				t.Errorf("%d pods left, want 2", n)
			}
		})
	}
	for _, f := range []func() error{
		func() error { _, err := drain.Preview(t.Context(), kc, "gpu-404", drain.Policy{}); return err },
		func() error { _, err := drain.Cordon(t.Context(), kc, "gpu-404", round, us); return err },
		func() error { _, err := drain.Uncordon(t.Context(), kc, "gpu-404", us); return err },
	} {
		if err := f(); !errors.Is(err, kube.ErrNodeNotFound) || !strings.Contains(err.Error(), `"gpu-404"`) {
			t.Errorf("on a missing node: %v", err)
		}
	}
}

func TestDrainServerDryRun(t *testing.T) {
	c := labkube.Cluster(t)
	kc := c.Client()
	ns := labkube.Namespace(t, c)
	name := "drain-dry-1"
	node(t, c, name)
	deploy(t, kc, ns, "web", name, 2, false)
	before := podsOf(t, kc, ns, "web")

	res, err := drain.Drain(t.Context(), kc, name, drain.Options{Round: round, Identity: us, DryRun: true, Timeout: 30 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !res.DryRun || !res.Cordon.DryRun || res.Cordon.Outcome != drain.OutcomeCordoned || len(res.Evicted) != 2 {
		t.Errorf("dry run result %+v cordon %+v", res, res.Cordon)
	}
	if cordoned, ann := nodeState(t, kc, name); cordoned || len(ann) != 0 {
		t.Errorf("dry run changed the node: unschedulable=%v %v", cordoned, ann)
	}
	if d := cmp.Diff(before, podsOf(t, kc, ns, "web")); d != "" {
		t.Errorf("dry run changed the pods (-before +after):\n%s", d)
	}

	// A PDB that forbids disruption fails the dry run too, with the reason.
	pdb(t, kc, ns, "web-pdb", "web", 2)
	res, err = drain.Drain(t.Context(), kc, name, drain.Options{Round: round, Identity: us, DryRun: true, Timeout: 2 * time.Second, EvictRetryDelay: 200 * time.Millisecond}, nil)
	if !errors.Is(err, drain.ErrIncomplete) || len(res.Blocked) != 2 || res.Blocked[0].PDBs[0].Name != "web-pdb" {
		t.Errorf("dry run against a PDB: %v, blocked %+v", err, res.Blocked)
	}
}

func TestCordonOwnership(t *testing.T) {
	c := labkube.Cluster(t)
	kc := c.Client()
	mine, persons, schedulable := "cordon-mine-1", "cordon-person-1", "cordon-free-1"
	node(t, c, mine)
	node(t, c, persons)
	node(t, c, schedulable)

	r, err := drain.Cordon(t.Context(), kc, mine, round, us)
	if err != nil || r.Outcome != drain.OutcomeCordoned || r.Owner == nil || r.Owner.Identity != us {
		t.Fatalf("Cordon = %+v, %v", r, err)
	}
	r2, err := drain.Cordon(t.Context(), kc, mine, "2025-08", us)
	if err != nil || r2.Outcome != drain.OutcomeAlreadyOurs || r2.Owner.Round != round || r2.At != r.At {
		t.Errorf("second Cordon = %+v, %v; want already-ours keeping the first record", r2, err)
	}
	r3, err := drain.Cordon(t.Context(), kc, mine, round, them)
	if err != nil || r3.Outcome != drain.OutcomeForeign || !strings.Contains(r3.Foreign, "identity="+us) {
		t.Errorf("Cordon by another server = %+v, %v; want foreign naming us", r3, err)
	}

	// A person cordons with kubectl: we note it and never claim it.
	if out, err := c.Kubectl(t.Context(), "cordon", persons); err != nil {
		t.Fatalf("kubectl cordon: %v %s", err, out)
	}
	pr, err := drain.Cordon(t.Context(), kc, persons, round, us)
	if err != nil || pr.Outcome != drain.OutcomeForeign || pr.Owner != nil {
		t.Errorf("Cordon of a person's cordon = %+v, %v", pr, err)
	}
	if _, ann := nodeState(t, kc, persons); len(ann) != 0 {
		t.Errorf("we wrote %v on a node someone else cordoned", ann)
	}

	tests := []struct {
		name     string
		node     string
		identity string
		kind     string
		reason   string
	}{
		{"another server's cordon", mine, them, drain.RefuseForeign, "cordoned by identity=" + us + ",round=" + round + " at "},
		{"a person's cordon", persons, us, drain.RefuseForeign, "cordoned by someone else (no mcp-patch record: a person or another tool)"},
		{"not cordoned", schedulable, us, drain.RefuseNotCordoned, "not cordoned"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, beforeAnn := nodeState(t, kc, tt.node)
			_, err := drain.Uncordon(t.Context(), kc, tt.node, tt.identity)
			var refusal *drain.RefusalError
			if !errors.As(err, &refusal) || refusal.Kind != tt.kind || !strings.HasPrefix(refusal.Reason, tt.reason) {
				t.Fatalf("Uncordon = %v, want refusal %s %q", err, tt.kind, tt.reason)
			}
			after, afterAnn := nodeState(t, kc, tt.node)
			if before != after || !cmp.Equal(beforeAnn, afterAnn) {
				t.Errorf("refused Uncordon changed the node")
			}
		})
	}

	// Someone uncordons our node by hand: Uncordon just clears our record.
	if out, err := c.Kubectl(t.Context(), "uncordon", mine); err != nil {
		t.Fatalf("kubectl uncordon: %v %s", err, out)
	}
	u, err := drain.Uncordon(t.Context(), kc, mine, us)
	if err != nil || u.WasCordoned {
		t.Errorf("Uncordon after a manual uncordon = %+v, %v", u, err)
	}
	if cordoned, ann := nodeState(t, kc, mine); cordoned || len(ann) != 0 {
		t.Errorf("after: unschedulable=%v %v", cordoned, ann)
	}
}

func TestDrainOfForeignCordon(t *testing.T) {
	c := labkube.Cluster(t)
	kc := c.Client()
	ns := labkube.Namespace(t, c)
	name := "drain-foreign-1"
	node(t, c, name)
	deploy(t, kc, ns, "web", name, 1, false)
	if out, err := c.Kubectl(t.Context(), "cordon", name); err != nil {
		t.Fatalf("kubectl cordon: %v %s", err, out)
	}
	res, err := drain.Drain(t.Context(), kc, name, drain.Options{Round: round, Identity: us, Timeout: time.Minute}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Cordon.Outcome != drain.OutcomeForeign || len(res.Evicted) != 1 {
		t.Errorf("cordon %+v evicted %v", res.Cordon, res.Evicted)
	}
	if _, err := drain.Uncordon(t.Context(), kc, name, us); !errors.Is(err, drain.ErrRefused) {
		t.Errorf("Uncordon of a node someone else cordoned = %v, want a refusal", err)
	}
}

// BenchmarkDrain100Pods drains a kwok node running 100 pods of one
// Deployment through the Eviction API of the real API server.
func BenchmarkDrain100Pods(b *testing.B) {
	c := labkube.Cluster(b)
	kc := c.Client()
	ns := labkube.Namespace(b, c)
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		name := fmt.Sprintf("bench-drain-%d", i)
		node(b, c, name)
		deploy(b, kc, ns, name, name, 100, false)
		b.StartTimer()
		res, err := drain.Drain(context.Background(), kc, name, drain.Options{Round: round, Identity: us, Timeout: 5 * time.Minute}, nil)
		if err != nil {
			b.Fatal(err)
		}
		if len(res.Evicted) != 100 {
			b.Fatalf("evicted %d, want 100", len(res.Evicted))
		}
		b.StopTimer()
		b.ReportMetric(float64(len(res.Evicted))/res.Duration.Seconds(), "pods/s")
		zero := int32(0)
		d, _ := kc.AppsV1().Deployments(ns).Get(context.Background(), name, metav1.GetOptions{})
		d.Spec.Replicas = &zero
		kc.AppsV1().Deployments(ns).Update(context.Background(), d, metav1.UpdateOptions{})
		b.StartTimer()
	}
}

// TestCheckEvictions asks the real API server, with dry-run evictions, about
// each pod a drain would evict: a PDB that keeps every pod it selects is a
// blocker for ever, one that allows a disruption is not, and nothing is
// evicted.
func TestCheckEvictions(t *testing.T) {
	c := labkube.Cluster(t)
	kc := c.Client()
	ns := labkube.Namespace(t, c)
	name := "evictcheck-1"
	node(t, c, name)
	deploy(t, kc, ns, "pinned", name, 2, false)
	deploy(t, kc, ns, "spare", name, 2, false)
	pdb(t, kc, ns, "pinned-all", "pinned", 2)
	pdb(t, kc, ns, "spare-one", "spare", 1)
	p, err := drain.Preview(t.Context(), kc, name, drain.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	checks, err := drain.CheckEvictions(t.Context(), kc, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(checks) != 4 {
		t.Fatalf("checks = %+v, want 4", checks)
	}
	for _, ch := range checks {
		pinned := strings.HasPrefix(ch.Name, "pinned-")
		if pinned && (ch.Never == "" || !strings.Contains(ch.Never, "minAvailable 2 for 2 pod(s)") || ch.Refused == "") {
			t.Errorf("%s: never %q refused %q, want a blocker refused now", ch.Name, ch.Never, ch.Refused)
		}
		if !pinned && (ch.Never != "" || ch.Refused != "") {
			t.Errorf("%s: never %q refused %q, want admitted", ch.Name, ch.Never, ch.Refused)
		}
	}
	pods, err := kc.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, pod := range pods.Items {
		if pod.DeletionTimestamp != nil {
			t.Errorf("%s is being deleted: a dry run evicted it", pod.Name)
		}
	}
}
