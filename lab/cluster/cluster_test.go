package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// The shared cluster serves every test that needs no special options; it is
// started on first use and stopped by TestMain.
var (
	sharedOnce sync.Once
	shared     *Cluster
	sharedErr  error
)

// sharedNodes are the nodes of the shared cluster.
var sharedNodes = []Node{
	{Name: "cp-01", Labels: map[string]string{"node-role.kubernetes.io/control-plane": ""},
		Taints: []corev1.Taint{{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}}},
	{Name: "gpu-01", Labels: map[string]string{"nvidia.com/gpu.present": "true"}, Capacity: map[corev1.ResourceName]string{"nvidia.com/gpu": "8"}},
	{Name: "gpu-02", Labels: map[string]string{"nvidia.com/gpu.present": "true"}, Capacity: map[corev1.ResourceName]string{"nvidia.com/gpu": "8"}},
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared != nil {
		if err := shared.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

func sharedCluster(t *testing.T) *Cluster {
	t.Helper()
	sharedOnce.Do(func() {
		sharedErr = errors.New("the shared cluster did not start (see the first test that asked for it)")
		binDir := binDirForTest(t, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		shared, sharedErr = Start(ctx, Options{Nodes: sharedNodes, BinDir: binDir})
	})
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("lab cluster logs (last lines):\n%s", shared.LogTails(30))
		}
	})
	return shared
}

// testNamespace creates a namespace named after the test and deletes it
// afterwards.
func testNamespace(t *testing.T, cs kubernetes.Interface) string {
	t.Helper()
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(name) > 50 {
		name = name[:50]
	}
	name = strings.Trim(name, "-")
	_, err := cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = cs.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
	})
	return name
}

// waitFor polls check until it holds or a minute passes.
func waitFor(t *testing.T, what string, check func(context.Context) (bool, error)) {
	t.Helper()
	if err := pollUntil(t.Context(), time.Minute, what, check); err != nil {
		t.Fatal(err)
	}
}

func TestNodesAreReadyWithRequestedShape(t *testing.T) {
	c := sharedCluster(t)
	type shape struct {
		Ready         bool
		GPUs          string
		Labels        map[string]string
		Taints        []string
		Unschedulable bool
	}
	tests := []struct {
		node string
		want shape
	}{
		{"cp-01", shape{Ready: true, GPUs: "", Labels: map[string]string{"node-role.kubernetes.io/control-plane": "", "kubernetes.io/hostname": "cp-01"},
			Taints: []string{"node-role.kubernetes.io/control-plane:NoSchedule"}}},
		{"gpu-01", shape{Ready: true, GPUs: "8", Labels: map[string]string{"nvidia.com/gpu.present": "true", "kubernetes.io/hostname": "gpu-01"}}},
		{"gpu-02", shape{Ready: true, GPUs: "8", Labels: map[string]string{"nvidia.com/gpu.present": "true", "kubernetes.io/hostname": "gpu-02"}}},
	}
	for _, tt := range tests {
		t.Run(tt.node, func(t *testing.T) {
			node, err := c.Client().CoreV1().Nodes().Get(t.Context(), tt.node, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var got shape
			for _, cond := range node.Status.Conditions {
				if cond.Type == corev1.NodeReady {
					got.Ready = cond.Status == corev1.ConditionTrue
				}
			}
			if q, ok := node.Status.Allocatable["nvidia.com/gpu"]; ok {
				got.GPUs = q.String()
			}
			got.Labels = map[string]string{}
			for k := range tt.want.Labels {
				if v, ok := node.Labels[k]; ok {
					got.Labels[k] = v
				}
			}
			for _, taint := range node.Spec.Taints {
				got.Taints = append(got.Taints, taint.Key+":"+string(taint.Effect))
			}
			got.Unschedulable = node.Spec.Unschedulable
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("node %s (-want +got):\n%s", tt.node, diff)
			}
			if node.Annotations[KwokNodeAnnotation] != KwokNodeAnnotationValue {
				t.Errorf("node %s lacks the kwok annotation: %v", tt.node, node.Annotations)
			}
		})
	}
	// The probe node proved kwok before any test node existed and is gone.
	if _, err := c.Client().CoreV1().Nodes().Get(t.Context(), probeNodeName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("probe node: want NotFound, got %v", err)
	}
}

