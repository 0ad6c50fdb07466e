// Package gpucheck is the cluster half of GPU acceptance after a node's
// window: a smoke pod that must get GPUs on that node, and a real completion
// through the model's OpenAI-compatible endpoint. A node whose GPUs are all
// taken is "no capacity", never a regression.
//
// It creates only its own smoke pod and always deletes it. It must not
// touch host state (driver, Fabric Manager: the SSH layer checks those),
// nodes, or other pods.
package gpucheck

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"

	"github.com/mcp-patch/mcp-patch/kube"
)

// Smoke outcomes.
const (
	StatusOK         = "ok"
	StatusNoCapacity = "no_capacity"
	StatusFailed     = "failed"
)

// NoCapacityMessage is the message of every no_capacity result.
const NoCapacityMessage = "no capacity — not a regression"

// SmokeLabel marks the smoke pods so they can be found and cleaned up.
const SmokeLabel = "app.kubernetes.io/name"

// SmokeLabelValue is SmokeLabel's value on smoke pods.
const SmokeLabelValue = "mcp-patch-gpu-smoke"

// SmokeOptions shape the smoke pod. Image is required.
type SmokeOptions struct {
	// Image runs the command; it needs the CUDA user-space tools, e.g.
	// nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04.
	Image string
	// Command is the container command. Nil: ["nvidia-smi", "-L"].
	Command []string
	// GPUs is how many nvidia.com/gpu the pod requests. Zero: 1.
	GPUs int64
	// Timeout bounds the whole smoke test, deletion aside. Zero: 5m.
	Timeout time.Duration
	// Namespace for the pod. Empty: "default".
	Namespace string
	// RequireCompletion waits for the pod to succeed; false accepts a
	// running pod (the container started with its GPUs).
	RequireCompletion bool
	// PollInterval is how often the pod is read. Zero: 1s.
	PollInterval time.Duration
	// Logger gets one line per state change. Nil: discarded.
	Logger *slog.Logger
}

// SmokeResult is what the smoke pod showed.
type SmokeResult struct {
	Node    string `json:"node"`
	Pod     string `json:"pod,omitempty"`
	Status  string `json:"status"`
	Message string `json:"message"`
	Phase   string `json:"phase,omitempty"`
	// Free and Allocatable are the node's GPUs before the pod was made.
	Free        int64         `json:"gpus_free"`
	Allocatable int64         `json:"gpus_allocatable"`
	Events      []string      `json:"events,omitempty"`
	Duration    time.Duration `json:"duration_ns"`
	// Cleanup says whether the pod was deleted; anything but "deleted" or
	// "not created" means a pod was left behind.
	Cleanup string `json:"cleanup"`
}

