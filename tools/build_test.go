package tools

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/mcp-patch/mcp-patch/config"
	"github.com/mcp-patch/mcp-patch/host"
	"github.com/mcp-patch/mcp-patch/kube"
	"github.com/mcp-patch/mcp-patch/round/service"
)

// buildConfig is a configuration that reaches nothing by itself: no
// cluster (a kubeconfig path that does not exist), no intent repository,
// a fresh state directory.
func buildConfig(t *testing.T) config.Config {
	t.Helper()
	c := config.DefaultConfig()
	c.StateDir = t.TempDir()
	c.Kubeconfig = filepath.Join(t.TempDir(), "no-such-kubeconfig")
	c.Identity = "server-a"
	kh := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(kh, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	c.SSH.KnownHosts = []string{kh}
	return c
}

func buildOf(t *testing.T, c config.Config) *Deps {
	t.Helper()
	d, cleanup, err := Build(context.Background(), &c, nil, nil, nil)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	t.Cleanup(cleanup)
	return d
}

// Build refuses approval files it cannot use, with the setting to fix
// named: a server that cannot check signatures or keep nonces does not
// start with destructive tools offered.
func TestBuildRefusesApprovalFilesItCannotUse(t *testing.T) {
	signers := filepath.Join(t.TempDir(), "allowed_signers")
	if err := os.WriteFile(signers, []byte("alice@example.org namespaces=\"mcp-patch\" ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBdJ6lXlkWyBXL8q2NDWpqzIHB/nUzGn5UHOykqKXvlI\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	notDir := filepath.Join(t.TempDir(), "state-is-a-file")
	if err := os.WriteFile(notDir, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		change func(*config.Config)
		want   string
	}{
		{"missing allowed_signers", func(c *config.Config) { c.Approvals.AllowedSigners = filepath.Join(t.TempDir(), "none") }, "approvals.allowed_signers"},
		{"unparsable allowed_signers", func(c *config.Config) {
			p := filepath.Join(t.TempDir(), "bad")
			if err := os.WriteFile(p, []byte("alice@example.org not-a-key\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			c.Approvals.AllowedSigners = p
		}, "approvals.allowed_signers"},
		{"state dir is a file", func(c *config.Config) { c.Approvals.AllowedSigners, c.StateDir = signers, notDir }, "open the approval nonce store"},
		{"webhook without a url", func(c *config.Config) { c.Notify.Webhooks = []config.Webhook{{Name: "ops"}} }, "notify.webhooks[0] (ops).url"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := buildConfig(t)
			c.change(&cfg)
			d, cleanup, err := Build(context.Background(), &cfg, nil, nil, nil)
			if err == nil {
				cleanup()
				t.Fatalf("Build accepted it: %+v", d.Approvals)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Build: %v, want it to name %q", err, c.want)
			}
		})
	}

	// Read-only, the same broken signers file is not even read: no
	// approvals are checked there, and every destructive tool refuses.
	cfg := buildConfig(t)
	cfg.Mode = config.ModeReadOnly
	cfg.Approvals.AllowedSigners = filepath.Join(t.TempDir(), "none")
	d := buildOf(t, cfg)
	if d.Approvals != nil {
		t.Fatal("a read-only server checks approvals")
	}
	if d.Mode != ModeReadOnly {
		t.Fatalf("mode %s", d.Mode)
	}
}

// Build's defaults: a clock, a logger, an empty environment, the
// configured identity; verify.sh is disabled exactly when the server runs
// read-only and the configuration does not allow it.
func TestBuildDefaultsAndVerifyInReadOnly(t *testing.T) {
	d := buildOf(t, buildConfig(t))
	if d.Now == nil || d.Log == nil || d.Getenv == nil || d.Getenv("HOME") != "" {
		t.Fatalf("Build defaults: now %v log %v getenv %v", d.Now != nil, d.Log != nil, d.Getenv != nil)
	}
	if d.Identity != "server-a" || d.Intent != nil || d.Book != nil || d.Ops == nil || d.Audit == nil {
		t.Fatalf("Build without an intent repo: identity %q intent %v book %v ops %v", d.Identity, d.Intent != nil, d.Book != nil, d.Ops != nil)
	}
	if _, err := d.OpenRound(); err == nil || !strings.Contains(err.Error(), "no intent repository") {
		t.Fatalf("a round without an intent repository: %v", err)
	}
	for _, c := range []struct {
		mode    config.Mode
		allowed bool
		off     bool
	}{
		{config.ModeNormal, false, false},
		{config.ModeDisableDestructive, false, false},
		{config.ModeReadOnly, false, true},
		{config.ModeReadOnly, true, false},
	} {
		cfg := config.DefaultConfig()
		cfg.Mode, cfg.Verify.InReadOnly = c.mode, c.allowed
		why := service.VerifyDisabled(&cfg)
		if (why != "") != c.off {
			t.Errorf("mode %s in_read_only %v: disabled %q", c.mode, c.allowed, why)
		}
		if c.off && !strings.Contains(why, "verify.in_read_only") {
			t.Errorf("the reason does not name the setting: %q", why)
		}
	}
}

// The cluster is reached on first use, not at Build: Build succeeds with a
// kubeconfig that does not exist yet, the first use fails naming it, and a
// failed connection is not kept (the next call tries again).
func TestBuildReachesTheClusterLazily(t *testing.T) {
	d := buildOf(t, buildConfig(t))
	_, err := d.Cluster(context.Background())
	if err == nil || !strings.Contains(err.Error(), d.Config.Kubeconfig) {
		t.Fatalf("cluster with no kubeconfig: %v", err)
	}
	// Hosts need node addresses: no inventory file and no cluster is a
	// clear refusal, not an empty pool.
	_, err = d.Hosts(context.Background())
	if err == nil || !strings.Contains(err.Error(), "no SSH inventory file and the cluster (for node addresses) is unreachable") {
		t.Fatalf("hosts with neither inventory nor cluster: %v", err)
	}
}

// With an inventory file, the hosts work without the cluster; the pool
// is built once and shared by later calls; without known_hosts files no
// pool is built at all (host keys are always checked).
func TestBuildHostsFromTheInventoryFile(t *testing.T) {
	inv := filepath.Join(t.TempDir(), "inventory.yaml")
	if err := os.WriteFile(inv, []byte("nodes:\n  gpu-01: {address: 10.0.0.11}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := buildConfig(t)
	c.SSH.Inventory = inv
	d := buildOf(t, c)
	a, err := d.Hosts(context.Background())
	if err != nil {
		t.Fatalf("hosts from the inventory file alone: %v", err)
	}
	if a.Steps == nil || a.Pool == nil || a.Runner == nil {
		t.Fatalf("host access: %+v", a)
	}
	b, err := d.Hosts(context.Background())
	if err != nil || b != a {
		t.Fatalf("second use built another pool (%p, %p) or failed: %v", a, b, err)
	}

	c.SSH.KnownHosts = nil
	pool, _, err := service.OpenHostPool(context.Background(), &Deps{Config: &c, Log: slog.New(slog.DiscardHandler), Getenv: func(string) string { return "" }})
	if err == nil {
		pool.Close()
		t.Fatal("a pool without known_hosts")
	}
	if !strings.Contains(err.Error(), "KnownHostsFiles") {
		t.Fatalf("pool without known_hosts: %v", err)
	}
	c.SSH.Inventory = filepath.Join(t.TempDir(), "missing.yaml")
	if _, _, err := service.OpenHostPool(context.Background(), &Deps{Config: &c, Log: slog.New(slog.DiscardHandler), Getenv: func(string) string { return "" }}); err == nil || !strings.Contains(err.Error(), "load inventory") {
		t.Fatalf("pool over a missing inventory file: %v", err)
	}
}

// The inventory is the file, completed with the InternalIP of every
// cluster node it does not name (under the config's SSH defaults); a node
// the file names keeps the file's address; a node without an address is
// left out; an unreachable cluster leaves the file alone.
func TestHostInventoryCompletedFromTheCluster(t *testing.T) {
	inv := filepath.Join(t.TempDir(), "inventory.yaml")
	if err := os.WriteFile(inv, []byte("nodes:\n  gpu-1: {address: 192.0.2.1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := config.DefaultConfig()
	c.SSH.Inventory, c.SSH.User, c.SSH.Port = inv, "ops", 2222
	noAddr := readyNode("gpu-9", nil, 0)
	noAddr.Status.Addresses = nil
	kc := fake.NewClientset(readyNode("gpu-1", nil, 8), readyNode("gpu-2", nil, 8), noAddr)
	clients := &kube.Clients{Kube: kc}
	d := &Deps{Config: &c, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Cluster: func(context.Context) (*kube.Clients, error) { return clients, nil }}
	got, err := service.LoadHostInventory(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	if tg, err := got.Lookup("gpu-1"); err != nil || tg.Address != "192.0.2.1" {
		t.Fatalf("gpu-1 (named in the file): %+v %v", tg, err)
	}
	tg, err := got.Lookup("gpu-2")
	if err != nil || tg.Address != readyNode("gpu-2", nil, 0).Status.Addresses[0].Address || tg.User != "ops" || tg.Port != 2222 {
		t.Fatalf("gpu-2 (from the cluster): %+v %v", tg, err)
	}
	if _, err := got.Lookup("gpu-9"); !errors.Is(err, host.ErrUnknownNode) {
		t.Fatalf("a node without an address: %v", err)
	}

	d.Cluster = func(context.Context) (*kube.Clients, error) { return nil, errors.New("connection refused") }
	got, err = service.LoadHostInventory(context.Background(), d)
	if err != nil {
		t.Fatalf("file inventory with the cluster down: %v", err)
	}
	if _, err := got.Lookup("gpu-2"); !errors.Is(err, host.ErrUnknownNode) {
		t.Fatalf("gpu-2 without the cluster: %v", err)
	}
	if _, err := got.Lookup("gpu-1"); err != nil {
		t.Fatalf("gpu-1 from the file: %v", err)
	}
}
