package windowlock

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/mcp-patch/mcp-patch/round"
)

var (
	pubCfg   = Config{Namespace: "kube-system", Identity: "ops-1/101"}
	pubAt    = time.Date(2026, 11, 3, 9, 30, 15, 123456789, time.UTC)
	leaseGVR = coordinationv1.SchemeGroupVersion.WithResource("leases")
)

// head is round's journal head at seq, as published with commit n.
func head(round string, seq uint64, commit int) Published {
	c := sha256.Sum256(fmt.Appendf(nil, "%s/%d", round, seq))
	g := sha1.Sum(fmt.Appendf(nil, "commit %d", commit))
	return Published{Round: round, Seq: seq, Chain: hex.EncodeToString(c[:]), Commit: hex.EncodeToString(g[:]), By: "ops-1/101", At: pubAt}
}

func readHead(t *testing.T, kc *fake.Clientset) Published {
	t.Helper()
	p, found, err := ReadPublished(t.Context(), kc, pubCfg)
	if err != nil || !found {
		t.Fatalf("ReadPublished = %+v, %v, %v", p, found, err)
	}
	return p
}

func TestPublishValidation(t *testing.T) {
	good := head("2026-11", 7, 1)
	tests := []struct {
		name string
		edit func(p *Published)
		want string
	}{
		{"no round", func(p *Published) { p.Round = "" }, "not a valid round id"},
		{"round with a slash", func(p *Published) { p.Round = "2026/11" }, "not a valid round id"},
		{"seq 0", func(p *Published) { p.Seq = 0 }, "seq is 0"},
		{"short chain", func(p *Published) { p.Chain = p.Chain[:63] }, "chain"},
		{"uppercase chain", func(p *Published) { p.Chain = strings.ToUpper(p.Chain) }, "chain"},
		{"sha256 commit", func(p *Published) { p.Commit = p.Chain }, "commit"},
		{"commit not hex", func(p *Published) { p.Commit = strings.Repeat("g", 40) }, "commit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kc := fake.NewClientset()
			p := good
			tt.edit(&p)
			err := Publish(t.Context(), kc, pubCfg, p)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Publish = %v, want an error saying %q", err, tt.want)
			}
			if len(kc.Actions()) != 0 {
				t.Errorf("a refused head reached the API server: %v", kc.Actions())
			}
		})
	}
	if err := Publish(t.Context(), fake.NewClientset(), Config{}, good); err == nil || !strings.Contains(err.Error(), "identity is required") {
		t.Errorf("Publish without an identity = %v", err)
	}
}

