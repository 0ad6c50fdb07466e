package gpucheck

import (
	"os"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/mcp-patch/mcp-patch/internal/testsupport/labkube"
	"github.com/mcp-patch/mcp-patch/lab/cluster"
)

func TestDecideDriverPod(t *testing.T) {
	boot := time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)
	const node, kernel = "gpu-02", "6.8.0-45-generic"
	drv := func(edit func(*DriverPodView)) DriverPodView {
		v := DriverPodView{Name: "nvidia-driver-abc", Node: node, Started: boot.Add(time.Minute), Ready: true, Kernel: kernel, PodPhase: corev1.PodRunning}
		if edit != nil {
			edit(&v)
		}
		return v
	}
	val := func(edit func(*DriverPodView)) DriverPodView {
		v := DriverPodView{Name: "nvidia-operator-validator-x", Node: node, Started: boot.Add(2 * time.Minute), Ready: true, Validation: true, PodPhase: corev1.PodRunning}
		if edit != nil {
			edit(&v)
		}
		return v
	}
	for _, tc := range []struct {
		name      string
		pods      []DriverPodView
		validator bool
		want      DriverPodState
		says      string
	}{
		{"ready", []DriverPodView{drv(nil)}, false, DriverReady, "is Ready on gpu-02 with kernel " + kernel},
		{"no pod", nil, false, DriverWaiting, "no driver pod of this boot"},
		{"the last boot's pod", []DriverPodView{drv(func(v *DriverPodView) { v.Started = boot.Add(-time.Hour) })}, false, DriverWaiting, "no driver pod of this boot"},
		{"another node's pod", []DriverPodView{drv(func(v *DriverPodView) { v.Node = "gpu-03" })}, false, DriverWaiting, "no driver pod"},
		{"the old kernel's precompiled pod", []DriverPodView{drv(func(v *DriverPodView) { v.Kernel = "6.8.0-40-generic" })}, false, DriverWaiting, "no driver pod"},
		{"a build-at-boot pod has no kernel label", []DriverPodView{drv(func(v *DriverPodView) { v.Kernel = "" })}, false, DriverReady, "is Ready"},
		{"terminating", []DriverPodView{drv(func(v *DriverPodView) { v.Deleting = true })}, false, DriverWaiting, "no driver pod"},
		{"starting", []DriverPodView{drv(func(v *DriverPodView) { v.Ready, v.PodPhase = false, corev1.PodPending })}, false, DriverWaiting, "not Ready yet (Pending)"},
		{"crash loop", []DriverPodView{drv(func(v *DriverPodView) {
			v.Ready, v.Failure, v.Container, v.Restarts = false, "CrashLoopBackOff: back-off 5m0s", "nvidia-driver-ctr", 6
		})}, false, DriverFailed, "container nvidia-driver-ctr CrashLoopBackOff: back-off 5m0s (6 restarts)"},
		{"validator awaited", []DriverPodView{drv(nil)}, true, DriverWaiting, "no validator pod"},
		{"validator not ready", []DriverPodView{drv(nil), val(func(v *DriverPodView) { v.Ready = false })}, true, DriverWaiting, "validator pod nvidia-operator-validator-x is not yet"},
		{"validator fails", []DriverPodView{drv(nil), val(func(v *DriverPodView) {
			v.Ready, v.Failure, v.Container = false, "CrashLoopBackOff: x", "driver-validation"
		})}, true, DriverFailed, "validator pod"},
		{"both ready", []DriverPodView{drv(nil), val(nil)}, true, DriverReady, "is Ready"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := DecideDriverPod(tc.pods, node, kernel, boot, tc.validator)
			if got != tc.want || !strings.Contains(why, tc.says) {
				t.Fatalf("%s %q, want %s ~%q", got, why, tc.want, tc.says)
			}
		})
	}
}

func TestViewOfAFailingDriverPod(t *testing.T) {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "d", Labels: map[string]string{LabelPrecompiledKernel: "k"}},
		Spec: corev1.PodSpec{NodeName: "n", RestartPolicy: corev1.RestartPolicyAlways},
		Status: corev1.PodStatus{Phase: corev1.PodRunning,
			InitContainerStatuses: []corev1.ContainerStatus{{Name: "k8s-driver-manager", RestartCount: 0}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "nvidia-driver-ctr", RestartCount: 4,
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "Back-off pulling image\n\"nvcr.io/nvidia/driver:550-x\""}}}}}}
	v := viewOf(p, false)
	if v.Failure != `ImagePullBackOff: Back-off pulling image "nvcr.io/nvidia/driver:550-x"` || v.Container != "nvidia-driver-ctr" || v.Restarts != 4 || v.Kernel != "k" {
		t.Fatalf("%+v", v)
	}
}

