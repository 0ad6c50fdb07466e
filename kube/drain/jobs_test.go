package drain

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes/fake"
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

func TestAnyPodMatchesAndSelectorRisk(t *testing.T) {
	p := pod("ml", "trainer-0", map[string]string{"workload-class": "training"}, corev1.PodRunning)
	kc := fake.NewClientset(&p)
	for _, c := range []struct {
		sel     string
		matches bool
		risk    string
	}{
		{"workload-class=training", true, ""},
		{"app=train", false, "drain.wait_for_jobs.selector app=train matches no pod in the cluster: the drain will wait for nothing"},
	} {
		sel, err := labels.Parse(c.sel)
		if err != nil {
			t.Fatal(err)
		}
		got, err := AnyPodMatches(t.Context(), kc, sel)
		if err != nil || got != c.matches {
			t.Fatalf("AnyPodMatches(%s) = %v %v, want %v", c.sel, got, err, c.matches)
		}
		if r := SelectorRisk(sel, got, nil); r != c.risk {
			t.Errorf("SelectorRisk(%s) = %q, want %q", c.sel, r, c.risk)
		}
	}
	if r := SelectorRisk(labels.Everything(), false, nil); r != "" {
		t.Errorf("no selector: %q", r)
	}
	if r := SelectorRisk(nil, false, nil); r != "" {
		t.Errorf("nil selector: %q", r)
	}
	sel, _ := labels.Parse("app=train")
	if r := SelectorRisk(sel, false, errors.New("pods is forbidden")); r != "drain.wait_for_jobs.selector app=train could not be checked against the cluster's pods: pods is forbidden" {
		t.Errorf("unreadable: %q", r)
	}
}
