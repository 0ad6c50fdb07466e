package drain

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

func pod(ns, name string, l map[string]string, phase corev1.PodPhase) corev1.Pod {
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: l}, Status: corev1.PodStatus{Phase: phase}}
}

func TestHoldingAndDecideHold(t *testing.T) {
	sel, err := labels.Parse("workload-class=training")
	if err != nil {
		t.Fatal(err)
	}
	pods := []corev1.Pod{
		pod("training", "llama-ft-0", map[string]string{"workload-class": "training"}, corev1.PodRunning),
		pod("training", "done-0", map[string]string{"workload-class": "training"}, corev1.PodSucceeded),
		pod("training", "crashed-0", map[string]string{"workload-class": "training"}, corev1.PodFailed),
		pod("notebooks", "jupyter-ada", map[string]string{"workload-class": "notebook"}, corev1.PodRunning),
		pod("inference", "llm-0", map[string]string{"app": "llm"}, corev1.PodRunning),
		pod("training", "bert-0", map[string]string{"workload-class": "training"}, corev1.PodPending),
	}
	got := Holding(pods, sel)
	if len(got) != 2 || got[0].String() != "training/bert-0" || got[1].String() != "training/llama-ft-0" {
		t.Fatalf("holding %v", got)
	}
	if Holding(pods, labels.Everything()) != nil || Holding(pods, nil) != nil {
		t.Fatal("an empty selector must hold nothing (not every pod)")
	}
	since := time.Date(2026, 11, 3, 22, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name       string
		holding    []PodRef
		now        time.Time
		wait, stop bool
		reason     string
	}{
		{"nothing runs", nil, since, false, false, ""},
		{"waits", got, since.Add(10 * time.Minute), true, false, "2 jobs still run on the node (training/bert-0, training/llama-ft-0); the drain waits for them until 2026-11-03T23:00:00Z"},
		{"the wait ends: stop", got, since.Add(time.Hour), false, true, "after waiting 1h0m0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := DecideHold(tc.holding, since, tc.now, time.Hour)
			if h.Wait != tc.wait || h.Stop != tc.stop || !strings.Contains(h.Reason, tc.reason) {
				t.Fatalf("hold %+v", h)
			}
		})
	}
}
