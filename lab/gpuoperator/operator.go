// Package gpuoperator is the lab's stand-in for the parts of NVIDIA's GPU
// Operator that a patch round meets: node feature discovery's kernel label
// on each GPU node (from the lab host's running kernel) and the driver
// DaemonSets, rendered as the operator renders them. With precompiled
// drivers, one DaemonSet per kernel found on the nodes, its pod placed by
// the real DaemonSet controller and scheduler on the nodes running that
// kernel and pulling <registry>/<repository>:<branch>-<kernel>-<os-tag>;
// the lab's registry decides whether that image exists. Built at boot,
// one DaemonSet per node, whose pod builds the driver only when the
// host has the running kernel's headers. A pod that cannot get a driver
// carries the lab's kwok stage annotation, so it runs and never becomes
// Ready (ImagePullBackOff, CrashLoopBackOff), as on a real node.
package gpuoperator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/mcp-patch/mcp-patch/kube/driverimage"
	"github.com/mcp-patch/mcp-patch/kube/gpucheck"
	"github.com/mcp-patch/mcp-patch/lab/cluster"
)

// Labels the operator and NFD use.
const (
	LabelKernel       = "feature.node.kubernetes.io/kernel-version.full"
	LabelDeployDriver = "nvidia.com/gpu.deploy.driver"
	LabelComponent    = "app.kubernetes.io/component"
	LabelPrecompiled  = "nvidia.com/precompiled"
	// PodLabel selects every driver pod the stand-in renders.
	PodLabel = LabelComponent + "=nvidia-driver"
)

// Host is what the stand-in reads of a lab host.
type Host struct {
	Kernel string
	// Headers: the running kernel's headers are installed (a build at
	// boot needs them).
	Headers bool
	// BuildFails: the build at boot fails even with the headers (a driver
	// that does not compile against this kernel).
	BuildFails bool
	// BootID changes with each boot: the node's driver pod starts again,
	// as its container does on a real node after a reboot.
	BootID string
}

// Operator renders the driver DaemonSets for the lab's GPU nodes.
type Operator struct {
	Kube        kubernetes.Interface
	Namespace   string
	Branch      string
	OSTag       string
	Precompiled bool
	// Image is the precompiled image repository; Check asks its registry.
	Image driverimage.Image
	Check driverimage.Checker
	// Hosts reads the GPU nodes' hosts now, by node name.
	Hosts func(ctx context.Context) (map[string]Host, error)

	boots map[string]string // last BootID seen, by node
}

// Sync labels each GPU node with its host's kernel and makes the driver
// DaemonSets match: one per kernel (precompiled) or per node (built at
// boot); the ones nothing needs any more are deleted.
func (o *Operator) Sync(ctx context.Context) error {
	hosts, err := o.Hosts(ctx)
	if err != nil {
		return err
	}
	want := map[string]*appsv1.DaemonSet{}
	for _, node := range slices.Sorted(maps.Keys(hosts)) {
		h := hosts[node]
		p, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{LabelKernel: h.Kernel, LabelDeployDriver: "true"}}})
		if err != nil {
			return err
		}
		if _, err := o.Kube.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, p, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("label node %s with its kernel: %w", node, err)
		}
		if o.Precompiled {
			if _, ok := want["k/"+h.Kernel]; !ok {
				want["k/"+h.Kernel] = o.precompiled(ctx, h.Kernel)
			}
			continue
		}
		want["n/"+node] = o.buildAtBoot(node, h)
	}
	have, err := o.Kube.AppsV1().DaemonSets(o.Namespace).List(ctx, metav1.ListOptions{LabelSelector: PodLabel})
	if err != nil {
		return err
	}
	keep := map[string]bool{}
	for _, ds := range want {
		keep[ds.Name] = true
		cur, err := o.Kube.AppsV1().DaemonSets(o.Namespace).Get(ctx, ds.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			if _, err := o.Kube.AppsV1().DaemonSets(o.Namespace).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("create driver daemonset %s: %w", ds.Name, err)
			}
		case err != nil:
			return err
		case !maps.Equal(cur.Spec.Template.Annotations, ds.Spec.Template.Annotations):
			cur.Spec.Template.Annotations = ds.Spec.Template.Annotations
			if _, err := o.Kube.AppsV1().DaemonSets(o.Namespace).Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("update driver daemonset %s: %w", ds.Name, err)
			}
		}
	}
	for _, ds := range have.Items {
		if !keep[ds.Name] {
			if err := o.Kube.AppsV1().DaemonSets(o.Namespace).Delete(ctx, ds.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("delete driver daemonset %s: %w", ds.Name, err)
			}
		}
	}
	return o.restartRebooted(ctx, hosts)
}

