package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/mcp-patch/mcp-patch/internal/testsupport/sshdtest"
)

// TestDoctorNamesKeyAndSSHConfigLines: with nothing but the user's ~/.ssh
// (a default identity, a Host block giving the address and port), doctor
// logs in to a real sshd and says which key and which config lines it
// used; with an empty ~/.ssh it says no key was found, which files it
// tried, and how to give it one.
func TestDoctorNamesKeyAndSSHConfigLines(t *testing.T) {
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	dotSSH := filepath.Join(home, ".ssh")
	if err := os.MkdirAll(dotSSH, 0o700); err != nil {
		t.Fatal(err)
	}
	signer, keyFile := sshdtest.NewKey(t, dotSSH, "id_ed25519", "ed25519")
	srv := sshdtest.Start(t, sshdtest.Options{AuthorizedKeys: []ssh.PublicKey{signer.PublicKey()}})
	sshConfig := filepath.Join(dotSSH, "config")
	if err := os.WriteFile(sshConfig, []byte(fmt.Sprintf("Host node-*\n  HostName %s\n  Port %d\n", srv.Host, srv.Port)), 0o600); err != nil {
		t.Fatal(err)
	}

	c := mustConfig(t, exampleRepo(t))
	c.Kubeconfig = filepath.Join(dir, "no-kubeconfig")
	c.SSH.KnownHosts = []string{filepath.Join(dir, "known_hosts")}
	sshdtest.WriteKnownHosts(t, c.SSH.KnownHosts[0], srv)
	c.SSH.KeyFiles = nil
	c.SSH.Inventory = filepath.Join(dir, "inventory.yaml")
	if err := os.WriteFile(c.SSH.Inventory, []byte("nodes:\n  node-1: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	doctor := func(t *testing.T, home string) (map[string]string, string) {
		t.Helper()
		_, out, errs := run(t, "", map[string]string{"HOME": home}, "doctor", "--config", writeConfigJSON(t, c))
		lines := map[string]string{}
		line := regexp.MustCompile(`^(ok  |FAIL) ([^:]+): `)
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if m := line.FindStringSubmatch(l); m != nil {
				lines[m[2]] = l
			}
		}
		return lines, out + errs
	}

	t.Run("the default identity and the Host block", func(t *testing.T) {
		lines, out := doctor(t, home)
		wantLine(t, lines, out, "ssh node-1", "ok", fmt.Sprintf("root@%s", srv.Addr()), "host key known",
			"key "+keyFile,
			fmt.Sprintf("HostName %s (%s:2)", srv.Host, sshConfig),
			fmt.Sprintf("Port %d (%s:3)", srv.Port, sshConfig))
	})
	t.Run("no key", func(t *testing.T) {
		empty := filepath.Join(dir, "empty-home")
		if err := os.MkdirAll(filepath.Join(empty, ".ssh"), 0o700); err != nil {
			t.Fatal(err)
		}
		inv := fmt.Sprintf("nodes:\n  node-1: {address: %s, port: %d}\n", srv.Host, srv.Port)
		if err := os.WriteFile(c.SSH.Inventory, []byte(inv), 0o600); err != nil {
			t.Fatal(err)
		}
		lines, out := doctor(t, empty)
		wantLine(t, lines, out, "ssh node-1", "FAIL", "no SSH key for node node-1", "SSH_AUTH_SOCK is not set",
			filepath.Join(empty, ".ssh", "id_ed25519")+" (not found)", "ssh-add", "IdentityFile")
	})
}
