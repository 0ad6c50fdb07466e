package service

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/mcp-patch/mcp-patch/answer"
	"github.com/mcp-patch/mcp-patch/config"
	"github.com/mcp-patch/mcp-patch/intent"
	"github.com/mcp-patch/mcp-patch/internal/testsupport/fakes"
	"github.com/mcp-patch/mcp-patch/kube"
	"github.com/mcp-patch/mcp-patch/kube/actors"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// A wait for another party is answered in progress, naming the holder and
// the bound; it is neither a refusal nor a failure.
func TestFromWindowWordsAWait(t *testing.T) {
	until := time.Date(2026, 12, 7, 4, 30, 0, 0, time.UTC)
	err := FromWindow(&window.Waiting{Node: "gpu-02", Until: until,
		Holders: []actors.Holder{{Actor: actors.Kured, Who: "gpu-07", Verdict: actors.Wait, What: "kured holds its reboot lock for node gpu-07"}}})
	var p *answer.Pending
	if !errors.As(err, &p) || !strings.Contains(strings.Join(p.Reasons, "\n"), "at most until 2026-12-07T04:30:00Z") ||
		!strings.Contains(strings.Join(p.Reasons, "\n"), "kured (gpu-07) holds it") || !strings.Contains(p.NextAction, "again") {
		t.Fatalf("%#v", err)
	}
}

// The window looks at the others as the intent's other_actors says (or
// their defaults), asks the maintenance operator only with a requestor id,
// and a test double of the cluster looks for nobody.
func TestWatchOthersTakesTheIntentsSettings(t *testing.T) {
	c := config.DefaultConfig()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{actors.NodeMaintenances: "NodeMaintenanceList"})
	clients := &kube.Clients{Kube: fake.NewClientset(), Dynamic: dyn}
	d := &Service{Config: &c, Identity: "srv-a", Cluster: func(context.Context) (*kube.Clients, error) { return clients, nil }}

	w := &window.Window{}
	if err := d.watchOthers(t.Context(), &window.Round{ID: "2026-12"}, w); err != nil {
		t.Fatal(err)
	}
	wt, ok := w.Others.(*actors.Watch)
	if !ok || w.OthersWait != defaultOthersWait || w.Requestor != nil || wt.Kured != actors.DefaultKured || wt.Self.KuredLockID != "mcp-patch:srv-a" {
		t.Fatalf("defaults: others %#v, wait %s, requestor %v", w.Others, w.OthersWait, w.Requestor)
	}
	if cl, ok := w.Claims.(*actors.Claims); !ok || cl.Kured != actors.DefaultKured || !cl.TakeLock || cl.LockID != "mcp-patch:srv-a" || cl.Round != "2026-12" {
		t.Fatalf("claims by default: %#v", w.Claims)
	}

	st := intent.Settings{OtherActors: &intent.OtherActorsSettings{WaitMinutes: 5, RequestorID: "mcp-patch.example.com",
		Kured: &intent.KuredSettings{Namespace: "kured", DaemonSet: "kured-x"}, StandingTaints: []string{"dedicated"}}}
	w = &window.Window{}
	if err := d.watchOthers(t.Context(), &window.Round{ID: "2026-12", Settings: st}, w); err != nil {
		t.Fatal(err)
	}
	wt = w.Others.(*actors.Watch)
	if w.OthersWait != 5*time.Minute || w.Requestor == nil || w.Asked == nil || wt.Kured.Name != "kured-x" || wt.Self.RequestorID != "mcp-patch.example.com" {
		t.Fatalf("from the intent: wait %s, requestor %v, watch %+v", w.OthersWait, w.Requestor, wt)
	}
	if w.Others != window.Others(d.others.watch) {
		t.Fatal("each window gets a new watch: the first-seen times are lost between calls")
	}
	if cl := w.Claims.(*actors.Claims); cl.Kured.Name != "kured-x" || cl.Kured.Namespace != "kured" {
		t.Fatalf("claims from the intent: %#v", cl)
	}
	off := false
	st.OtherActors.Kured.TakeLock = &off
	w = &window.Window{}
	if err := d.watchOthers(t.Context(), &window.Round{ID: "2026-12", Settings: st}, w); err != nil {
		t.Fatal(err)
	}
	if cl := w.Claims.(*actors.Claims); cl.TakeLock || cl.Kured.Name != "kured-x" || w.Others.(*actors.Watch).Kured.Name != "kured-x" {
		t.Fatalf("take_lock false: claims %#v: kured's lock is still looked at and given back, never taken", cl)
	}

	d.Drainer = &fakes.Cluster{}
	w = &window.Window{}
	if err := d.watchOthers(t.Context(), &window.Round{ID: "2026-12", Settings: st}, w); err != nil || w.Others != nil || w.Requestor != nil {
		t.Fatalf("with a test double of the cluster: %v %v %v", err, w.Others, w.Requestor)
	}
}

// The round's end gives kured's lock back through the intent's settings,
// journaled; a cluster that cannot be reached while the journal says the
// round holds it is a journaled failure, answered as one.
func TestReleaseKuredLockAtTheRoundsEnd(t *testing.T) {
	c := config.DefaultConfig()
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "kured", Namespace: "kube-system",
		Annotations: map[string]string{actors.KuredLockAnnotation: `{"nodeID":"mcp-patch:srv-a","created":"2026-12-07T02:00:00Z","TTL":0}`}}}
	kc := fake.NewClientset(ds)
	var reach error
	d := &Service{Config: &c, Identity: "srv-a", Cluster: func(context.Context) (*kube.Clients, error) {
		if reach != nil {
			return nil, reach
		}
		return &kube.Clients{Kube: kc}, nil
	}}
	j, err := round.Open(filepath.Join(t.TempDir(), "2026-12"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := j.Close(); err != nil {
			t.Error(err)
		}
	})
	s := &window.Round{ID: "2026-12", Journal: j}
	if _, err := j.OtherActors(round.Record{Event: round.EventKuredLockTaken, Detail: "taken"}); err != nil {
		t.Fatal(err)
	}

	reach = errors.New("connection refused")
	var fail *answer.Failure
	if _, err := d.ReleaseKuredLock(t.Context(), s); !errors.As(err, &fail) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("release without the cluster: %v", err)
	}
	if k := j.State().KuredLock; !k.Held || !strings.Contains(k.Failure, "connection refused") {
		t.Fatalf("journal after a failed release: %+v", k)
	}

	reach = nil
	reasons, err := d.ReleaseKuredLock(t.Context(), s)
	if err != nil || len(reasons) != 1 || reasons[0] != "kured's reboot lock given back" {
		t.Fatalf("release: %v %v", reasons, err)
	}
	if got, err := kc.AppsV1().DaemonSets("kube-system").Get(t.Context(), "kured", metav1.GetOptions{}); err != nil || got.Annotations[actors.KuredLockAnnotation] != "" {
		t.Fatalf("kured's lock after the release: %v %v", got.Annotations, err)
	}
	if k := j.State().KuredLock; k.Held || k.Failure != "" {
		t.Fatalf("journal after the release: %+v", k)
	}
	if reasons, err := d.ReleaseKuredLock(t.Context(), s); err != nil || reasons != nil {
		t.Fatalf("release again: %v %v, want nothing to do", reasons, err)
	}
}
