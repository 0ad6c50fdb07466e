package usednonces

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/mcp-patch/mcp-patch/kube"
	"github.com/mcp-patch/mcp-patch/policy"
)

// The fake clientset checks the store's logic; races between servers,
// which need the API server's resourceVersion checks, are tested against a
// real one (lab_test.go).

var t0 = time.Date(2026, 11, 29, 15, 0, 0, 0, time.UTC)

func nonce(i int) string { return strings.Repeat("0", 31) + string("0123456789abcdef"[i%16]) }

func storeFor(kc kubernetes.Interface) *Store {
	return &Store{Clients: func(context.Context) (*kube.Clients, error) { return &kube.Clients{Kube: kc}, nil }, Namespace: "kube-system"}
}

func TestConsumeThenUsedThenReplayed(t *testing.T) {
	kc := fake.NewClientset()
	s := storeFor(kc)
	if used, err := s.Used(t.Context(), nonce(1)); err != nil || used {
		t.Fatalf("Used before any ConfigMap = %v, %v", used, err)
	}
	if err := s.Consume(t.Context(), nonce(1), "id-1", t0, t0.Add(30*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if used, err := s.Used(t.Context(), nonce(1)); err != nil || !used {
		t.Fatalf("Used after Consume = %v, %v", used, err)
	}
	err := s.Consume(t.Context(), nonce(1), "id-1", t0.Add(time.Minute), t0.Add(30*time.Minute))
	if !errors.Is(err, policy.ErrReplayed) || !strings.Contains(err.Error(), "approval id-1, used 2026-11-29T15:00:00Z") {
		t.Fatalf("second Consume = %v, want replayed naming the first use", err)
	}
	if err := s.Consume(t.Context(), nonce(2), "id-2", t0, t0.Add(30*time.Minute)); err != nil {
		t.Fatal(err)
	}
	cm, err := kc.CoreV1().ConfigMaps("kube-system").Get(t.Context(), DefaultName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(cm.Data) != 2 || cm.Labels["app.kubernetes.io/managed-by"] != "mcp-patch" {
		t.Errorf("ConfigMap %+v", cm)
	}
}

func TestConsumePrunesExpiredMarks(t *testing.T) {
	kc := fake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: DefaultName, Namespace: "kube-system"},
		Data: map[string]string{
			nonce(1): Mark{ApprovalID: "old", At: t0.Add(-26 * time.Hour), Expires: t0.Add(-2 * time.Hour)}.String(),
			nonce(2): Mark{ApprovalID: "recent", At: t0.Add(-time.Hour), Expires: t0.Add(-30 * time.Minute)}.String(),
			nonce(3): "unreadable",
		}})
	s := storeFor(kc)
	if err := s.Consume(t.Context(), nonce(4), "new", t0, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	cm, _ := kc.CoreV1().ConfigMaps("kube-system").Get(t.Context(), DefaultName, metav1.GetOptions{})
	for n, want := range map[string]bool{nonce(1): false, nonce(2): true, nonce(3): true, nonce(4): true} {
		if _, kept := cm.Data[n]; kept != want {
			t.Errorf("nonce %s kept=%v, want %v", n, kept, want)
		}
	}
}

func TestConsumeRetriesConflicts(t *testing.T) {
	kc := fake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: DefaultName, Namespace: "kube-system"}})
	conflicts := 2
	kc.PrependReactor("update", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if conflicts > 0 {
			conflicts--
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, DefaultName, errors.New("changed"))
		}
		return false, nil, nil
	})
	if err := storeFor(kc).Consume(t.Context(), nonce(5), "id", t0, t0.Add(time.Hour)); err != nil {
		t.Fatalf("Consume after two conflicts: %v", err)
	}
	if conflicts != 0 {
		t.Errorf("%d conflicts left", conflicts)
	}
	// A server that always loses gives up with an error, never success.
	kc.PrependReactor("update", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, DefaultName, errors.New("changed"))
	})
	if err := storeFor(kc).Consume(t.Context(), nonce(6), "id", t0, t0.Add(time.Hour)); err == nil || !strings.Contains(err.Error(), "lost the race") {
		t.Errorf("Consume always in conflict = %v", err)
	}
}

func TestRefusals(t *testing.T) {
	s := storeFor(fake.NewClientset())
	if err := s.Consume(t.Context(), "XYZ", "id", t0, t0); err == nil {
		t.Error("bad nonce accepted")
	}
	if err := s.Consume(t.Context(), nonce(1), "two words", t0, t0); err == nil {
		t.Error("approval id with a space accepted")
	}
	down := &Store{Clients: func(context.Context) (*kube.Clients, error) { return nil, errors.New("connection refused") }, Namespace: "ns"}
	if _, err := down.Used(t.Context(), nonce(1)); err == nil {
		t.Error("Used with the cluster down said unused")
	}
	if err := down.Consume(t.Context(), nonce(1), "id", t0, t0); err == nil {
		t.Error("Consume with the cluster down succeeded")
	}
	if _, err := (&Store{}).Used(t.Context(), nonce(1)); err == nil {
		t.Error("a Store without client and namespace answered")
	}
}
