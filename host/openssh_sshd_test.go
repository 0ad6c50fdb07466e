package host

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/mcp-patch/mcp-patch/internal/testsupport/sshdtest"
)

// sshHome is a home directory for one test, never the user's own: its
// .ssh holds the keys and config the test writes.
func sshHome(t *testing.T) (home, dotSSH string) {
	t.Helper()
	home = sshdtest.TempDir(t, "hosttest-home-")
	dotSSH = filepath.Join(home, ".ssh")
	if err := os.Mkdir(dotSSH, 0o700); err != nil {
		t.Fatal(err)
	}
	return home, dotSSH
}

// lockKey puts a passphrase on a key file with the real ssh-keygen.
func lockKey(t *testing.T, path string) {
	t.Helper()
	if out, err := exec.Command("ssh-keygen", "-q", "-p", "-P", "", "-N", "secret", "-f", path).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen -p %s: %v: %s", path, err, out)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// openPool is a pool over inv, closed at cleanup.
func openPool(t *testing.T, inv Inventory, cfg Config) *Pool {
	t.Helper()
	p, err := NewPool(inv, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// The identities ssh(1) would use with nothing configured: the default
// identity files under the home directory, and the agent's keys.
func TestOpenSSHIdentities(t *testing.T) {
	start := func(t *testing.T, keys ...ssh.PublicKey) (*sshdtest.Server, *MapInventory, Config) {
		s := sshdtest.Start(t, sshdtest.Options{AuthorizedKeys: keys})
		known := filepath.Join(t.TempDir(), "known_hosts")
		sshdtest.WriteKnownHosts(t, known, s)
		inv, err := NewMapInventory(Target{}, Target{Name: "h1", Address: s.Host, Port: s.Port})
		if err != nil {
			t.Fatal(err)
		}
		return s, inv, Config{KnownHostsFiles: []string{known}, DialTimeout: 10 * time.Second,
			Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil))}
	}
	t.Run("a default identity, a locked one before it skipped", func(t *testing.T) {
		home, dotSSH := sshHome(t)
		signer, keyPath := sshdtest.NewKey(t, dotSSH, "id_ed25519", "ed25519")
		sshdtest.NewKey(t, dotSSH, "id_ecdsa", "ecdsa") // OpenSSH tries id_ecdsa before id_ed25519
		lockKey(t, filepath.Join(dotSSH, "id_ecdsa"))
		_, inv, cfg := start(t, signer.PublicKey())
		cfg.DefaultIdentityFiles = DefaultIdentityFiles(home)
		p := openPool(t, inv, cfg)
		if _, err := p.RunScript(ctxFor(t, 30*time.Second), "h1", []byte("true\n"), nil); err != nil {
			t.Fatalf("RunScript with ~/.ssh/id_ed25519: %v", err)
		}
		if key, ok := p.KeyUsed("h1"); !ok || key != keyPath {
			t.Errorf("KeyUsed = %q, %v; want %s", key, ok, keyPath)
		}
	})
	t.Run("an agent key, its file on disk locked", func(t *testing.T) {
		home, dotSSH := sshHome(t)
		signer, plain := sshdtest.NewKey(t, t.TempDir(), "agent_key", "ed25519")
		sock := sshdtest.StartAgent(t, plain)
		copyFile(t, plain, filepath.Join(dotSSH, "id_ed25519"))
		lockKey(t, filepath.Join(dotSSH, "id_ed25519"))
		_, inv, cfg := start(t, signer.PublicKey())
		cfg.AgentSocket = sock
		cfg.DefaultIdentityFiles = DefaultIdentityFiles(home)
		p := openPool(t, inv, cfg)
		if _, err := p.RunScript(ctxFor(t, 30*time.Second), "h1", []byte("true\n"), nil); err != nil {
			t.Fatalf("RunScript with the agent's key: %v", err)
		}
		want := "ssh-agent key " + ssh.FingerprintSHA256(signer.PublicKey())
		if key, _ := p.KeyUsed("h1"); !strings.HasPrefix(key, want) {
			t.Errorf("KeyUsed = %q, want it to start %q", key, want)
		}
	})
	t.Run("a stale SSH_AUTH_SOCK is passed over", func(t *testing.T) {
		home, dotSSH := sshHome(t)
		signer, keyPath := sshdtest.NewKey(t, dotSSH, "id_ecdsa", "ecdsa")
		_, inv, cfg := start(t, signer.PublicKey())
		cfg.AgentSocket = filepath.Join(home, "agent-gone.sock")
		cfg.DefaultIdentityFiles = DefaultIdentityFiles(home)
		p := openPool(t, inv, cfg)
		if _, err := p.RunScript(ctxFor(t, 30*time.Second), "h1", []byte("true\n"), nil); err != nil {
			t.Fatalf("RunScript with ~/.ssh/id_ecdsa and no agent behind SSH_AUTH_SOCK: %v", err)
		}
		if key, _ := p.KeyUsed("h1"); key != keyPath {
			t.Errorf("KeyUsed = %q, want %s", key, keyPath)
		}
		emptyHome, _ := sshHome(t)
		cfg.DefaultIdentityFiles = DefaultIdentityFiles(emptyHome)
		_, err := openPool(t, inv, cfg).RunScript(ctxFor(t, 30*time.Second), "h1", []byte("true\n"), nil)
		if want := "the ssh-agent at " + cfg.AgentSocket + " could not be reached"; err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("err = %v, want it to say %q", err, want)
		}
	})
	t.Run("the agent IdentityAgent names, and IdentityAgent none", func(t *testing.T) {
		home, dotSSH := sshHome(t)
		signer, plain := sshdtest.NewKey(t, t.TempDir(), "agent_key", "ed25519")
		sock := sshdtest.StartAgent(t, plain)
		s, _, cfg := start(t, signer.PublicKey())
		cfgPath := filepath.Join(dotSSH, "config")
		config := fmt.Sprintf("Host h1\n  HostName %s\n  Port %d\n  IdentityAgent %s\nHost h2\n  HostName %s\n  Port %d\n  IdentityAgent none\n",
			s.Host, s.Port, sock, s.Host, s.Port)
		if err := os.WriteFile(cfgPath, []byte(config), 0o600); err != nil {
			t.Fatal(err)
		}
		oc, err := LoadOpenSSHConfig(cfgPath, home)
		if err != nil {
			t.Fatal(err)
		}
		inv, err := ParseInventoryWith([]byte("nodes:\n  h1: {}\n  h2: {}\n"), Target{}, oc)
		if err != nil {
			t.Fatal(err)
		}
		known := filepath.Join(dotSSH, "known_hosts")
		sshdtest.WriteKnownHosts(t, known, s)
		cfg.KnownHostsFiles = []string{known}
		cfg.DefaultIdentityFiles = DefaultIdentityFiles(home)
		p := openPool(t, inv, cfg) // no SSH_AUTH_SOCK
		if _, err := p.RunScript(ctxFor(t, 30*time.Second), "h1", []byte("true\n"), nil); err != nil {
			t.Fatalf("RunScript with the agent IdentityAgent names: %v", err)
		}
		if key, _ := p.KeyUsed("h1"); !strings.HasPrefix(key, "ssh-agent key "+ssh.FingerprintSHA256(signer.PublicKey())) {
			t.Errorf("KeyUsed = %q, want the agent's key", key)
		}
		cfg.AgentSocket = sock
		_, err = openPool(t, inv, cfg).RunScript(ctxFor(t, 30*time.Second), "h2", []byte("true\n"), nil)
		if !errors.As(err, new(*NoKeyError)) {
			t.Fatalf("err = %v, want a NoKeyError: IdentityAgent none turns SSH_AUTH_SOCK's agent off", err)
		}
	})
	t.Run("no key at all names the files tried and dials nothing", func(t *testing.T) {
		home, dotSSH := sshHome(t)
		signer, path := sshdtest.NewKey(t, dotSSH, "id_ed25519", "ed25519")
		lockKey(t, path)
		sock := sshdtest.StartAgent(t) // running, but holding no key
		s, inv, cfg := start(t, signer.PublicKey())
		cfg.AgentSocket = sock
		cfg.DefaultIdentityFiles = DefaultIdentityFiles(home)
		p := openPool(t, inv, cfg)
		_, err := p.RunScript(ctxFor(t, 30*time.Second), "h1", []byte("true\n"), nil)
		var nk *NoKeyError
		if !errors.As(err, &nk) {
			t.Fatalf("err = %v, want a NoKeyError", err)
		}
		for _, want := range []string{
			"the ssh-agent at " + sock + " holds no keys",
			filepath.Join(dotSSH, "id_rsa") + " (not found)",
			path + " (passphrase-protected and not in the agent: ssh-add it)",
		} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("err = %v\nwant it to say %q", err, want)
			}
		}
		if n := s.Count("Connection from"); n != 0 {
			t.Errorf("sshd saw %d connections; with no key nothing is dialled", n)
		}
	})
}

