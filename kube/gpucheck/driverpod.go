package gpucheck

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// LabelPrecompiledKernel is the label the GPU Operator puts on a
// precompiled driver DaemonSet's pods: the kernel its image was built for.
const LabelPrecompiledKernel = "nvidia.com/precompiled.kernel-version"

// DriverPodOptions find a node's driver pod (and the operator's validator
// pod, where one runs) and bound the wait for them.
type DriverPodOptions struct {
	Namespace string
	// PodLabel and ValidatorLabel are label selectors ("app=…").
	PodLabel, ValidatorLabel string
	// Kernel is the kernel the node runs now; BootedAt when it booted
	// (zero: unknown). A pod that started before the boot is the last
	// boot's and does not count.
	Kernel   string
	BootedAt time.Time
	Timeout  time.Duration
	// Poll is the interval between looks (default 2 s).
	Poll time.Duration
	// LogLines is how many of a failed pod's last log lines to keep
	// (default 20).
	LogLines int64
	// FailAfter is how long a failure must last before the wait answers
	// failed (default 1 min): a pull or a crash that a new pod (a rolled
	// DaemonSet, a retry) gets past is no verdict.
	FailAfter time.Duration
}

// DriverPodState is one look's verdict.
type DriverPodState string

// States.
const (
	DriverReady   DriverPodState = "ready"
	DriverWaiting DriverPodState = "waiting"
	DriverFailed  DriverPodState = "failed"
)

// DriverPodView is what a decision needs of one pod.
type DriverPodView struct {
	Name       string
	Node       string
	Started    time.Time
	Ready      bool
	Kernel     string // LabelPrecompiledKernel, "" for a build-at-boot pod
	Deleting   bool
	Restarts   int32
	Failure    string // a container's waiting or terminated reason that is a failure
	Container  string // the failing container
	PodPhase   corev1.PodPhase
	Validation bool // the operator's validator pod
}

// DecideDriverPod is the pure verdict over the pods on node: ready when
// the node's driver pod of this boot (and the validator pod, where
// validator says one runs) is Ready on kernel; failed when the driver pod
// of this boot fails (a crash loop, an image that cannot be pulled, a
// container that exited in error); waiting otherwise, with what is
// awaited.
func DecideDriverPod(pods []DriverPodView, node, kernel string, bootedAt time.Time, validator bool) (DriverPodState, string) {
	var driver, valid *DriverPodView
	for i := range pods {
		p := &pods[i]
		if p.Node != node || p.Deleting || (!bootedAt.IsZero() && !p.Started.IsZero() && p.Started.Before(bootedAt)) {
			continue
		}
		if p.Kernel != "" && p.Kernel != kernel {
			continue // a precompiled pod for another kernel
		}
		if p.Validation {
			valid = p
		} else {
			driver = p
		}
	}
	switch {
	case driver == nil:
		return DriverWaiting, "no driver pod of this boot on " + node + " for " + kernel + " yet"
	case driver.Failure != "":
		return DriverFailed, fmt.Sprintf("driver pod %s on %s fails: container %s %s (%d restarts)", driver.Name, node, driver.Container, driver.Failure, driver.Restarts)
	case !driver.Ready:
		return DriverWaiting, fmt.Sprintf("driver pod %s on %s is not Ready yet (%s)", driver.Name, node, driver.PodPhase)
	case validator && valid == nil:
		return DriverWaiting, "driver pod " + driver.Name + " is Ready; no validator pod of this boot on " + node + " yet"
	case validator && valid.Failure != "":
		return DriverFailed, fmt.Sprintf("validator pod %s on %s fails: container %s %s", valid.Name, node, valid.Container, valid.Failure)
	case validator && !valid.Ready:
		return DriverWaiting, "driver pod " + driver.Name + " is Ready; validator pod " + valid.Name + " is not yet"
	}
	return DriverReady, fmt.Sprintf("driver pod %s is Ready on %s with kernel %s", driver.Name, node, kernel)
}

// failing container reasons: the pod will not become Ready by itself.
var failing = map[string]bool{"CrashLoopBackOff": true, "ImagePullBackOff": true, "ErrImagePull": true,
	"InvalidImageName": true, "CreateContainerConfigError": true, "CreateContainerError": true, "RunContainerError": true}

// viewOf reads what DecideDriverPod needs from a pod.
func viewOf(p corev1.Pod, validation bool) DriverPodView {
	v := DriverPodView{Name: p.Name, Node: p.Spec.NodeName, Kernel: p.Labels[LabelPrecompiledKernel],
		Deleting: p.DeletionTimestamp != nil, PodPhase: p.Status.Phase, Validation: validation}
	if p.Status.StartTime != nil {
		v.Started = p.Status.StartTime.Time
	}
	for _, cs := range p.Status.ContainerStatuses {
		// A pod lives on across its node's reboot; its containers start
		// again, and the latest start says which boot it serves.
		if r := cs.State.Running; r != nil && r.StartedAt.After(v.Started) {
			v.Started = r.StartedAt.Time
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			v.Ready = true
		}
	}
	statuses := append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...)
	for _, cs := range statuses {
		v.Restarts += cs.RestartCount
		switch {
		case cs.State.Waiting != nil && failing[cs.State.Waiting.Reason]:
			v.Failure, v.Container = cs.State.Waiting.Reason+": "+oneLine(cs.State.Waiting.Message), cs.Name
		case cs.State.Terminated != nil && cs.State.Terminated.ExitCode != 0 && p.Spec.RestartPolicy == corev1.RestartPolicyNever:
			v.Failure, v.Container = fmt.Sprintf("exited %d (%s)", cs.State.Terminated.ExitCode, cs.State.Terminated.Reason), cs.Name
		}
	}
	if p.Status.Phase == corev1.PodFailed && v.Failure == "" {
		v.Failure = "pod failed: " + oneLine(p.Status.Message)
	}
	return v
}

