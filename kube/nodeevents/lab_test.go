package nodeevents_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/mcp-patch/mcp-patch/internal/testsupport/labkube"
	"github.com/mcp-patch/mcp-patch/kube/nodeevents"
	"github.com/mcp-patch/mcp-patch/lab/cluster"
)

func TestMain(m *testing.M) { labkube.Main(m) }

// Against a real API server: the Events land where kubectl describe node
// looks for them (involvedObject kind Node, name, uid = name), and the
// annotations follow the latest step.
func TestStepEventsAndAnnotations(t *testing.T) {
	c := labkube.Cluster(t)
	kc := c.Client()
	labkube.Nodes(t, c, cluster.Node{Name: "events-1"})
	r := nodeevents.New(kc, "ops-1", nil)
	defer r.Shutdown()
	ctx := t.Context()
	for _, s := range []nodeevents.Step{
		{Node: "events-1", Round: "2026-11", Step: "drain", State: "done", Kernel: "old 6.8.0-40-generic", Message: "round 2026-11: drained (4 pods evicted)"},
		{Node: "events-1", Round: "2026-11", Step: "trial_boot", State: "done", Kernel: "trial 6.8.0-45-generic (default 6.8.0-40-generic)"},
		{Node: "events-1", Round: "2026-11", Step: "verify", State: "failed", Warning: true, Message: "round 2026-11: verify failed: bond0 has 1 active slave"},
	} {
		if err := r.Record(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	sel := fields.AndSelectors(fields.OneTermEqualSelector("involvedObject.kind", "Node"),
		fields.OneTermEqualSelector("involvedObject.name", "events-1"),
		fields.OneTermEqualSelector("involvedObject.uid", "events-1")).String()
	var evs []corev1.Event
	deadline := time.Now().Add(2 * time.Minute)
	for len(evs) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("events after 2m: %+v", evs)
		}
		l, err := kc.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			t.Fatal(err)
		}
		evs = l.Items
		time.Sleep(200 * time.Millisecond)
	}
	got := map[string]corev1.Event{}
	for _, e := range evs {
		got[e.Reason] = e
	}
	if e := got["PatchVerifyFailed"]; e.Type != corev1.EventTypeWarning || !strings.Contains(e.Message, "bond0") || e.Source.Component != "mcp-patch" {
		t.Errorf("verify event %+v", e)
	}
	if _, ok := got["PatchTrialBootDone"]; !ok {
		t.Errorf("no PatchTrialBootDone among %v", got)
	}
	n, err := kc.CoreV1().Nodes().Get(context.Background(), "events-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a := n.Annotations; a[nodeevents.AnnotationRound] != "2026-11" || a[nodeevents.AnnotationStep] != "verify: failed" ||
		a[nodeevents.AnnotationKernel] != "trial 6.8.0-45-generic (default 6.8.0-40-generic)" {
		t.Errorf("annotations %v", a)
	}
	// A node that does not exist: a clear error, nothing else changed.
	if err := r.Record(ctx, nodeevents.Step{Node: "no-such-node", Round: "2026-11", Step: "drain", State: "done"}); err == nil ||
		!strings.Contains(err.Error(), "annotate node no-such-node") {
		t.Errorf("err = %v", err)
	}
}

func TestReason(t *testing.T) {
	for in, want := range map[[2]string]string{
		{"trial_boot", "done"}: "PatchTrialBootDone", {"drain", "started"}: "PatchDrainStarted",
		{"gpu_acceptance", "failed"}: "PatchGpuAcceptanceFailed", {"rollback", "done"}: "PatchRollbackDone",
	} {
		if got := (nodeevents.Step{Step: in[0], State: in[1]}).Reason(); got != want {
			t.Errorf("%v: %s, want %s", in, got, want)
		}
	}
}