func gpuDeployment(ns, name string, replicas int32, nodeSelector map[string]string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector: nodeSelector,
					Containers: []corev1.Container{{
						Name:  "model",
						Image: "registry.example/model:1",
						Resources: corev1.ResourceRequirements{
							Limits: corev1.ResourceList{"nvidia.com/gpu": mustQuantity("1")},
						},
					}},
				},
			},
		},
	}
}

// runningPods lists the pods of app that are Running and Ready, by node.
func runningPods(ctx context.Context, cs kubernetes.Interface, ns, app string) (map[string]string, error) {
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
				out[p.Name] = p.Spec.NodeName
			}
		}
	}
	return out, nil
}

func TestDeploymentPodsRunOnKwokNodes(t *testing.T) {
	c := sharedCluster(t)
	cs := c.Client()
	ns := testNamespace(t, cs)
	dep := gpuDeployment(ns, "model", 3, map[string]string{"nvidia.com/gpu.present": "true"})
	if _, err := cs.AppsV1().Deployments(ns).Create(t.Context(), dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "3 model pods running", func(ctx context.Context) (bool, error) {
		pods, err := runningPods(ctx, cs, ns, "model")
		return len(pods) == 3, err
	})
	pods, err := cs.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "app=model"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if !strings.HasPrefix(p.Spec.NodeName, "gpu-") {
			t.Errorf("pod %s on node %q, want a gpu node (nodeSelector)", p.Name, p.Spec.NodeName)
		}
		if p.Status.PodIP == "" {
			t.Errorf("pod %s has no pod IP", p.Name)
		}
	}
	got, err := cs.AppsV1().Deployments(ns).Get(t.Context(), "model", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "deployment status", func(ctx context.Context) (bool, error) {
		got, err = cs.AppsV1().Deployments(ns).Get(ctx, "model", metav1.GetOptions{})
		return err == nil && got.Status.AvailableReplicas == 3, err
	})
}

func TestEvictionRespectsPDBAndPodIsReplaced(t *testing.T) {
	c := sharedCluster(t)
	cs := c.Client()
	ns := testNamespace(t, cs)
	// Two nodes of its own, so cordoning one does not disturb other tests.
	for _, n := range []string{"evict-a", "evict-b"} {
		if err := c.CreateNode(t.Context(), Node{Name: n, Labels: map[string]string{"lab-pool": "evict"}, Capacity: map[corev1.ResourceName]string{"nvidia.com/gpu": "8"}}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cs.CoreV1().Nodes().Delete(context.Background(), n, metav1.DeleteOptions{}) })
		if err := c.WaitNodeReady(t.Context(), n); err != nil {
			t.Fatal(err)
		}
	}
	// Everything starts on evict-a.
	cordon(t, cs, "evict-b", true)
	if _, err := cs.AppsV1().Deployments(ns).Create(t.Context(), gpuDeployment(ns, "web", 2, map[string]string{"lab-pool": "evict"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	minAvailable := intstr.FromInt32(2)
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &minAvailable, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
	}
	if _, err := cs.PolicyV1().PodDisruptionBudgets(ns).Create(t.Context(), pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pods map[string]string
	waitFor(t, "2 web pods running", func(ctx context.Context) (bool, error) {
		var err error
		pods, err = runningPods(ctx, cs, ns, "web")
		return len(pods) == 2, err
	})
	waitFor(t, "PDB observed by the disruption controller", func(ctx context.Context) (bool, error) {
		p, err := cs.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "web", metav1.GetOptions{})
		return err == nil && p.Status.ObservedGeneration == p.Generation && p.Status.CurrentHealthy == 2, err
	})
	victim := sortedKeys(pods)[0]

	err := cs.CoreV1().Pods(ns).EvictV1(t.Context(), &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: victim, Namespace: ns}})
	if !apierrors.IsTooManyRequests(err) {
		t.Fatalf("evict %s under minAvailable=2: want 429 TooManyRequests, got %v", victim, err)
	}

	// Loosen the budget, move the pods' home: the eviction goes through and
	// the scheduler places the replacement on the other node.
	cordon(t, cs, "evict-b", false)
	cordon(t, cs, "evict-a", true)
	minAvailable = intstr.FromInt32(1)
	p, err := cs.PolicyV1().PodDisruptionBudgets(ns).Get(t.Context(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Spec.MinAvailable = &minAvailable
	if _, err := cs.PolicyV1().PodDisruptionBudgets(ns).Update(t.Context(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "PDB allows one disruption", func(ctx context.Context) (bool, error) {
		p, err := cs.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "web", metav1.GetOptions{})
		return err == nil && p.Status.ObservedGeneration == p.Generation && p.Status.DisruptionsAllowed == 1, err
	})
	if err := cs.CoreV1().Pods(ns).EvictV1(t.Context(), &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: victim, Namespace: ns}}); err != nil {
		t.Fatalf("evict %s under minAvailable=1: %v", victim, err)
	}
	waitFor(t, "replacement running on evict-b", func(ctx context.Context) (bool, error) {
		now, err := runningPods(ctx, cs, ns, "web")
		if err != nil || len(now) != 2 {
			return false, err
		}
		_, stillThere := now[victim]
		return !stillThere && slices.Contains(mapValues(now), "evict-b"), nil
	})
}

