package actors_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/mcp-patch/mcp-patch/internal/testsupport/labkube"
	"github.com/mcp-patch/mcp-patch/kube/actors"
	"github.com/mcp-patch/mcp-patch/kube/drain"
	"github.com/mcp-patch/mcp-patch/lab/cluster"
)

func TestMain(m *testing.M) { labkube.Main(m) }

const fixtures = "../../testdata/fixtures/k8s/"

// The other actors as the real API server holds them: the maintenance
// operator's real NodeMaintenance CRD and its sample object, kured's real
// DaemonSet with its lock annotation, the GPU Operator's upgrade-state
// label among a real H100 node's labels, a person's cordon and taint.
// Observe reads each holder (and none before the CRD is served), and
// changes nothing of any of them.
func TestObserveTheOtherActorsOnARealAPIServer(t *testing.T) {
	c := labkube.Cluster(t)
	ctx := t.Context()
	kc, dyn := c.Client(), c.Dynamic()
	ns := labkube.Namespace(t, c)
	self := actors.Self{RequestorID: "mcp-patch.example.com", KuredLockID: "mcp-patch:srv-a"}
	kured := actors.KuredRef{Namespace: ns, Name: "kured", Annotation: actors.KuredLockAnnotation}

	var h100 map[string]string
	b, err := os.ReadFile(fixtures + "gpu-operator-docs-node-labels-h100-mig-single.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &h100); err != nil {
		t.Fatal(err)
	}
	gpuLabels := func(state string) map[string]string {
		l := map[string]string{}
		for k, v := range h100 {
			if !strings.HasPrefix(k, "kubernetes.io/") && !strings.HasPrefix(k, "beta.kubernetes.io/") {
				l[k] = v
			}
		}
		l[actors.LabelGPUDriverUpgradeState] = state
		return l
	}
	labkube.Nodes(t, c,
		cluster.Node{Name: "actors-quiet", Labels: gpuLabels("upgrade-done")},
		cluster.Node{Name: "actors-driver", Labels: gpuLabels("pod-restart-required")},
		cluster.Node{Name: "actors-nm", Labels: gpuLabels("upgrade-done")},
		cluster.Node{Name: "actors-cordon", Annotations: map[string]string{"example.com/cordon-reason": "PSU swap, ticket OPS-77"}},
		cluster.Node{Name: "actors-taint"},
		cluster.Node{Name: "actors-ours"},
	)
	observe := func(node string) []actors.Holder {
		t.Helper()
		o, err := actors.Observe(ctx, kc, dyn, node, "srv-a", kured)
		if err != nil {
			t.Fatalf("observe %s: %v", node, err)
		}
		return actors.Decide(o, self, time.Now())
	}
	expect := func(node string, want ...string) {
		t.Helper()
		got := observe(node)
		if len(got) != len(want) {
			t.Fatalf("%s: holders %v, want %d naming %q", node, got, len(want), want)
		}
		for i, w := range want {
			if !strings.Contains(got[i].String(), w) {
				t.Fatalf("%s: holder %d = %q, want it to name %q", node, i, got[i], w)
			}
		}
	}

	// Before the maintenance operator is installed, and without kured.
	expect("actors-quiet")
	expect("actors-nm")
	expect("actors-driver", "state pod-restart-required")

	// Watch gives a hold without the cluster's own time the time it was
	// first seen, and keeps it while the hold lasts.
	clock := time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)
	watch := &actors.Watch{Kube: kc, Dynamic: dyn, Identity: "srv-a", Kured: kured, Self: self, Now: func() time.Time { return clock }}
	if hs, err := watch.Holders(ctx, "actors-driver"); err != nil || len(hs) != 1 || !hs[0].Since.Equal(clock) {
		t.Fatalf("first look: %v %v", hs, err)
	}
	clock = clock.Add(10 * time.Minute)
	if hs, err := watch.Holders(ctx, "actors-driver"); err != nil || len(hs) != 1 || !hs[0].Since.Equal(clock.Add(-10*time.Minute)) {
		t.Fatalf("second look: %v %v, want the first look's time", hs, err)
	}

	if _, err := actors.RequestMaintenance(ctx, dyn, ns, "actors-quiet", self.RequestorID, "2026-12"); !errors.Is(err, actors.ErrNotServed) {
		t.Fatalf("a request without the maintenance operator: %v, want not served", err)
	}
	if gone, err := actors.ReleaseMaintenance(ctx, dyn, ns, "actors-quiet", self.RequestorID); gone || err != nil {
		t.Fatalf("a release without the maintenance operator: %v %v, want nothing to do", gone, err)
	}

	// The maintenance operator's CRD, as released, and its sample object
	// for one node.
	crd := fixtures + "maintenance-operator-crd-nodemaintenances_v0.3.0.yaml"
	if out, err := c.Kubectl(ctx, "apply", "-f", crd); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Cleanup(func() { _, _ = c.Kubectl(context.Background(), "delete", "-f", crd, "--wait=false") })
	if out, err := c.Kubectl(ctx, "wait", "--for=condition=Established", "--timeout=120s", "crd/nodemaintenances.maintenance.nvidia.com"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	expect("actors-nm") // served, none for the node
	nm := sample(t, "maintenance-operator-sample-nodemaintenance_v0.3.0.yaml")
	nm.SetNamespace(ns)
	if err := unstructured.SetNestedField(nm.Object, "actors-nm", "spec", "nodeName"); err != nil {
		t.Fatal(err)
	}
	labkube.Eventually(t, time.Minute, "the NodeMaintenance created", func(ctx context.Context) (bool, error) {
		_, err := dyn.Resource(actors.NodeMaintenances).Namespace(ns).Create(ctx, nm, metav1.CreateOptions{})
		return err == nil, err // the CRD's first seconds can answer not found
	})
	mine := nm.DeepCopy()
	mine.SetName("mcp-patch-actors-nm")
	mine.SetResourceVersion("")
	if err := unstructured.SetNestedField(mine.Object, self.RequestorID, "spec", "requestorID"); err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(actors.NodeMaintenances).Namespace(ns).Create(ctx, mine, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("actors-nm", "node-maintenance (some-cluster-component.vendor.com) holds it: NodeMaintenance "+ns+"/nodemaintenance-sample")
	expect("actors-quiet")

	// The round asks for a node as one requestor among others: its own
	// object, accepted by the real CRD's schema, is no one else's hold;
	// the operator's Ready (here written as the operator writes it) says
	// the node is the round's; the release deletes only its own.
	req, err := actors.RequestMaintenance(ctx, dyn, ns, "actors-quiet", self.RequestorID, "2026-12")
	if err != nil || !req.Created || req.Ready || req.Name != "mcp-patch-actors-quiet" {
		t.Fatalf("request: %+v %v", req, err)
	}
	if again, err := actors.RequestMaintenance(ctx, dyn, ns, "actors-quiet", self.RequestorID, "2026-12"); err != nil || again.Created {
		t.Fatalf("the same request again: %+v %v, want the one already there", again, err)
	}
	if _, err := actors.RequestMaintenance(ctx, dyn, ns, "actors-quiet", "someone-else.example.com", "2026-12"); err == nil {
		t.Fatal("another requestor's object of the round's name was taken as the round's")
	}
	expect("actors-quiet")
	got, err := dyn.Resource(actors.NodeMaintenances).Namespace(ns).Get(ctx, req.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cordon, _, _ := unstructured.NestedBool(got.Object, "spec", "cordon"); cordon {
		t.Fatalf("the round's request asks the operator to cordon: %v", got.Object["spec"])
	}
	if err := unstructured.SetNestedSlice(got.Object, []any{map[string]any{"type": "Ready", "status": "True", "reason": "Ready",
		"message": "maintenance ready", "lastTransitionTime": time.Now().UTC().Format(time.RFC3339)}}, "status", "conditions"); err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(actors.NodeMaintenances).Namespace(ns).UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if r, err := actors.MaintenanceReady(ctx, dyn, ns, "actors-quiet"); err != nil || !r.Ready || r.Phase != "Ready" {
		t.Fatalf("ready: %+v %v", r, err)
	}
	q := &actors.Requests{Dynamic: dyn, Namespace: ns, RequestorID: self.RequestorID, Round: "2026-12"}
	if served, ready, phase, err := q.Request(ctx, "actors-quiet"); err != nil || !served || !ready || phase != "Ready" {
		t.Fatalf("round/window's request: %v %v %q %v", served, ready, phase, err)
	}
	if gone, err := q.Release(ctx, "actors-quiet"); !gone || err != nil {
		t.Fatalf("release: %v %v", gone, err)
	}
	if gone, err := actors.ReleaseMaintenance(ctx, dyn, ns, "actors-quiet", self.RequestorID); gone || err != nil {
		t.Fatalf("release again: %v %v, want nothing left to do", gone, err)
	}
	if _, err := dyn.Resource(actors.NodeMaintenances).Namespace(ns).Get(ctx, "nodemaintenance-sample", metav1.GetOptions{}); err != nil {
		t.Fatalf("the other requestor's object after the round's release: %v", err)
	}

	// kured's DaemonSet as released, in the test's namespace, its lock held
	// for the quiet node.
	var ds appsv1.DaemonSet
	for _, doc := range docs(t, "kured-ds_1.23.0.yaml") {
		if strings.Contains(doc, "kind: DaemonSet") {
			if err := yaml.Unmarshal([]byte(doc), &ds); err != nil {
				t.Fatal(err)
			}
		}
	}
	ds.Namespace, ds.Spec.Template.Spec.ServiceAccountName = ns, ""
	ds.Spec.Template.Spec.NodeSelector = map[string]string{"actors-test": "none"} // no pods wanted
	ds.Annotations = map[string]string{actors.KuredLockAnnotation: `{"nodeID":"actors-quiet","metadata":{"unschedulable":false},"created":"2026-12-07T02:00:00Z","TTL":0}`}
	if _, err := kc.AppsV1().DaemonSets(ns).Create(ctx, &ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("actors-quiet", "kured (actors-quiet) holds it: kured holds its reboot lock for this node")
	expect("actors-taint", "kured (actors-quiet) holds it: kured holds its reboot lock for node actors-quiet")
	lock := func(v string) {
		t.Helper()
		p, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{actors.KuredLockAnnotation: v}}})
		if _, err := kc.AppsV1().DaemonSets(ns).Patch(ctx, "kured", types.MergePatchType, p, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The round takes kured's lock only while it is free, as kured does,
	// and lets go only of its own.
	if h, err := actors.TakeKuredLock(ctx, kc, kured, self.KuredLockID, time.Now()); err != nil || h.Held || len(h.Other) != 1 || h.Other[0].NodeID != "actors-quiet" {
		t.Fatalf("take while kured holds it: %+v %v", h, err)
	}
	if gone, err := actors.ReleaseKuredLock(ctx, kc, kured, self.KuredLockID); gone || err != nil {
		t.Fatalf("release of kured's own lock: %v %v, want it left", gone, err)
	}
	expect("actors-quiet", "kured (actors-quiet)")
	lock(`{"maxOwners":2,"locks":[]}`)
	expect("actors-quiet")
	if h, err := actors.TakeKuredLock(ctx, kc, kured, self.KuredLockID, time.Now()); err != nil || !h.Taken || !h.Held {
		t.Fatalf("take while free: %+v %v", h, err)
	}
	expect("actors-quiet") // the round's own
	if h, err := actors.TakeKuredLock(ctx, kc, kured, self.KuredLockID, time.Now()); err != nil || h.Taken || !h.Held {
		t.Fatalf("take again: %+v %v, want held already", h, err)
	}
	if gone, err := actors.ReleaseKuredLock(ctx, kc, kured, self.KuredLockID); !gone || err != nil {
		t.Fatalf("release of the round's lock: %v %v", gone, err)
	}
	if d, err := kc.AppsV1().DaemonSets(ns).Get(ctx, "kured", metav1.GetOptions{}); err != nil || d.Annotations[actors.KuredLockAnnotation] != "" {
		t.Fatalf("kured's lock after the release: %v %v", d.Annotations, err)
	}
	expect("actors-quiet")

	// A person's cordon (with the team's reason annotation) and taint.
	if out, err := c.Kubectl(ctx, "cordon", "actors-cordon"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if out, err := c.Kubectl(ctx, "taint", "node", "actors-taint", "maintenance=disk:NoSchedule"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	expect("actors-cordon", `a person cordoned the node: "PSU swap, ticket OPS-77"`)
	expect("actors-taint", "maintenance=disk:NoSchedule")

	// This server's own cordon is no one else's.
	if _, err := drain.Cordon(ctx, kc, "actors-ours", "2026-12", "srv-a"); err != nil {
		t.Fatal(err)
	}
	expect("actors-ours")

	// Observing wrote nothing: every object is at the version it had.
	before := versions(t, c, ns)
	for _, n := range []string{"actors-quiet", "actors-driver", "actors-nm", "actors-cordon", "actors-taint", "actors-ours"} {
		observe(n)
	}
	if after := versions(t, c, ns); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("observing changed objects: before %v, after %v", before, after)
	}
}

// versions are the resourceVersions of the test's nodes, its
// NodeMaintenances and kured's DaemonSet.
func versions(t *testing.T, c *cluster.Cluster, ns string) map[string]string {
	t.Helper()
	ctx := t.Context()
	out := map[string]string{}
	nodes, err := c.Client().CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if strings.HasPrefix(n.Name, "actors-") {
			out["node/"+n.Name] = n.ResourceVersion + fmt.Sprint(n.Spec.Unschedulable, len(n.Spec.Taints))
		}
	}
	l, err := c.Dynamic().Resource(actors.NodeMaintenances).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range l.Items {
		out["nm/"+it.GetName()] = it.GetResourceVersion()
	}
	ds, err := c.Client().AppsV1().DaemonSets(ns).Get(ctx, "kured", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out["ds/kured"] = ds.ResourceVersion
	return out
}

// sample reads a one-object fixture as an unstructured object.
func sample(t *testing.T, name string) *unstructured.Unstructured {
	t.Helper()
	d := docs(t, name)
	var obj map[string]any
	if err := yaml.Unmarshal([]byte(d[0]), &obj); err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: obj}
}

// docs splits a fixture into its YAML documents.
func docs(t *testing.T, name string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixtures, name))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range strings.Split(string(b), "\n---") {
		if strings.TrimSpace(d) != "" {
			out = append(out, d)
		}
	}
	return out
}
