package windowlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcp-patch/mcp-patch/internal/testsupport/labkube"
	"github.com/mcp-patch/mcp-patch/kube/windowlock"
)

// Two "server instances" contend for the window Lease on a real API server,
// whose resourceVersion checks decide every race.

func TestMain(m *testing.M) { labkube.Main(m) }

func configs(ns, name string, d time.Duration) (a, b windowlock.Config) {
	a = windowlock.Config{Namespace: ns, Name: name, Identity: "ops-1/101", LeaseDuration: d, ClockSkew: time.Millisecond}
	b = a
	b.Identity = "ops-2/202"
	return a, b
}

func TestContention(t *testing.T) {
	c := labkube.Cluster(t)
	kc := c.Client()
	ns := labkube.Namespace(t, c)
	a, b := configs(ns, "mcp-patch-window", time.Minute)

	lockA, h, err := windowlock.Acquire(t.Context(), kc, a, "2025-07", "cp-1")
	if err != nil {
		t.Fatal(err)
	}
	if h.Identity != a.Identity || h.Round != "2025-07" || h.Node != "cp-1" || h.Transitions != 0 {
		t.Errorf("holder %+v", h)
	}

	_, _, err = windowlock.Acquire(t.Context(), kc, b, "2025-07", "cp-2")
	var held *windowlock.HeldError
	if !errors.As(err, &held) || held.Holder.Identity != a.Identity || held.Holder.Node != "cp-1" {
		t.Fatalf("second server Acquire = %v, want HeldError naming the first", err)
	}
	t.Logf("refused: %v", err)

	// The same server may take its own window back (after a restart), but
	// not open a second one.
	if _, _, err := windowlock.Acquire(t.Context(), kc, a, "2025-07", "cp-1"); err != nil {
		t.Errorf("resume own window: %v", err)
	}
	if _, _, err := windowlock.Acquire(t.Context(), kc, a, "2025-07", "cp-2"); !errors.Is(err, windowlock.ErrHeld) {
		t.Errorf("second window by the same server = %v, want ErrHeld", err)
	}
	if _, held, _ := windowlock.Inspect(t.Context(), kc, b); !held {
		t.Error("Inspect: not held")
	}

	if _, err := lockA.Renew(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := lockA.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, held, _ := windowlock.Inspect(t.Context(), kc, b); held {
		t.Error("Inspect after release: still held")
	}
	lockB, h, err := windowlock.Acquire(t.Context(), kc, b, "2025-07", "cp-2")
	if err != nil {
		t.Fatalf("Acquire after release: %v", err)
	}
	if h.Identity != b.Identity || h.Transitions != 1 {
		t.Errorf("holder after release %+v, want ops-2 with one transition", h)
	}
	if _, err := lockA.Renew(t.Context()); !errors.Is(err, windowlock.ErrLost) {
		t.Errorf("released lock renewed: %v", err)
	}
	if err := lockB.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestExpiredLeaseTakenOver(t *testing.T) {
	c := labkube.Cluster(t)
	kc := c.Client()
	ns := labkube.Namespace(t, c)
	a, b := configs(ns, "mcp-patch-window", time.Second)

	lockA, _, err := windowlock.Acquire(t.Context(), kc, a, "2025-07", "gpu-01")
	if err != nil {
		t.Fatal(err)
	}
	// ops-1 stops renewing (crashed); once the Lease has expired ops-2 may
	// take it.
	time.Sleep(1100 * time.Millisecond)
	lockB, h, err := windowlock.Acquire(t.Context(), kc, b, "2025-07", "gpu-02")
	if err != nil {
		t.Fatalf("takeover of an expired lease: %v", err)
	}
	if h.Identity != b.Identity || h.Transitions != 1 {
		t.Errorf("holder %+v", h)
	}
	if _, err := lockA.Renew(t.Context()); !errors.Is(err, windowlock.ErrLost) {
		t.Errorf("old holder renewed after takeover: %v", err)
	}
	if err := lockA.Release(t.Context()); !errors.Is(err, windowlock.ErrLost) {
		t.Errorf("old holder released after takeover: %v", err)
	}
	if cur, held, _ := windowlock.Inspect(t.Context(), kc, b); !held || cur.Identity != b.Identity {
		t.Errorf("after the old holder's attempts: %+v held=%v", cur, held)
	}
	_ = lockB.Release(t.Context())
}

// TestRaceExactlyOneWins races two servers many times, on a fresh Lease
// (create) and on an expired one (update), and requires exactly one winner
// each time.
func TestRaceExactlyOneWins(t *testing.T) {
	c := labkube.Cluster(t)
	kc := c.Client()
	ns := labkube.Namespace(t, c)
	for i := range 20 {
		name := fmt.Sprintf("race-%d", i)
		a, b := configs(ns, name, time.Minute)
		if i%2 == 1 {
			// An expired Lease left by a third server: both race to update it.
			id, d := "ops-3/303", int32(1)
			old := metav1.NewMicroTime(time.Now().Add(-time.Hour))
			_, err := kc.CoordinationV1().Leases(ns).Create(t.Context(), &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
				Spec:       coordinationv1.LeaseSpec{HolderIdentity: &id, LeaseDurationSeconds: &d, RenewTime: &old},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		errs := make([]error, 2)
		start := make(chan struct{})
		for j, cfg := range []windowlock.Config{a, b} {
			wg.Go(func() {
				<-start
				_, _, errs[j] = windowlock.Acquire(context.Background(), kc, cfg, "2025-07", "node-"+cfg.Identity)
			})
		}
		close(start)
		wg.Wait()
		won := 0
		for _, err := range errs {
			switch {
			case err == nil:
				won++
			case !errors.Is(err, windowlock.ErrHeld):
				t.Errorf("race %d: unexpected error %v", i, err)
			}
		}
		if won != 1 {
			t.Errorf("race %d: %d winners (%v)", i, won, errs)
		}
	}
}