func TestKubectlDrainWaitsForPDBThenDrains(t *testing.T) {
	c := sharedCluster(t)
	cs := c.Client()
	ns := testNamespace(t, cs)
	for _, n := range []string{"drain-a", "drain-b"} {
		if err := c.CreateNode(t.Context(), Node{Name: n, Labels: map[string]string{"lab-pool": "drain"}, Capacity: map[corev1.ResourceName]string{"nvidia.com/gpu": "8"}}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cs.CoreV1().Nodes().Delete(context.Background(), n, metav1.DeleteOptions{}) })
		if err := c.WaitNodeReady(t.Context(), n); err != nil {
			t.Fatal(err)
		}
	}
	cordon(t, cs, "drain-b", true)
	if _, err := cs.AppsV1().Deployments(ns).Create(t.Context(), gpuDeployment(ns, "db", 1, map[string]string{"lab-pool": "drain"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	minAvailable := intstr.FromInt32(1)
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &minAvailable, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}},
	}
	if _, err := cs.PolicyV1().PodDisruptionBudgets(ns).Create(t.Context(), pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "db pod running and PDB observed", func(ctx context.Context) (bool, error) {
		pods, err := runningPods(ctx, cs, ns, "db")
		if err != nil || len(pods) != 1 {
			return false, err
		}
		p, err := cs.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "db", metav1.GetOptions{})
		return err == nil && p.Status.ObservedGeneration == p.Generation && p.Status.CurrentHealthy == 1, err
	})
	cordon(t, cs, "drain-b", false)

	// One replica, minAvailable 1: drain cordons, then keeps being refused.
	out, err := c.Kubectl(t.Context(), "drain", "drain-a", "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=8s")
	if err == nil {
		t.Fatalf("kubectl drain with a blocking PDB succeeded:\n%s", out)
	}
	if !strings.Contains(string(out), "disruption budget") {
		t.Errorf("kubectl drain output does not name the disruption budget:\n%s", out)
	}
	node, err := cs.CoreV1().Nodes().Get(t.Context(), "drain-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !node.Spec.Unschedulable {
		t.Error("drain-a is not cordoned after the refused drain")
	}

	// A second replica (it can only go to drain-b) makes room in the budget.
	if _, err := cs.AppsV1().Deployments(ns).Patch(t.Context(), "db", "application/merge-patch+json", []byte(`{"spec":{"replicas":2}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "second db pod running on drain-b and PDB allows one disruption", func(ctx context.Context) (bool, error) {
		pods, err := runningPods(ctx, cs, ns, "db")
		if err != nil || len(pods) != 2 {
			return false, err
		}
		p, err := cs.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "db", metav1.GetOptions{})
		return err == nil && p.Status.DisruptionsAllowed == 1, err
	})
	if out, err := c.Kubectl(t.Context(), "drain", "drain-a", "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=60s"); err != nil {
		t.Fatalf("kubectl drain after scaling up: %v\n%s", err, out)
	}
	waitFor(t, "both db pods running on drain-b", func(ctx context.Context) (bool, error) {
		pods, err := runningPods(ctx, cs, ns, "db")
		if err != nil || len(pods) != 2 {
			return false, err
		}
		for _, n := range pods {
			if n != "drain-b" {
				return false, nil
			}
		}
		return true, nil
	})
}

func TestCNPGClusterCRDInstallsAndTakesStatus(t *testing.T) {
	c := sharedCluster(t)
	ns := testNamespace(t, c.Client())
	names, err := c.InstallCRDFile(t.Context(), fixture(t, "cnpg-crd-postgresql.cnpg.io_clusters.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"clusters.postgresql.cnpg.io"}, names); diff != "" {
		t.Fatalf("installed CRDs (-want +got):\n%s", diff)
	}

	// A real Cluster object as `kubectl get -o yaml` printed it.
	data, err := os.ReadFile(fixture(t, "cnpg-cluster-get-o-yaml_3-instances-healthy_cnpg-1.28_pg18.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var sample map[string]any
	if err := yaml.Unmarshal(data, &sample); err != nil {
		t.Fatal(err)
	}
	obj := &unstructured.Unstructured{Object: sample}
	wantStatus := jsonRoundTrip(t, obj.Object["status"])
	delete(obj.Object, "status")
	obj.SetNamespace(ns)
	obj.SetResourceVersion("")
	obj.SetUID("")
	obj.SetCreationTimestamp(metav1.Time{})
	obj.SetGeneration(0)
	obj.SetAnnotations(nil)

	gvr := schema.GroupVersionResource{Group: "postgresql.cnpg.io", Version: "v1", Resource: "clusters"}
	res := c.Dynamic().Resource(gvr).Namespace(ns)
	created, err := res.Create(t.Context(), obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Through the main resource the status is ignored...
	created.Object["status"] = map[string]any{"phase": "written through the main resource"}
	updated, err := res.Update(t.Context(), created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st, ok := updated.Object["status"]; ok {
		t.Errorf("status written through the main resource was kept: %v", st)
	}
	// ...and through the status subresource it is stored as given.
	updated.Object["status"] = wantStatus
	if _, err := res.UpdateStatus(t.Context(), updated, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := res.Get(t.Context(), obj.GetName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantStatus, jsonRoundTrip(t, got.Object["status"])); diff != "" {
		t.Errorf("status read back (-want +got):\n%s", diff)
	}
	primary, _, _ := unstructured.NestedString(got.Object, "status", "currentPrimary")
	if primary != "cluster-example-1" {
		t.Errorf("status.currentPrimary = %q, want cluster-example-1", primary)
	}
}

func TestStartWithoutSchedulerAndControllerManager(t *testing.T) {
	opts := Options{
		WithoutScheduler:         true,
		WithoutControllerManager: true,
		Nodes:                    []Node{{Name: "solo-01"}},
		Tokens:                   []Token{{Token: "viewer-token-for-tests", User: "viewer", Groups: []string{"lab-viewers"}}},
		// By default anonymous requests may read /readyz; this turns that off.
		APIServerFlags: []string{"--anonymous-auth=false"},
	}
	c := StartT(t, opts)
	pids := c.PIDs()
	var components []string
	for name := range pids {
		components = append(components, name)
	}
	sort.Strings(components)
	if diff := cmp.Diff([]string{"etcd", "kube-apiserver", "kwok"}, components); diff != "" {
		t.Errorf("running components (-want +got):\n%s", diff)
	}
	// The extra flag took effect: an anonymous request is now refused.
	anonymous := rest.AnonymousClientConfig(c.Config)
	acs, err := kubernetes.NewForConfig(anonymous)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := acs.Discovery().ServerVersion(); !apierrors.IsUnauthorized(err) {
		t.Errorf("anonymous /version with --anonymous-auth=false: want 401 Unauthorized, got %v", err)
	}

	// Without a scheduler a pod that names its node still runs (kwok), and
	// without the controller manager no default service account is needed.
	cs := c.Client()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pinned", Namespace: metav1.NamespaceDefault, Labels: map[string]string{"app": "pinned"}},
		Spec:       corev1.PodSpec{NodeName: "solo-01", Containers: []corev1.Container{{Name: "c", Image: "registry.example/c:1"}}},
	}
	if _, err := cs.CoreV1().Pods(metav1.NamespaceDefault).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "pinned pod running", func(ctx context.Context) (bool, error) {
		pods, err := runningPods(ctx, cs, metav1.NamespaceDefault, "pinned")
		return len(pods) == 1, err
	})

	// The extra token authenticates, and RBAC gives it nothing.
	viewer := rest.CopyConfig(c.Config)
	viewer.BearerToken = "viewer-token-for-tests"
	vcs, err := kubernetes.NewForConfig(viewer)
	if err != nil {
		t.Fatal(err)
	}
	_, err = vcs.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("viewer lists nodes: want Forbidden, got %v", err)
	}
	if err != nil && !strings.Contains(err.Error(), `"viewer"`) {
		t.Errorf("viewer's refusal does not name the user: %v", err)
	}

	// Stop ends every component and removes the cluster directory.
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	for name, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("%s (pid %d) still exists after Stop: %v", name, pid, err)
		}
	}
	if _, err := os.Stat(c.Dir); !os.IsNotExist(err) {
		t.Errorf("cluster dir %s after Stop: %v", c.Dir, err)
	}
}

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{"zero value", Options{}, ""},
		{"nodes and tokens", Options{Nodes: []Node{{Name: "a", Capacity: map[corev1.ResourceName]string{"nvidia.com/gpu": "8"}}}, Tokens: []Token{{Token: "t", User: "u"}}}, ""},
		{"empty node name", Options{Nodes: []Node{{}}}, "Nodes[0]: name is empty"},
		{"duplicate node", Options{Nodes: []Node{{Name: "a"}, {Name: "a"}}}, `Nodes[1]: name "a" appears twice`},
		{"bad quantity", Options{Nodes: []Node{{Name: "a", Capacity: map[corev1.ResourceName]string{"nvidia.com/gpu": "eight"}}}}, `capacity nvidia.com/gpu="eight"`},
		{"token with comma", Options{Tokens: []Token{{Token: "a,b", User: "u"}}}, "must not contain commas"},
		{"token without user", Options{Tokens: []Token{{Token: "a"}}}, "token and user are required"},
		{"negative timeout", Options{ReadyTimeout: -time.Second}, "ReadyTimeout is negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.opts.validate()
			got := ""
			if err != nil {
				got = err.Error()
			}
			if tt.wantErr == "" && got != "" || tt.wantErr != "" && !strings.Contains(got, tt.wantErr) {
				t.Errorf("validate() = %q, want it to contain %q", got, tt.wantErr)
			}
		})
	}
}

func TestDecodeObjects(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []string
		wantErr string
	}{
		{"two documents and an empty one", "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: b, namespace: a}\n", []string{"Namespace/a", "ConfigMap/b"}, ""},
		{"json", `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"j"}}`, []string{"Namespace/j"}, ""},
		{"no name", "apiVersion: v1\nkind: Namespace\n", nil, "metadata.name are required"},
		{"nothing", "---\n", nil, "no objects"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs, err := decodeObjects([]byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, o := range objs {
				got = append(got, o.GetKind()+"/"+o.GetName())
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("objects (-want +got):\n%s", diff)
			}
		})
	}
}

func mustQuantity(s string) resource.Quantity { return resource.MustParse(s) }

func cordon(t *testing.T, cs kubernetes.Interface, node string, on bool) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, on)
	if _, err := cs.CoreV1().Nodes().Patch(t.Context(), node, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("cordon %s=%t: %v", node, on, err)
	}
}

// fixture returns the path of a shared real-world sample; the test fails
// when it is missing.
func fixture(t *testing.T, name string) string {
	t.Helper()
	path := filepath.Join("..", "..", "testdata", "fixtures", "k8s", name)
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("fixture %s: %v", name, err)
	}
	return path
}

func jsonRoundTrip(t *testing.T, v any) any {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func mapValues(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

func TestStartReportsAComponentThatDies(t *testing.T) {
	binDir := binDirForTest(t, nil)
	logDir := t.TempDir()
	_, err := Start(t.Context(), Options{BinDir: binDir, LogDir: logDir, APIServerFlags: []string{"--no-such-flag"}})
	if err == nil {
		t.Fatal("Start with an unknown API server flag succeeded")
	}
	t.Logf("Start's error, as a user sees it:\n%v", err)
	for _, want := range []string{"kube-apiserver exited", "unknown flag: --no-such-flag"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q:\n%v", want, err)
		}
	}
	// etcd, which had started, was stopped.
	logData, err := os.ReadFile(filepath.Join(logDir, "etcd.log"))
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	for _, line := range strings.Split(string(logData), "\n") {
		if _, err := fmt.Sscanf(line, "### pid %d", &pid); err == nil {
			break
		}
	}
	if pid == 0 {
		t.Fatalf("no pid line in etcd.log:\n%s", logData)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("etcd (pid %d) still exists after a failed Start: %v", pid, err)
	}
}
