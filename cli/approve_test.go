package cli

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-patch/mcp-patch/policy"
	"github.com/mcp-patch/mcp-patch/round"
)

// TestApproveSignsWhatSSHKeygenVerifies: a person signs a request with
// `mcp-patch approve --key`; the real ssh-keygen verifies the signature
// against an allowed_signers file, and so does the server's verifier.
func TestApproveSignsWhatSSHKeygenVerifies(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "id_ed25519")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "alice", "-f", key).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v %s", err, out)
	}
	pub, _ := os.ReadFile(key + ".pub")
	allowed := filepath.Join(dir, "allowed_signers")
	os.WriteFile(allowed, []byte(`alice@example.org namespaces="mcp-patch" `+strings.TrimSpace(string(pub))+"\n"), 0o644)
	req, err := policy.NewRequest("drain_node", "gpu-03", "2026-11", "sha256:"+strings.Repeat("ab", 32),
		[]string{"cordon gpu-03 and evict 2 pods"}, 30*time.Minute, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	reqFile := filepath.Join(dir, "request.txt")
	os.WriteFile(reqFile, req.Canonical(), 0o644)

	code, out, errOut := run(t, "", nil, "approve", "--key", key, "--yes", reqFile)
	if code != ExitOK {
		t.Fatalf("approve: exit %d: %s", code, errOut)
	}
	if !strings.Contains(errOut, "You approve: cordon node gpu-03") && !strings.Contains(errOut, "gpu-03") {
		t.Errorf("the request was not shown in plain words:\n%s", errOut)
	}
	i := strings.Index(out, "-----BEGIN SSH SIGNATURE-----")
	if i < 0 || out[:i] != string(req.Canonical()) {
		t.Fatalf("approval is not the request followed by the signature:\n%s", out)
	}
	sig := filepath.Join(dir, "request.txt.sig")
	os.WriteFile(sig, []byte(out[i:]), 0o644)
	cmd := exec.Command("ssh-keygen", "-Y", "verify", "-f", allowed, "-I", "alice@example.org", "-n", "mcp-patch", "-s", sig)
	cmd.Stdin = bytes.NewReader(req.Canonical())
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen -Y verify refused our approval: %v\n%s", err, b)
	}
	signers, err := policy.LoadAllowedSigners(allowed)
	if err != nil {
		t.Fatal(err)
	}
	store, err := policy.OpenNonceStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	v := &policy.Verifier{AllowedSigners: signers, NonceStore: store}
	if _, err := v.Verify(t.Context(), out, policy.Expectation{Tool: "drain_node", Node: "gpu-03", Round: "2026-11", PlanDigest: req.PlanDigest}); err != nil {
		t.Fatalf("the server's verifier refused it: %v", err)
	}

	// A request someone edited is not signed.
	os.WriteFile(reqFile, bytes.Replace(req.Canonical(), []byte("gpu-03"), []byte("gpu-04\nextra: x"), 1), 0o644)
	if code, _, errOut := run(t, "", nil, "approve", "--key", key, "--yes", reqFile); code == ExitOK || !strings.Contains(errOut, "not a valid request") {
		t.Fatalf("edited request: exit %d: %s", code, errOut)
	}
}

// TestApproveRefusesLongLivedRequests: a request valid for 180 days, one
// issued in the future and one already expired are shown and not signed;
// the person reads the lifetime in plain words.
func TestApproveRefusesLongLivedRequests(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "id_ed25519")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "alice", "-f", key).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v %s", err, out)
	}
	base, err := policy.NewRequest("drain_node", "gpu-03", "2026-11", "sha256:"+strings.Repeat("ab", 32),
		[]string{"cordon gpu-03 and evict 2 pods"}, 30*time.Minute, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	longLived := base
	longLived.Expires = base.Issued.Add(180 * 24 * time.Hour)
	future := base
	future.Issued, future.Expires = base.Issued.Add(2*time.Hour), base.Issued.Add(3*time.Hour)
	expired := base
	expired.Issued, expired.Expires = base.Issued.Add(-2*time.Hour), base.Issued.Add(-time.Hour)
	tests := []struct {
		name  string
		req   policy.Request
		flags []string
		want  []string
	}{
		{"180 days", longLived, nil, []string{"valid for 180 days", "lifetime too long", "longer than the 1 day allowed", "not signed"}},
		{"issued in the future", future, nil, []string{"issued in future", "after now", "not signed"}},
		{"expired", expired, nil, []string{"expired at", "ago", "not signed"}},
	}
	// A server configured for 2 hours: a 3-hour request is refused too.
	cfg := filepath.Join(dir, "config.yaml")
	os.WriteFile(cfg, []byte("identity: test\napprovals:\n  max_lifetime: 2h\n"), 0o600)
	threeHours := base
	threeHours.Expires = base.Issued.Add(3 * time.Hour)
	tests = append(tests, struct {
		name  string
		req   policy.Request
		flags []string
		want  []string
	}{"over the configured maximum", threeHours, []string{"--config", cfg}, []string{"valid for 3 hours", "longer than the 2 hours allowed", "not signed"}})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reqFile := filepath.Join(t.TempDir(), "request.txt")
			os.WriteFile(reqFile, tt.req.Canonical(), 0o644)
			args := append(append([]string{"approve"}, tt.flags...), "--key", key, "--yes", reqFile)
			code, out, errOut := run(t, "", nil, args...)
			if code == ExitOK || strings.Contains(out, "BEGIN SSH SIGNATURE") {
				t.Fatalf("signed: exit %d, stdout %q", code, out)
			}
			for _, w := range tt.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr lacks %q:\n%s", w, errOut)
				}
			}
		})
	}
	// The same request with its own lifetime is signed, and says it.
	reqFile := filepath.Join(dir, "ok.txt")
	os.WriteFile(reqFile, base.Canonical(), 0o644)
	if code, _, errOut := run(t, "", nil, "approve", "--key", key, "--yes", reqFile); code != ExitOK || !strings.Contains(errOut, "valid for 30 minutes") {
		t.Fatalf("fresh request: exit %d: %s", code, errOut)
	}
}