// A head published before any window creates the Lease with no holder;
// the first window then takes it as a fresh Lease.
func TestPublishCreatesLeaseWithoutHolder(t *testing.T) {
	kc := fake.NewClientset()
	p := head("2026-11", 3, 1)
	p.By, p.At = "", time.Time{} // defaults: the identity, now
	before := time.Now()
	if err := Publish(t.Context(), kc, pubCfg, p); err != nil {
		t.Fatal(err)
	}
	l, err := kc.CoordinationV1().Leases("kube-system").Get(t.Context(), DefaultName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(coordinationv1.LeaseSpec{}, l.Spec); diff != "" {
		t.Errorf("created Lease spec (-want +got):\n%s", diff)
	}
	got := readHead(t, kc)
	if got.By != pubCfg.Identity || got.At.Before(before.Add(-time.Second)) || got.At.After(time.Now()) {
		t.Errorf("defaults: by %q at %v", got.By, got.At)
	}
	p.By, p.At = got.By, got.At
	if diff := cmp.Diff(p, got); diff != "" {
		t.Errorf("ReadPublished (-want +got):\n%s", diff)
	}
	if _, held, err := Inspect(t.Context(), kc, pubCfg); held || err != nil {
		t.Errorf("Inspect after Publish: held=%v %v", held, err)
	}
	_, h, err := Acquire(t.Context(), kc, pubCfg, "2026-11", "gpu-1")
	if err != nil {
		t.Fatal(err)
	}
	if h.Transitions != 0 {
		t.Errorf("first holder of a published Lease: %d transitions, want 0", h.Transitions)
	}
}

// Publishing while a window holds the Lease changes only the head's
// annotations; Acquire, Renew and Release keep the head and any other
// annotation.
func TestPublishKeepsHolderAndAnnotations(t *testing.T) {
	kc := fake.NewClientset()
	other := pubCfg
	other.Identity = "ops-2/202"
	lock, _, err := Acquire(t.Context(), kc, pubCfg, "2026-11", "gpu-1")
	if err != nil {
		t.Fatal(err)
	}
	leases := kc.CoordinationV1().Leases("kube-system")
	l, err := leases.Get(t.Context(), DefaultName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.Annotations["example.com/owner"] = "platform"
	if l, err = leases.Update(t.Context(), l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	p := head("2026-11", 12, 1)
	if err := Publish(t.Context(), kc, other, p); err != nil {
		t.Fatal(err)
	}
	after, err := leases.Get(t.Context(), DefaultName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(l.Spec, after.Spec); diff != "" {
		t.Errorf("Publish changed the spec (-before +after):\n%s", diff)
	}
	want := map[string]string{
		AnnotationRound: "2026-11", AnnotationNode: "gpu-1", "example.com/owner": "platform",
		AnnotationJournalRound: "2026-11", AnnotationJournalSeq: "12", AnnotationJournalChain: p.Chain,
		AnnotationJournalCommit: p.Commit, AnnotationPublishedBy: "ops-1/101", AnnotationPublishedAt: "2026-11-03T09:30:15.123456789Z",
	}
	if diff := cmp.Diff(want, after.Annotations); diff != "" {
		t.Errorf("annotations after Publish (-want +got):\n%s", diff)
	}

	steps := []struct {
		name string
		do   func() error
	}{
		{"renew", func() error { _, err := lock.Renew(t.Context()); return err }},
		{"take back", func() error { _, _, err := Acquire(t.Context(), kc, pubCfg, "2026-11", "gpu-1"); return err }},
		{"release", func() error { return lock.Release(t.Context()) }},
		{"another server takes it", func() error { _, _, err := Acquire(t.Context(), kc, other, "2026-11", "gpu-2"); return err }},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if diff := cmp.Diff(p, readHead(t, kc)); diff != "" {
			t.Errorf("head after %s (-want +got):\n%s", st.name, diff)
		}
		l, _ := leases.Get(t.Context(), DefaultName, metav1.GetOptions{})
		if l.Annotations["example.com/owner"] != "platform" {
			t.Errorf("after %s the other annotation is gone: %v", st.name, l.Annotations)
		}
	}
}

// The head moves forward within a round, never back; another round
// replaces it.
func TestPublishOrder(t *testing.T) {
	cur := head("2026-11", 12, 1)
	tests := []struct {
		name  string
		next  Published
		stale bool
	}{
		{"next record", head("2026-11", 13, 2), false},
		{"same head in another commit", head("2026-11", 12, 2), false},
		{"same head again", cur, false},
		{"older record", head("2026-11", 11, 0), true},
		{"same seq, another chain", func() Published { p := head("2026-11", 12, 2); p.Chain = head("2026-10", 12, 0).Chain; return p }(), true},
		{"another round, lower seq", head("2026-12", 1, 3), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kc := fake.NewClientset()
			if err := Publish(t.Context(), kc, pubCfg, cur); err != nil {
				t.Fatal(err)
			}
			tt.next.By = "ops-2/202"
			err := Publish(t.Context(), kc, pubCfg, tt.next)
			want := tt.next
			if tt.stale {
				if !errors.Is(err, ErrStale) {
					t.Fatalf("Publish = %v, want ErrStale", err)
				}
				t.Logf("refused: %v", err)
				want = cur
			} else if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, readHead(t, kc)); diff != "" {
				t.Errorf("head (-want +got):\n%s", diff)
			}
		})
	}
}

// conflictOnce makes the next update of the Lease fail with a conflict,
// after meddle has changed the stored Lease as another writer would.
func conflictOnce(t *testing.T, kc *fake.Clientset, meddle func(l *coordinationv1.Lease)) *int {
	t.Helper()
	conflicts := 1
	kc.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if conflicts == 0 {
			return false, nil, nil
		}
		conflicts--
		obj, err := kc.Tracker().Get(leaseGVR, "kube-system", DefaultName)
		if err != nil {
			return true, nil, err
		}
		l := obj.(*coordinationv1.Lease).DeepCopy()
		meddle(l)
		if err := kc.Tracker().Update(leaseGVR, l, "kube-system"); err != nil {
			return true, nil, err
		}
		return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, DefaultName, errors.New("changed"))
	})
	return &conflicts
}