// SmokePod runs a pod pinned to node (node affinity on metadata.name, so
// the scheduler judges capacity) that requests GPUs and tolerates the GPU
// taints. Outcomes: ok when it runs (or succeeds, with RequireCompletion);
// no_capacity when the node's GPUs are all taken, found before creating the
// pod or from the scheduler's "Insufficient nvidia.com/gpu"; failed
// otherwise, with the pod's events. The pod is always deleted. An error is
// returned only for bad input or when the pod could not be created.
func SmokePod(ctx context.Context, kc kubernetes.Interface, node string, opts SmokeOptions) (res SmokeResult, err error) {
	start := time.Now()
	// Named results: the deferred deletion below records its outcome in
	// the result being returned.
	res = SmokeResult{Node: node, Cleanup: "not created"}
	if opts.Image == "" {
		return res, fmt.Errorf("GPU smoke pod on node %s: no image given", node)
	}
	if opts.GPUs < 0 || opts.Timeout < 0 || opts.PollInterval < 0 {
		return res, fmt.Errorf("GPU smoke pod on node %s: negative GPUs, timeout or poll interval", node)
	}
	gpus := opts.GPUs
	if gpus == 0 {
		gpus = 1
	}
	timeout := orDuration(opts.Timeout, 5*time.Minute)
	poll := orDuration(opts.PollInterval, time.Second)
	ns := opts.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("node", node, "step", "gpu-smoke")
	done := func(status, msg string) (SmokeResult, error) {
		res.Status, res.Message, res.Duration = status, msg, time.Since(start)
		return res, nil
	}

	n, err := kc.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return res, fmt.Errorf("GPU smoke pod on node %q: %w", node, kube.ErrNodeNotFound)
	}
	if err != nil {
		return res, fmt.Errorf("GPU smoke pod on node %s: get node: %w", node, err)
	}
	// Right after its reboot and uncordon the node may not be Ready yet, or
	// still carry the taints the node lifecycle controller removes once it
	// is; a smoke pod created then is refused by the scheduler. Wait for
	// them to clear, bounded by the smoke timeout.
	if n, err = waitSettled(ctx, kc, n, timeout, poll); err != nil {
		return res, fmt.Errorf("GPU smoke pod on node %s: %w", node, err)
	}
	if why := unsettled(n); len(why) > 0 {
		return done(StatusFailed, fmt.Sprintf("node not ready for the smoke pod after %v: %s", timeout, strings.Join(why, "; ")))
	}
	if q, ok := n.Status.Allocatable[kube.ResourceGPU]; ok {
		res.Allocatable = q.Value()
	}
	if res.Allocatable == 0 {
		return done(StatusFailed, fmt.Sprintf("node advertises no allocatable %s (device plugin down or driver not loaded)", kube.ResourceGPU))
	}
	usage, err := kube.GPUUsageOn(ctx, kc, node)
	if err != nil {
		return res, fmt.Errorf("GPU smoke pod on node %s: %w", node, err)
	}
	res.Free = res.Allocatable - usage.Requested
	if res.Free < gpus {
		return done(StatusNoCapacity, fmt.Sprintf("%s: %d of %d GPUs requested by %d running pods, %d needed",
			NoCapacityMessage, usage.Requested, res.Allocatable, usage.RunningPods, gpus))
	}

	pod := smokePodSpec(n, ns, gpus, opts, timeout)
	created, err := kc.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return res, fmt.Errorf("GPU smoke pod on node %s: create pod: %w", node, err)
	}
	res.Pod = ns + "/" + created.Name
	res.Cleanup = "pending"
	log.Info("smoke pod created", "pod", res.Pod)
	defer func() {
		// Delete even when ctx has ended; bounded on its own.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		zero := int64(0)
		err := kc.CoreV1().Pods(ns).Delete(dctx, created.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		switch {
		case err == nil || apierrors.IsNotFound(err):
			res.Cleanup = "deleted"
		default:
			res.Cleanup = "delete failed, pod left behind: " + err.Error()
			log.Error("smoke pod not deleted", "pod", res.Pod, "err", err)
		}
	}()

	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(poll)
	defer t.Stop()
	lastPhase := ""
	staleSeen := false
	var last *corev1.Pod
	for {
		p, err := kc.CoreV1().Pods(ns).Get(wctx, created.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return done(StatusFailed, "smoke pod disappeared before it ran (deleted or evicted by someone else)")
		}
		if err == nil {
			last = p
			res.Phase = string(p.Status.Phase)
			if res.Phase != lastPhase {
				log.Info("smoke pod phase", "pod", res.Pod, "phase", res.Phase)
				lastPhase = res.Phase
			}
			status, msg, final := judgeSmoke(p, opts.RequireCompletion)
			if final && status == StatusFailed {
				// The scheduler may have judged the pod on a reading of the
				// node from before its taints cleared; it tries again once
				// it sees the node's update. Wait while the node, read now,
				// gives it no reason to refuse (bounded by the timeout).
				if cur, gerr := kc.CoreV1().Nodes().Get(wctx, node, metav1.GetOptions{}); gerr == nil && staleRefusal(p, cur) {
					if !staleSeen {
						log.Info("scheduler refused on an older reading of the node; waiting for its retry", "pod", res.Pod)
					}
					staleSeen, final = true, false
				}
			}
			if final {
				if status != StatusOK {
					res.Events = podEvents(ctx, kc, p)
				}
				return done(status, msg)
			}
		}
		select {
		case <-wctx.Done():
			if last != nil {
				res.Events = podEvents(ctx, kc, last)
			}
			why := "timed out"
			if ctx.Err() != nil {
				why = "cancelled"
			}
			return done(StatusFailed, fmt.Sprintf("%s after %v in phase %s%s", why, timeout, res.Phase, waitingReasons(last)+schedulingReason(last)))
		case <-t.C:
		}
	}
}

