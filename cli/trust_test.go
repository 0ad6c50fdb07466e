package cli

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-patch/mcp-patch/config"
)

// When serve and doctor warn about the trust domain, and when not.
func TestTrustWarnings(t *testing.T) {
	base := trustFacts{UID: 1000, Signers: "/etc/mcp-patch/allowed_signers", Destructive: true, Stdio: true, ClientUID: 1000}
	tests := []struct {
		name  string
		edit  func(*trustFacts)
		wants []string // one substring per warning, in order
	}{
		{"stdio agent as the serving user", nil, []string{"serving user (uid 1000): the agent is in the server's trust domain"}},
		{"and it can write allowed_signers", func(f *trustFacts) { f.SignersWritable = true },
			[]string{"can write /etc/mcp-patch/allowed_signers", "can write /etc/mcp-patch/allowed_signers"}},
		{"stdio agent of another user", func(f *trustFacts) { f.ClientUID = 1001 }, nil},
		{"client unknown", func(f *trustFacts) { f.ClientUID = -1 }, nil},
		{"HTTP service", func(f *trustFacts) { f.Stdio = false }, nil},
		{"HTTP service that can write allowed_signers", func(f *trustFacts) { f.Stdio, f.SignersWritable = false, true },
			[]string{"add a key and approve"}},
		{"read-only over stdio", func(f *trustFacts) { f.Destructive = false }, nil},
		{"no allowed_signers: nothing can be approved", func(f *trustFacts) { f.Signers, f.SignersWritable = "", true }, nil},
		{"config and state dir named", func(f *trustFacts) { f.Writable = []string{"/etc/mcp-patch/config.yaml", "/var/lib/mcp-patch"} },
			[]string{"can write /etc/mcp-patch/config.yaml, /var/lib/mcp-patch"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := base
			if tc.edit != nil {
				tc.edit(&f)
			}
			got := trustWarnings(f)
			if len(got) != len(tc.wants) {
				t.Fatalf("warnings %q, want %d", got, len(tc.wants))
			}
			for i, w := range tc.wants {
				if !strings.Contains(got[i], w) {
					t.Errorf("warning %d %q does not say %q", i, got[i], w)
				}
			}
		})
	}
}

// signersFile is an allowed_signers file of one person (a key made by the
// real ssh-keygen), writable by this user.
func signersFile(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	key := filepath.Join(dir, "id_ed25519")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "alice", "-f", key).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v %s", err, out)
	}
	pub, err := os.ReadFile(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	allowed := filepath.Join(dir, "allowed_signers")
	if err := os.WriteFile(allowed, []byte(`alice@example.org namespaces="mcp-patch" `+strings.TrimSpace(string(pub))+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return allowed
}

// The real binary over stdio, started by this test (the same user) with
// an allowed_signers file it can write: serve warns on stderr that the
// agent shares its trust domain and can write the file; with
// --disable-destructive only the file's warning is left. doctor prints
// the same as WARN lines.
func TestServeAndDoctorWarnAboutTheTrustDomain(t *testing.T) {
	repo := exampleRepo(t)
	signers := signersFile(t)
	stderrOf := func(extra ...string) string {
		t.Helper()
		cmd := exec.Command(binary, append([]string{"serve", "--intent-repo", repo, "--state-dir", t.TempDir(), "--allowed-signers", signers}, extra...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cs.ListTools(ctx, nil); err != nil {
			t.Fatal(err)
		}
		cs.Close()
		return stderr.String()
	}
	got := stderrOf()
	for _, want := range []string{"trust domain", "client running as the serving user", "can write " + signers} {
		if !strings.Contains(got, want) {
			t.Errorf("serve over stdio: stderr does not say %q:\n%s", want, got)
		}
	}
	got = stderrOf("--disable-destructive")
	if strings.Contains(got, "offered over stdio") || !strings.Contains(got, "can write "+signers) {
		t.Errorf("serve --disable-destructive:\n%s", got)
	}

	c := config.DefaultConfig()
	c.IntentRepo, c.StateDir, c.Approvals.AllowedSigners = repo, t.TempDir(), signers
	lines := ""
	for _, ch := range trustChecks(&c, "") {
		lines += ch.String() + "\n"
	}
	if !strings.Contains(lines, "WARN trust: the serving user") || !strings.Contains(lines, "WARN trust: destructive tools are offered over stdio") {
		t.Errorf("doctor's trust lines:\n%s", lines)
	}
	code, out, _ := run(t, "", nil, "doctor", "--intent-repo", repo, "--state-dir", t.TempDir(), "--allowed-signers", signers,
		"--kubeconfig", filepath.Join(t.TempDir(), "none"))
	if !strings.Contains(out, "WARN trust:") || code == ExitOK && strings.Contains(out, "FAIL trust") {
		t.Errorf("doctor (exit %d):\n%s", code, out)
	}
}