// On a conflict the Lease is read and judged again: a newer head written
// in between makes the publisher stale; an unrelated write is kept.
func TestPublishConflictReadsAgain(t *testing.T) {
	t.Run("a newer head in between", func(t *testing.T) {
		kc := fake.NewClientset()
		if err := Publish(t.Context(), kc, pubCfg, head("2026-11", 5, 1)); err != nil {
			t.Fatal(err)
		}
		newer := head("2026-11", 9, 2)
		left := conflictOnce(t, kc, func(l *coordinationv1.Lease) { annotatePublished(l, newer) })
		if err := Publish(t.Context(), kc, pubCfg, head("2026-11", 7, 3)); !errors.Is(err, ErrStale) {
			t.Fatalf("Publish = %v, want ErrStale", err)
		}
		if *left != 0 {
			t.Fatal("no conflict happened")
		}
		if diff := cmp.Diff(newer, readHead(t, kc)); diff != "" {
			t.Errorf("head (-want +got):\n%s", diff)
		}
	})
	t.Run("a holder in between", func(t *testing.T) {
		kc := fake.NewClientset()
		if err := Publish(t.Context(), kc, pubCfg, head("2026-11", 5, 1)); err != nil {
			t.Fatal(err)
		}
		conflictOnce(t, kc, func(l *coordinationv1.Lease) {
			fill(l, pubCfg, "2026-11", "gpu-1", metav1.NewMicroTime(time.Now()), true)
		})
		p := head("2026-11", 7, 3)
		if err := Publish(t.Context(), kc, pubCfg, p); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(p, readHead(t, kc)); diff != "" {
			t.Errorf("head (-want +got):\n%s", diff)
		}
		if h, held, _ := Inspect(t.Context(), kc, pubCfg); !held || h.Node != "gpu-1" {
			t.Errorf("the holder written in between is gone: %+v held=%v", h, held)
		}
	})
	t.Run("always in conflict", func(t *testing.T) {
		kc := fake.NewClientset()
		if err := Publish(t.Context(), kc, pubCfg, head("2026-11", 5, 1)); err != nil {
			t.Fatal(err)
		}
		kc.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, DefaultName, errors.New("changed"))
		})
		if err := Publish(t.Context(), kc, pubCfg, head("2026-11", 6, 1)); err == nil || !strings.Contains(err.Error(), "still contended") {
			t.Errorf("Publish always in conflict = %v", err)
		}
	})
}

