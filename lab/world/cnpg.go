package world

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/mcp-patch/mcp-patch/kube"
)

// CloudNativePG phases the World reports (CNPG's own strings).
const (
	PhaseHealthy             = "Cluster in healthy state"
	PhaseSwitchover          = "Switchover in progress"
	PhaseFailOver            = "Failing over"
	PhaseWaitingForInstances = "Waiting for the instances to become active"
)

// PostgresStatus is the part of the CNPG Cluster status the World keeps.
type PostgresStatus struct {
	Phase          string
	CurrentPrimary string
	TargetPrimary  string
	Instances      int
	ReadyInstances int
	Healthy        []string
	Failed         []string
}

// PostgresStatus reads the CNPG Cluster's status.
func (w *World) PostgresStatus(ctx context.Context) (PostgresStatus, error) {
	n := w.opts.Names
	u, err := w.dc.Resource(kube.CNPGClusters).Namespace(n.PostgresNamespace).Get(ctx, n.PostgresCluster, metav1.GetOptions{})
	if err != nil {
		return PostgresStatus{}, fmt.Errorf("read CNPG cluster %s/%s: %w", n.PostgresNamespace, n.PostgresCluster, err)
	}
	return statusOf(u), nil
}

func statusOf(u *unstructured.Unstructured) PostgresStatus {
	var s PostgresStatus
	s.Phase, _, _ = unstructured.NestedString(u.Object, "status", "phase")
	s.CurrentPrimary, _, _ = unstructured.NestedString(u.Object, "status", "currentPrimary")
	s.TargetPrimary, _, _ = unstructured.NestedString(u.Object, "status", "targetPrimary")
	i, _, _ := unstructured.NestedInt64(u.Object, "spec", "instances")
	s.Instances = int(i)
	r, _, _ := unstructured.NestedInt64(u.Object, "status", "readyInstances")
	s.ReadyInstances = int(r)
	s.Healthy, _, _ = unstructured.NestedStringSlice(u.Object, "status", "instancesStatus", "healthy")
	s.Failed, _, _ = unstructured.NestedStringSlice(u.Object, "status", "instancesStatus", "failed")
	return s
}

// cnpgTime is CloudNativePG's timestamp format.
func cnpgTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000Z") }

func (w *World) patchClusterStatus(ctx context.Context, status map[string]any) error {
	n := w.opts.Names
	body, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return err
	}
	_, err = w.dc.Resource(kube.CNPGClusters).Namespace(n.PostgresNamespace).Patch(ctx, n.PostgresCluster, types.MergePatchType, body, metav1.PatchOptions{FieldManager: fieldManager}, "status")
	if err != nil {
		return fmt.Errorf("update CNPG cluster %s/%s status: %w", n.PostgresNamespace, n.PostgresCluster, err)
	}
	return nil
}

// instanceView is what the operator sees of one instance.
type instanceView struct {
	slot  instanceSlot
	pod   *corev1.Pod
	ready bool
	// nodeUsable: the node is Ready, its host is up and it is not
	// cordoned: a primary may move there.
	nodeUsable bool
	// nodeCordoned and nodeDown say why the node is not usable.
	nodeCordoned, nodeDown bool
}

