package actors_test

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/mcp-patch/mcp-patch/kube/actors"
)

// A write refused because the object changed since it was read (a node's
// heartbeat, a DaemonSet's status) is read again and decided again; a
// conflict every time is an error, never a pass.
func TestClaimsReadAgainOnAConflict(t *testing.T) {
	for _, tc := range []struct {
		name      string
		conflicts int // writes refused before one goes through
		wantErr   bool
	}{
		{name: "no conflict"},
		{name: "one conflict", conflicts: 1},
		{name: "always a conflict", conflicts: 1000, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kc := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1"}},
				&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "kured", Namespace: "kube-system"}})
			refuse := func(resource string) {
				left := tc.conflicts
				kc.PrependReactor("*", resource, func(a k8stesting.Action) (bool, runtime.Object, error) {
					if (a.GetVerb() != "patch" && a.GetVerb() != "update") || left == 0 {
						return false, nil, nil
					}
					left--
					return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: resource}, "x", nil)
				})
			}
			refuse("nodes")
			refuse("daemonsets")
			cl := &actors.Claims{Kube: kc, Kured: actors.DefaultKured, TakeLock: true, LockID: "mcp-patch:srv-a", Round: "2026-12"}
			s, err := cl.SkipDriverUpgrade(t.Context(), "gpu-1")
			if tc.wantErr != (err != nil) || (!tc.wantErr && s != actors.SkipAdded) {
				t.Fatalf("skip: %q %v", s, err)
			}
			h, err := cl.TakeKuredLock(t.Context())
			if tc.wantErr != (err != nil) || (!tc.wantErr && !h.Taken) {
				t.Fatalf("take: %+v %v", h, err)
			}
		})
	}
}
