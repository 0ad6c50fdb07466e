package gpucheck

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
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

func testNode(cordoned, ready bool, taints ...corev1.Taint) *corev1.Node {
	status := corev1.ConditionTrue
	if !ready {
		status = corev1.ConditionFalse
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu-2"},
		Spec:       corev1.NodeSpec{Unschedulable: cordoned, Taints: taints},
		Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}}},
	}
}

var (
	uncordonTaint = corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}
	notReadyTaint = corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}
	unreachable   = corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute}
	llmTaint      = corev1.Taint{Key: "dedicated", Value: "llm", Effect: corev1.TaintEffectNoSchedule}
	gpuTaint      = corev1.Taint{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}
)

// A node back from its reboot and uncordon may not be Ready yet, and keeps
// the node lifecycle controller's taints a moment longer; the smoke pod
// waits for them instead of failing. What a person set stays the answer.
func TestUnsettled(t *testing.T) {
	for _, tt := range []struct {
		name string
		node *corev1.Node
		want string
	}{
		{"uncordoned, Ready, no taints", testNode(false, true), ""},
		{"uncordoned, unschedulable taint still there", testNode(false, true, uncordonTaint), "taint node.kubernetes.io/unschedulable:NoSchedule"},
		{"back from its reboot, kubelet not Ready yet", testNode(false, false, notReadyTaint),
			"the kubelet does not post Ready; taint node.kubernetes.io/not-ready:NoSchedule"},
		{"Ready, the controller has yet to drop not-ready", testNode(false, true, notReadyTaint), "taint node.kubernetes.io/not-ready:NoSchedule"},
		{"unreachable", testNode(false, false, unreachable), "the kubelet does not post Ready; taint node.kubernetes.io/unreachable:NoExecute"},
		{"still cordoned: a real refusal, not a wait", testNode(true, false, uncordonTaint, notReadyTaint), ""},
		{"a person's taint", testNode(false, true, llmTaint), ""},
	} {
		if got := strings.Join(unsettled(tt.node), "; "); got != tt.want {
			t.Errorf("%s: unsettled %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestWaitSettled(t *testing.T) {
	ctx := context.Background()
	kc := fake.NewClientset(testNode(false, false, notReadyTaint))
	readings := []*corev1.Node{testNode(false, false, notReadyTaint), testNode(false, true, notReadyTaint, uncordonTaint), testNode(false, true)}
	gets := 0
	kc.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		n := readings[min(gets, len(readings)-1)]
		gets++
		return true, n, nil
	})
	n, err := waitSettled(ctx, kc, testNode(false, false, notReadyTaint), time.Minute, time.Millisecond)
	if err != nil || len(unsettled(n)) > 0 || gets != 3 {
		t.Fatalf("after %d reads: node %+v, err %v", gets, n.Spec, err)
	}
	// A kubelet that never comes back: the wait ends at its bound with the
	// last reading, which says why.
	kc = fake.NewClientset(testNode(false, false, notReadyTaint))
	n, err = waitSettled(ctx, kc, testNode(false, false, notReadyTaint), 20*time.Millisecond, time.Millisecond)
	if err != nil || len(unsettled(n)) != 2 {
		t.Fatalf("bounded wait: node %+v, err %v", n.Spec, err)
	}
	// A cancelled context is an error, not a reading.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := waitSettled(cctx, kc, testNode(false, false), time.Minute, time.Millisecond); err == nil {
		t.Fatal("cancelled wait: no error")
	}
}

