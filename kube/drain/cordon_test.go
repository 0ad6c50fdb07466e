package drain

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// UncordonIfOurs uncordons a node only when this identity cordoned it in
// this round, and says in words what it did.
func TestUncordonIfOurs(t *testing.T) {
	ctx := context.Background()
	node := func(name string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	}
	kc := fake.NewClientset(node("free"), node("ours"), node("theirs"), node("last-round"),
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "by-hand"}, Spec: corev1.NodeSpec{Unschedulable: true}})
	if _, err := Cordon(ctx, kc, "ours", "2026-11", "server-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := Cordon(ctx, kc, "theirs", "2026-11", "server-b"); err != nil {
		t.Fatal(err)
	}
	if _, err := Cordon(ctx, kc, "last-round", "2026-10", "server-a"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		node     string
		done     bool
		words    string
		cordoned bool // after
	}{
		{"free", false, "it was not cordoned", false},
		{"ours", true, "uncordoned (this round had cordoned it)", false},
		{"theirs", false, "left cordoned: this round did not cordon it", true},
		{"last-round", false, "left cordoned: this round did not cordon it", true},
		{"by-hand", false, "left cordoned: this round did not cordon it", true},
		{"missing", false, "left cordoned: read its cordon: ", false},
	} {
		done, words := UncordonIfOurs(ctx, kc, c.node, "server-a", "2026-11")
		if done != c.done || !strings.HasPrefix(words, c.words) {
			t.Errorf("%s: %v %q, want %v %q", c.node, done, words, c.done, c.words)
		}
		if n, err := kc.CoreV1().Nodes().Get(ctx, c.node, metav1.GetOptions{}); err == nil && n.Spec.Unschedulable != c.cordoned {
			t.Errorf("%s: unschedulable %v after %q", c.node, n.Spec.Unschedulable, words)
		}
	}
}
