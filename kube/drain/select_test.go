package drain

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// judgePod decides as kubectl drain --ignore-daemonsets does; the lab
// tests (TestPreview) hold it to the real API server's pods.
func TestJudgePod(t *testing.T) {
	yes := true
	owned := func(kind string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: "p", Namespace: "ns", OwnerReferences: []metav1.OwnerReference{{Kind: kind, Name: "o", Controller: &yes}}}
	}
	emptyDir := corev1.PodSpec{Volumes: []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}}
	mirror := metav1.ObjectMeta{Name: "p", Namespace: "ns", Annotations: map[string]string{corev1.MirrorPodAnnotationKey: "x"}}
	cases := []struct {
		name   string
		pod    corev1.Pod
		pol    Policy
		dsGone bool
		dsErr  error
		want   verdict
	}{
		{"replica", corev1.Pod{ObjectMeta: owned("ReplicaSet")}, Policy{}, false, nil, verdict{evict: true}},
		{"daemonset stays", corev1.Pod{ObjectMeta: owned("DaemonSet")}, Policy{}, false, nil, verdict{warning: daemonSetWarning}},
		{"orphaned daemonset pod", corev1.Pod{ObjectMeta: owned("DaemonSet")}, Policy{}, true, nil, verdict{fatal: `daemonsets.apps "o" not found`}},
		{"orphaned daemonset pod, unmanaged allowed", corev1.Pod{ObjectMeta: owned("DaemonSet")}, Policy{DeleteUnmanagedPods: true}, true, nil, verdict{evict: true}},
		{"daemonset unreadable", corev1.Pod{ObjectMeta: owned("DaemonSet")}, Policy{}, false, errors.New("forbidden"), verdict{fatal: "forbidden"}},
		{"finished daemonset pod", corev1.Pod{ObjectMeta: owned("DaemonSet"), Status: corev1.PodStatus{Phase: corev1.PodSucceeded}}, Policy{}, false, nil, verdict{evict: true}},
		{"mirror", corev1.Pod{ObjectMeta: mirror}, Policy{}, false, nil, verdict{}},
		{"emptyDir", corev1.Pod{ObjectMeta: owned("ReplicaSet"), Spec: emptyDir}, Policy{}, false, nil, verdict{fatal: localStorageFail}},
		{"emptyDir allowed", corev1.Pod{ObjectMeta: owned("ReplicaSet"), Spec: emptyDir}, Policy{DeleteEmptyDirData: true}, false, nil, verdict{evict: true}},
		{"finished emptyDir", corev1.Pod{ObjectMeta: owned("ReplicaSet"), Spec: emptyDir, Status: corev1.PodStatus{Phase: corev1.PodFailed}}, Policy{}, false, nil, verdict{evict: true}},
		{"bare", corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}}, Policy{}, false, nil, verdict{fatal: unmanagedFail}},
		{"bare allowed", corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}}, Policy{DeleteUnmanagedPods: true}, false, nil, verdict{evict: true, warning: unmanagedWarning}},
		{"bare with emptyDir", corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: emptyDir}, Policy{DeleteUnmanagedPods: true}, false, nil, verdict{fatal: localStorageFail}},
		{"finished bare", corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Status: corev1.PodStatus{Phase: corev1.PodSucceeded}}, Policy{}, false, nil, verdict{evict: true}},
	}
	for _, c := range cases {
		got := judgePod(&c.pod, c.pol, func() (bool, error) { return c.dsGone, c.dsErr })
		if got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}
