package windowlock_test

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcp-patch/mcp-patch/internal/testsupport/labkube"
	"github.com/mcp-patch/mcp-patch/kube/windowlock"
)

// The journal head published on the window Lease of a real API server:
// it outlives the window that held the Lease, and of publishers racing,
// the API server's resourceVersion checks leave the furthest head, having
// never shown an older one after a newer.

// journalHead is round's head at seq, pushed in the commit numbered n.
func journalHead(round string, seq uint64, n int) windowlock.Published {
	c := sha256.Sum256(fmt.Appendf(nil, "%s/%d", round, seq))
	g := sha1.Sum(fmt.Appendf(nil, "commit %d", n))
	return windowlock.Published{Round: round, Seq: seq, Chain: hex.EncodeToString(c[:]), Commit: hex.EncodeToString(g[:])}
}

func TestPublishedHeadOutlivesWindow(t *testing.T) {
	c := labkube.Cluster(t)
	kc := c.Client()
	ns := labkube.Namespace(t, c)
	a, b := configs(ns, "mcp-patch-window", time.Minute)

	lockA, _, err := windowlock.Acquire(t.Context(), kc, a, "2026-11", "gpu-1")
	if err != nil {
		t.Fatal(err)
	}
	p := journalHead("2026-11", 41, 1)
	p.At = time.Date(2026, 11, 3, 9, 30, 15, 123456789, time.UTC)
	if err := windowlock.Publish(t.Context(), kc, a, p); err != nil {
		t.Fatal(err)
	}
	p.By = a.Identity
	if _, err := lockA.Renew(t.Context()); err != nil {
		t.Fatalf("Renew after Publish: %v", err)
	}
	if err := lockA.Release(t.Context()); err != nil {
		t.Fatalf("Release after Publish: %v", err)
	}
	if _, held, err := windowlock.Inspect(t.Context(), kc, b); held || err != nil {
		t.Fatalf("Inspect after Release: held=%v %v", held, err)
	}
	got, found, err := windowlock.ReadPublished(t.Context(), kc, b)
	if err != nil || !found {
		t.Fatalf("ReadPublished after Release: found=%v %v", found, err)
	}
	if diff := cmp.Diff(p, got); diff != "" {
		t.Errorf("head after the window closed (-want +got):\n%s", diff)
	}

	// Server B takes the next window; the head A published stays, and
	// A, no longer holding anything, is still refused going backwards.
	lockB, h, err := windowlock.Acquire(t.Context(), kc, b, "2026-11", "gpu-2")
	if err != nil {
		t.Fatal(err)
	}
	if h.Transitions != 1 {
		t.Errorf("B's holding: %d transitions, want 1", h.Transitions)
	}
	if err := windowlock.Publish(t.Context(), kc, a, journalHead("2026-11", 40, 2)); !errors.Is(err, windowlock.ErrStale) {
		t.Errorf("older head = %v, want ErrStale", err)
	}
	if got, _, err := windowlock.ReadPublished(t.Context(), kc, a); err != nil || got.Seq != 41 {
		t.Errorf("head after B took the Lease: %+v %v", got, err)
	}
	if err := lockB.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestPublishRace has two servers publish the heads of one round as their
// journals grow, interleaved (one the odd records, the other the even),
// starting with no Lease, and watches every revision of the Lease.
func TestPublishRace(t *testing.T) {
	c := labkube.Cluster(t)
	kc := c.Client()
	ns := labkube.Namespace(t, c)
	a, b := configs(ns, "mcp-patch-window", time.Minute)
	const last = 40

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	w, err := kc.CoordinationV1().Leases(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=mcp-patch-window"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	type watched struct {
		seqs []uint64
		err  error
	}
	seen := make(chan watched, 1)
	go func() {
		var r watched
		defer func() { seen <- r }()
		for ev := range w.ResultChan() {
			l, ok := ev.Object.(*coordinationv1.Lease)
			if !ok {
				r.err = fmt.Errorf("watch: %v %T", ev.Type, ev.Object)
				return
			}
			seq, err := strconv.ParseUint(l.Annotations[windowlock.AnnotationJournalSeq], 10, 64)
			if err != nil {
				r.err = fmt.Errorf("watch: revision %s: %w", l.ResourceVersion, err)
				return
			}
			r.seqs = append(r.seqs, seq)
			if seq == last {
				return
			}
		}
	}()

	var wg sync.WaitGroup
	start := make(chan struct{})
	var mu sync.Mutex
	outcomes := map[string]int{}
	for i, cfg := range []windowlock.Config{a, b} {
		wg.Go(func() {
			<-start
			for seq := uint64(i + 1); seq <= last; seq += 2 {
				err := windowlock.Publish(ctx, kc, cfg, journalHead("2026-11", seq, int(seq)))
				mu.Lock()
				switch {
				case err == nil:
					outcomes["published"]++
				case errors.Is(err, windowlock.ErrStale):
					outcomes["stale"]++
				default:
					t.Errorf("%s publishing seq %d: %v", cfg.Identity, seq, err)
				}
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	t.Logf("outcomes: %v", outcomes)

	got, found, err := windowlock.ReadPublished(t.Context(), kc, a)
	if err != nil || !found {
		t.Fatalf("ReadPublished: found=%v %v", found, err)
	}
	want := journalHead("2026-11", last, last)
	want.By, want.At = b.Identity, got.At
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("head after the race (-want +got):\n%s", diff)
	}
	r := <-seen
	if r.err != nil {
		t.Fatal(r.err)
	}
	seqs := r.seqs
	if len(seqs) == 0 || seqs[len(seqs)-1] != last {
		t.Fatalf("the watch saw %v, not ending at %d", seqs, last)
	}
	for i := 1; i < len(seqs); i++ {
		if seqs[i] < seqs[i-1] {
			t.Errorf("the head went backwards: revision %d seq %d after seq %d (all: %v)", i, seqs[i], seqs[i-1], seqs)
		}
	}
	if len(seqs) != outcomes["published"] {
		t.Errorf("%d revisions watched, %d publishes succeeded", len(seqs), outcomes["published"])
	}
}
