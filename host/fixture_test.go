package host

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/mcp-patch/mcp-patch/internal/testsupport/sshdtest"
)

// fixture is a client identity, a known_hosts file and an inventory for
// tests against real sshd processes.
type fixture struct {
	t          *testing.T
	dir        string
	signer     ssh.Signer
	keyPath    string
	knownHosts string
	inv        *MapInventory
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	dir := sshdtest.TempDir(t, "hosttest-")
	signer, keyPath := sshdtest.NewKey(t, dir, "id_ed25519", "ed25519")
	known := filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(known, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	inv, err := NewMapInventory(Target{})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, dir: dir, signer: signer, keyPath: keyPath, knownHosts: known, inv: inv}
}

// server starts an sshd that accepts the fixture's key, lists its host
// keys in known_hosts (unless opts says otherwise) and adds it to the
// inventory as node.
func (f *fixture) server(node string, opts sshdtest.Options, user string, known bool) *sshdtest.Server {
	f.t.Helper()
	opts.AuthorizedKeys = append(opts.AuthorizedKeys, f.signer.PublicKey())
	s := sshdtest.Start(f.t, opts)
	if known {
		f.appendKnown(s.KnownHostsLines())
	}
	if err := f.inv.Set(Target{Name: node, Address: s.Host, Port: s.Port, User: user}); err != nil {
		f.t.Fatal(err)
	}
	return s
}

func (f *fixture) appendKnown(lines string) {
	f.t.Helper()
	fh, err := os.OpenFile(f.knownHosts, os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		f.t.Fatal(err)
	}
	defer fh.Close()
	if _, err := fh.WriteString(lines); err != nil {
		f.t.Fatal(err)
	}
}

// config is a Config using the fixture's key file and known_hosts.
func (f *fixture) config() Config {
	return Config{
		KnownHostsFiles: []string{f.knownHosts},
		IdentityFiles:   []string{f.keyPath},
		DialTimeout:     10 * time.Second,
		CommandTimeout:  60 * time.Second,
		Logger:          slog.New(slog.NewTextHandler(testWriter{f.t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
}

func (f *fixture) pool(cfg Config) *Pool {
	f.t.Helper()
	p, err := NewPool(f.inv, cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { p.Close() })
	return p
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(b))
	return len(b), nil
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}