// restartRebooted deletes the driver pods of nodes that booted since the
// last Sync: their DaemonSet starts them again, after the boot.
func (o *Operator) restartRebooted(ctx context.Context, hosts map[string]Host) error {
	if o.boots == nil {
		o.boots = map[string]string{}
	}
	for _, node := range slices.Sorted(maps.Keys(hosts)) {
		id := hosts[node].BootID
		last, seen := o.boots[node]
		o.boots[node] = id
		if !seen || id == last || id == "" {
			continue
		}
		pods, err := o.Kube.CoreV1().Pods(o.Namespace).List(ctx, metav1.ListOptions{LabelSelector: PodLabel, FieldSelector: "spec.nodeName=" + node})
		if err != nil {
			return fmt.Errorf("driver pods on %s: %w", node, err)
		}
		for _, p := range pods.Items {
			if err := o.Kube.CoreV1().Pods(o.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("restart driver pod %s after %s's boot: %w", p.Name, node, err)
			}
		}
	}
	return nil
}

// precompiled renders the DaemonSet for one kernel; its pods fail to pull
// where the registry does not list the image (or cannot be asked).
func (o *Operator) precompiled(ctx context.Context, kernel string) *appsv1.DaemonSet {
	tag := driverimage.Tag(o.Branch, kernel, o.OSTag)
	sum := sha256.Sum256([]byte(kernel))
	name := "nvidia-gpu-driver-" + o.OSTag + "-" + hex.EncodeToString(sum[:5])
	labels := map[string]string{"app": name, LabelComponent: "nvidia-driver", LabelPrecompiled: "true", gpucheck.LabelPrecompiledKernel: kernel}
	ds := o.daemonSet(name, labels, map[string]string{LabelKernel: kernel, LabelDeployDriver: "true"}, o.Image.Ref(tag))
	if r := o.Check.Check(ctx, o.Image, tag); r.Verdict != driverimage.Present {
		ds.Spec.Template.Annotations = map[string]string{cluster.AnnotationContainerFails: "ImagePullBackOff"}
	}
	return ds
}

// buildAtBoot renders a node's DaemonSet; its pod's build fails where the
// host lacks the running kernel's headers.
func (o *Operator) buildAtBoot(node string, h Host) *appsv1.DaemonSet {
	name := "nvidia-driver-daemonset-" + node
	labels := map[string]string{"app": name, LabelComponent: "nvidia-driver", LabelPrecompiled: "false"}
	ds := o.daemonSet(name, labels, map[string]string{"kubernetes.io/hostname": node, LabelDeployDriver: "true"},
		o.Image.Ref(o.Branch+"-"+o.OSTag))
	if !h.Headers || h.BuildFails {
		ds.Spec.Template.Annotations = map[string]string{cluster.AnnotationContainerFails: "CrashLoopBackOff"}
	}
	return ds
}

func (o *Operator) daemonSet(name string, labels, selector map[string]string, image string) *appsv1.DaemonSet {
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: o.Namespace, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{NodeSelector: selector,
					Tolerations: []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
					Containers:  []corev1.Container{{Name: "nvidia-driver-ctr", Image: image, Command: []string{"nvidia-driver"}, Args: []string{"init"}}}},
			},
		},
	}
}