// The scheduler may refuse the smoke pod on a reading of the node from
// before its taints cleared; that refusal is waited out once, any other is
// the answer.
func TestStaleRefusal(t *testing.T) {
	refused := func(msg string) *corev1.Pod {
		return &corev1.Pod{
			Spec: corev1.PodSpec{Tolerations: []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists}}},
			Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
				Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: msg,
			}}},
		}
	}
	taintMsg := "0/5 nodes are available: 1 node(s) had untolerated taint(s), 4 node(s) didn't satisfy plugin(s) [NodeAffinity]."
	for _, tt := range []struct {
		name string
		pod  *corev1.Pod
		node *corev1.Node
		want bool
	}{
		{"taint refusal, node now clean", refused(taintMsg), testNode(false, true), true},
		{"taint refusal, node's GPU taint is tolerated", refused(taintMsg), testNode(false, true, gpuTaint), true},
		{"taint refusal, a person's taint is still there", refused(taintMsg), testNode(false, true, llmTaint), false},
		{"taint refusal, not-ready taint still there", refused(taintMsg), testNode(false, true, notReadyTaint), false},
		{"taint refusal, node cordoned again", refused(taintMsg), testNode(true, true), false},
		{"refused for memory, node clean", refused("0/5 nodes are available: 1 Insufficient memory."), testNode(false, true), false},
		{"not refused", &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed}}, testNode(false, true), false},
	} {
		if got := staleRefusal(tt.pod, tt.node); got != tt.want {
			t.Errorf("%s: stale %v, want %v", tt.name, got, tt.want)
		}
	}
}

// SmokePod waits for a node that is not back yet and says why when it
// never comes; a refusal made on an older reading of the node is waited
// out while the node gives the scheduler no reason to refuse.
func TestSmokePodWaitsForTheNode(t *testing.T) {
	ctx := context.Background()
	withGPUs := func(n *corev1.Node) *corev1.Node {
		n.Status.Allocatable = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")}
		return n
	}
	opts := SmokeOptions{Image: "cuda", Timeout: 200 * time.Millisecond, PollInterval: time.Millisecond}

	kc := fake.NewClientset(withGPUs(testNode(false, false, notReadyTaint)))
	res, err := SmokePod(ctx, kc, "gpu-2", opts)
	if err != nil {
		t.Fatal(err)
	}
	want := "node not ready for the smoke pod after 200ms: the kubelet does not post Ready; taint node.kubernetes.io/not-ready:NoSchedule"
	if res.Status != StatusFailed || res.Message != want || res.Pod != "" {
		t.Errorf("kubelet never back: %+v", res)
	}

	taintMsg := "0/5 nodes are available: 1 node(s) had untolerated taint(s)."
	for _, tt := range []struct {
		name     string
		readings []string // the pod's successive states: "refused" or "running"
		taints   []corev1.Taint
		status   string
		message  string
	}{
		{"refused on an older reading, then scheduled", []string{"refused", "refused", "running"}, []corev1.Taint{gpuTaint}, StatusOK,
			"smoke pod running on the node with its GPUs allocated"},
		{"refused for a taint the node still has", []string{"refused", "running"}, []corev1.Taint{llmTaint}, StatusFailed,
			"smoke pod unschedulable: 0/5 nodes are available: 1 node(s) had untolerated taint(s)."},
		{"refused on an older reading, never retried", []string{"refused"}, nil, StatusFailed,
			"timed out after 300ms in phase Pending (scheduler: 0/5 nodes are available: 1 node(s) had untolerated taint(s).)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			kc := fake.NewClientset(withGPUs(testNode(false, true, tt.taints...)))
			var created *corev1.Pod
			kc.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
				created = a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
				created.Name = "smoke-1"
				return false, nil, nil
			})
			gets, refusals := 0, 0
			kc.PrependReactor("get", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
				state := tt.readings[min(gets, len(tt.readings)-1)]
				gets++
				p := created.DeepCopy()
				switch state {
				case "running":
					p.Status.Phase = corev1.PodRunning
				default:
					refusals++
					p.Status.Phase = corev1.PodPending
					p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: taintMsg}}
				}
				return true, p, nil
			})
			timeout := time.Minute
			if tt.readings[len(tt.readings)-1] == "refused" {
				timeout = 300 * time.Millisecond
			}
			res, err := SmokePod(ctx, kc, "gpu-2", SmokeOptions{Image: "cuda", Timeout: timeout, PollInterval: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != tt.status || res.Message != tt.message || res.Cleanup != "deleted" {
				t.Errorf("after %d readings (%d refused): %+v", gets, refusals, res)
			}
		})
	}
}
