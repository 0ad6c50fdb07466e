package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/mcp-patch/mcp-patch/internal/testsupport/sshdtest"
)

// TestHostToolsWithOpenSSHIdentities: a correct inventory and a key where
// ssh(1) would find it (~/.ssh/id_ed25519, or ssh-agent) and nothing in
// ssh.key_files: the host tools log in to a real sshd. With neither, they
// fail with the no_ssh_key cause, the identity files tried, and a next
// step that says how to give mcp-patch a key, not to check the network.
func TestHostToolsWithOpenSSHIdentities(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the host tools log in as root over a real sshd: run the cli tests as root")
	}
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	if err := os.MkdirAll(filepath.Join(home, ".ssh"), 0o700); err != nil {
		t.Fatal(err)
	}
	signer, keyFile := sshdtest.NewKey(t, filepath.Join(home, ".ssh"), "id_ed25519", "ed25519")
	srv := sshdtest.Start(t, sshdtest.Options{AuthorizedKeys: []ssh.PublicKey{signer.PublicKey()}})

	c := mustConfig(t, exampleRepo(t))
	c.Kubeconfig = filepath.Join(dir, "no-kubeconfig") // no cluster at all
	c.SSH.KnownHosts = []string{filepath.Join(dir, "known_hosts")}
	sshdtest.WriteKnownHosts(t, c.SSH.KnownHosts[0], srv)
	c.SSH.KeyFiles = nil
	c.SSH.Inventory = filepath.Join(dir, "inventory.yaml")
	inv := fmt.Sprintf("nodes:\n  h1: {address: %s, port: %d, user: root}\n", srv.Host, srv.Port)
	if err := os.WriteFile(c.SSH.Inventory, []byte(inv), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfigJSON(t, c)
	tool := func(t *testing.T, env map[string]string, args ...string) (int, map[string]any) {
		t.Helper()
		code, out, errs := run(t, "", env, append(append([]string{"tool"}, args...), "--config", cfg)...)
		var m map[string]any
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			t.Fatalf("%v: not JSON (%v):\n%s\nstderr:\n%s", args, err, out, errs)
		}
		return code, m
	}
	readsTheKernel := func(t *testing.T, env map[string]string) {
		t.Helper()
		code, m := tool(t, env, "fleet_check")
		rows, _ := m["nodes"].([]any)
		if code != ExitOK || m["status"] != "ok" || len(rows) != 1 {
			t.Fatalf("fleet_check: exit %d, %v", code, m)
		}
		if row, _ := rows[0].(map[string]any); row["kernel"] == nil || row["kernel"] == "" {
			t.Fatalf("fleet_check read no kernel: %v", m)
		}
	}

	t.Run("the default identity file", func(t *testing.T) {
		readsTheKernel(t, map[string]string{"HOME": home})
	})
	empty := filepath.Join(dir, "empty-home")
	if err := os.MkdirAll(filepath.Join(empty, ".ssh"), 0o700); err != nil {
		t.Fatal(err)
	}
	t.Run("an ssh-agent key", func(t *testing.T) {
		readsTheKernel(t, map[string]string{"HOME": empty, "SSH_AUTH_SOCK": sshdtest.StartAgent(t, keyFile)})
	})
	t.Run("no key anywhere", func(t *testing.T) {
		code, m := tool(t, map[string]string{"HOME": empty}, "inspect_node", "--node", "h1")
		want(t, "inspect_node without a key", code, m, "failed",
			[]string{"no SSH key for node h1", filepath.Join(empty, ".ssh", "id_ed25519") + " (not found)"},
			"Give mcp-patch an SSH key for h1", "reachable")
	})
}