func smokePodSpec(n *corev1.Node, ns string, gpus int64, opts SmokeOptions, timeout time.Duration) *corev1.Pod {
	cmd := opts.Command
	if cmd == nil {
		cmd = []string{"nvidia-smi", "-L"}
	}
	tolerations := []corev1.Toleration{{Key: string(kube.ResourceGPU), Operator: corev1.TolerationOpExists}}
	for _, t := range n.Spec.Taints {
		if strings.HasPrefix(t.Key, "nvidia.com/") && t.Key != string(kube.ResourceGPU) {
			tolerations = append(tolerations, corev1.Toleration{Key: t.Key, Operator: corev1.TolerationOpExists})
		}
	}
	deadline := int64(timeout.Seconds()) + 1
	grace := int64(0)
	q := *resource.NewQuantity(gpus, resource.DecimalSI)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "mcp-patch-gpu-smoke-",
			Namespace:    ns,
			Labels:       map[string]string{SmokeLabel: SmokeLabelValue},
			Annotations:  map[string]string{"mcp-patch.io/node": n.Name},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			ActiveDeadlineSeconds:         &deadline,
			TerminationGracePeriodSeconds: &grace,
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
					NodeSelectorTerms: []corev1.NodeSelectorTerm{{
						MatchFields: []corev1.NodeSelectorRequirement{{
							Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{n.Name},
						}},
					}},
				},
			}},
			Tolerations: tolerations,
			Containers: []corev1.Container{{
				Name:    "smoke",
				Image:   opts.Image,
				Command: cmd,
				Resources: corev1.ResourceRequirements{
					Limits:   corev1.ResourceList{kube.ResourceGPU: q},
					Requests: corev1.ResourceList{kube.ResourceGPU: q},
				},
			}},
		},
	}
}

// unsettled lists what the cluster has yet to clear on a node that has
// just come back from its window and that it clears by itself: the kubelet
// not yet posting Ready after the reboot, the node lifecycle controller's
// not-ready and unreachable taints that come with it, and the unschedulable
// taint the controller leaves a moment after an uncordon. A smoke pod made
// before they clear is refused by the scheduler though nothing is wrong.
// A cordoned node is settled: the scheduler's refusal is the answer there.
func unsettled(n *corev1.Node) []string {
	if n.Spec.Unschedulable {
		return nil
	}
	var why []string
	if !kube.NodeReady(n) {
		why = append(why, "the kubelet does not post Ready")
	}
	for _, t := range n.Spec.Taints {
		switch t.Key {
		case corev1.TaintNodeUnschedulable, corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable:
			why = append(why, "taint "+t.ToString())
		}
	}
	return why
}

// waitSettled rereads the node until unsettled is empty or timeout passes,
// and returns the last reading.
func waitSettled(ctx context.Context, kc kubernetes.Interface, n *corev1.Node, timeout, poll time.Duration) (*corev1.Node, error) {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for len(unsettled(n)) > 0 {
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return n, ctx.Err()
			}
			return n, nil
		case <-time.After(poll):
		}
		next, err := kc.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return n, fmt.Errorf("get node: %w", err)
		}
		n = next
	}
	return n, nil
}

