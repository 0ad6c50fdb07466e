package drain_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/mcp-patch/mcp-patch/internal/testsupport/apifake"
	"github.com/mcp-patch/mcp-patch/internal/testsupport/labkube"
	"github.com/mcp-patch/mcp-patch/kube/drain"
)

// mirror copies what the drain reads of node from the real cluster (the
// Node, its pods, their DaemonSets and ReplicaSets, the namespace's PDBs
// with the disruption controller's status) into a fake clientset with
// apifake's behaviours.
func mirror(t *testing.T, kc kubernetes.Interface, ns, node string) *fake.Clientset {
	t.Helper()
	ctx := context.Background()
	var objs []runtime.Object
	n, err := kc.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	objs = append(objs, n)
	pods, err := kc.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	for i := range pods.Items {
		objs = append(objs, &pods.Items[i])
	}
	ds, err := kc.AppsV1().DaemonSets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range ds.Items {
		objs = append(objs, &ds.Items[i])
	}
	rs, err := kc.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range rs.Items {
		objs = append(objs, &rs.Items[i])
	}
	pdbs, err := kc.PolicyV1().PodDisruptionBudgets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range pdbs.Items {
		objs = append(objs, &pdbs.Items[i])
	}
	f := fake.NewClientset(objs...)
	apifake.Behave(f)
	return f
}

// TestFakeAPIServerDrainContract keeps the unit tests' API server
// stand-in (kube/apifake over client-go's fake clientset, which the tools'
// fleet rig drains through) honest against the real API server: the same
// node and pods, mirrored from the lab cluster into the fake, give the
// same drain preview (pods to evict, blockers, skipped pods, warnings,
// digest) under both policies, the same server-side dry-run drain (every
// eviction admitted, nothing changed on either side), and with a PDB that
// allows no disruption the same refused dry run: the same pods, each with
// the same verdict of a dry-run eviction and the same budgets.
func TestFakeAPIServerDrainContract(t *testing.T) {
	c := labkube.Cluster(t)
	kc := c.Client()
	ns := labkube.Namespace(t, c)
	name := "contract-1"
	node(t, c, name)
	daemonSet(t, kc, ns, "agent", name)
	deploy(t, kc, ns, "web", name, 2, false)
	deploy(t, kc, ns, "cache", name, 1, true)
	barePod(t, kc, ns, "debug", name)
	fk := mirror(t, kc, ns, name)

	planOpts := cmpopts.IgnoreUnexported(drain.Evictions{})
	permissive := drain.Policy{DeleteEmptyDirData: true, DeleteUnmanagedPods: true}
	for _, pol := range []drain.Policy{{}, permissive} {
		real, rerr := drain.Preview(t.Context(), kc, name, pol)
		fp, ferr := drain.Preview(t.Context(), fk, name, pol)
		if rerr != nil || ferr != nil {
			t.Fatalf("preview %+v: real %v, fake %v", pol, rerr, ferr)
		}
		if d := cmp.Diff(real, fp, planOpts); d != "" {
			t.Errorf("preview %+v (-real +fake):\n%s", pol, d)
		}
	}

	// The cautious policy's blockers refuse the drain on both before
	// anything changes.
	_, rerr := drain.Drain(t.Context(), kc, name, drain.Options{Round: round, Identity: us, DryRun: true, Timeout: 30 * time.Second}, nil)
	_, ferr := drain.Drain(t.Context(), fk, name, drain.Options{Round: round, Identity: us, DryRun: true, Timeout: 30 * time.Second}, nil)
	if !errors.Is(rerr, drain.ErrBlocked) || !errors.Is(ferr, drain.ErrBlocked) {
		t.Errorf("dry run with blockers: real %v, fake %v", rerr, ferr)
	}

	type outcome struct {
		Evicted []drain.PodRef
		Blocked []drain.BlockedPod
		Cordon  string
		DryRun  bool
		Err     bool
		Pods    []string
		Node    bool
		Ours    map[string]string
	}
	dryRun := func(kc kubernetes.Interface, timeout time.Duration) outcome {
		t.Helper()
		res, err := drain.Drain(t.Context(), kc, name, drain.Options{Round: round, Identity: us, Policy: permissive, DryRun: true,
			Timeout: timeout, EvictRetryDelay: 200 * time.Millisecond}, nil)
		o := outcome{Evicted: res.Evicted, Blocked: res.Blocked, DryRun: res.DryRun, Err: err != nil}
		if err != nil && !errors.Is(err, drain.ErrIncomplete) {
			t.Fatalf("dry run: %v", err)
		}
		if res.Cordon != nil {
			o.Cordon = string(res.Cordon.Outcome)
		}
		for _, app := range []string{"agent", "web", "cache", "debug"} {
			o.Pods = append(o.Pods, podsOf(t, kc, ns, app)...)
		}
		o.Node, o.Ours = nodeState(t, kc, name)
		return o
	}
	real, fo := dryRun(kc, 30*time.Second), dryRun(fk, 30*time.Second)
	if real.Err || len(real.Evicted) != 4 || real.Node || len(real.Ours) != 0 {
		t.Fatalf("the real server's dry run: %+v", real)
	}
	if d := cmp.Diff(real, fo); d != "" {
		t.Errorf("server-side dry run (-real +fake):\n%s", d)
	}
	admitted := len(real.Evicted)

	// A PDB that allows no disruption: the dry run is refused on both,
	// for the same pods, budget and reason.
	pdb(t, kc, ns, "web-pdb", "web", 2)
	fk = mirror(t, kc, ns, name)
	real, fo = dryRun(kc, 2*time.Second), dryRun(fk, 2*time.Second)
	held := 0
	for _, b := range real.Blocked {
		if len(b.PDBs) == 1 && b.PDBs[0].Name == "web-pdb" {
			held++
		}
	}
	if !real.Err || held != 2 {
		t.Fatalf("the real server's dry run under the PDB: %+v", real)
	}
	if d := cmp.Diff(real, fo); d != "" {
		t.Errorf("dry run under a PDB (-real +fake):\n%s", d)
	}
	if t.Failed() {
		return
	}
	t.Logf("real and fake agree: preview under both policies, dry run admitted (%d pods), dry run refused with web-pdb holding %d of %d pods", admitted, held, len(real.Blocked))
}
