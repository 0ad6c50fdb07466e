package cluster

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

// controllerWait bounds each wait on a controller: generous, for a loaded
// two-core machine (the node lifecycle controller alone waits 50 s for a
// missed heartbeat).
const controllerWait = 4 * time.Minute

// waitLong polls check until it holds or controllerWait passes.
func waitLong(t *testing.T, what string, check func(context.Context) (bool, error)) {
	t.Helper()
	if err := pollUntil(t.Context(), controllerWait, what, check); err != nil {
		t.Fatal(err)
	}
}

// TestControllerManagerRunsTheLabsControllers: each controller the lab's
// kube-controller-manager runs (lab/controlplane/kube/controllermanager.go)
// does its job against the real API server, with kwok nodes and pods. The
// subtests run side by side; each has its namespace (and node) to itself.
func TestControllerManagerRunsTheLabsControllers(t *testing.T) {
	c := sharedCluster(t)
	cs := c.Client()

	// deployment, replicaset, disruption, endpoints, endpointslice and
	// garbage-collector controllers.
	t.Run("deployment to pods, PDB status, endpoints, cascade on delete", func(t *testing.T) {
		t.Parallel()
		ns := testNamespace(t, cs)
		dep, err := cs.AppsV1().Deployments(ns).Create(t.Context(), gpuDeployment(ns, "web", 2, map[string]string{"nvidia.com/gpu.present": "true"}), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var rs appsv1.ReplicaSet
		waitLong(t, "the deployment's ReplicaSet", func(ctx context.Context) (bool, error) {
			list, err := cs.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
			if err != nil || len(list.Items) != 1 {
				return false, err
			}
			rs = list.Items[0]
			return true, nil
		})
		if ref := metav1.GetControllerOf(&rs); ref == nil || ref.UID != dep.UID {
			t.Fatalf("ReplicaSet %s: controller %+v, want Deployment %s (uid %s)", rs.Name, ref, dep.Name, dep.UID)
		}
		waitLong(t, "2 web pods running", func(ctx context.Context) (bool, error) {
			pods, err := runningPods(ctx, cs, ns, "web")
			return len(pods) == 2, err
		})
		pods, err := cs.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			if ref := metav1.GetControllerOf(&p); ref == nil || ref.UID != rs.UID {
				t.Errorf("pod %s: controller %+v, want ReplicaSet %s", p.Name, ref, rs.Name)
			}
		}

		minAvailable := intstr.FromInt32(1)
		pdb := &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
			Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &minAvailable, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
		}
		if _, err := cs.PolicyV1().PodDisruptionBudgets(ns).Create(t.Context(), pdb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitLong(t, "PDB status: 2 expected, 2 healthy, 1 disruption allowed", func(ctx context.Context) (bool, error) {
			p, err := cs.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "web", metav1.GetOptions{})
			return err == nil && p.Status.ObservedGeneration == p.Generation && p.Status.ExpectedPods == 2 &&
				p.Status.CurrentHealthy == 2 && p.Status.DisruptionsAllowed == 1, err
		})

		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
				Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}},
		}
		if _, err := cs.CoreV1().Services(ns).Create(t.Context(), svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitLong(t, "EndpointSlice of service web with the 2 pods ready", func(ctx context.Context) (bool, error) {
			list, err := cs.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=web"})
			if err != nil {
				return false, err
			}
			ready := 0
			for _, s := range list.Items {
				for _, e := range s.Endpoints {
					if e.Conditions.Ready != nil && *e.Conditions.Ready {
						ready++
					}
				}
			}
			return ready == 2, nil
		})
		waitLong(t, "Endpoints of service web with the 2 pods", func(ctx context.Context) (bool, error) {
			ep, err := cs.CoreV1().Endpoints(ns).Get(ctx, "web", metav1.GetOptions{}) //nolint:staticcheck // the endpoints controller's own object
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			if err != nil {
				return false, err
			}
			n := 0
			for _, s := range ep.Subsets {
				n += len(s.Addresses)
			}
			return n == 2, nil
		})

		// The garbage collector deletes what the Deployment owned.
		background := metav1.DeletePropagationBackground
		if err := cs.AppsV1().Deployments(ns).Delete(t.Context(), "web", metav1.DeleteOptions{PropagationPolicy: &background}); err != nil {
			t.Fatal(err)
		}
		waitLong(t, "the ReplicaSet and the pods garbage-collected", func(ctx context.Context) (bool, error) {
			rsList, err := cs.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
			if err != nil {
				return false, err
			}
			podList, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
			return err == nil && len(rsList.Items) == 0 && len(podList.Items) == 0, err
		})
	})

	// daemonset-controller.
	t.Run("daemonset pods on the matching kwok nodes", func(t *testing.T) {
		t.Parallel()
		ns := testNamespace(t, cs)
		labels := map[string]string{"app": "device-plugin"}
		ds := &appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Name: "device-plugin", Namespace: ns},
			Spec: appsv1.DaemonSetSpec{
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{
						NodeSelector: map[string]string{"nvidia.com/gpu.present": "true"},
						Containers:   []corev1.Container{{Name: "plugin", Image: "registry.example/device-plugin:1"}},
					},
				},
			},
		}
		if _, err := cs.AppsV1().DaemonSets(ns).Create(t.Context(), ds, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitLong(t, "a running device-plugin pod on gpu-01 and on gpu-02", func(ctx context.Context) (bool, error) {
			pods, err := runningPods(ctx, cs, ns, "device-plugin")
			if err != nil {
				return false, err
			}
			nodes := strings.Join(sortedKeys(invert(pods)), ",")
			return nodes == "gpu-01,gpu-02", nil
		})
		waitLong(t, "DaemonSet status: 2 scheduled, 2 ready", func(ctx context.Context) (bool, error) {
			d, err := cs.AppsV1().DaemonSets(ns).Get(ctx, "device-plugin", metav1.GetOptions{})
			return err == nil && d.Status.ObservedGeneration == d.Generation && d.Status.DesiredNumberScheduled == 2 && d.Status.NumberReady == 2, err
		})
	})

	// statefulset-controller.
	t.Run("statefulset pods in order", func(t *testing.T) {
		t.Parallel()
		ns := testNamespace(t, cs)
		labels := map[string]string{"app": "db"}
		replicas := int32(2)
		ss := &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns},
			Spec: appsv1.StatefulSetSpec{
				Replicas:    &replicas,
				ServiceName: "db",
				Selector:    &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "db", Image: "registry.example/db:1"}}},
				},
			},
		}
		if _, err := cs.AppsV1().StatefulSets(ns).Create(t.Context(), ss, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitLong(t, "pods db-0 and db-1 running", func(ctx context.Context) (bool, error) {
			pods, err := runningPods(ctx, cs, ns, "db")
			return err == nil && strings.Join(sortedKeys(pods), ",") == "db-0,db-1", err
		})
	})

	// serviceaccount-controller, root-ca-certificate-publisher-controller,
	// namespace-controller.
	t.Run("namespace gets its ServiceAccount and CA, and its deletion finishes", func(t *testing.T) {
		t.Parallel()
		ns := "cm-namespace-lifecycle"
		if _, err := cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
		waitLong(t, "ServiceAccount "+ns+"/default", func(ctx context.Context) (bool, error) {
			_, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			return err == nil, err
		})
		var ca string
		waitLong(t, "ConfigMap "+ns+"/kube-root-ca.crt", func(ctx context.Context) (bool, error) {
			cm, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			if err != nil {
				return false, err
			}
			ca = cm.Data["ca.crt"]
			return true, nil
		})
		if strings.TrimSpace(ca) != strings.TrimSpace(string(c.Config.CAData)) {
			t.Errorf("kube-root-ca.crt holds %q, want the cluster's CA %q", ca, c.Config.CAData)
		}

		// Something to delete: a ConfigMap and a running pod (owned by a
		// Deployment, so its ReplicaSet goes too).
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.AppsV1().Deployments(ns).Create(t.Context(), gpuDeployment(ns, "app", 1, map[string]string{"nvidia.com/gpu.present": "true"}), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitLong(t, "1 app pod running", func(ctx context.Context) (bool, error) {
			pods, err := runningPods(ctx, cs, ns, "app")
			return len(pods) == 1, err
		})
		if err := cs.CoreV1().Namespaces().Delete(t.Context(), ns, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitLong(t, "namespace "+ns+" gone", func(ctx context.Context) (bool, error) {
			_, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return true, nil
			}
			return false, err
		})
	})

	// node-lifecycle-controller and taint-eviction-controller.
	t.Run("node whose heartbeats stop turns unreachable and its pods are evicted", func(t *testing.T) {
		t.Parallel()
		ns := testNamespace(t, cs)
		// A node kwok does not manage (kwok keeps heartbeating a node it
		// once managed), playing a kubelet that posts one Ready heartbeat
		// and then dies.
		node := "cm-heartbeat"
		if err := c.CreateNode(t.Context(), Node{Name: node, Labels: map[string]string{"lab-pool": "heartbeat"},
			Annotations: map[string]string{KwokNodeAnnotation: "cm-test-unmanaged"}}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cs.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{}) })
		now := metav1.Now()
		status, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []any{map[string]any{
			"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "cm test: one heartbeat, then none",
			"lastHeartbeatTime": now, "lastTransitionTime": now,
		}}}})
		if _, err := cs.CoreV1().Nodes().Patch(t.Context(), node, types.StrategicMergePatchType, status, metav1.PatchOptions{}, "status"); err != nil {
			t.Fatal(err)
		}
		// The node lifecycle controller lifts the not-ready taint.
		if err := c.WaitNodeReady(t.Context(), node); err != nil {
			t.Fatal(err)
		}
		// The pod tolerates an unreachable node for no time at all (the
		// default, added by admission, is 300 s).
		zero := int64(0)
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "victim", Namespace: ns},
			Spec: corev1.PodSpec{
				NodeSelector: map[string]string{"lab-pool": "heartbeat"},
				Containers:   []corev1.Container{{Name: "c", Image: "registry.example/c:1"}},
				Tolerations: []corev1.Toleration{
					{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &zero},
					{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &zero},
				},
			},
		}
		if _, err := cs.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { forceDeletePod(cs, ns, "victim") })
		waitLong(t, "pod victim bound to "+node, func(ctx context.Context) (bool, error) {
			p, err := cs.CoreV1().Pods(ns).Get(ctx, "victim", metav1.GetOptions{})
			return err == nil && p.Spec.NodeName == node, err
		})

		// No heartbeat and no lease renewal follow: once the grace period
		// (50 s) passes the node is Unknown and tainted unreachable.
		waitLong(t, "node "+node+" Ready=Unknown and tainted unreachable:NoExecute", func(ctx context.Context) (bool, error) {
			n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			unknown, tainted := false, false
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady {
					unknown = cond.Status == corev1.ConditionUnknown
				}
			}
			for _, taint := range n.Spec.Taints {
				if taint.Key == corev1.TaintNodeUnreachable && taint.Effect == corev1.TaintEffectNoExecute {
					tainted = true
				}
			}
			return unknown && tainted, nil
		})
		waitLong(t, "pod victim evicted (deleted) by the taint eviction controller", func(ctx context.Context) (bool, error) {
			p, err := cs.CoreV1().Pods(ns).Get(ctx, "victim", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return true, nil
			}
			return err == nil && p.DeletionTimestamp != nil, err
		})
	})
}

// invert maps values to keys.
func invert(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[v] = k
	}
	return out
}

// forceDeletePod deletes a pod at once: one on a node nobody manages any
// more would otherwise wait for a kubelet forever.
func forceDeletePod(cs kubernetes.Interface, ns, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	zero := int64(0)
	_ = cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
}
