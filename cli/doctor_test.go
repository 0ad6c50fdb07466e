package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/mcp-patch/mcp-patch/config"
	"github.com/mcp-patch/mcp-patch/internal/testsupport/sshdtest"
	"github.com/mcp-patch/mcp-patch/lab"
)

// writeConfigJSON writes c as a config file (JSON is YAML) and returns its path.
func writeConfigJSON(t *testing.T, c config.Config) string {
	t.Helper()
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// doctorLines runs doctor and returns its exit code, its check lines by
// their name ("cluster", "ssh cp-1", ...) and the whole output.
func doctorLines(t *testing.T, args ...string) (int, map[string]string, string) {
	t.Helper()
	code, out, errs := run(t, "", nil, append([]string{"doctor"}, args...)...)
	lines := map[string]string{}
	line := regexp.MustCompile(`^(ok  |FAIL) ([^:]+): `)
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if m := line.FindStringSubmatch(l); m != nil {
			lines[m[2]] = l
		}
	}
	return code, lines, out + errs
}

func wantLine(t *testing.T, lines map[string]string, out, name, prefix string, contains ...string) {
	t.Helper()
	l, ok := lines[name]
	if !ok {
		t.Errorf("no %q line in:\n%s", name, out)
		return
	}
	if !strings.HasPrefix(l, prefix+" ") {
		t.Errorf("%q line is not %s: %s\nwhole output:\n%s", name, prefix, l, out)
	}
	for _, s := range contains {
		if !strings.Contains(l, s) {
			t.Errorf("%q line lacks %q: %s", name, s, l)
		}
	}
}