// staleRefusal reports whether the scheduler's "untolerated taint" refusal
// of p was made on an older reading of node n than the one just read: n is
// settled and carries no taint p does not tolerate. The scheduler tries the
// pod again on the node's update, so the refusal is not the answer.
func staleRefusal(p *corev1.Pod, n *corev1.Node) bool {
	if n.Spec.Unschedulable || len(unsettled(n)) > 0 {
		return false
	}
	// The scheduler's own test (its TaintToleration plugin's): a NoSchedule
	// or NoExecute taint that no toleration of the pod tolerates.
	if _, untolerated := corev1helpers.FindMatchingUntoleratedTaint(logr.Discard(), n.Spec.Taints, p.Spec.Tolerations,
		func(t *corev1.Taint) bool { return t.Effect != corev1.TaintEffectPreferNoSchedule }, false); untolerated {
		return false
	}
	msg, refused := schedulerRefusal(p)
	return refused && strings.Contains(msg, "untolerated taint")
}

// judgeSmoke decides from one reading of the pod; final is false while it
// should keep waiting.
func judgeSmoke(p *corev1.Pod, requireCompletion bool) (status, msg string, final bool) {
	switch p.Status.Phase {
	case corev1.PodSucceeded:
		return StatusOK, "smoke pod succeeded on the node", true
	case corev1.PodRunning:
		if !requireCompletion {
			return StatusOK, "smoke pod running on the node with its GPUs allocated", true
		}
	case corev1.PodFailed:
		return StatusFailed, "smoke pod failed: " + terminationDetail(p), true
	case corev1.PodPending:
		if msg, refused := schedulerRefusal(p); refused {
			if strings.Contains(msg, "Insufficient "+string(kube.ResourceGPU)) {
				return StatusNoCapacity, NoCapacityMessage + ": scheduler: " + msg, true
			}
			return StatusFailed, "smoke pod unschedulable: " + msg, true
		}
	}
	return "", "", false
}

func terminationDetail(p *corev1.Pod) string {
	parts := []string{}
	if p.Status.Reason != "" || p.Status.Message != "" {
		parts = append(parts, strings.TrimSpace(p.Status.Reason+" "+p.Status.Message))
	}
	for _, cs := range p.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil {
			parts = append(parts, fmt.Sprintf("container %s exit %d %s %s", cs.Name, t.ExitCode, t.Reason, strings.TrimSpace(t.Message)))
		}
	}
	if len(parts) == 0 {
		return "no reason given"
	}
	return strings.Join(parts, "; ")
}

// schedulerRefusal is the scheduler's last refusal of p: its
// PodScheduled=False condition with reason Unschedulable.
func schedulerRefusal(p *corev1.Pod) (msg string, refused bool) {
	if p == nil {
		return "", false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return c.Message, true
		}
	}
	return "", false
}

// schedulingReason is the scheduler's last refusal of p, for a timeout.
func schedulingReason(p *corev1.Pod) string {
	if msg, refused := schedulerRefusal(p); refused && msg != "" {
		return " (scheduler: " + msg + ")"
	}
	return ""
}

func waitingReasons(p *corev1.Pod) string {
	if p == nil {
		return ""
	}
	var r []string
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && w.Reason != "" {
			r = append(r, cs.Name+": "+w.Reason+" "+w.Message)
		}
	}
	if len(r) == 0 {
		return ""
	}
	return " (" + strings.Join(r, "; ") + ")"
}

// podEvents lists the pod's events oldest first, as "Reason: message".
func podEvents(ctx context.Context, kc kubernetes.Interface, p *corev1.Pod) []string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	sel := fields.Set{"involvedObject.name": p.Name, "involvedObject.namespace": p.Namespace}.AsSelector().String()
	l, err := kc.CoreV1().Events(p.Namespace).List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return []string{"events unreadable: " + err.Error()}
	}
	sort.SliceStable(l.Items, func(i, j int) bool { return eventTime(&l.Items[i]).Before(eventTime(&l.Items[j])) })
	out := make([]string, 0, len(l.Items))
	for _, e := range l.Items {
		out = append(out, fmt.Sprintf("%s %s: %s", e.Type, e.Reason, e.Message))
	}
	return out
}

func eventTime(e *corev1.Event) time.Time {
	switch {
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	}
	return e.CreationTimestamp.Time
}

func orDuration(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
