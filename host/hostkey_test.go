package host

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/crypto/ssh"

	"github.com/mcp-patch/mcp-patch/internal/testsupport/sshdtest"
)

func TestHostKeyChecking(t *testing.T) {
	otherDir := sshdtest.TempDir(t, "otherkey-")
	otherEd, _ := sshdtest.NewKey(t, otherDir, "other_ed25519", "ed25519")

	tests := []struct {
		name string
		// knownLines builds the known_hosts content for the started server.
		knownLines func(s *sshdtest.Server) string
		wantErr    bool
		wantKnown  bool
	}{
		{
			name:       "known key accepted",
			knownLines: func(s *sshdtest.Server) string { return s.KnownHostsLines() },
		},
		{
			name:       "unknown host refused",
			knownLines: func(s *sshdtest.Server) string { return "" },
			wantErr:    true,
		},
		{
			name: "changed key refused",
			knownLines: func(s *sshdtest.Server) string {
				return fmt.Sprintf("[%s]:%d %s", s.Host, s.Port, ssh.MarshalAuthorizedKey(otherEd.PublicKey()))
			},
			wantErr:   true,
			wantKnown: true,
		},
		{
			name: "same key listed for port 22 only is not this host",
			knownLines: func(s *sshdtest.Server) string {
				return fmt.Sprintf("%s %s", s.Host, ssh.MarshalAuthorizedKey(s.HostKeys[0]))
			},
			wantErr: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			s := f.server("node-1", sshdtest.Options{}, "", false)
			f.appendKnown(tc.knownLines(s))
			p := f.pool(f.config())

			out, err := p.RunScript(ctxFor(t, 30*time.Second), "node-1", []byte("echo ok\n"), nil)
			if !tc.wantErr {
				if err != nil {
					t.Fatalf("RunScript: %v", err)
				}
				if diff := cmp.Diff("ok\n", string(out.Stdout)); diff != "" {
					t.Errorf("stdout (-want +got):\n%s", diff)
				}
				return
			}
			var hkErr *HostKeyError
			if !errors.As(err, &hkErr) {
				t.Fatalf("err = %v, want a HostKeyError", err)
			}
			want := &HostKeyError{
				Node:        "node-1",
				Host:        fmt.Sprintf("[127.0.0.1]:%d", s.Port),
				KeyType:     "ssh-ed25519",
				Fingerprint: ssh.FingerprintSHA256(s.HostKeys[0]),
				Known:       tc.wantKnown,
				Files:       []string{f.knownHosts},
			}
			if diff := cmp.Diff(want, hkErr, cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".Want" }, cmp.Ignore())); diff != "" {
				t.Errorf("HostKeyError (-want +got):\n%s", diff)
			}
			for _, part := range []string{"node-1", want.Host, want.Fingerprint} {
				if !strings.Contains(err.Error(), part) {
					t.Errorf("error %q does not name %q", err, part)
				}
			}
			if tc.wantKnown && (len(hkErr.Want) != 1 || !strings.Contains(hkErr.Want[0], ssh.FingerprintSHA256(otherEd.PublicKey()))) {
				t.Errorf("Want = %q, want the listed key's fingerprint", hkErr.Want)
			}
			if n := s.Count("Accepted publickey"); n != 0 {
				t.Errorf("sshd accepted %d logins; a refused host key must stop before authentication", n)
			}
		})
	}
}

// A host with several host keys, of which known_hosts lists only one, must
// negotiate the listed one whatever the client's default preference.
func TestHostKeyAlgorithmOrdering(t *testing.T) {
	tests := []struct {
		name      string
		knownIdx  int // which of the server's keys known_hosts lists
		keyTypes  []string
		wantError bool
	}{
		{name: "only ed25519 known", keyTypes: []string{"ed25519", "rsa", "ecdsa"}, knownIdx: 0},
		{name: "only rsa known", keyTypes: []string{"ed25519", "rsa", "ecdsa"}, knownIdx: 1},
		{name: "only ecdsa known", keyTypes: []string{"ed25519", "rsa", "ecdsa"}, knownIdx: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			s := f.server("multi", sshdtest.Options{HostKeyTypes: tc.keyTypes}, "", false)
			f.appendKnown(fmt.Sprintf("[%s]:%d %s", s.Host, s.Port, ssh.MarshalAuthorizedKey(s.HostKeys[tc.knownIdx])))
			p := f.pool(f.config())
			if _, err := p.RunScript(ctxFor(t, 30*time.Second), "multi", []byte("true\n"), nil); err != nil {
				t.Fatalf("RunScript: %v", err)
			}
		})
	}

	t.Run("host offers no listed key type", func(t *testing.T) {
		f := newFixture(t)
		s := f.server("multi", sshdtest.Options{HostKeyTypes: []string{"ed25519", "rsa"}}, "", false)
		dir := sshdtest.TempDir(t, "ecdsa-")
		other, _ := sshdtest.NewKey(t, dir, "k", "ecdsa")
		f.appendKnown(fmt.Sprintf("[%s]:%d %s", s.Host, s.Port, ssh.MarshalAuthorizedKey(other.PublicKey())))
		p := f.pool(f.config())
		_, err := p.RunScript(ctxFor(t, 30*time.Second), "multi", []byte("true\n"), nil)
		var hkErr *HostKeyError
		if !errors.As(err, &hkErr) || !hkErr.Known {
			t.Fatalf("err = %v, want HostKeyError with Known", err)
		}
	})
}

// A person fixing known_hosts after a refusal is picked up at the next dial.
func TestKnownHostsReloaded(t *testing.T) {
	f := newFixture(t)
	s := f.server("node-1", sshdtest.Options{}, "", false)
	p := f.pool(f.config())
	ctx := ctxFor(t, 30*time.Second)
	if _, err := p.RunScript(ctx, "node-1", []byte("true\n"), nil); !errors.As(err, new(*HostKeyError)) {
		t.Fatalf("before: err = %v, want HostKeyError", err)
	}
	// Make sure the file's mtime moves even on coarse clocks.
	later := time.Now().Add(2 * time.Second)
	f.appendKnown(s.KnownHostsLines())
	if err := os.Chtimes(f.knownHosts, later, later); err != nil {
		t.Fatal(err)
	}
	if _, err := p.RunScript(ctx, "node-1", []byte("true\n"), nil); err != nil {
		t.Fatalf("after adding the key: %v", err)
	}
}

func TestNewPoolRefusesMissingKnownHosts(t *testing.T) {
	inv, _ := NewMapInventory(Target{})
	tests := []struct {
		name string
		cfg  Config
	}{
		{name: "no known_hosts", cfg: Config{}},
		{name: "known_hosts file missing", cfg: Config{KnownHostsFiles: []string{filepath.Join(t.TempDir(), "nope")}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewPool(inv, tc.cfg); err == nil {
				t.Fatal("NewPool succeeded; want an error")
			}
		})
	}
}