// A head published between a holder's read and its write costs the holder
// a conflict, never the lock: Renew and Release read again.
func TestHolderRetriesConflictFromPublish(t *testing.T) {
	kc := fake.NewClientset()
	lock, _, err := Acquire(t.Context(), kc, pubCfg, "2026-11", "gpu-1")
	if err != nil {
		t.Fatal(err)
	}
	p := head("2026-11", 4, 1)
	conflictOnce(t, kc, func(l *coordinationv1.Lease) { annotatePublished(l, p) })
	if _, err := lock.Renew(t.Context()); err != nil {
		t.Fatalf("Renew after a conflict: %v", err)
	}
	conflictOnce(t, kc, func(l *coordinationv1.Lease) { annotatePublished(l, head("2026-11", 5, 2)) })
	if err := lock.Release(t.Context()); err != nil {
		t.Fatalf("Release after a conflict: %v", err)
	}
	if _, held, _ := Inspect(t.Context(), kc, pubCfg); held {
		t.Error("still held after Release")
	}
	if diff := cmp.Diff(head("2026-11", 5, 2), readHead(t, kc)); diff != "" {
		t.Errorf("head (-want +got):\n%s", diff)
	}
}

func TestReadPublished(t *testing.T) {
	good := head("2026-11", 12, 1)
	set := func(name, value string) func(map[string]string) {
		return func(a map[string]string) { a[name] = value }
	}
	tests := []struct {
		name  string
		edit  func(a map[string]string)
		found bool
		want  string // in the error
	}{
		{"complete", func(map[string]string) {}, true, ""},
		{"none of it", func(a map[string]string) {
			for _, n := range []string{AnnotationJournalRound, AnnotationJournalSeq, AnnotationJournalChain,
				AnnotationJournalCommit, AnnotationPublishedBy, AnnotationPublishedAt} {
				delete(a, n)
			}
		}, false, ""},
		{"commit missing", func(a map[string]string) { delete(a, AnnotationJournalCommit) }, false, AnnotationJournalCommit + " is missing"},
		{"bad round", set(AnnotationJournalRound, "../x"), false, AnnotationJournalRound},
		{"seq not decimal", set(AnnotationJournalSeq, "0x10"), false, AnnotationJournalSeq},
		{"seq 0", set(AnnotationJournalSeq, "0"), false, AnnotationJournalSeq},
		{"short chain", set(AnnotationJournalChain, "abc"), false, AnnotationJournalChain},
		{"bad commit", set(AnnotationJournalCommit, "HEAD"), false, AnnotationJournalCommit},
		{"empty by", set(AnnotationPublishedBy, ""), false, AnnotationPublishedBy},
		{"bad time", set(AnnotationPublishedAt, "yesterday"), false, AnnotationPublishedAt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: DefaultName,
				Annotations: map[string]string{AnnotationRound: "2026-11", "example.com/owner": "platform"}}}
			annotatePublished(l, good)
			tt.edit(l.Annotations)
			kc := fake.NewClientset(l)
			got, found, err := ReadPublished(t.Context(), kc, Config{})
			if tt.want != "" {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("ReadPublished = %v, want an error naming %q", err, tt.want)
				}
				t.Logf("refused: %v", err)
				// Publish refuses to write over a head it cannot read.
				if err := Publish(t.Context(), kc, pubCfg, head("2026-11", 13, 2)); err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("Publish over it = %v", err)
				}
				return
			}
			if err != nil || found != tt.found {
				t.Fatalf("ReadPublished: found=%v %v, want found=%v", found, err, tt.found)
			}
			if found {
				if diff := cmp.Diff(good, got); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
			}
		})
	}
	if _, found, err := ReadPublished(t.Context(), fake.NewClientset(), Config{}); found || err != nil {
		t.Errorf("no Lease: found=%v %v", found, err)
	}
}

func TestRoundIDShapeMatchesRound(t *testing.T) {
	for _, id := range []string{"2026-11", "r1", "a.b_c-d", "", "-x", ".x", "_x", "2026/11", "../x", "x y", "é",
		strings.Repeat("a", 64), strings.Repeat("a", 65)} {
		if got, want := validRoundID(id), round.ValidRoundID(id); got != want {
			t.Errorf("validRoundID(%q) = %v, round.ValidRoundID = %v", id, got, want)
		}
	}
}
