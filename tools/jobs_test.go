package tools

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/mcp-patch/mcp-patch/intent"
	"github.com/mcp-patch/mcp-patch/kube"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// A training job on the node holds the drain (nothing written), until the
// bounded wait ends: then a stop, which the chokepoint journals. The pure
// decision is tested in kube/drain; the lab covers it on a real API server.
func TestHoldForJobs(t *testing.T) {
	now := time.Date(2026, 11, 3, 22, 0, 0, 0, time.UTC)
	j, err := round.Open(filepath.Join(t.TempDir(), "2026-11"), round.WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	kc := fake.NewClientset(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "training", Name: "llama-ft-0", Labels: map[string]string{"workload-class": "training"}},
		Spec:       corev1.PodSpec{NodeName: "gpu-a"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}})
	d := &Deps{Now: func() time.Time { return now }, Cluster: func(context.Context) (*kube.Clients, error) { return &kube.Clients{Kube: kc}, nil }}
	s := &session{j: j, id: "2026-11", settings: intent.Settings{Drain: &intent.DrainSettings{EmptyDirPolicy: "delete", TimeoutMinutes: 30,
		WaitForJobs: &intent.WaitForJobs{Selector: "workload-class=training", MaxWaitMinutes: 60}}}}

	err = d.holdForJobs(t.Context(), s, "gpu-a")
	var r *Refusal
	if !errors.As(err, &r) || !strings.Contains(err.Error(), "training/llama-ft-0") || !strings.Contains(err.Error(), "until 2026-11-03T23:00:00Z") {
		t.Fatalf("first look: %v", err)
	}
	now = now.Add(30 * time.Minute)
	if err := d.holdForJobs(t.Context(), s, "gpu-a"); !errors.As(err, &r) || !strings.Contains(err.Error(), "until 2026-11-03T23:00:00Z") {
		t.Fatalf("the wait must be bounded from its start: %v", err)
	}
	now = now.Add(31 * time.Minute)
	var st *window.Stop
	if err := d.holdForJobs(t.Context(), s, "gpu-a"); !errors.As(err, &st) || st.Step != round.StepDrain || !strings.Contains(st.Reasons[0], "after waiting 1h0m0s") {
		t.Fatalf("after the bound: %v", err)
	}
	// The job finished: the drain goes ahead.
	if err := kc.CoreV1().Pods("training").Delete(t.Context(), "llama-ft-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := d.holdForJobs(t.Context(), s, "gpu-a"); err != nil {
		t.Fatal(err)
	}
}
