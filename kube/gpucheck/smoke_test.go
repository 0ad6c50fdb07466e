package gpucheck

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestJudgeSmoke(t *testing.T) {
	unschedulable := func(msg string) *corev1.Pod {
		return &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: msg,
		}}}}
	}
	tests := []struct {
		name     string
		pod      *corev1.Pod
		require  bool
		status   string
		msg      string
		notFinal bool
	}{
		{name: "running", pod: &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning}}, status: StatusOK, msg: "running"},
		{name: "running, completion required", pod: &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning}}, require: true, notFinal: true},
		{name: "succeeded", pod: &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodSucceeded}}, status: StatusOK, msg: "succeeded"},
		{name: "scheduler: no free GPU",
			pod:    unschedulable("0/5 nodes are available: 1 Insufficient nvidia.com/gpu, 4 node(s) didn't match Pod's node affinity/selector."),
			status: StatusNoCapacity, msg: "no capacity — not a regression: scheduler: 0/5 nodes are available: 1 Insufficient nvidia.com/gpu"},
		{name: "scheduler: untolerated taint",
			pod:    unschedulable("0/5 nodes are available: 1 node(s) had untolerated taint {dedicated: llm}."),
			status: StatusFailed, msg: "smoke pod unschedulable: 0/5 nodes are available: 1 node(s) had untolerated taint"},
		{name: "pending, not judged yet", pod: &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending}}, notFinal: true},
		{name: "failed with exit code",
			pod: &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{
				Name: "smoke", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 9, Reason: "Error", Message: "No devices were found"}},
			}}}},
			status: StatusFailed, msg: "smoke pod failed: container smoke exit 9 Error No devices were found"},
		{name: "rejected by the kubelet",
			pod:    &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "UnexpectedAdmissionError", Message: "Allocate failed due to no healthy devices present"}},
			status: StatusFailed, msg: "smoke pod failed: UnexpectedAdmissionError Allocate failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, msg, final := judgeSmoke(tt.pod, tt.require)
			if final == tt.notFinal {
				t.Fatalf("final = %v, want %v", final, !tt.notFinal)
			}
			if status != tt.status || !strings.HasPrefix(msg, tt.msg) && !strings.Contains(msg, tt.msg) {
				t.Errorf("judge = %q, %q; want %q, %q", status, msg, tt.status, tt.msg)
			}
		})
	}
}

// An uncordoned node keeps the unschedulable taint until the node lifecycle
// controller removes it; the smoke pod waits for that instead of failing.
func TestWaitForUncordonTaint(t *testing.T) {
	taint := corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}
	node := func(cordoned bool, taints ...corev1.Taint) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-2"}, Spec: corev1.NodeSpec{Unschedulable: cordoned, Taints: taints}}
	}
	for _, tt := range []struct {
		name string
		node *corev1.Node
		want bool
	}{
		{"uncordoned, taint still there", node(false, taint), true},
		{"uncordoned, taint gone", node(false), false},
		{"still cordoned: a real refusal, not a wait", node(true, taint), false},
		{"another taint", node(false, corev1.Taint{Key: "dedicated", Value: "llm", Effect: corev1.TaintEffectNoSchedule}), false},
	} {
		if got := lingeringUncordonTaint(tt.node); got != tt.want {
			t.Errorf("%s: lingering %v, want %v", tt.name, got, tt.want)
		}
	}

	ctx := context.Background()
	kc := fake.NewClientset(node(false, taint))
	gets := 0
	kc.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		gets++
		if gets < 3 {
			return true, node(false, taint), nil
		}
		return true, node(false), nil
	})
	n, err := waitForUncordonTaint(ctx, kc, node(false, taint), time.Minute, time.Millisecond)
	if err != nil || lingeringUncordonTaint(n) || gets != 3 {
		t.Fatalf("after %d reads: node %+v, err %v", gets, n.Spec, err)
	}
	// A taint that never goes: the wait ends at its bound with the last reading.
	kc = fake.NewClientset(node(false, taint))
	n, err = waitForUncordonTaint(ctx, kc, node(false, taint), 20*time.Millisecond, time.Millisecond)
	if err != nil || !lingeringUncordonTaint(n) {
		t.Fatalf("bounded wait: node %+v, err %v", n.Spec, err)
	}
}
