package maintainers_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/mcp-patch/mcp-patch/internal/testsupport/labkube"
	"github.com/mcp-patch/mcp-patch/kube/actors"
	"github.com/mcp-patch/mcp-patch/lab/cluster"
	"github.com/mcp-patch/mcp-patch/lab/maintainers"
)

func TestMain(m *testing.M) { labkube.Main(m) }

// self is this server as kube/actors knows it.
var self = actors.Self{RequestorID: "mcp-patch.example.com", KuredLockID: "mcp-patch:srv-a"}

const within = 30 * time.Second

// setup starts (or reuses) the lab cluster with the other maintainers
// installed.
func setup(t *testing.T) *cluster.Cluster {
	t.Helper()
	c := labkube.Cluster(t)
	if err := maintainers.Install(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	return c
}

// runOperator runs the maintenance operator's stand-in until the test
// ends. Registered before the test's nodes and namespaces, it stops
// after their cleanup.
func runOperator(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	op := &maintainers.Operator{Kube: c.Client(), Dynamic: c.Dynamic(),
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	done := make(chan error, 1)
	go func() { done <- op.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}

// holders is what kube/actors makes of node: "actor who verdict" each.
func holders(t *testing.T, c *cluster.Cluster, node string) []string {
	t.Helper()
	o, err := actors.Observe(t.Context(), c.Client(), c.Dynamic(), node, "srv-a", actors.DefaultKured)
	if err != nil {
		t.Fatalf("observe %s: %v", node, err)
	}
	var out []string
	for _, h := range actors.Decide(o, self, time.Now()) {
		out = append(out, fmt.Sprintf("%s %s %s: %s", h.Actor, h.Who, h.Verdict, h.What))
	}
	return out
}

// expectHolders checks the holders kube/actors sees, each by a prefix.
func expectHolders(t *testing.T, c *cluster.Cluster, node string, want ...string) {
	t.Helper()
	got := holders(t, c, node)
	ok := len(got) == len(want)
	for i := 0; ok && i < len(want); i++ {
		ok = strings.HasPrefix(got[i], want[i])
	}
	if !ok {
		t.Fatalf("holders of %s:\n%s\nwant, by prefix:\n%s", node, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// nodeMaintenance is one object's state as the tests check it.
type nodeMaintenance struct {
	Reason, Status string
	Finalized      bool
	Initial        string // the node's initial state annotation, "-" when absent
	ReadyTime      bool
}

func readNM(ctx context.Context, c *cluster.Cluster, ns, name string) (nodeMaintenance, error) {
	obj, err := c.Dynamic().Resource(maintainers.NodeMaintenances).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nodeMaintenance{}, err
	}
	var m nodeMaintenance
	conds, _, err := unstructured.NestedSlice(obj.Object, "status", "conditions")
	if err != nil {
		return m, err
	}
	for _, raw := range conds {
		if cm, ok := raw.(map[string]any); ok && cm["type"] == "Ready" {
			m.Reason, _ = cm["reason"].(string)
			m.Status, _ = cm["status"].(string)
		}
	}
	m.Finalized = slices.Contains(obj.GetFinalizers(), maintainers.Finalizer)
	m.Initial = "-"
	if v, ok := obj.GetAnnotations()[maintainers.AnnotationInitialUnschedulable]; ok {
		m.Initial = v
	}
	if v, ok := obj.GetAnnotations()[maintainers.AnnotationReadyTime]; ok {
		if _, err := time.Parse(time.RFC3339, v); err != nil {
			return m, fmt.Errorf("ready-time %q: %w", v, err)
		}
		m.ReadyTime = true
	}
	return m, nil
}

// waitNM waits until the object is as wanted.
func waitNM(t *testing.T, c *cluster.Cluster, ns, name string, want nodeMaintenance) {
	t.Helper()
	labkube.Eventually(t, within, "NodeMaintenance "+ns+"/"+name+" "+want.Reason, func(ctx context.Context) (bool, error) {
		got, err := readNM(ctx, c, ns, name)
		if err != nil {
			return false, err
		}
		if d := cmp.Diff(want, got); d != "" {
			return false, fmt.Errorf("(-want +got):\n%s", d)
		}
		return true, nil
	})
}

// waitGone waits until the operator has let the deleted object go.
func waitGone(t *testing.T, c *cluster.Cluster, ns, name string) {
	t.Helper()
	labkube.Eventually(t, within, "NodeMaintenance "+ns+"/"+name+" gone", func(ctx context.Context) (bool, error) {
		_, err := c.Dynamic().Resource(maintainers.NodeMaintenances).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}

// unschedulable reads the node's cordon.
func unschedulable(t *testing.T, c *cluster.Cluster, node string) bool {
	t.Helper()
	n, err := c.Client().CoreV1().Nodes().Get(t.Context(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n.Spec.Unschedulable
}

func expectCordon(t *testing.T, c *cluster.Cluster, node string, want bool) {
	t.Helper()
	if got := unschedulable(t, c, node); got != want {
		t.Fatalf("node %s unschedulable = %v, want %v", node, got, want)
	}
}

// Two NodeMaintenances on one node: the older is served (Scheduled, the
// node's state recorded, the node cordoned, Ready), the newer waits
// Pending; kube/actors sees both, by phase. Deleting the older uncordons
// the node it found schedulable, and the newer is served next.
func TestServedOneAtATimeOldestFirst(t *testing.T) {
	c := setup(t)
	runOperator(t, c)
	ctx, dyn := t.Context(), c.Dynamic()
	ns := labkube.Namespace(t, c)
	const node = "maint-order"
	labkube.Nodes(t, c, cluster.Node{Name: node})
	// Created in this order (and by name in this order, should the two
	// share a second), both before the operator's next pass.
	older := maintainers.Requestor{ID: "network-operator.nvidia.com", Namespace: ns, Prefix: "a-older"}
	newer := maintainers.Requestor{ID: "some.one.acme.com", Namespace: ns, Prefix: "b-newer"}
	for _, r := range []maintainers.Requestor{older, newer} {
		if err := maintainers.HoldMaintenance(ctx, c.Client(), dyn, r, node); err != nil {
			t.Fatal(err)
		}
	}
	waitNM(t, c, ns, older.MaintenanceName(node), nodeMaintenance{Reason: "Ready", Status: "True", Finalized: true, Initial: "false", ReadyTime: true})
	waitNM(t, c, ns, newer.MaintenanceName(node), nodeMaintenance{Reason: "Pending", Status: "False", Initial: "-"})
	expectCordon(t, c, node, true)
	// The condition went through the status subresource, as the CRD
	// declares one.
	obj, err := dyn.Resource(maintainers.NodeMaintenances).Namespace(ns).Get(ctx, older.MaintenanceName(node), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(obj.GetManagedFields(), func(f metav1.ManagedFieldsEntry) bool { return f.Subresource == "status" }) {
		t.Fatalf("no write through the status subresource: %+v", obj.GetManagedFields())
	}
	expectHolders(t, c, node,
		"node-maintenance network-operator.nvidia.com wait: NodeMaintenance "+ns+"/a-older-maint-order asks for the node (phase Ready)",
		"node-maintenance some.one.acme.com wait: NodeMaintenance "+ns+"/b-newer-maint-order asks for the node (phase Pending)")

	if err := maintainers.ReleaseMaintenance(ctx, dyn, older, node); err != nil {
		t.Fatal(err)
	}
	waitGone(t, c, ns, older.MaintenanceName(node))
	// The newer found the node schedulable again: the older lifted its
	// cordon before the newer was scheduled.
	waitNM(t, c, ns, newer.MaintenanceName(node), nodeMaintenance{Reason: "Ready", Status: "True", Finalized: true, Initial: "false", ReadyTime: true})
	expectCordon(t, c, node, true)

	if err := maintainers.ReleaseMaintenance(ctx, dyn, newer, node); err != nil {
		t.Fatal(err)
	}
	waitGone(t, c, ns, newer.MaintenanceName(node))
	expectCordon(t, c, node, false)
	expectHolders(t, c, node)
	if err := maintainers.ReleaseMaintenance(ctx, dyn, newer, node); err != nil {
		t.Fatalf("release again: %v, want nothing to do", err)
	}
}

// A node a person cordoned before: the maintenance operator records
// "true", and its cleanup leaves the person's cordon (and reason) in
// place. kube/actors sees the person, then the requestor (whose hold
// explains the cordon), then the person again.
func TestACordonFromBeforeStays(t *testing.T) {
	c := setup(t)
	runOperator(t, c)
	ctx, dyn := t.Context(), c.Dynamic()
	const node = "maint-cordoned"
	labkube.Nodes(t, c, cluster.Node{Name: node})
	if err := maintainers.PersonCordon(ctx, c.Client(), node, "PSU swap, ticket OPS-77"); err != nil {
		t.Fatal(err)
	}
	expectHolders(t, c, node, `person cordon stop: a person cordoned the node: "PSU swap, ticket OPS-77" (`+maintainers.PersonCordonReason+`)`)

	// The network operator as a requestor, in its own namespace (made
	// here if need be).
	net := maintainers.NetworkOperator
	if err := maintainers.HoldMaintenance(ctx, c.Client(), dyn, net, node); err != nil {
		t.Fatal(err)
	}
	if err := maintainers.HoldMaintenance(ctx, c.Client(), dyn, net, node); err != nil {
		t.Fatalf("hold again: %v, want the one already there", err)
	}
	other := maintainers.Requestor{ID: "some.one.acme.com", Namespace: net.Namespace, Prefix: net.Prefix}
	if err := maintainers.HoldMaintenance(ctx, c.Client(), dyn, other, node); !errors.Is(err, maintainers.ErrNotTheRequestors) {
		t.Fatalf("another requestor's hold under the same name: %v, want ErrNotTheRequestors", err)
	}
	if err := maintainers.ReleaseMaintenance(ctx, dyn, other, node); !errors.Is(err, maintainers.ErrNotTheRequestors) {
		t.Fatalf("another requestor's release: %v, want ErrNotTheRequestors", err)
	}
	name := net.MaintenanceName(node)
	waitNM(t, c, net.Namespace, name, nodeMaintenance{Reason: "Ready", Status: "True", Finalized: true, Initial: "true", ReadyTime: true})
	expectHolders(t, c, node, "node-maintenance network-operator.nvidia.com wait: NodeMaintenance "+net.Namespace+"/"+name+" asks for the node (phase Ready)")

	if err := maintainers.ReleaseMaintenance(ctx, dyn, net, node); err != nil {
		t.Fatal(err)
	}
	waitGone(t, c, net.Namespace, name)
	expectCordon(t, c, node, true)
	expectHolders(t, c, node, `person cordon stop: a person cordoned the node: "PSU swap, ticket OPS-77"`)

	if err := maintainers.PersonUncordon(ctx, c.Client(), node); err != nil {
		t.Fatal(err)
	}
	expectCordon(t, c, node, false)
	expectHolders(t, c, node)
	if err := maintainers.PersonUncordon(ctx, c.Client(), node); err != nil {
		t.Fatalf("uncordon again: %v, want nothing to do", err)
	}
}

// This server's own request, made by kube/actors.RequestMaintenance
// (spec.cordon false, no drainSpec), becomes Ready without a cordon and
// is nobody else's hold to the round; while it is served another
// requestor's waits Pending, and gets the node once the round lets go.
func TestOurRequestIsReadyWithoutACordon(t *testing.T) {
	c := setup(t)
	runOperator(t, c)
	ctx, dyn := t.Context(), c.Dynamic()
	ns := labkube.Namespace(t, c)
	const node = "maint-ours"
	labkube.Nodes(t, c, cluster.Node{Name: node})

	req, err := actors.RequestMaintenance(ctx, dyn, ns, node, self.RequestorID, "2026-12")
	if err != nil || !req.Created || req.Ready {
		t.Fatalf("request: %+v %v", req, err)
	}
	labkube.Eventually(t, within, "the round's request Ready", func(ctx context.Context) (bool, error) {
		r, err := actors.MaintenanceReady(ctx, dyn, ns, node)
		return r.Ready && r.Phase == "Ready", err
	})
	waitNM(t, c, ns, req.Name, nodeMaintenance{Reason: "Ready", Status: "True", Finalized: true, Initial: "-", ReadyTime: true})
	expectCordon(t, c, node, false)
	expectHolders(t, c, node)

	later := maintainers.Requestor{ID: "network-operator.nvidia.com", Namespace: ns, Prefix: "nvidia-operator"}
	if err := maintainers.HoldMaintenance(ctx, c.Client(), dyn, later, node); err != nil {
		t.Fatal(err)
	}
	waitNM(t, c, ns, later.MaintenanceName(node), nodeMaintenance{Reason: "Pending", Status: "False", Initial: "-"})
	expectCordon(t, c, node, false)
	expectHolders(t, c, node, "node-maintenance network-operator.nvidia.com wait: NodeMaintenance "+ns+"/nvidia-operator-maint-ours asks for the node (phase Pending)")

	if gone, err := actors.ReleaseMaintenance(ctx, dyn, ns, node, self.RequestorID); !gone || err != nil {
		t.Fatalf("the round's release: %v %v", gone, err)
	}
	waitGone(t, c, ns, req.Name)
	waitNM(t, c, ns, later.MaintenanceName(node), nodeMaintenance{Reason: "Ready", Status: "True", Finalized: true, Initial: "false", ReadyTime: true})
	expectCordon(t, c, node, true)
	if err := maintainers.ReleaseMaintenance(ctx, dyn, later, node); err != nil {
		t.Fatal(err)
	}
	waitGone(t, c, ns, later.MaintenanceName(node))
	expectCordon(t, c, node, false)
}

// kured's lock as kured 1.23 writes it with --concurrency=1, on the
// DaemonSet Install made: kube/actors parses it and sees kured hold the
// node (and, for another node, hold the reboot slot); the round's own
// take waits; only the holder's release removes it; a second Install
// leaves it.
func TestKuredLockAsKuredWritesIt(t *testing.T) {
	c := setup(t)
	ctx, kc := t.Context(), c.Client()
	const node, other = "maint-kured", "maint-kured-2"
	labkube.Nodes(t, c, cluster.Node{Name: node}, cluster.Node{Name: other})
	t.Cleanup(func() {
		if err := maintainers.ReleaseKuredLock(context.Background(), kc, node); err != nil {
			t.Error(err)
		}
	})
	lockValue := func() string {
		t.Helper()
		ds, err := kc.AppsV1().DaemonSets(maintainers.KuredNamespace).Get(ctx, maintainers.KuredName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return ds.Annotations[maintainers.KuredLockAnnotation]
	}

	before := time.Now().UTC()
	if err := maintainers.HoldKuredLock(ctx, kc, node); err != nil {
		t.Fatal(err)
	}
	v := lockValue()
	var raw map[string]any
	if err := json.Unmarshal([]byte(v), &raw); err != nil {
		t.Fatalf("lock %q: %v", v, err)
	}
	created, _ := raw["created"].(string)
	delete(raw, "created")
	if d := cmp.Diff(map[string]any{"nodeID": node, "metadata": map[string]any{"unschedulable": false}, "TTL": 0.0}, raw); d != "" {
		t.Fatalf("lock %s (-want +got):\n%s", v, d)
	}
	at, err := time.Parse(time.RFC3339Nano, created)
	if err != nil || !strings.HasSuffix(created, "Z") || at.Before(before.Truncate(time.Second)) || at.After(time.Now()) {
		t.Fatalf("lock created %q (%v), want RFC3339Nano UTC now", created, err)
	}
	locks, err := actors.ParseKuredLock(v)
	if err != nil || len(locks) != 1 || locks[0].NodeID != node || locks[0].TTL != 0 || !locks[0].Created.Equal(at) {
		t.Fatalf("kube/actors reads %q as %+v %v", v, locks, err)
	}
	expectHolders(t, c, node, "kured "+node+" wait: kured holds its reboot lock for this node (weave.works/kured-node-lock on kube-system/kured)")
	expectHolders(t, c, other, "kured "+node+" wait: kured holds its reboot lock for node "+node)
	if h, err := actors.TakeKuredLock(ctx, kc, actors.DefaultKured, self.KuredLockID, time.Now()); err != nil || h.Held || len(h.Other) != 1 || h.Other[0].NodeID != node {
		t.Fatalf("the round's take while kured holds it: %+v %v", h, err)
	}

	if err := maintainers.HoldKuredLock(ctx, kc, node); err != nil {
		t.Fatalf("hold again: %v, want held already", err)
	}
	if err := maintainers.HoldKuredLock(ctx, kc, other); !errors.Is(err, maintainers.ErrKuredLockHeld) {
		t.Fatalf("hold for another node: %v, want ErrKuredLockHeld", err)
	}
	if err := maintainers.ReleaseKuredLock(ctx, kc, other); !errors.Is(err, maintainers.ErrKuredLockHeld) {
		t.Fatalf("release by another node: %v, want ErrKuredLockHeld", err)
	}
	if err := maintainers.Install(ctx, c); err != nil {
		t.Fatal(err)
	}
	if got := lockValue(); got != v {
		t.Fatalf("lock after the holder's second take, another's tries and a second Install: %q, want %q", got, v)
	}

	if err := maintainers.ReleaseKuredLock(ctx, kc, node); err != nil {
		t.Fatal(err)
	}
	if got := lockValue(); got != "" {
		t.Fatalf("lock after release: %q", got)
	}
	expectHolders(t, c, node)
	expectHolders(t, c, other)
	if err := maintainers.ReleaseKuredLock(ctx, kc, node); err != nil {
		t.Fatalf("release again: %v, want nothing to do", err)
	}

	// kured records the node's cordon before its own.
	if err := maintainers.PersonCordon(ctx, kc, other, "cable check"); err != nil {
		t.Fatal(err)
	}
	if err := maintainers.HoldKuredLock(ctx, kc, other); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(lockValue()), &raw); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(map[string]any{"unschedulable": true}, raw["metadata"]); d != "" {
		t.Fatalf("lock metadata of a cordoned node (-want +got):\n%s", d)
	}
	for _, undo := range []func() error{
		func() error { return maintainers.ReleaseKuredLock(ctx, kc, other) },
		func() error { return maintainers.PersonUncordon(ctx, kc, other) },
	} {
		if err := undo(); err != nil {
			t.Fatal(err)
		}
	}
	expectHolders(t, c, other)
}

// The GPU Operator's driver upgrade: the state label, a cordon from
// cordon-required on that upgrade-done lifts, a node cordoned before
// left cordoned; kube/actors waits for it, and stops for a failed one.
func TestGPUOperatorUpgrade(t *testing.T) {
	c := setup(t)
	ctx, kc := t.Context(), c.Client()
	const node, cordoned = "maint-gpu", "maint-gpu-cordoned"
	labkube.Nodes(t, c, cluster.Node{Name: node}, cluster.Node{Name: cordoned})
	initial := func(n string) string {
		t.Helper()
		got, err := kc.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if v, ok := got.Annotations[maintainers.AnnotationGPUUpgradeInitialState]; ok {
			return v
		}
		return "-"
	}
	steps := []struct {
		state       string
		cordon      bool
		holder      string
		initialNote string
	}{
		{"upgrade-required", false, "gpu-operator nvidia.com/gpu-driver-upgrade-state=upgrade-required wait", "-"},
		{"cordon-required", true, "gpu-operator nvidia.com/gpu-driver-upgrade-state=cordon-required wait", "-"},
		{"drain-required", true, "gpu-operator nvidia.com/gpu-driver-upgrade-state=drain-required wait", "-"},
		{"pod-restart-required", true, "gpu-operator nvidia.com/gpu-driver-upgrade-state=pod-restart-required wait", "-"},
		{"upgrade-done", false, "", "-"},
		{"upgrade-failed", true, "gpu-operator nvidia.com/gpu-driver-upgrade-state=upgrade-failed stop", "-"},
	}
	for _, s := range steps {
		if err := maintainers.GPUOperatorUpgrading(ctx, kc, node, s.state); err != nil {
			t.Fatal(err)
		}
		expectCordon(t, c, node, s.cordon)
		if got := initial(node); got != s.initialNote {
			t.Fatalf("%s: initial state annotation %q, want %q", s.state, got, s.initialNote)
		}
		if s.holder == "" {
			expectHolders(t, c, node)
		} else {
			expectHolders(t, c, node, s.holder)
		}
	}
	if err := maintainers.UpgradeDone(ctx, kc, node); err != nil {
		t.Fatal(err)
	}
	expectCordon(t, c, node, false)
	expectHolders(t, c, node)

	if err := maintainers.PersonCordon(ctx, kc, cordoned, "BIOS update"); err != nil {
		t.Fatal(err)
	}
	if err := maintainers.GPUOperatorUpgrading(ctx, kc, cordoned, "cordon-required"); err != nil {
		t.Fatal(err)
	}
	if got := initial(cordoned); got != "true" {
		t.Fatalf("a node cordoned before: initial state annotation %q, want true", got)
	}
	expectHolders(t, c, cordoned, "gpu-operator nvidia.com/gpu-driver-upgrade-state=cordon-required wait")
	if err := maintainers.UpgradeDone(ctx, kc, cordoned); err != nil {
		t.Fatal(err)
	}
	expectCordon(t, c, cordoned, true)
	if got := initial(cordoned); got != "-" {
		t.Fatalf("after the upgrade: initial state annotation %q, want none", got)
	}
	expectHolders(t, c, cordoned, `person cordon stop: a person cordoned the node: "BIOS update"`)
	if err := maintainers.PersonUncordon(ctx, kc, cordoned); err != nil {
		t.Fatal(err)
	}
	expectCordon(t, c, cordoned, false)

	// A person does not cordon over the upgrade's cordon (its undo would
	// lift the upgrade's).
	if err := maintainers.GPUOperatorUpgrading(ctx, kc, node, "drain-required"); err != nil {
		t.Fatal(err)
	}
	if err := maintainers.PersonCordon(ctx, kc, node, "y"); !errors.Is(err, maintainers.ErrCordoned) {
		t.Fatalf("a person's cordon on a node the upgrade cordoned: %v, want ErrCordoned", err)
	}
	if err := maintainers.UpgradeDone(ctx, kc, node); err != nil {
		t.Fatal(err)
	}
	expectCordon(t, c, node, false)
}

// Install puts the real objects in place and a second Install changes
// nothing: the CRDs served, the ClusterPolicy as the Helm chart names
// it, kured's DaemonSet as upstream ships it.
func TestInstall(t *testing.T) {
	c := setup(t)
	ctx := t.Context()
	if err := maintainers.Install(ctx, c); err != nil {
		t.Fatalf("second install: %v", err)
	}
	cp, err := c.Dynamic().Resource(maintainers.ClusterPolicies).Get(ctx, maintainers.ClusterPolicyName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if auto, _, err := unstructured.NestedBool(cp.Object, "spec", "driver", "upgradePolicy", "autoUpgrade"); err != nil || !auto {
		t.Fatalf("ClusterPolicy %s: driver.upgradePolicy.autoUpgrade %v %v, want the sample's true", cp.GetName(), auto, err)
	}
	ds, err := c.Client().AppsV1().DaemonSets(maintainers.KuredNamespace).Get(ctx, maintainers.KuredName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if img := ds.Spec.Template.Spec.Containers[0].Image; img != "ghcr.io/kubereboot/kured:1.23.0" {
		t.Fatalf("kured's image %q", img)
	}
	if _, err := c.Client().CoreV1().ServiceAccounts(maintainers.KuredNamespace).Get(ctx, "kured", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Dynamic().Resource(maintainers.NodeMaintenances).List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("NodeMaintenances not served: %v", err)
	}
}
