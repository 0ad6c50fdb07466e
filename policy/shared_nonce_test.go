package policy

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// sharedStore stands in for a store every server of a cluster sees (the
// real one, kube/usednonces, is tested against a real API server).
type sharedStore struct {
	mu   sync.Mutex
	used map[string]bool
	err  error // when set, every call fails
}

func (s *sharedStore) Used(ctx context.Context, nonce string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.used[nonce], s.err
}

func (s *sharedStore) Consume(ctx context.Context, nonce, id string, at, expires time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	if s.used[nonce] {
		return refusal(ReasonReplayed, "", "", "", "nonce "+nonce+" has already been used")
	}
	s.used[nonce] = true
	return nil
}

// TestReplayOnSecondServer: two servers with their own state directories
// and one shared store. An approval used on one is refused by the other;
// with the state directories alone it would be accepted again.
func TestReplayOnSecondServer(t *testing.T) {
	req := newTestRequest(t, t0)
	text := signReq(t, keys["ed25519"].Signer, req)
	signers := mustSigners(t, allowedSignersFor("ed25519"))
	shared := &sharedStore{used: map[string]bool{}}
	server := func() *Verifier {
		return &Verifier{AllowedSigners: signers, NonceStore: Nonces(shared, openStore(t)), Clock: fixedClock(t0)}
	}
	a, b := server(), server()
	got, err := a.Verify(t.Context(), text, expectFor(req))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Consume(t.Context(), got); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Verify(t.Context(), text, expectFor(req)); !errors.Is(err, ErrReplayed) {
		t.Errorf("second server, another state dir: got %v, want replayed", err)
	}
	// Both verified before either consumed: the shared store decides.
	req2 := newTestRequest(t, t0)
	text2 := signReq(t, keys["ed25519"].Signer, req2)
	ga, errA := a.Verify(t.Context(), text2, expectFor(req2))
	gb, errB := b.Verify(t.Context(), text2, expectFor(req2))
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	if err := b.Consume(t.Context(), gb); err != nil {
		t.Fatal(err)
	}
	if err := a.Consume(t.Context(), ga); !errors.Is(err, ErrReplayed) {
		t.Errorf("race lost on the shared store: got %v, want replayed", err)
	}

	// The shared store unreachable: refuse, do not fall back to the file.
	shared.err = errors.New("apiserver: connection refused")
	req3 := newTestRequest(t, t0)
	if _, err := b.Verify(t.Context(), signReq(t, keys["ed25519"].Signer, req3), expectFor(req3)); err == nil {
		t.Error("verified with the shared store unreachable")
	}
}

func TestNoncesUsedByAny(t *testing.T) {
	first, second := &sharedStore{used: map[string]bool{}}, &sharedStore{used: map[string]bool{}}
	s := Nonces(first, second)
	n := nonceN(4)
	second.used[n] = true
	if used, err := s.Used(t.Context(), n); err != nil || !used {
		t.Errorf("Used = %v, %v; want used (the second store has it)", used, err)
	}
	if err := s.Consume(t.Context(), n, "id", t0, t0.Add(time.Hour)); !errors.Is(err, ErrReplayed) {
		t.Errorf("Consume = %v, want replayed from the second store", err)
	}
	if !first.used[n] {
		t.Error("the first store was not marked")
	}
}