// reconcilePostgres plays the CloudNativePG operator: it recreates missing
// instance pods on their own node (reusePVC), switches the primary over
// when its node is cordoned, fails over when its node is down, and keeps
// readyInstances, instancesStatus and phase.
func (w *World) reconcilePostgres(ctx context.Context) error {
	o := w.opts
	n := o.Names
	u, err := w.dc.Resource(kube.CNPGClusters).Namespace(n.PostgresNamespace).Get(ctx, n.PostgresCluster, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("read CNPG cluster: %w", err)
	}
	old := statusOf(u)
	views, err := w.instanceViews(ctx)
	if err != nil {
		return err
	}
	byName := map[string]*instanceView{}
	for i := range views {
		byName[views[i].slot.name] = &views[i]
	}

	now := time.Now()
	current, target := old.CurrentPrimary, old.TargetPrimary
	if target == "" {
		target = current
	}
	status := map[string]any{}
	phase, reason := "", ""

	w.mu.Lock()
	switchStart := w.switchStart
	w.mu.Unlock()

	switch {
	case current != target:
		// A switchover or failover, started here or by a person (kubectl
		// cnpg promote sets targetPrimary): the target takes over once
		// it has had its time and is ready.
		if switchStart.IsZero() {
			switchStart = now
		}
		phase = old.Phase
		if phase != PhaseSwitchover && phase != PhaseFailOver {
			phase = PhaseSwitchover
		}
		reason = fmt.Sprintf("lab: %s → %s", current, target)
		if tv := byName[target]; tv != nil && tv.ready && now.Sub(switchStart) >= o.SwitchoverDelay {
			w.log.Info("lab postgres primary moved", "from", current, "to", target, "node", tv.slot.node, "phase", phase)
			current = target
			switchStart = time.Time{}
			status["currentPrimaryTimestamp"] = cnpgTime(now)
			phase = ""
		}
	default:
		pv := byName[current]
		switch {
		case pv == nil:
			// A primary the World does not know; leave it to a person.
		case pv.nodeCordoned && !pv.nodeDown:
			if cand := pickCandidate(views, current); cand != "" {
				target, phase, switchStart = cand, PhaseSwitchover, now
				reason = fmt.Sprintf("lab: node %s of primary %s is cordoned", pv.slot.node, current)
				status["targetPrimaryTimestamp"] = cnpgTime(now)
				w.log.Info("lab postgres switchover", "from", current, "to", cand, "reason", reason)
			}
		case pv.nodeDown || pv.pod == nil:
			if cand := pickCandidate(views, current); cand != "" {
				target, phase, switchStart = cand, PhaseFailOver, now
				reason = fmt.Sprintf("lab: primary %s unavailable (node %s down or pod gone)", current, pv.slot.node)
				status["targetPrimaryTimestamp"] = cnpgTime(now)
				w.log.Info("lab postgres failover", "from", current, "to", cand, "reason", reason)
			}
		}
	}
	w.mu.Lock()
	w.switchStart = switchStart
	w.mu.Unlock()

	if err := w.ensureInstancePods(ctx, views, current); err != nil {
		return err
	}

	var healthy, failed, names []string
	reported := map[string]any{}
	for _, v := range views {
		names = append(names, v.slot.name)
		if v.ready {
			healthy = append(healthy, v.slot.name)
		} else {
			failed = append(failed, v.slot.name)
		}
		ip := ""
		if v.pod != nil {
			ip = v.pod.Status.PodIP
		}
		reported[v.slot.name] = map[string]any{"isPrimary": v.slot.name == current, "timeLineID": int64(1), "ip": ip}
	}
	if phase == "" {
		if len(healthy) == len(views) {
			phase, reason = PhaseHealthy, ""
		} else {
			phase, reason = PhaseWaitingForInstances, "lab: not ready: "+fmt.Sprint(failed)
		}
	}
	instancesStatus := map[string]any{"healthy": nilIfEmpty(healthy), "failed": nilIfEmpty(failed)}
	status["currentPrimary"] = current
	status["targetPrimary"] = target
	status["phase"] = phase
	status["phaseReason"] = reason
	status["instances"] = int64(len(views))
	status["readyInstances"] = int64(len(healthy))
	status["instanceNames"] = names
	status["instancesStatus"] = instancesStatus
	status["instancesReportedState"] = reported
	readyCond := "False"
	if phase == PhaseHealthy {
		readyCond = "True"
	}
	status["conditions"] = []any{map[string]any{
		"type": "Ready", "status": readyCond, "reason": readyReason(readyCond), "message": phase,
		"lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
	}}

	if old.CurrentPrimary == current && old.TargetPrimary == target && old.Phase == phase &&
		old.ReadyInstances == len(healthy) && old.Instances == len(views) &&
		slices.Equal(old.Healthy, healthy) && slices.Equal(old.Failed, failed) {
		return nil
	}
	return w.patchClusterStatus(ctx, status)
}

