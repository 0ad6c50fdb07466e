package gpucheck

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/mcp-patch/mcp-patch/internal/testsupport/labkube"
	"github.com/mcp-patch/mcp-patch/kube"
	"github.com/mcp-patch/mcp-patch/lab/cluster"
)

// Smoke pods against lab/cluster: the real scheduler judges GPU capacity
// on kwok nodes, kwok runs what is scheduled.

func TestMain(m *testing.M) { labkube.Main(m) }

const image = "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"

// gpuWorkload binds a pod requesting gpus to node and waits for it to run.
func gpuWorkload(t *testing.T, kc kubernetes.Interface, ns, name, node string, gpus int64) {
	t.Helper()
	q := *resource.NewQuantity(gpus, resource.DecimalSI)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "train", Image: "registry.example/train:1",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{kube.ResourceGPU: q}}}}},
	}
	if _, err := kc.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labkube.Eventually(t, time.Minute, "pod "+name+" running", func(ctx context.Context) (bool, error) {
		got, err := kc.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && got.Status.Phase == corev1.PodRunning, err
	})
}

func smokePodsLeft(t *testing.T, kc kubernetes.Interface, ns string) int {
	t.Helper()
	l, err := kc.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: SmokeLabel + "=" + SmokeLabelValue})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range l.Items {
		if p.DeletionTimestamp == nil {
			n++
		}
	}
	return n
}

func TestSmokePod(t *testing.T) {
	c := labkube.Cluster(t)
	kc := c.Client()
	ns := labkube.Namespace(t, c)
	gpu8 := map[corev1.ResourceName]string{kube.ResourceGPU: "8"}
	labkube.Nodes(t, c,
		cluster.Node{Name: "smoke-free", Capacity: gpu8,
			Taints: []corev1.Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}}},
		cluster.Node{Name: "smoke-full", Capacity: gpu8},
		cluster.Node{Name: "smoke-nogpu"},
		cluster.Node{Name: "smoke-tainted", Capacity: gpu8,
			Taints: []corev1.Taint{{Key: "dedicated", Value: "llm", Effect: corev1.TaintEffectNoSchedule}}},
	)
	gpuWorkload(t, kc, ns, "train-a", "smoke-full", 4)
	gpuWorkload(t, kc, ns, "train-b", "smoke-full", 4)

	tests := []struct {
		name    string
		node    string
		opts    SmokeOptions
		status  string
		message string
		events  string
	}{
		{name: "free GPUs behind the GPU taint", node: "smoke-free", opts: SmokeOptions{GPUs: 8},
			status: StatusOK, message: "smoke pod running on the node with its GPUs allocated"},
		{name: "all GPUs requested", node: "smoke-full",
			status: StatusNoCapacity, message: "no capacity — not a regression: 8 of 8 GPUs requested by 2 running pods, 1 needed"},
		{name: "no GPUs advertised", node: "smoke-nogpu",
			status: StatusFailed, message: "node advertises no allocatable nvidia.com/gpu"},
		{name: "taint not tolerated", node: "smoke-tainted",
			status: StatusFailed, message: "smoke pod unschedulable: 0/", events: "FailedScheduling"},
		{name: "completion required, never completes", node: "smoke-free", opts: SmokeOptions{RequireCompletion: true, Timeout: 2 * time.Second},
			status: StatusFailed, message: "timed out after 2s in phase Running"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := tt.opts
			opts.Image, opts.Namespace = image, ns
			if opts.Timeout == 0 {
				opts.Timeout = time.Minute
			}
			res, err := SmokePod(t.Context(), kc, tt.node, opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("result: %+v", res)
			if res.Status != tt.status || !strings.HasPrefix(res.Message, tt.message) {
				t.Errorf("status %q message %q; want %q %q", res.Status, res.Message, tt.status, tt.message)
			}
			if tt.events != "" && !strings.Contains(strings.Join(res.Events, "\n"), tt.events) {
				t.Errorf("events %q lack %q", res.Events, tt.events)
			}
			if res.Pod != "" && res.Cleanup != "deleted" {
				t.Errorf("cleanup %q", res.Cleanup)
			}
			if n := smokePodsLeft(t, kc, ns); n != 0 {
				t.Errorf("%d smoke pods left behind", n)
			}
		})
	}

	_, err := SmokePod(t.Context(), kc, "gpu-404", SmokeOptions{Image: image, Namespace: ns})
	if !errors.Is(err, kube.ErrNodeNotFound) {
		t.Errorf("missing node: %v", err)
	}
}

// TestSchedulerNoCapacityMessage shows that a smoke pod racing another
// claim for the last GPUs is judged no_capacity from the real scheduler's
// words, not only from the count taken before creating it.
func TestSchedulerNoCapacityMessage(t *testing.T) {
	c := labkube.Cluster(t)
	kc := c.Client()
	ns := labkube.Namespace(t, c)
	labkube.Nodes(t, c, cluster.Node{Name: "smoke-race", Capacity: map[corev1.ResourceName]string{kube.ResourceGPU: "4"}})
	gpuWorkload(t, kc, ns, "claims-all", "smoke-race", 4)
	n, err := kc.CoreV1().Nodes().Get(t.Context(), "smoke-race", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod, err := kc.CoreV1().Pods(ns).Create(t.Context(), smokePodSpec(n, ns, 1, SmokeOptions{Image: image}, time.Minute), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var status, msg string
	labkube.Eventually(t, time.Minute, "scheduler verdict", func(ctx context.Context) (bool, error) {
		p, err := kc.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		var final bool
		status, msg, final = judgeSmoke(p, false)
		return final, fmt.Errorf("phase %s", p.Status.Phase)
	})
	t.Logf("verdict: %s %s", status, msg)
	if status != StatusNoCapacity || !strings.Contains(msg, "Insufficient nvidia.com/gpu") {
		t.Errorf("verdict %q %q", status, msg)
	}
}
