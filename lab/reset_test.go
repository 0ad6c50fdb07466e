package lab

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/mcp-patch/mcp-patch/lab/fleet"
)

// TestResetStartsTheLabAnew: a lab left with a cordoned node, a stopped
// etcd member and a namespace of its own is Reset on its control plane;
// what it then holds is what a lab just up holds (the same objects,
// counted by resource and namespace), every etcd member runs, no node is
// cordoned, and a new fleet (hosts on the old kernel) writes into the new
// directory.
// The package's other lab tests rely on this: they run on reset labs.
func TestResetStartsTheLabAnew(t *testing.T) {
	opts := Options{ControlPlanes: 2, Canary: 1, GPUServers: 0}
	l := upLab(t, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	up := objectCounts(t, l)

	kc := l.Cluster.Client()
	if _, err := kc.CoreV1().Nodes().Patch(ctx, "cp-1", types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := l.Inject(ctx, "etcd-member-lost", "", "cp-2"); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "left-behind"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.CoreV1().ConfigMaps("left-behind").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A pod held in graceful deletion on a node the reset deletes as well:
	// no kubelet (kwok manages neither) confirms it, and the controller
	// manager runs no pod GC to force it.
	if _, err := kc.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "left-behind-node"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	stuck := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "stuck", Namespace: "left-behind"},
		Spec: corev1.PodSpec{NodeName: "left-behind-node", Containers: []corev1.Container{{Name: "c", Image: "registry.example/c:1"}}}}
	// Admission takes the pod once the namespace's default ServiceAccount is there.
	var createErr error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, createErr = kc.CoreV1().Pods("left-behind").Create(ctx, stuck, metav1.CreateOptions{})
		return createErr == nil, nil
	})
	if err != nil {
		t.Fatalf("create pod left-behind/stuck: %v (last: %v)", err, createErr)
	}
	if err := kc.CoreV1().Pods("left-behind").Delete(ctx, "stuck", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if p, err := kc.CoreV1().Pods("left-behind").Get(ctx, "stuck", metav1.GetOptions{}); err != nil || p.DeletionTimestamp == nil {
		t.Fatalf("pod left-behind/stuck is not held in graceful deletion (get: %v)", err)
	}
	oldDir := l.Dir

	opts.Dir, opts.Logger = t.TempDir(), testLog(t)
	opts.Progress = func(s string) { t.Log("lab: " + s) }
	start := time.Now()
	if err := l.Reset(ctx, opts); err != nil {
		t.Fatal(err)
	}
	t.Logf("reset in %s", time.Since(start).Round(time.Millisecond))
	if l.Dir == oldDir {
		t.Errorf("the reset lab still writes into %s", oldDir)
	}
	if diff := diffCounts(up, objectCounts(t, l)); diff != "" {
		t.Errorf("objects after the reset differ from a lab just up (resource namespace: up -> reset):\n%s", diff)
	}
	for i := range l.Etcd.Members {
		if !l.Etcd.Running(i) {
			t.Errorf("etcd member %d is not running after the reset", i)
		}
	}
	nodes, err := kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if n.Spec.Unschedulable {
			t.Errorf("node %s is cordoned after the reset", n.Name)
		}
	}
	if _, err := kc.CoreV1().Namespaces().Get(ctx, "left-behind", metav1.GetOptions{}); err == nil {
		t.Error("namespace left-behind is still there after the reset")
	}
	for _, h := range l.Fleet.Hosts() {
		st, err := h.State()
		if err != nil {
			t.Fatal(err)
		}
		if st.Kernel != fleet.OldKernel {
			t.Errorf("%s runs %s after the reset, want %s", h.Name, st.Kernel, fleet.OldKernel)
		}
	}
}

// objectCounts counts the lab cluster's objects (events left out) by
// resource and namespace.
func objectCounts(t *testing.T, l *Lab) map[string]int {
	t.Helper()
	objs, err := l.clusterObjects(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for k := range objs {
		out[k.Resource.Resource+"."+k.Resource.Group+" "+k.Namespace]++
	}
	return out
}

func diffCounts(a, b map[string]int) string {
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	var out []string
	for k := range keys {
		if a[k] != b[k] {
			out = append(out, fmt.Sprintf("%s: %d -> %d", k, a[k], b[k]))
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}
