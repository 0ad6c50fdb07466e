package windowlock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// The renewal loop is time logic: these tests run it on synctest's clock
// against the fake clientset. Contention between servers, which needs the
// API server's resourceVersion checks, is tested against a real one.

func lease(t *testing.T, kc *fake.Clientset, cfg Config) *coordinationv1.Lease {
	t.Helper()
	l, err := kc.CoordinationV1().Leases(cfg.Namespace).Get(context.Background(), cfg.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestKeepRenews(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		kc := fake.NewClientset()
		cfg := Config{Namespace: "kube-system", Name: DefaultName, Identity: "server-a", LeaseDuration: 60 * time.Second}
		lock, h, err := Acquire(t.Context(), kc, cfg, "2025-07", "gpu-03")
		if err != nil {
			t.Fatal(err)
		}
		acquired := h.RenewedAt
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- lock.Keep(ctx) }()

		time.Sleep(65 * time.Second) // three renewals at 20s, 40s, 60s
		synctest.Wait()
		l := lease(t, kc, cfg)
		if got := l.Spec.RenewTime.Sub(acquired); got != 60*time.Second {
			t.Errorf("last renewal %v after acquiring, want 60s", got)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Keep after cancel = %v, want nil", err)
		}
		if h, held, _ := Inspect(t.Context(), kc, cfg); !held || h.Identity != "server-a" || h.Node != "gpu-03" {
			t.Errorf("after Keep ended: held=%v holder=%+v; Keep must not release", held, h)
		}
	})
}

func TestKeepNoticesTakeover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		kc := fake.NewClientset()
		cfg := Config{Namespace: "kube-system", Name: DefaultName, Identity: "server-a", LeaseDuration: 30 * time.Second}
		lock, _, err := Acquire(t.Context(), kc, cfg, "2025-07", "gpu-03")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- lock.Keep(t.Context()) }()

		time.Sleep(15 * time.Second)
		l := lease(t, kc, cfg)
		other := "server-b"
		l.Spec.HolderIdentity = &other
		l.Annotations[AnnotationNode] = "gpu-04"
		if _, err := kc.CoordinationV1().Leases(cfg.Namespace).Update(t.Context(), l, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		err = <-done
		if !errors.Is(err, ErrLost) || !strings.Contains(err.Error(), `"server-b"`) {
			t.Errorf("Keep = %v, want ErrLost naming server-b", err)
		}
		if took := time.Since(start); took != 20*time.Second {
			t.Errorf("loss noticed after %v, want at the next renewal (20s)", took)
		}
		if err := lock.Release(t.Context()); !errors.Is(err, ErrLost) {
			t.Errorf("Release of a lost lock = %v, want ErrLost", err)
		}
		if h := holderOf(lease(t, kc, cfg)); h.Identity != "server-b" {
			t.Errorf("Release changed the new holder's Lease: %+v", h)
		}
	})
}

func TestKeepGivesUpBeforeExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		kc := fake.NewClientset()
		cfg := Config{Namespace: "kube-system", Name: DefaultName, Identity: "server-a", LeaseDuration: 30 * time.Second, RenewRetries: 2}
		lock, _, err := Acquire(t.Context(), kc, cfg, "2025-07", "gpu-03")
		if err != nil {
			t.Fatal(err)
		}
		var updates int
		kc.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
			updates++
			return true, nil, errors.New("etcdserver: request timed out")
		})
		start := time.Now()
		err = lock.Keep(t.Context())
		took := time.Since(start)
		if !errors.Is(err, ErrLost) || !strings.Contains(err.Error(), "not renewed for") {
			t.Fatalf("Keep = %v, want ErrLost for failed renewals", err)
		}
		// Renewals at 10s and 20s fail (2 tries each); at 20s the last good
		// renewal is 20s old = duration - interval, so Keep stops before the
		// Lease expires at 30s.
		if took >= 30*time.Second {
			t.Errorf("Keep gave up after %v, not before the Lease expired", took)
		}
		if updates != 4 {
			t.Errorf("%d renewal attempts, want 4 (2 renewals x 2 tries)", updates)
		}
	})
}

func TestExpired(t *testing.T) {
	now := time.Date(2025, 7, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		expires time.Time
		skew    time.Duration
		want    bool
	}{
		{"no expiry recorded", time.Time{}, 5 * time.Second, true},
		{"still valid", now.Add(time.Second), 5 * time.Second, false},
		{"expired but within the skew allowance", now.Add(-3 * time.Second), 5 * time.Second, false},
		{"expired beyond the skew allowance", now.Add(-6 * time.Second), 5 * time.Second, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := expired(Holder{ExpiresAt: tt.expires}, tt.skew, now); got != tt.want {
				t.Errorf("expired = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestConfigValidation(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no identity", Config{}, "identity is required"},
		{"renew not shorter than lease", Config{Identity: "a", LeaseDuration: 10 * time.Second, RenewInterval: 10 * time.Second}, "not shorter"},
		{"sub-second lease", Config{Identity: "a", LeaseDuration: 500 * time.Millisecond}, "under a second"},
		{"negative", Config{Identity: "a", ClockSkew: -time.Second}, "negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := Acquire(t.Context(), fake.NewClientset(), tt.cfg, "r", "n")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Acquire = %v, want %q", err, tt.want)
			}
		})
	}
}