// TestApproveSignsRecords: a person signs a round's outcome and a kernel
// promoted without upstream proof with `mcp-patch approve`, reading what
// each means; the server's VerifyRecord accepts both, after their requests
// expired too, and refuses each as the other kind.
func TestApproveSignsRecords(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "id_ed25519")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "alice", "-f", key).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v %s", err, out)
	}
	pub, err := os.ReadFile(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	signers, err := policy.ParseAllowedSigners([]byte(`alice@example.org namespaces="mcp-patch" ` + strings.TrimSpace(string(pub)) + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	outcome, err := policy.NewAttestation(policy.KindRoundOutcome,
		policy.AttestationFields{Environment: "staging", Round: "2026-11", Digest: "sha256:" + strings.Repeat("5e", 32)},
		[]string{"6.8.0-49-generic: 12 nodes, green, soaked 72 hours"}, 30*time.Minute, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	promoted, err := policy.NewAttestation(policy.KindKernelPromoted,
		policy.AttestationFields{Environment: "production", Round: "2026-12", Kernel: "6.8.0-49-generic", Reason: "staging soak cut short"},
		nil, 30*time.Minute, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		req   policy.Request
		other policy.Kind
		shown string
	}{
		{"round outcome", outcome, policy.KindKernelPromoted, "You certify that patch round 2026-11 in environment staging ended as summarised below"},
		{"kernel promoted", promoted, policy.KindRoundOutcome, "You promote kernel 6.8.0-49-generic into environment production's round 2026-12 without proof"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reqFile := filepath.Join(t.TempDir(), "request.txt")
			if err := os.WriteFile(reqFile, tt.req.Canonical(), 0o600); err != nil {
				t.Fatal(err)
			}
			code, out, errOut := run(t, "", nil, "approve", "--key", key, "--yes", reqFile)
			if code != ExitOK {
				t.Fatalf("approve: exit %d: %s", code, errOut)
			}
			for _, want := range []string{tt.shown, "stands as a record"} {
				if !strings.Contains(errOut, want) {
					t.Errorf("stderr lacks %q:\n%s", want, errOut)
				}
			}
			later := tt.req.Expires.Add(30 * 24 * time.Hour)
			v := &policy.Verifier{AllowedSigners: signers, Clock: func() time.Time { return later }}
			if _, got, err := v.VerifyRecord(t.Context(), out, tt.req.Kind); err != nil || got.ID() != tt.req.ID() {
				t.Fatalf("VerifyRecord: request %s, %v", got.ID(), err)
			}
			if _, _, err := v.VerifyRecord(t.Context(), out, tt.other); !errors.Is(err, policy.ErrMismatch) {
				t.Fatalf("VerifyRecord as %s: %v", tt.other, err)
			}
		})
	}
}

// TestRoundStatusCommand prints the table of a round kept in the intent repo.
func TestRoundStatusCommand(t *testing.T) {
	repo := exampleRepo(t)
	j, err := round.Open(filepath.Join(repo, "rounds", "2026-11"))
	if err != nil {
		t.Fatal(err)
	}
	order, err := round.PlanOrder([]round.NodeInfo{{Name: "cp-1", ControlPlane: true}, {Name: "gpu-1", GPU: true}}, round.Placement{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Plan(order, 48*time.Hour, round.Meta{}); err != nil {
		t.Fatal(err)
	}
	j.Close()
	code, out, errOut := run(t, "", nil, "round", "status", "--intent-repo", repo, "--state-dir", t.TempDir())
	if code != ExitOK || !strings.Contains(out, "cp-1") || !strings.Contains(out, "gpu-1") || !strings.Contains(out, "Next:") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
}