// A node named in ~/.ssh/config: HostName, Port, User and IdentityFile from
// its Host block, reached through the ProxyJump host the config names (a
// second real sshd, with a key of its own); the inventory wins where it
// says something.
func TestOpenSSHConfigAliasThroughProxyJump(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test logs in as a user it creates: run the host tests as root")
	}
	sshdtest.RequireSudo(t)
	sshdtest.EnsureUser(t, sudoUser)
	sshdtest.SudoRule(t, "mcp-patch-test", sudoUser, true)

	home, dotSSH := sshHome(t)
	jumpKey, jumpKeyPath := sshdtest.NewKey(t, dotSSH, "jump_key", "ed25519")
	nodeKey, nodeKeyPath := sshdtest.NewKey(t, dotSSH, "node_key", "ecdsa")
	bastion := sshdtest.Start(t, sshdtest.Options{AuthorizedKeys: []ssh.PublicKey{jumpKey.PublicKey()}, AllowTCPForwarding: true, LogLevel: "DEBUG1"})
	target := sshdtest.Start(t, sshdtest.Options{AuthorizedKeys: []ssh.PublicKey{nodeKey.PublicKey()}})
	known := filepath.Join(dotSSH, "known_hosts")
	sshdtest.WriteKnownHosts(t, known, bastion, target)
	cfgPath := filepath.Join(dotSSH, "config")
	config := fmt.Sprintf(`Host gpu-*
    HostName 127.0.0.1
    Port %d
    User %s
    IdentityFile ~/.ssh/node_key
    ProxyJump jump

Host jump
    HostName 127.0.0.1
    Port %d
    IdentityFile %%d/.ssh/jump_key
`, target.Port, sudoUser, bastion.Port)
	if err := os.WriteFile(cfgPath, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	oc, err := LoadOpenSSHConfig(cfgPath, home)
	if err != nil {
		t.Fatal(err)
	}
	inventory := "nodes:\n  gpu-01: {}\n  gpu-02: {user: root, jump: \"-\"}\n"
	inv, err := ParseInventoryWith([]byte(inventory), Target{User: "root", Port: 22}, oc)
	if err != nil {
		t.Fatal(err)
	}
	p := openPool(t, inv, Config{KnownHostsFiles: []string{known}, DefaultIdentityFiles: DefaultIdentityFiles(home),
		DialTimeout: 10 * time.Second, Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil))})
	ctx := ctxFor(t, 60*time.Second)

	out, err := p.RunScript(ctx, "gpu-01", []byte("echo \"$(id -un) $SUDO_USER\"\n"), nil)
	if err != nil {
		t.Fatalf("RunScript gpu-01: %v (stderr %q)", err, out.Stderr)
	}
	if got, want := strings.TrimSpace(string(out.Stdout)), "root "+sudoUser; got != want {
		t.Fatalf("gpu-01 said %q, want %q: logged in as the Host block's User, through sudo", got, want)
	}
	if n := target.Count("Accepted publickey for " + sudoUser); n != 1 {
		t.Errorf("the target logged %d logins of %s, want 1\n%s", n, sudoUser, target.Log())
	}
	if n := bastion.Count(fmt.Sprintf("target 127.0.0.1 port %d", target.Port)); n != 1 {
		t.Errorf("the jump host opened %d tunnels to the target, want 1 (ProxyJump)\n%s", n, bastion.Log())
	}
	for node, want := range map[string]string{"gpu-01": nodeKeyPath, "jump": jumpKeyPath} {
		if key, ok := p.KeyUsed(node); key != want {
			t.Errorf("KeyUsed(%s) = %q, %v; want %s (its IdentityFile)", node, key, ok, want)
		}
	}
	tg, err := inv.Lookup("gpu-01")
	if err != nil {
		t.Fatal(err)
	}
	wantLine := fmt.Sprintf("Port %d (%s:3)", target.Port, cfgPath)
	if !slices.Contains(tg.SSHConfigLines, wantLine) {
		t.Errorf("SSHConfigLines = %q, want %q among them", tg.SSHConfigLines, wantLine)
	}

	// gpu-02's inventory entry says root, directly: it wins over the
	// Host block's User and ProxyJump.
	out, err = p.RunScript(ctx, "gpu-02", []byte("echo \"$(id -un) ${SUDO_USER:-none}\"\n"), nil)
	if err != nil {
		t.Fatalf("RunScript gpu-02: %v (stderr %q)", err, out.Stderr)
	}
	if got := strings.TrimSpace(string(out.Stdout)); got != "root none" {
		t.Errorf("gpu-02 ran as %q, want root logged in as root", got)
	}
	if n := bastion.Count(fmt.Sprintf("target 127.0.0.1 port %d", target.Port)); n != 1 {
		t.Errorf("the jump host opened %d tunnels, want still 1: gpu-02 is reached directly", n)
	}
}
