package world

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/mcp-patch/mcp-patch/kube"
	"github.com/mcp-patch/mcp-patch/lab/cluster"
)

// SetHostUp records that a host went down (up false) or came back (up
// true, having booted kernel; "" keeps the kernel it reported). The loop
// then makes the cluster show it: the host's Node NotReady and its etcd
// member stopped while it is down; the Node Ready with the new kernel, the
// member started and its pods Ready again once it is back. Hosts with a
// probe follow the probe instead.
func (w *World) SetHostUp(name string, up bool, kernel string) error {
	w.mu.Lock()
	h := w.hosts[name]
	if h == nil {
		w.mu.Unlock()
		return fmt.Errorf("set host %s up=%v: no such host", name, up)
	}
	h.wantUp = up
	if up && kernel != "" {
		h.kernel = kernel
	}
	w.mu.Unlock()
	w.poke()
	return nil
}

// OnDown and OnUp are SetHostUp for a fleet that reports power events
// (HostEvents in the report): the host went down; the host is up again
// running kernel.
func (w *World) OnDown(host string) { _ = w.SetHostUp(host, false, "") }

// OnUp: see OnDown.
func (w *World) OnUp(host, kernel string) { _ = w.SetHostUp(host, true, kernel) }

// HostShownUp reports whether the cluster has been made to show the host
// up (its Node's readiness follows).
func (w *World) HostShownUp(name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	h := w.hosts[name]
	return h != nil && h.isUp
}

func (w *World) hostUp(name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	h := w.hosts[name]
	return h == nil || (h.wantUp && h.isUp)
}

func (w *World) pollProbes() {
	for name, probe := range w.opts.Probes {
		up, kernel := probe()
		w.mu.Lock()
		h := w.hosts[name]
		h.wantUp = up
		if up && kernel != "" {
			h.kernel = kernel
		}
		w.mu.Unlock()
	}
}

// reconcileHosts brings each host's Node and etcd member in line with its
// power.
func (w *World) reconcileHosts(ctx context.Context) error {
	w.mu.Lock()
	var todo []hostState
	for _, h := range w.hosts {
		if h.wantUp != h.isUp {
			todo = append(todo, *h)
		}
	}
	w.mu.Unlock()
	sort.Slice(todo, func(i, j int) bool { return todo[i].host.Name < todo[j].host.Name })
	for _, h := range todo {
		var err error
		if h.wantUp {
			err = w.hostCameUp(ctx, h)
		} else {
			err = w.hostWentDown(ctx, h)
		}
		if err != nil {
			return err
		}
		w.mu.Lock()
		w.hosts[h.host.Name].isUp = h.wantUp
		w.mu.Unlock()
	}
	return nil
}

// hostWentDown: the kubelet stops posting, so the Node turns NotReady;
// kwok must not heartbeat it meanwhile (its annotation changes, and the
// node-power policy refuses a Ready status while AnnotationPower is down);
// the host's etcd member stops.
func (w *World) hostWentDown(ctx context.Context, h hostState) error {
	name := h.host.Name
	uids := map[types.UID]bool{}
	if pods, err := w.pods.List(labels.Everything()); err == nil {
		for _, p := range pods {
			if p.Spec.NodeName == name && p.DeletionTimestamp == nil {
				uids[p.UID] = true
			}
		}
	}
	meta, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{
		cluster.KwokNodeAnnotation: KwokNodeUnmanaged,
		AnnotationPower:            PowerDown,
	}}})
	if _, err := w.kc.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, meta, metav1.PatchOptions{FieldManager: fieldManager}); err != nil {
		return fmt.Errorf("host %s down: mark node: %w", name, err)
	}
	now := metav1.Now()
	status, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []any{map[string]any{
		"type": "Ready", "status": "False", "reason": "KubeletNotReady",
		"message":            "lab: the host is down (rebooting or powered off); the kubelet is not posting",
		"lastHeartbeatTime":  now,
		"lastTransitionTime": now,
	}}}})
	if _, err := w.kc.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, status, metav1.PatchOptions{FieldManager: fieldManager}, "status"); err != nil {
		return fmt.Errorf("host %s down: node NotReady: %w", name, err)
	}
	if i, ok := w.etcdIndex[name]; ok && w.opts.Etcd != nil {
		w.mu.Lock()
		w.etcdDown[i] = true
		w.mu.Unlock()
		if err := w.opts.Etcd.StopMember(i); err != nil {
			return fmt.Errorf("host %s down: %w", name, err)
		}
	}
	w.mu.Lock()
	w.hosts[name].podUIDs = uids
	w.hosts[name].boots++
	w.mu.Unlock()
	w.log.Info("lab host down: node NotReady", "node", name)
	return nil
}