// DriverPodResult is the wait's outcome.
type DriverPodResult struct {
	State  DriverPodState `json:"state"`
	Reason string         `json:"reason"`
	Pod    string         `json:"pod,omitempty"`
	// Logs are the failing pod's last log lines.
	Logs []string `json:"logs,omitempty"`
	// Waited is how long the wait took.
	Waited time.Duration `json:"waited"`
}

// WaitDriverPod waits, bounded by opts.Timeout, until the node's driver
// pod of this boot is Ready on opts.Kernel (and its validator, where one
// runs), or fails for opts.FailAfter on end (its last log lines kept). A wait that runs out is
// failed, saying what it waited for. It reads only.
func WaitDriverPod(ctx context.Context, kc kubernetes.Interface, node string, opts DriverPodOptions) (DriverPodResult, error) {
	if opts.Namespace == "" || opts.PodLabel == "" || opts.Timeout <= 0 {
		return DriverPodResult{}, fmt.Errorf("driver pod of %s: namespace, pod label and a timeout are required", node)
	}
	poll := opts.Poll
	if poll <= 0 {
		poll = 2 * time.Second
	}
	failAfter := opts.FailAfter
	if failAfter <= 0 {
		failAfter = time.Minute
	}
	start := time.Now()
	deadline := start.Add(opts.Timeout)
	last := ""
	var failingSince time.Time
	for {
		pods, err := look(ctx, kc, node, opts)
		if err != nil {
			return DriverPodResult{}, err
		}
		state, why := DecideDriverPod(pods, node, opts.Kernel, opts.BootedAt, opts.ValidatorLabel != "")
		res := DriverPodResult{State: state, Reason: why, Waited: time.Since(start)}
		if state == DriverReady {
			return res, nil
		}
		if state != DriverFailed {
			failingSince = time.Time{}
		} else if failingSince.IsZero() {
			failingSince = time.Now()
		}
		if state == DriverFailed && (time.Since(failingSince) >= failAfter || time.Now().After(deadline)) {
			res.Pod = failingPod(pods, node)
			if res.Pod != "" {
				res.Logs = lastLines(ctx, kc, opts, res.Pod)
			}
			return res, nil
		}
		last = why
		if time.Now().After(deadline) {
			res.State, res.Reason = DriverFailed, fmt.Sprintf("waited %s, the bound: %s", opts.Timeout, last)
			return res, nil
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(poll):
		}
	}
}

// look lists the driver and validator pods on node.
func look(ctx context.Context, kc kubernetes.Interface, node string, opts DriverPodOptions) ([]DriverPodView, error) {
	var out []DriverPodView
	for _, sel := range []struct {
		label      string
		validation bool
	}{{opts.PodLabel, false}, {opts.ValidatorLabel, true}} {
		if sel.label == "" {
			continue
		}
		l, err := kc.CoreV1().Pods(opts.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.label, FieldSelector: "spec.nodeName=" + node})
		if err != nil {
			return nil, fmt.Errorf("list pods %s in %s on %s: %w", sel.label, opts.Namespace, node, err)
		}
		for _, p := range l.Items {
			out = append(out, viewOf(p, sel.validation))
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Started.Before(out[j].Started) })
	return out, nil
}

func failingPod(pods []DriverPodView, node string) string {
	for i := len(pods) - 1; i >= 0; i-- {
		if pods[i].Node == node && pods[i].Failure != "" {
			return pods[i].Name
		}
	}
	return ""
}

// lastLines are a pod's last log lines (its failing container's where
// the API server can tell); an unreadable log is one line saying why.
func lastLines(ctx context.Context, kc kubernetes.Interface, opts DriverPodOptions, pod string) []string {
	n := opts.LogLines
	if n <= 0 {
		n = 20
	}
	var container string
	if p, err := kc.CoreV1().Pods(opts.Namespace).Get(ctx, pod, metav1.GetOptions{}); err == nil {
		container = viewOf(*p, false).Container
	}
	b, err := kc.CoreV1().Pods(opts.Namespace).GetLogs(pod, &corev1.PodLogOptions{Container: container, TailLines: &n}).DoRaw(ctx)
	if err != nil {
		return []string{"(its log could not be read: " + oneLine(err.Error()) + ")"}
	}
	var out []string
	for _, l := range bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n")) {
		out = append(out, string(l))
	}
	return out
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
