package service

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

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