// hostCameUp: the kubelet reports the booted kernel and Ready (kwok takes
// the Node back); the etcd member starts unless a fault keeps it lost.
func (w *World) hostCameUp(ctx context.Context, h hostState) error {
	name := h.host.Name
	info, _ := json.Marshal(map[string]any{"status": map[string]any{"nodeInfo": map[string]any{
		"kernelVersion": h.kernel,
		"bootID":        string(uuid.NewUUID()),
	}}})
	if _, err := w.kc.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, info, metav1.PatchOptions{FieldManager: fieldManager}, "status"); err != nil {
		return fmt.Errorf("host %s up: report kernel: %w", name, err)
	}
	if w.opts.RestartsOnReboot {
		if err := w.showRebootRestarts(ctx, name); err != nil {
			return fmt.Errorf("host %s up: %w", name, err)
		}
	}
	meta, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{
		cluster.KwokNodeAnnotation: cluster.KwokNodeAnnotationValue,
		AnnotationPower:            nil,
	}}})
	if _, err := w.kc.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, meta, metav1.PatchOptions{FieldManager: fieldManager}); err != nil {
		return fmt.Errorf("host %s up: hand node back to kwok: %w", name, err)
	}
	if i, ok := w.etcdIndex[name]; ok && w.opts.Etcd != nil {
		w.startMember(i)
	}
	w.log.Info("lab host up: node handed back to kwok", "node", name, "kernel", h.kernel)
	return nil
}

