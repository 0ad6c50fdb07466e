package actors_test

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcp-patch/mcp-patch/internal/testsupport/labkube"
	"github.com/mcp-patch/mcp-patch/kube/actors"
	"github.com/mcp-patch/mcp-patch/lab/cluster"
)

// What the round claims from the others, on the real API server: the GPU
// Operator's per-node driver-upgrade skip is set only where absent, with
// the record that it is the round's in the same write, removed only where
// that record is, and a person's skip label is never touched; kured's lock
// is taken through Claims only where kured is installed and the intent
// lets it, and given back.
func TestClaimsOnARealAPIServer(t *testing.T) {
	c := labkube.Cluster(t)
	ctx := t.Context()
	kc := c.Client()
	ns := labkube.Namespace(t, c)
	labkube.Nodes(t, c,
		cluster.Node{Name: "claims-free"},
		cluster.Node{Name: "claims-person", Labels: map[string]string{actors.LabelGPUDriverUpgradeSkip: "true"}},
	)
	node := func(name string) *corev1.Node {
		t.Helper()
		n, err := kc.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	cl := &actors.Claims{Kube: kc, Kured: actors.KuredRef{Namespace: ns, Name: "kured"}, TakeLock: true, LockID: "mcp-patch:srv-a", Round: "2026-12"}
	if s, err := cl.SkipDriverUpgrade(ctx, "claims-free"); s != actors.SkipAdded || err != nil {
		t.Fatalf("skip a free node: %q %v", s, err)
	}
	if n := node("claims-free"); n.Labels[actors.LabelGPUDriverUpgradeSkip] != "true" || n.Annotations[actors.AnnotationDriverUpgradeSkipBy] != "2026-12" {
		t.Fatalf("after the skip: labels %v annotations %v", n.Labels, n.Annotations)
	}
	if s, err := cl.SkipDriverUpgrade(ctx, "claims-free"); s != actors.SkipOurs || err != nil {
		t.Fatalf("skip again (a resumed window, a second server): %q %v", s, err)
	}
	if s, err := cl.SkipDriverUpgrade(ctx, "claims-person"); s != actors.SkipTheirs || err != nil {
		t.Fatalf("skip a node a person skipped: %q %v", s, err)
	}
	personBefore := node("claims-person").ResourceVersion
	if gone, err := cl.UnskipDriverUpgrade(ctx, "claims-person"); gone || err != nil {
		t.Fatalf("unskip a person's skip: %v %v, want it left", gone, err)
	}
	if n := node("claims-person"); n.ResourceVersion != personBefore || n.Labels[actors.LabelGPUDriverUpgradeSkip] != "true" {
		t.Fatalf("a person's skip label was touched: %v (version %s, was %s)", n.Labels, n.ResourceVersion, personBefore)
	}
	if gone, err := cl.UnskipDriverUpgrade(ctx, "claims-free"); !gone || err != nil {
		t.Fatalf("unskip the round's: %v %v", gone, err)
	}
	if n := node("claims-free"); n.Labels[actors.LabelGPUDriverUpgradeSkip] != "" || n.Annotations[actors.AnnotationDriverUpgradeSkipBy] != "" {
		t.Fatalf("after the unskip: labels %v annotations %v", n.Labels, n.Annotations)
	}
	if gone, err := cl.UnskipDriverUpgrade(ctx, "claims-free"); gone || err != nil {
		t.Fatalf("unskip again: %v %v, want nothing to do", gone, err)
	}

	// kured not installed: nothing to take, nothing to give back.
	if h, err := cl.TakeKuredLock(ctx); h.Installed || h.Held || err != nil {
		t.Fatalf("take without kured: %+v %v", h, err)
	}
	if gone, err := cl.ReleaseKuredLock(ctx); gone || err != nil {
		t.Fatalf("release without kured: %v %v", gone, err)
	}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "kured", Namespace: ns},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"name": "kured"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"name": "kured"}},
				Spec: corev1.PodSpec{NodeSelector: map[string]string{"claims-test": "none"},
					Containers: []corev1.Container{{Name: "kured", Image: "ghcr.io/kubereboot/kured:1.23.0"}}}}}}
	if _, err := kc.AppsV1().DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	off := *cl
	off.TakeLock = false // the intent's take_lock: false
	if h, err := off.TakeKuredLock(ctx); h.Held || err != nil {
		t.Fatalf("take with take_lock off: %+v %v", h, err)
	}
	if h, err := cl.TakeKuredLock(ctx); !h.Installed || !h.Taken || !h.Held || err != nil {
		t.Fatalf("take: %+v %v", h, err)
	}
	got, err := kc.AppsV1().DaemonSets(ns).Get(ctx, "kured", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	locks, err := actors.ParseKuredLock(got.Annotations[actors.KuredLockAnnotation])
	if err != nil || len(locks) != 1 || locks[0].NodeID != "mcp-patch:srv-a" || time.Since(locks[0].Created) > time.Hour {
		t.Fatalf("kured's lock as kured reads it: %+v %v", locks, err)
	}
	if h, err := cl.TakeKuredLock(ctx); h.Taken || !h.Held || err != nil {
		t.Fatalf("take again (a second server, a resumed round): %+v %v", h, err)
	}
	if gone, err := off.ReleaseKuredLock(ctx); !gone || err != nil {
		t.Fatalf("release (take_lock turned off since it was taken): %v %v", gone, err)
	}
	if gone, err := cl.ReleaseKuredLock(ctx); gone || err != nil {
		t.Fatalf("release again: %v %v, want nothing to do", gone, err)
	}
}
