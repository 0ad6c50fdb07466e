package tools

import (
	"context"
	"errors"
	"github.com/mcp-patch/mcp-patch/round/service"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/mcp-patch/mcp-patch/config"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// dialPool records the tunnels asked of it.
type dialPool struct {
	mu    sync.Mutex
	dials []string
}

func (*dialPool) Forget(string) {}
func (p *dialPool) Dial(_ context.Context, node, network, addr string) (net.Conn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dials = append(p.dials, node+" "+network+" "+addr)
	return nil, errors.New("no tunnel in this test")
}

// The gate's configuration from the round and the server's config: the
// round's baseline (a damaged one is an error, never a gate without a
// baseline), etcd dialled directly or through an SSH tunnel to the node's
// own 127.0.0.1 port, the OIDC CA bundle (a missing file is named).
func TestGateConfig(t *testing.T) {
	r := newWRig(t)
	s, err := r.d.OpenRound()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := r.d.GateConfig(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Baseline != nil || cfg.Etcd != nil || cfg.OIDC.PodNamespace != "kube-system" || cfg.OIDC.CAPEM != nil || cfg.FailingVerify != nil {
		t.Fatalf("gate config of a bare server: %+v", cfg)
	}

	if err := r.d.Book.WriteFile(wRound, window.BaselineFile, []byte(`{"taken_at": "2026-11-03T08:00:00Z", "namespaces": ["ml"]}`)); err != nil {
		t.Fatal(err)
	}
	if cfg, err = r.d.GateConfig(t.Context(), s); err != nil || cfg.Baseline == nil || !slices.Equal(cfg.Baseline.Namespaces, []string{"ml"}) {
		t.Fatalf("with a baseline: %+v %v", cfg.Baseline, err)
	}
	if err := r.d.Book.WriteFile(wRound, window.BaselineFile, []byte(`{"taken_at": `)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.d.GateConfig(t.Context(), s); err == nil || !strings.Contains(err.Error(), "read the round's baseline") {
		t.Fatalf("a damaged baseline: %v", err)
	}
	if err := r.d.Book.WriteFile(wRound, window.BaselineFile, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}

	r.d.Config.Kube.EtcdEndpoints = []string{"https://10.0.0.1:2379"}
	r.d.Config.Kube.EtcdCA = "/etc/etcd/ca.crt"
	if cfg, err = r.d.GateConfig(t.Context(), s); err != nil || cfg.Etcd == nil || cfg.Etcd.Dial != nil || cfg.Etcd.CAFile != "/etc/etcd/ca.crt" {
		t.Fatalf("direct etcd: %+v %v", cfg.Etcd, err)
	}
	pool := &dialPool{}
	r.d.Hosts = func(context.Context) (*service.HostAccess, error) {
		return &service.HostAccess{Steps: r.host, Pool: pool}, nil
	}
	r.d.Config.Kube.EtcdTunnel = true
	if cfg, err = r.d.GateConfig(t.Context(), s); err != nil || cfg.Etcd == nil || cfg.Etcd.Dial == nil {
		t.Fatalf("tunnelled etcd: %+v %v", cfg.Etcd, err)
	}
	if _, err := cfg.Etcd.Dial(t.Context(), "10.0.0.1:2379"); err == nil {
		t.Fatal("the test pool made a tunnel")
	}
	if _, err := cfg.Etcd.Dial(t.Context(), "10.0.0.1"); err == nil {
		t.Fatal("an address without a port was dialled")
	}
	if want := []string{"10.0.0.1 tcp 127.0.0.1:2379"}; !slices.Equal(pool.dials, want) {
		t.Fatalf("tunnels %q, want %q", pool.dials, want)
	}
	r.d.Hosts = func(context.Context) (*service.HostAccess, error) { return nil, errors.New("no SSH") }
	if _, err := r.d.GateConfig(t.Context(), s); err == nil || !strings.Contains(err.Error(), "no SSH") {
		t.Fatalf("tunnelled etcd without hosts: %v", err)
	}
	r.d.Config.Kube.EtcdTunnel, r.d.Config.Kube.EtcdEndpoints = false, nil

	ca := filepath.Join(t.TempDir(), "oidc-ca.pem")
	r.d.Config.Kube.OIDCCAFile = ca
	if _, err := r.d.GateConfig(t.Context(), s); err == nil || !strings.Contains(err.Error(), "kube.oidc_ca_file") {
		t.Fatalf("a missing OIDC CA file: %v", err)
	}
	if err := os.WriteFile(ca, []byte("-----BEGIN CERTIFICATE-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if cfg, err = r.d.GateConfig(t.Context(), s); err != nil || string(cfg.OIDC.CAPEM) != "-----BEGIN CERTIFICATE-----\n" {
		t.Fatalf("OIDC CA bundle: %q %v", cfg.OIDC.CAPEM, err)
	}
}

// The stack health's verify.sh results: every component whose verify.sh
// fails is named; a read-only server that may not run verify.sh leaves
// verify out (names nothing) rather than guessing.
func TestFailingVerifyNamesTheFailingComponents(t *testing.T) {
	f := newFleet(t)
	if got := f.d.FailingVerify(t.Context()); len(got) != 0 {
		t.Fatalf("the example intent's verify.sh fail: %v", got)
	}
	p := filepath.Join(f.repo, "os-layer", "settings.yaml")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(strings.Replace(string(b), "soak_hours: 48", "soak_hours: 12", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	gitRun(t, f.repo, "commit", "-qam", "soak 12h")
	if got := f.d.FailingVerify(t.Context()); !slices.Equal(got, []string{"os-layer"}) {
		t.Fatalf("with os-layer's soak under 48h: %v, want os-layer", got)
	}

	ro := newFleet(t, func(c *config.Config) { c.Mode = config.ModeReadOnly })
	if err := os.WriteFile(filepath.Join(ro.repo, "os-layer", "settings.yaml"), []byte(strings.Replace(string(b), "soak_hours: 48", "soak_hours: 12", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	gitRun(t, ro.repo, "commit", "-qam", "soak 12h")
	if got := ro.d.FailingVerify(t.Context()); got != nil {
		t.Fatalf("read-only, verify.sh not allowed: %v", got)
	}
	if got := (&Deps{}).FailingVerify(t.Context()); got != nil {
		t.Fatalf("no intent repository: %v", got)
	}
}
