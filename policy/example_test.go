package policy_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"fmt"
	"os"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/mcp-patch/mcp-patch/policy"
)

// The whole life of an approval: the server issues a request, a person signs
// it, the server verifies it for the step and consumes it right before the
// step runs.
func Example() {
	// The person's key (deterministic here; in life: ssh-agent, a FIDO key or
	// a key file, through SignWithAgent or SignWithKeyFile).
	signer, _ := ssh.NewSignerFromKey(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32)))
	signers, _ := policy.ParseAllowedSigners([]byte("alice@example.com namespaces=\"mcp-patch\" " +
		string(ssh.MarshalAuthorizedKey(signer.PublicKey()))))

	now := time.Date(2026, 11, 29, 14, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	digest := "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	summary := []string{"node gpu-03: cordon, then evict 2 pods: ml/model-0, ml/model-1"}

	// Server: the request a person must sign (returned with approval_required).
	req, _ := policy.NewRequest("drain_node", "gpu-03", "2026-11", digest, summary, 2*time.Hour, clock, bytes.NewReader(make([]byte, 16)))
	fmt.Print(req)

	// Person: read it in plain words, sign it.
	signed, _ := policy.Sign(signer, req.Canonical())
	approval := policy.FormatApproval(req, signed.Signature)

	// Server: verify for this very step, then commit just before running it.
	dir, _ := os.MkdirTemp("", "nonces")
	defer os.RemoveAll(dir)
	store, _ := policy.OpenNonceStore(dir)
	defer store.Close()
	v := &policy.Verifier{AllowedSigners: signers, NonceStore: store, Clock: clock}
	want := policy.Expectation{Tool: "drain_node", Node: "gpu-03", Round: "2026-11", PlanDigest: digest, Summary: summary}
	got, err := v.Verify(context.Background(), approval, want)
	fmt.Println("verified:", got.Principal, err)
	fmt.Println("consume:", v.Consume(context.Background(), got))
	_, err = v.Verify(context.Background(), approval, want)
	fmt.Println("again:", err)
	// Output:
	// mcp-patch approval request v1
	// tool: drain_node
	// node: gpu-03
	// round: 2026-11
	// plan-digest: sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
	// issued: 2026-11-29T14:00:00Z
	// expires: 2026-11-29T16:00:00Z
	// nonce: 00000000000000000000000000000000
	// summary: node gpu-03: cordon, then evict 2 pods: ml/model-0, ml/model-1
	// verified: alice@example.com <nil>
	// consume: <nil>
	// again: verify approval: approval refused (replayed): nonce 00000000000000000000000000000000 has already been used
}
