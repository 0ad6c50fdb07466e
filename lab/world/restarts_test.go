package world

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func podWithRestarts(ready bool, counts map[string]int32) *corev1.Pod {
	p := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	for _, name := range []string{"etcd", "sidecar"} {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: name})
		if c, ok := counts[name]; ok {
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
				Name: name, RestartCount: c, Ready: ready,
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
			})
		}
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
	return p
}

func shownRestarts(statuses []corev1.ContainerStatus) map[string]int32 {
	out := map[string]int32{}
	for _, cs := range statuses {
		out[cs.Name] = cs.RestartCount
	}
	return out
}

// One reboot is one restart, however often its report is sent again: a
// patch that timed out here but landed, or a pass over a cache that has not
// seen the last patch, must not show a second restart (a gate would count
// it as a new failure) nor take the first one back.
func TestRebootRestartShownOnce(t *testing.T) {
	before := podWithRestarts(false, map[string]int32{"etcd": 2, "sidecar": 0})
	target := oneMoreRestart(before)
	if target["etcd"] != 3 || target["sidecar"] != 1 {
		t.Fatalf("oneMoreRestart = %v, want etcd 3 sidecar 1", target)
	}
	if missing := oneMoreRestart(podWithRestarts(false, map[string]int32{"etcd": 4})); missing["sidecar"] != 1 || missing["etcd"] != 5 {
		t.Errorf("a container with no status yet: %v, want sidecar 1 etcd 5", missing)
	}
	now := metav1.Now()
	cases := []struct {
		name string
		pod  *corev1.Pod // what the reconcile pass sees
		want map[string]int32
	}{
		{"first report", before, map[string]int32{"etcd": 3, "sidecar": 1}},
		{"sent again after it landed", podWithRestarts(true, map[string]int32{"etcd": 3, "sidecar": 1}), map[string]int32{"etcd": 3, "sidecar": 1}},
		{"stale cache, before it landed", before, map[string]int32{"etcd": 3, "sidecar": 1}},
		{"a later crash counted above it stays", podWithRestarts(true, map[string]int32{"etcd": 7, "sidecar": 1}), map[string]int32{"etcd": 7, "sidecar": 1}},
	}
	for _, tc := range cases {
		_, statuses := kubeletStatus(tc.pod, true, nil, target, now)
		got := shownRestarts(statuses)
		if got["etcd"] != tc.want["etcd"] || got["sidecar"] != tc.want["sidecar"] {
			t.Errorf("%s: restarts shown %v, want %v", tc.name, got, tc.want)
		}
	}
	_, statuses := kubeletStatus(before, true, nil, nil, now)
	if got := shownRestarts(statuses); got["etcd"] != 2 || got["sidecar"] != 0 {
		t.Errorf("no reboot pending: restarts shown %v, want them unchanged", got)
	}
}

func TestRestartsShown(t *testing.T) {
	target := map[string]int32{"etcd": 3, "sidecar": 1}
	cases := []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"all at target", podWithRestarts(true, map[string]int32{"etcd": 3, "sidecar": 1}), true},
		{"above target", podWithRestarts(true, map[string]int32{"etcd": 4, "sidecar": 2}), true},
		{"one below", podWithRestarts(true, map[string]int32{"etcd": 3, "sidecar": 0}), false},
		{"a container without status", podWithRestarts(true, map[string]int32{"etcd": 3}), false},
	}
	for _, tc := range cases {
		if got := restartsShown(tc.pod, target); got != tc.want {
			t.Errorf("%s: restartsShown = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// The pending bump keeps its target until the pod shows it Ready, then is
// forgotten; its target, fixed when the host came up, does not move.
func TestPendingRestarts(t *testing.T) {
	w := &World{}
	before := podWithRestarts(false, map[string]int32{"etcd": 2, "sidecar": 0})
	before.UID = "u1"
	if got := w.pendingRestarts(before); got != nil {
		t.Fatalf("no reboot: pending %v, want nil", got)
	}
	w.restartBumps = map[types.UID]*restartBump{"u1": {target: oneMoreRestart(before)}}
	first := w.pendingRestarts(before)
	if first["etcd"] != 3 {
		t.Fatalf("first report: %v, want etcd 3", first)
	}
	landed := podWithRestarts(false, map[string]int32{"etcd": 3, "sidecar": 1})
	landed.UID = "u1"
	if again := w.pendingRestarts(landed); again["etcd"] != 3 {
		t.Errorf("landed but not Ready yet: %v, want the same target kept", again)
	}
	if stale := w.pendingRestarts(before); stale["etcd"] != 3 {
		t.Errorf("a stale cache after the first report: %v, want etcd 3 (not 4)", stale)
	}
	shown := podWithRestarts(true, map[string]int32{"etcd": 3, "sidecar": 1})
	shown.UID = "u1"
	if got := w.pendingRestarts(shown); got != nil {
		t.Errorf("shown and Ready: %v, want nil", got)
	}
	if _, ok := w.restartBumps["u1"]; ok {
		t.Error("the bump is not forgotten once shown")
	}
}
