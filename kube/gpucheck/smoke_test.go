package gpucheck

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
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