func readyReason(s string) string {
	if s == "True" {
		return "ClusterIsReady"
	}
	return "ClusterIsNotReady"
}

func nilIfEmpty(s []string) any {
	if len(s) == 0 {
		return nil
	}
	return s
}

func (w *World) instanceViews(ctx context.Context) ([]instanceView, error) {
	n := w.opts.Names
	pods, err := w.pods.Pods(n.PostgresNamespace).List(labels.SelectorFromSet(labels.Set{cnpgClusterLabel: n.PostgresCluster}))
	if err != nil {
		return nil, fmt.Errorf("list CNPG instance pods: %w", err)
	}
	byName := map[string]*corev1.Pod{}
	for _, p := range pods {
		byName[p.Name] = p
	}
	var views []instanceView
	for _, s := range w.instances {
		v := instanceView{slot: s, pod: byName[s.name]}
		node, err := w.nodes.Get(s.node)
		up := w.hostUp(s.node)
		switch {
		case err != nil || node == nil:
			v.nodeDown = true
		default:
			v.nodeDown = !up || !kube.NodeReady(node)
			v.nodeCordoned = node.Spec.Unschedulable
		}
		v.nodeUsable = !v.nodeDown && !v.nodeCordoned
		v.ready = v.pod != nil && podReady(v.pod) && !v.nodeDown && v.pod.Spec.NodeName == s.node
		views = append(views, v)
	}
	return views, nil
}

// why says what keeps an instance from being ready, for a wait's reason.
func (v instanceView) why() string {
	where := v.slot.name + " on " + v.slot.node + ": "
	switch {
	case v.ready:
		return where + "ready"
	case v.pod == nil:
		return where + "no pod"
	case v.nodeDown:
		return where + "node down or NotReady"
	case v.pod.DeletionTimestamp != nil:
		return where + "pod being deleted"
	case v.pod.Spec.NodeName != v.slot.node:
		return where + "pod on node " + v.pod.Spec.NodeName
	default:
		return fmt.Sprintf("%spod %s, not Ready", where, v.pod.Status.Phase)
	}
}

// pickCandidate chooses the ready instance on a usable node, first in
// instance order, other than the current primary.
func pickCandidate(views []instanceView, current string) string {
	for _, v := range views {
		if v.slot.name != current && v.ready && v.nodeUsable {
			return v.slot.name
		}
	}
	return ""
}

// ensureInstancePods recreates missing instance pods (pinned to their own
// node, where their volume is) and keeps the role labels in line with the
// primary.
func (w *World) ensureInstancePods(ctx context.Context, views []instanceView, primary string) error {
	o := w.opts
	for _, v := range views {
		role := roleReplica
		if v.slot.name == primary {
			role = rolePrimary
		}
		if v.pod == nil {
			pod := instancePod(o, w.clusterUID, v.slot.name, v.slot.node, role)
			if _, err := w.kc.CoreV1().Pods(o.Names.PostgresNamespace).Create(ctx, pod, metav1.CreateOptions{FieldManager: fieldManager}); err != nil && !isAlreadyExists(err) {
				return fmt.Errorf("recreate CNPG instance pod %s: %w", v.slot.name, err)
			}
			w.log.Info("lab postgres instance pod recreated", "pod", v.slot.name, "node", v.slot.node)
			continue
		}
		if v.pod.DeletionTimestamp != nil || (v.pod.Labels[cnpgRoleLabel] == role && v.pod.Labels[cnpgLegacyRole] == role) {
			continue
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{cnpgRoleLabel: role, cnpgLegacyRole: role}}})
		if _, err := w.kc.CoreV1().Pods(o.Names.PostgresNamespace).Patch(ctx, v.pod.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: fieldManager}); err != nil && !isNotFound(err) {
			return fmt.Errorf("label CNPG instance pod %s %s: %w", v.pod.Name, role, err)
		}
	}
	return nil
}
