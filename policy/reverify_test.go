package policy

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// A standing approval (the signed plan, a window approval) is verified
// again whenever a step relies on it: accepted once it was used, also
// after its expiry; refused when no server ever used it, when its key
// left allowed_signers, or for another binding. Each part of it is used
// once.
func TestReverifyStandingApproval(t *testing.T) {
	now := time.Date(2026, 11, 29, 15, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, _ := ssh.NewSignerFromKey(priv)
	line := "alice@example.org namespaces=\"mcp-patch\" " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey()))) + "\n"
	allowed, err := ParseAllowedSigners([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	store, err := OpenNonceStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	v := &Verifier{AllowedSigners: allowed, NonceStore: store, Clock: clock}
	digest := "sha256:" + strings.Repeat("ab", 32)
	req, err := NewRequest("sign_plan", "all-nodes", "2026-11", digest, []string{"the plan"}, 30*time.Minute, clock, nil)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := Sign(signer, req.Canonical())
	if err != nil {
		t.Fatal(err)
	}
	text := FormatApproval(req, sig.Signature)
	want := Expectation{Tool: "sign_plan", Node: "all-nodes", Round: "2026-11", PlanDigest: digest}
	ctx := context.Background()
	if _, err := v.Reverify(ctx, text, want); !errors.Is(err, ErrNeverUsed) {
		t.Fatalf("an approval no server used: %v", err)
	}
	got, err := v.Verify(ctx, text, want)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Consume(ctx, got); err != nil {
		t.Fatal(err)
	}
	now = now.Add(48 * time.Hour) // long past its expiry
	if _, err := v.Reverify(ctx, text, want); err != nil {
		t.Fatalf("a used approval, verified again: %v", err)
	}
	other := want
	other.PlanDigest = "sha256:" + strings.Repeat("cd", 32)
	if _, err := v.Reverify(ctx, text, other); !errors.Is(err, ErrMismatch) {
		t.Fatalf("another digest: %v", err)
	}
	tampered := strings.Replace(text, "summary: the plan", "summary: the plan!", 1)
	if _, err := v.Reverify(ctx, tampered, want); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("a changed summary: %v", err)
	}
	if err := v.ConsumePart(ctx, got, "promote_kernel"); err != nil {
		t.Fatal(err)
	}
	if err := v.ConsumePart(ctx, got, "promote_kernel"); !errors.Is(err, ErrReplayed) {
		t.Fatalf("a part used twice: %v", err)
	}
	if err := v.ConsumePart(ctx, got, "install_updates"); err != nil {
		t.Fatalf("another part: %v", err)
	}
	empty, err := ParseAllowedSigners([]byte("# nobody\n"))
	if err != nil {
		t.Fatal(err)
	}
	v.AllowedSigners = empty
	if _, err := v.Reverify(ctx, text, want); !errors.Is(err, ErrUnknownSigner) {
		t.Fatalf("a key removed from allowed_signers: %v", err)
	}
}