// The GPU Operator's precompiled driver DaemonSet as it renders it (its
// golden file), for the new kernel, on the real API server: the real
// DaemonSet controller and scheduler place its pod only once the node's
// kernel label (NFD's, after the boot) names that kernel; the wait is
// failed at its bound before, and ready after.
func TestWaitForTheDriverPodOfTheNewKernel(t *testing.T) {
	c := labkube.Cluster(t)
	kc := c.Client()
	ctx := t.Context()
	ns := labkube.Namespace(t, c)
	const oldK, newK = "6.8.0-40-generic", "6.8.0-45-generic"
	const kernelLabel = "feature.node.kubernetes.io/kernel-version.full"
	labkube.Nodes(t, c, cluster.Node{Name: "drv-1", Labels: map[string]string{kernelLabel: oldK, "nvidia.com/gpu.deploy.driver": "true"}})

	b, err := os.ReadFile("../../testdata/fixtures/k8s/gpu-operator-rendered-driver-precompiled_v26.7.0.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	for _, doc := range strings.Split(string(b), "\n---") {
		if strings.Contains(doc, "\nkind: DaemonSet") {
			if err := yaml.Unmarshal([]byte(doc), &ds); err != nil {
				t.Fatal(err)
			}
		}
	}
	if ds.Name == "" {
		t.Fatal("no DaemonSet in the golden file")
	}
	// The operator renders one per kernel; this one is for the new kernel.
	ds.Namespace, ds.ResourceVersion = ns, ""
	for _, l := range []map[string]string{ds.Labels, ds.Spec.Template.Labels} {
		l[LabelPrecompiledKernel] = newK
	}
	ps := &ds.Spec.Template.Spec
	ps.NodeSelector[kernelLabel] = newK
	ps.ServiceAccountName, ps.PriorityClassName = "", ""
	if _, err := kc.AppsV1().DaemonSets(ns).Create(ctx, &ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	opts := DriverPodOptions{Namespace: ns, PodLabel: "app=" + ds.Spec.Selector.MatchLabels["app"], Kernel: newK,
		BootedAt: time.Now().Add(-time.Second), Timeout: 3 * time.Second, Poll: 200 * time.Millisecond}

	// Still on the old kernel: no pod for the new one; the wait ends failed.
	res, err := WaitDriverPod(ctx, kc, "drv-1", opts)
	if err != nil || res.State != DriverFailed || !strings.Contains(res.Reason, "waited 3s, the bound: no driver pod of this boot") {
		t.Fatalf("on the old kernel: %+v %v", res, err)
	}

	// The node came up on the new kernel and NFD relabelled it.
	patch := []byte(`{"metadata":{"labels":{"` + kernelLabel + `":"` + newK + `"}}}`)
	if _, err := kc.CoreV1().Nodes().Patch(ctx, "drv-1", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	opts.Timeout = 2 * time.Minute
	res, err = WaitDriverPod(ctx, kc, "drv-1", opts)
	if err != nil || res.State != DriverReady || !strings.Contains(res.Reason, "with kernel "+newK) {
		t.Fatalf("on the new kernel: %+v %v", res, err)
	}
	if _, err := WaitDriverPod(ctx, kc, "drv-1", DriverPodOptions{Namespace: ns}); err == nil {
		t.Fatal("a wait without a label or bound was accepted")
	}

	// A driver pod whose image cannot be pulled (the lab's kwok stage keeps
	// its container waiting on ImagePullBackOff): failed, not waited out.
	labkube.Nodes(t, c, cluster.Node{Name: "drv-2", Labels: map[string]string{kernelLabel: "6.8.0-47-generic", "nvidia.com/gpu.deploy.driver": "true"}})
	broken := ds.DeepCopy()
	broken.Name, broken.ResourceVersion, broken.UID = "nvidia-gpu-driver-broken", "", ""
	broken.Spec.Selector.MatchLabels = map[string]string{"app": "nvidia-gpu-driver-broken"}
	broken.Spec.Template.Labels["app"] = "nvidia-gpu-driver-broken"
	broken.Spec.Template.Labels[LabelPrecompiledKernel] = "6.8.0-47-generic"
	broken.Spec.Template.Spec.NodeSelector[kernelLabel] = "6.8.0-47-generic"
	broken.Spec.Template.Annotations = map[string]string{cluster.AnnotationContainerFails: "ImagePullBackOff"}
	if _, err := kc.AppsV1().DaemonSets(ns).Create(ctx, broken, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	res, err = WaitDriverPod(ctx, kc, "drv-2", DriverPodOptions{Namespace: ns, PodLabel: "app=nvidia-gpu-driver-broken", Kernel: "6.8.0-47-generic",
		BootedAt: time.Now().Add(-time.Minute), Timeout: 2 * time.Minute, Poll: 200 * time.Millisecond, FailAfter: 2 * time.Second})
	if err != nil || res.State != DriverFailed || !strings.Contains(res.Reason, "ImagePullBackOff") || res.Pod == "" || len(res.Logs) == 0 {
		t.Fatalf("a driver pod that cannot pull its image: %+v %v", res, err)
	}
}