// showRebootRestarts shows the restart of every pod that stayed on the
// rebooted host, read from the API server (not the informer's cache), before
// the host's Node turns Ready again: a kubelet starts those containers anew
// before it reports the node Ready, so no gate can see the node Ready with
// its pods still showing their pre-reboot containers. A pod the World holds
// (an etcd member not started yet) shows the restart and stays not Ready. The
// restart is a fixed target count (restartBump), so a retry after an error
// does not show a second one; the kubelet play forgets it once shown.
func (w *World) showRebootRestarts(ctx context.Context, name string) error {
	w.mu.Lock()
	uids := w.hosts[name].podUIDs
	w.mu.Unlock()
	if len(uids) == 0 {
		return nil
	}
	list, err := w.kc.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + name})
	if err != nil {
		return fmt.Errorf("list its pods: %w", err)
	}
	pods := make([]*corev1.Pod, 0, len(list.Items))
	for i := range list.Items {
		pods = append(pods, &list.Items[i])
	}
	holds := w.holds(pods)
	for _, p := range pods {
		if !uids[p.UID] || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		w.mu.Lock()
		if w.restartBumps == nil {
			w.restartBumps = map[types.UID]*restartBump{}
		}
		b := w.restartBumps[p.UID]
		if b == nil || b.boot != w.hosts[name].boots {
			b = &restartBump{boot: w.hosts[name].boots, target: oneMoreRestart(p)}
			w.restartBumps[p.UID] = b
		}
		target := b.target
		w.mu.Unlock()
		var err error
		if h, held := holds[p.Namespace+"/"+p.Name]; held {
			err = w.patchPodStatus(ctx, p, false, &h, target)
		} else {
			err = w.patchPodStatus(ctx, p, true, nil, target)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// startMember starts etcd member i in the background unless a fault keeps
// it lost; its mirror pod turns Ready once it answers.
func (w *World) startMember(i int) {
	w.mu.Lock()
	if w.etcdHeld[i] || w.etcdStarting[i] || w.closed {
		w.mu.Unlock()
		return
	}
	if w.etcdStarting == nil {
		w.etcdStarting = map[int]bool{}
	}
	w.etcdStarting[i] = true
	w.mu.Unlock()
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		ctx, cancel := context.WithTimeout(w.loopCtx, 2*time.Minute)
		defer cancel()
		err := w.opts.Etcd.StartMember(ctx, i)
		w.mu.Lock()
		w.etcdStarting[i] = false
		if err == nil {
			w.etcdDown[i] = false
		}
		w.mu.Unlock()
		if err != nil {
			w.log.Warn("lab etcd member did not start; retrying on the next host event", "member", i, "err", err)
			return
		}
		w.log.Info("lab etcd member started", "member", i)
		w.poke()
	}()
}

// podHold is a pod the World keeps from being Ready.
type podHold struct {
	reason string
	// waiting is the container's waiting reason (CrashLoopBackOff), "" to
	// leave it running but not ready.
	waiting string
	// restarts is the least restart count to show.
	restarts int32
}

// holds lists the pods kept from being Ready: the etcd mirror pods of
// stopped members and what the active faults hold.
func (w *World) holds(pods []*corev1.Pod) map[string]podHold {
	out := map[string]podHold{}
	w.mu.Lock()
	for name, i := range w.etcdIndex {
		if w.etcdDown[i] || w.etcdHeld[i] {
			out[metav1.NamespaceSystem+"/etcd-"+name] = podHold{reason: "etcd member stopped"}
		}
	}
	faults := append([]Fault(nil), w.faults...)
	w.mu.Unlock()
	for _, f := range faults {
		if hf, ok := f.(podHolder); ok {
			for k, v := range hf.holds(w, pods) {
				out[k] = v
			}
		}
	}
	return out
}

// podHolder is a fault that keeps pods from being Ready.
type podHolder interface {
	holds(w *World, pods []*corev1.Pod) map[string]podHold
}

// reconcilePods plays the kubelet's status reports: a Running pod on a
// host that is up with a Ready Node is Ready (after a reboot, or after the
// node controller marked it not ready), unless the World holds it or its
// containers fail (cluster.AnnotationContainerFails).
func (w *World) reconcilePods(ctx context.Context) error {
	pods, err := w.pods.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("list pods: %w", err)
	}
	holds := w.holds(pods)
	var errs []error
	for _, p := range pods {
		if p.Spec.NodeName == "" || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		if _, fails := p.Annotations[cluster.AnnotationContainerFails]; fails {
			continue // its containers never start (the lab's kwok stage shows why)
		}
		key := p.Namespace + "/" + p.Name
		if h, held := holds[key]; held {
			if !podMatchesHold(p, h) {
				errs = append(errs, w.patchPodStatus(ctx, p, false, &h, nil))
			}
			continue
		}
		if !w.hostUp(p.Spec.NodeName) {
			continue
		}
		node, err := w.nodes.Get(p.Spec.NodeName)
		if err != nil || !kube.NodeReady(node) {
			continue
		}
		atLeast := w.pendingRestarts(p)
		if !podReady(p) || atLeast != nil || containersWaiting(p) {
			errs = append(errs, w.patchPodStatus(ctx, p, true, nil, atLeast))
		}
	}
	return joinFirst(errs)
}

// restartBump is the restart a reboot shows on one pod that stayed on its
// host. Its target, each container's restart count to show, is fixed when
// the host comes up (showRebootRestarts), so that reporting it again (a
// patch that timed out on this side but landed, or a pass over a cache that
// has not seen the last patch yet) shows the same count, not one more.
type restartBump struct {
	boot   int // the host's boot it belongs to (hostState.boots)
	target map[string]int32
}

// pendingRestarts returns the restart counts p must show for a reboot not
// yet reported, or nil when there is none or the pod shows it already
// (then it is forgotten).
func (w *World) pendingRestarts(p *corev1.Pod) map[string]int32 {
	w.mu.Lock()
	defer w.mu.Unlock()
	b := w.restartBumps[p.UID]
	if b == nil {
		return nil
	}
	if podReady(p) && restartsShown(p, b.target) {
		delete(w.restartBumps, p.UID)
		return nil
	}
	return b.target
}

// oneMoreRestart is each container's restart count plus one.
func oneMoreRestart(p *corev1.Pod) map[string]int32 {
	out := map[string]int32{}
	for _, c := range p.Spec.Containers {
		out[c.Name] = 1
	}
	for _, cs := range p.Status.ContainerStatuses {
		if _, ok := out[cs.Name]; ok {
			out[cs.Name] = cs.RestartCount + 1
		}
	}
	return out
}