func TestDoctorOnTheLab(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	l, err := lab.Up(ctx, lab.Options{Dir: t.TempDir(), ControlPlanes: 1, Canary: 1, GPUServers: 1,
		Progress: func(s string) { t.Log("lab: " + s) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	nodes := []string{"ssh cp-1", "ssh gpu-canary-1", "ssh gpu-1"}

	t.Run("green", func(t *testing.T) {
		code, lines, out := doctorLines(t, "--config", l.ConfigFile)
		if code != ExitOK {
			t.Errorf("exit %d, want 0:\n%s", code, out)
		}
		wantLine(t, lines, out, "cluster", "ok", "answers", "Kubernetes v")
		// The lab's config is the mcp-patch ServiceAccount with the shipped roles.
		wantLine(t, lines, out, "permissions", "ok", "requests of deploy/kubernetes/rbac.yaml allowed")
		for _, n := range nodes {
			wantLine(t, lines, out, n, "ok", "host key known", "root")
		}
		wantLine(t, lines, out, "intent repo", "ok", "clean on main", "mcp-patch/round-")
		wantLine(t, lines, out, "allowed_signers", "ok", "1 may approve", "lab-approver@mcp-patch.lab")
		wantLine(t, lines, out, "token file", "ok")
	})

	t.Run("a login other than root goes through sudo -n", func(t *testing.T) {
		b, err := os.ReadFile(l.Config.SSH.Inventory)
		if err != nil {
			t.Fatal(err)
		}
		inv := strings.Replace(string(b), "user: root", "user: ubuntu", 1)
		if inv == string(b) {
			t.Fatalf("the lab inventory names no root user:\n%s", b)
		}
		c := l.Config
		c.SSH.Inventory = filepath.Join(t.TempDir(), "inventory.yaml")
		if err := os.WriteFile(c.SSH.Inventory, []byte(inv), 0o600); err != nil {
			t.Fatal(err)
		}
		code, lines, out := doctorLines(t, "--config", writeConfigJSON(t, c))
		if code != ExitOK {
			t.Errorf("exit %d, want 0:\n%s", code, out)
		}
		for _, n := range nodes {
			wantLine(t, lines, out, n, "ok", "ubuntu@", "sudo -n works")
		}
	})

	t.Run("unknown host key", func(t *testing.T) {
		c := l.Config
		c.SSH.KnownHosts = []string{filepath.Join(t.TempDir(), "known_hosts")}
		if err := os.WriteFile(c.SSH.KnownHosts[0], nil, 0o600); err != nil {
			t.Fatal(err)
		}
		code, lines, out := doctorLines(t, "--config", writeConfigJSON(t, c))
		if code != ExitNotOK {
			t.Errorf("exit %d, want 1:\n%s", code, out)
		}
		for _, n := range nodes {
			wantLine(t, lines, out, n, "FAIL", "known_hosts", "fingerprint")
		}
		wantLine(t, lines, out, "cluster", "ok")
	})

	t.Run("dirty intent repo", func(t *testing.T) {
		stray := filepath.Join(l.IntentRepo, "notes.txt")
		if err := os.WriteFile(stray, []byte("draft\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(stray)
		code, lines, out := doctorLines(t, "--config", l.ConfigFile)
		if code != ExitNotOK {
			t.Errorf("exit %d, want 1:\n%s", code, out)
		}
		wantLine(t, lines, out, "intent repo", "FAIL", "uncommitted changes", "notes.txt", "commit, stash or remove")
		wantLine(t, lines, out, "ssh gpu-1", "ok")
	})

	t.Run("missing permissions", func(t *testing.T) {
		// A ServiceAccount no role is bound to: every request is refused,
		// and each is named with the rule that grants it.
		kc := filepath.Join(t.TempDir(), "nobody.kubeconfig")
		if err := l.Cluster.ServiceAccountKubeconfig(ctx, "default", "nobody", kc); err != nil {
			t.Fatal(err)
		}
		code, lines, out := doctorLines(t, "--config", l.ConfigFile, "--kubeconfig", kc)
		if code != ExitNotOK {
			t.Errorf("exit %d, want 1:\n%s", code, out)
		}
		wantLine(t, lines, out, "cluster", "ok")
		wantLine(t, lines, out, "permission create pods/eviction", "FAIL", "every namespace",
			`grant apiGroups: [""], resources: [pods/eviction], verbs: [create] (ClusterRole mcp-patch)`)
		wantLine(t, lines, out, "permission update leases mcp-patch-window", "FAIL", "namespace kube-system",
			"resourceNames: [mcp-patch-window] (Role mcp-patch in namespace kube-system)")
		wantLine(t, lines, out, "permission update leases mcp-patch-leader", "FAIL", "namespace kube-system", "leader_election",
			"resourceNames: [mcp-patch-leader] (Role mcp-patch in namespace kube-system)")
		wantLine(t, lines, out, "permission create pods", "FAIL", "namespace default", "(Role mcp-patch in namespace default)")
		if _, ok := lines["permissions"]; ok {
			t.Errorf("a permissions ok line beside the missing ones:\n%s", out)
		}
	})

	t.Run("unreachable API server", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		gone := ln.Addr().String()
		ln.Close()
		kc := filepath.Join(t.TempDir(), "kubeconfig")
		body := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: gone, cluster: {server: "https://%s", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: not-a-token}}]
contexts: [{name: gone, context: {cluster: gone, user: u}}]
current-context: gone
`, gone)
		if err := os.WriteFile(kc, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		code, lines, out := doctorLines(t, "--config", l.ConfigFile, "--kubeconfig", kc)
		if code != ExitNotOK {
			t.Errorf("exit %d, want 1:\n%s", code, out)
		}
		wantLine(t, lines, out, "cluster", "FAIL", gone, `context "gone"`, "API server is up")
		// The inventory file still names every node.
		for _, n := range nodes {
			wantLine(t, lines, out, n, "ok")
		}
	})

	t.Run("token file others can read", func(t *testing.T) {
		c := l.Config
		c.Serve.TokenFile = filepath.Join(t.TempDir(), "token")
		if err := os.WriteFile(c.Serve.TokenFile, []byte("0123456789abcdef0123\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		code, lines, out := doctorLines(t, "--config", writeConfigJSON(t, c))
		if code != ExitNotOK {
			t.Errorf("exit %d, want 1:\n%s", code, out)
		}
		wantLine(t, lines, out, "token file", "FAIL", "0644", "chmod 600")
	})
}

// TestDoctorNoSudo: a real sshd and a login user without a sudo rule.
func TestDoctorNoSudo(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("TestDoctorNoSudo creates a login user: run the cli tests as root")
	}
	const login = "mcppdoctor"
	sshdtest.RequireSudo(t)
	sshdtest.EnsureUser(t, login)
	dir := t.TempDir()
	signer, keyFile := sshdtest.NewKey(t, dir, "id_ed25519", "ed25519")
	srv := sshdtest.Start(t, sshdtest.Options{AuthorizedKeys: []ssh.PublicKey{signer.PublicKey()}})
	c := mustConfig(t, exampleRepo(t))
	c.Kubeconfig = filepath.Join(dir, "no-kubeconfig")
	c.SSH.KnownHosts = []string{filepath.Join(dir, "known_hosts")}
	sshdtest.WriteKnownHosts(t, c.SSH.KnownHosts[0], srv)
	c.SSH.KeyFiles = []string{keyFile}
	c.SSH.Inventory = filepath.Join(dir, "inventory.yaml")
	inv := fmt.Sprintf("nodes:\n  node-1: {address: %s, port: %d, user: %s}\n", srv.Host, srv.Port, login)
	if err := os.WriteFile(c.SSH.Inventory, []byte(inv), 0o600); err != nil {
		t.Fatal(err)
	}
	code, lines, out := doctorLines(t, "--config", writeConfigJSON(t, c))
	if code != ExitNotOK {
		t.Errorf("exit %d, want 1:\n%s", code, out)
	}
	wantLine(t, lines, out, "ssh node-1", "FAIL", login+"@", "host key known, logged in", "without a password", "NOPASSWD")
	wantLine(t, lines, out, "cluster", "FAIL", "no-kubeconfig")
}