// restartsShown reports whether every container of p shows at least its
// target restart count.
func restartsShown(p *corev1.Pod, target map[string]int32) bool {
	shown := map[string]int32{}
	for _, cs := range p.Status.ContainerStatuses {
		shown[cs.Name] = cs.RestartCount
	}
	for name, want := range target {
		if got, ok := shown[name]; !ok || got < want {
			return false
		}
	}
	return true
}

func podMatchesHold(p *corev1.Pod, h podHold) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return false
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Ready || cs.RestartCount < h.restarts {
			return false
		}
		if h.waiting != "" && (cs.State.Waiting == nil || cs.State.Waiting.Reason != h.waiting) {
			return false
		}
	}
	return true
}

func containersWaiting(p *corev1.Pod) bool {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Waiting != nil {
			return true
		}
	}
	return false
}

// patchPodStatus sets the pod's Ready and ContainersReady conditions and
// its containers' states the way a kubelet reports them; restartsAtLeast
// raises containers' restart counts (a reboot), never by more than to it.
func (w *World) patchPodStatus(ctx context.Context, p *corev1.Pod, ready bool, h *podHold, restartsAtLeast map[string]int32) error {
	conds, statuses := kubeletStatus(p, ready, h, restartsAtLeast, metav1.Now())
	body, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": conds, "containerStatuses": statuses}})
	if err != nil {
		return err
	}
	_, err = w.kc.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: fieldManager}, "status")
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("report pod %s/%s ready=%v: %w", p.Namespace, p.Name, ready, err)
	}
	return nil
}

// kubeletStatus is the status a kubelet would report for p: Ready or not,
// held by h (nil: none), each container's restart count raised to
// restartsAtLeast where it is lower (a container so raised starts anew).
func kubeletStatus(p *corev1.Pod, ready bool, h *podHold, restartsAtLeast map[string]int32, now metav1.Time) ([]corev1.PodCondition, []corev1.ContainerStatus) {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	conds := make([]corev1.PodCondition, 0, len(p.Status.Conditions)+2)
	seen := map[corev1.PodConditionType]bool{}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady || c.Type == corev1.ContainersReady {
			seen[c.Type] = true
			if c.Status != status {
				c.Status, c.LastTransitionTime = status, now
			}
			c.Reason, c.Message = "", ""
			if !ready {
				c.Reason, c.Message = "ContainersNotReady", "lab: "+h.reason
			}
		}
		conds = append(conds, c)
	}
	for _, t := range []corev1.PodConditionType{corev1.PodReady, corev1.ContainersReady} {
		if !seen[t] {
			conds = append(conds, corev1.PodCondition{Type: t, Status: status, LastTransitionTime: now})
		}
	}
	byName := map[string]corev1.ContainerStatus{}
	for _, cs := range p.Status.ContainerStatuses {
		byName[cs.Name] = cs
	}
	var statuses []corev1.ContainerStatus
	for _, c := range p.Spec.Containers {
		cs, ok := byName[c.Name]
		if !ok {
			cs = corev1.ContainerStatus{Name: c.Name, Image: c.Image}
		}
		cs.Ready = ready
		started := ready
		cs.Started = &started
		restarted := false
		if want, ok := restartsAtLeast[c.Name]; ok && cs.RestartCount < want {
			cs.RestartCount, restarted = want, true
			cs.LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 255, Reason: "Unknown", FinishedAt: now,
			}}
		}
		switch {
		case h != nil && h.waiting != "":
			if cs.RestartCount < h.restarts {
				cs.RestartCount = h.restarts
			}
			cs.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
				Reason: h.waiting, Message: "lab: " + h.reason,
			}}
			cs.LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 1, Reason: "Error", FinishedAt: now,
			}}
		case cs.State.Running == nil || restarted:
			cs.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}
		}
		statuses = append(statuses, cs)
	}
	return conds, statuses
}

// joinFirst returns the first non-nil error, saying how many more there
// were.
func joinFirst(errs []error) error {
	var first error
	more := 0
	for _, e := range errs {
		if e == nil {
			continue
		}
		if first == nil {
			first = e
		} else {
			more++
		}
	}
	if first != nil && more > 0 {
		return fmt.Errorf("%w (and %d more)", first, more)
	}
	return first
}
