package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseInventory(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		want    map[string]Target
		wantErr string
	}{
		{
			name: "defaults fill what nodes leave empty",
			yaml: `
defaults:
  user: ubuntu
  port: 2222
  jump: bastion
  identity_files: [/etc/mcp-patch/id_ed25519]
nodes:
  bastion:
    address: 203.0.113.10
    port: 22
  gpu-01:
    address: 10.0.0.11
  cp-1:
    address: cp-1.example.internal
    user: root
    host_key_alias: cp-1
  direct:
    address: 10.0.0.12
    jump: "-"
`,
			want: map[string]Target{
				"bastion": {Name: "bastion", Address: "203.0.113.10", Port: 22, User: "ubuntu", IdentityFiles: []string{"/etc/mcp-patch/id_ed25519"}},
				"gpu-01":  {Name: "gpu-01", Address: "10.0.0.11", Port: 2222, User: "ubuntu", Jump: "bastion", IdentityFiles: []string{"/etc/mcp-patch/id_ed25519"}},
				"cp-1":    {Name: "cp-1", Address: "cp-1.example.internal", Port: 2222, User: "root", Jump: "bastion", HostKeyAlias: "cp-1", IdentityFiles: []string{"/etc/mcp-patch/id_ed25519"}},
				"direct":  {Name: "direct", Address: "10.0.0.12", Port: 2222, User: "ubuntu", IdentityFiles: []string{"/etc/mcp-patch/id_ed25519"}},
			},
		},
		{name: "unknown field", yaml: "nodes:\n  a: {address: 10.0.0.1, pasword: x}\n", wantErr: "unknown field"},
		{name: "jump to nowhere", yaml: "nodes:\n  a: {address: 10.0.0.1, jump: b}\n", wantErr: `jump "b" is not a node`},
		{name: "address with shell", yaml: "nodes:\n  a: {address: '10.0.0.1;reboot'}\n", wantErr: "neither an IP"},
		{name: "address with option", yaml: "nodes:\n  a: {address: '-oProxyCommand=x'}\n", wantErr: "neither an IP"},
		{name: "missing address", yaml: "nodes:\n  a: {user: root}\n", wantErr: "address is required"},
		{name: "bad node name", yaml: "nodes:\n  'a b': {address: 10.0.0.1}\n", wantErr: "invalid node name"},
		{name: "bad user", yaml: "nodes:\n  a: {address: 10.0.0.1, user: 'root;x'}\n", wantErr: "not a valid login name"},
		{name: "bad port", yaml: "nodes:\n  a: {address: 10.0.0.1, port: 70000}\n", wantErr: "out of range"},
		{name: "defaults with address", yaml: "defaults: {address: 10.0.0.1}\nnodes: {}\n", wantErr: "defaults may not set address"},
		{name: "self jump", yaml: "nodes:\n  a: {address: 10.0.0.1, jump: a}\n", wantErr: "jump names the node itself"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			inv, err := ParseInventory([]byte(tc.yaml))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]Target{}
			for _, n := range inv.Nodes() {
				got[n], _ = inv.Lookup(n)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("targets (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLoadInventoryFileAndSetAddress(t *testing.T) {
	path := filepath.Join(t.TempDir(), "inventory.yaml")
	if err := os.WriteFile(path, []byte("defaults: {user: ubuntu}\nnodes:\n  gpu-01: {address: 10.0.0.11}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	inv, err := LoadInventory(path)
	if err != nil {
		t.Fatal(err)
	}
	// The cluster side feeds InternalIPs: one for a known node, one new.
	if err := inv.SetAddress("gpu-01", "10.1.0.11"); err != nil {
		t.Fatal(err)
	}
	if err := inv.SetAddress("gpu-02", "10.1.0.12"); err != nil {
		t.Fatal(err)
	}
	if err := inv.SetAddress("gpu-03", "10.1.0.13 ; reboot"); err == nil {
		t.Error("SetAddress accepted an address with a shell command")
	}
	var got []Target
	for _, n := range inv.Nodes() {
		tg, _ := inv.Lookup(n)
		got = append(got, tg)
	}
	want := []Target{
		{Name: "gpu-01", Address: "10.1.0.11", User: "ubuntu"},
		{Name: "gpu-02", Address: "10.1.0.12", User: "ubuntu"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("targets (-want +got):\n%s", diff)
	}
	if _, err := inv.Lookup("gpu-09"); !errors.Is(err, ErrUnknownNode) {
		t.Errorf("Lookup(gpu-09) err = %v, want ErrUnknownNode", err)
	}
	if _, err := LoadInventory(filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Error("LoadInventory of a missing file succeeded")
	}
}

func TestScriptWithEnv(t *testing.T) {
	got, err := scriptWithEnv([]byte("echo hi\n"), map[string]string{"B": "it's", "A": "x y", "C": ""})
	if err != nil {
		t.Fatal(err)
	}
	want := "export A='x y'\nexport B='it'\\''s'\nexport C=''\necho hi\n"
	if diff := cmp.Diff(want, string(got)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// The quoting is checked against a real shell with hostile values.
func TestShellQuoteRoundTrip(t *testing.T) {
	values := []string{"", "'", "''", `\'`, "$(id)", "`id`", "a\nb", "\"; exit 1; \"", "ü", "*", "-n", "$$"}
	for i, v := range values {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			script, err := scriptWithEnv([]byte(`printf '%s' "$V"`), map[string]string{"V": v})
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("sh", "-s")
			cmd.Stdin = strings.NewReader(string(script))
			out, err := cmd.Output()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(v, string(out)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// The guard itself, run by a local sh: exit codes and output pass
// through untouched, and pkill with the guard's pattern finds it (and
// nothing else) and ends the whole script, including a foreground child.
func TestScriptGuardLocally(t *testing.T) {
	cmd := exec.Command("sh", "-c", scriptGuard, guardName(newGuardToken()))
	cmd.Stdin = strings.NewReader("echo a; echo b >&2; exit 7\n")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 7 || stdout.String() != "a\n" || stderr.String() != "b\n" {
		t.Errorf("got stdout %q stderr %q err %v; want a, b, exit 7", stdout.String(), stderr.String(), err)
	}

	dir := t.TempDir()
	token := newGuardToken()
	guard := exec.Command("sh", "-c", scriptGuard, guardName(token))
	// Its own process group, as under sshd: the guard signals its group.
	guard.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	guard.Stdin = strings.NewReader(cancelScript(dir))
	if err := guard.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- guard.Wait() }()
	sleepPID := readPID(t, filepath.Join(dir, "sleep.pid"))
	shPID := readPID(t, filepath.Join(dir, "sh.pid"))

	other := guardPattern(newGuardToken())
	if err := exec.Command("pkill", "-TERM", "-f", other).Run(); err == nil {
		t.Fatalf("pkill with another call's pattern %q matched something", other)
	}
	list, err := exec.Command("pgrep", "-f", guardPattern(token)).Output()
	if err != nil || strings.TrimSpace(string(list)) != fmt.Sprint(guard.Process.Pid) {
		t.Fatalf("pgrep found %q (%v), want only the guard %d", list, err, guard.Process.Pid)
	}
	if out, err := exec.Command("sh", "-c", "pkill -TERM -f "+shellQuote(guardPattern(token))).CombinedOutput(); err != nil {
		t.Fatalf("pkill: %v: %s", err, out)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("guard did not end")
	}
	waitGone(t, map[string]int{"sh": shPID, "sleep": sleepPID})
}

func readPID(t *testing.T, path string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if b, err := os.ReadFile(path); err == nil {
			var pid int
			if _, err := fmt.Sscan(string(b), &pid); err == nil {
				return pid
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not written", path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestSudoRefusal(t *testing.T) {
	tests := []struct {
		name   string
		out    Output
		want   string
		wantOK bool
	}{
		{name: "password required", out: Output{ExitCode: 1, Stderr: []byte("sudo: a password is required\n")}, want: "sudo: a password is required", wantOK: true},
		{name: "sudo missing", out: Output{ExitCode: 127, Stderr: []byte("sh: 1: sudo: not found\n")}, want: "sudo is not installed", wantOK: true},
		{name: "script failure", out: Output{ExitCode: 1, Stdout: []byte("x"), Stderr: []byte("sudo: x\n")}},
		{name: "other exit", out: Output{ExitCode: 2, Stderr: []byte("sudo: x\n")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := sudoRefusal(tc.out)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("sudoRefusal = %q, %v; want %q, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestCapBuffer(t *testing.T) {
	b := &capBuffer{max: 5}
	for _, w := range []string{"ab", "cd", "ef", "gh"} {
		if n, err := b.Write([]byte(w)); n != len(w) || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	got, trunc := b.snapshot()
	if string(got) != "abcde" || !trunc {
		t.Errorf("snapshot = %q, %v; want abcde, true", got, trunc)
	}
}

func TestKeepaliveLoop(t *testing.T) {
	t.Run("answered keepalives run until done", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			done := make(chan struct{})
			var sent atomic.Int32
			result := make(chan error, 1)
			go func() {
				result <- keepaliveLoop(done, 30*time.Second, 15*time.Second, idleForever, func() error { sent.Add(1); return nil })
			}()
			time.Sleep(95 * time.Second)
			synctest.Wait()
			if got := sent.Load(); got != 3 {
				t.Errorf("sent %d keepalives in 95s at 30s, want 3", got)
			}
			close(done)
			if err := <-result; err != nil {
				t.Errorf("loop ended with %v, want nil", err)
			}
		})
	})
	t.Run("no reply within the timeout", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			done := make(chan struct{})
			block := make(chan struct{})
			start := time.Now()
			err := keepaliveLoop(done, 30*time.Second, 15*time.Second, idleForever, func() error { <-block; return nil })
			if err == nil || !strings.Contains(err.Error(), "no reply within 15s") {
				t.Errorf("err = %v", err)
			}
			if d := time.Since(start); d != 45*time.Second {
				t.Errorf("gave up after %s, want 45s (one interval plus the timeout)", d)
			}
			close(block)
		})
	})
	t.Run("recent activity skips the keepalive", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			done := make(chan struct{})
			var sent atomic.Int32
			var lastActive atomic.Int64
			lastActive.Store(time.Now().UnixNano())
			result := make(chan error, 1)
			go func() {
				result <- keepaliveLoop(done, 30*time.Second, 15*time.Second,
					func() time.Duration { return time.Since(time.Unix(0, lastActive.Load())) },
					func() error { sent.Add(1); return nil })
			}()
			for range 4 { // busy for two minutes: a session every 20s
				time.Sleep(20 * time.Second)
				lastActive.Store(time.Now().UnixNano())
			}
			synctest.Wait()
			if got := sent.Load(); got != 0 {
				t.Errorf("sent %d keepalives on a busy connection, want 0", got)
			}
			time.Sleep(61 * time.Second) // idle now
			synctest.Wait()
			if got := sent.Load(); got == 0 {
				t.Error("no keepalive on an idle connection")
			}
			close(done)
			<-result
		})
	})
	t.Run("failed request", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			err := keepaliveLoop(make(chan struct{}), time.Second, time.Second, idleForever, func() error { return errors.New("EOF") })
			if err == nil || !strings.Contains(err.Error(), "EOF") {
				t.Errorf("err = %v", err)
			}
		})
	})
}

func idleForever() time.Duration { return time.Hour }

func TestFanOut(t *testing.T) {
	t.Run("order, per-node errors and bounded concurrency", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			nodes := []string{"a", "b", "c", "d", "e", "f", "g"}
			var running, peak atomic.Int32
			results := FanOut(t.Context(), nodes, 3, func(ctx context.Context, node string) (string, error) {
				n := running.Add(1)
				for {
					p := peak.Load()
					if n <= p || peak.CompareAndSwap(p, n) {
						break
					}
				}
				time.Sleep(time.Duration(len(nodes)-strings.Index("abcdefg", node)) * time.Second)
				running.Add(-1)
				if node == "c" {
					return "", errors.New("c is down")
				}
				return strings.ToUpper(node), nil
			})
			var got []string
			for _, r := range results {
				got = append(got, fmt.Sprintf("%s=%s/%v/%s", r.Node, r.Value, r.Err, r.Duration))
			}
			want := []string{"a=A/<nil>/7s", "b=B/<nil>/6s", "c=/c is down/5s", "d=D/<nil>/4s", "e=E/<nil>/3s", "f=F/<nil>/2s", "g=G/<nil>/1s"}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("results (-want +got):\n%s", diff)
			}
			if peak.Load() != 3 {
				t.Errorf("peak concurrency %d, want 3", peak.Load())
			}
		})
	})
	t.Run("cancelled context skips nodes not started", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		var calls atomic.Int32
		results := FanOut(ctx, []string{"a", "b", "c"}, 1, func(ctx context.Context, node string) (int, error) {
			calls.Add(1)
			cancel()
			return 1, nil
		})
		if calls.Load() != 1 {
			t.Errorf("fn called %d times, want 1", calls.Load())
		}
		if results[0].Err != nil || !errors.Is(results[1].Err, context.Canceled) || !errors.Is(results[2].Err, context.Canceled) {
			t.Errorf("results = %+v", results)
		}
	})
	t.Run("empty and zero concurrency", func(t *testing.T) {
		if r := FanOut(t.Context(), nil, 0, func(context.Context, string) (int, error) { return 0, nil }); len(r) != 0 {
			t.Errorf("got %d results for no nodes", len(r))
		}
		r := FanOut(t.Context(), []string{"a"}, 0, func(context.Context, string) (int, error) { return 1, nil })
		if len(r) != 1 || r[0].Value != 1 {
			t.Errorf("got %+v", r)
		}
	})
}

func TestConfigValidate(t *testing.T) {
	ok := Config{KnownHostsFiles: []string{"/k"}}
	tests := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{name: "valid", mod: func(*Config) {}},
		{name: "no known_hosts", mod: func(c *Config) { c.KnownHostsFiles = nil }, want: "KnownHostsFiles is required"},
		{name: "negative timeout", mod: func(c *Config) { c.CommandTimeout = -1 }, want: "CommandTimeout"},
		{name: "negative cap", mod: func(c *Config) { c.MaxOutputBytes = -1 }, want: "MaxOutputBytes"},
		{name: "empty identity path", mod: func(c *Config) { c.IdentityFiles = []string{""} }, want: "IdentityFiles"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.mod(&c)
			err := c.Validate()
			if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("Validate = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestLoadInventoryExample(t *testing.T) {
	inv, err := LoadInventory("testdata/inventory.yaml")
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"/etc/mcp-patch/id_ed25519"}
	want := map[string]Target{
		"bastion-1": {Name: "bastion-1", Address: "203.0.113.10", Port: 2222, User: "patcher", IdentityFiles: keys},
		"cp-1":      {Name: "cp-1", Address: "10.20.0.11", Port: 22, User: "patcher", Jump: "bastion-1", IdentityFiles: keys, HostKeyAlias: "cp-1.cluster.internal"},
		"cp-2":      {Name: "cp-2", Address: "10.20.0.12", Port: 22, User: "patcher", Jump: "bastion-1", IdentityFiles: keys},
		"gpu-01":    {Name: "gpu-01", Address: "10.20.1.21", Port: 22, User: "root", Jump: "bastion-1", IdentityFiles: keys},
	}
	got := map[string]Target{}
	for _, n := range inv.Nodes() {
		got[n], _ = inv.Lookup(n)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if got := got["cp-1"].knownHostsAddr(); got != "cp-1.cluster.internal:22" {
		t.Errorf("cp-1 known_hosts name = %q", got)
	}
}

func TestJumpChainRefusedBeforeDial(t *testing.T) {
	known := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(known, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	inv, err := NewMapInventory(Target{},
		Target{Name: "a", Address: "127.0.0.1", Port: 1, Jump: "b"},
		Target{Name: "b", Address: "127.0.0.1", Port: 1, Jump: "a"},
		Target{Name: "c", Address: "127.0.0.1", Port: 1, Jump: "nowhere"},
		Target{Name: "h1", Address: "127.0.0.1", Port: 1, Jump: "h2"},
		Target{Name: "h2", Address: "127.0.0.1", Port: 1, Jump: "h3"},
		Target{Name: "h3", Address: "127.0.0.1", Port: 1, Jump: "h4"},
		Target{Name: "h4", Address: "127.0.0.1", Port: 1, Jump: "h5"},
		Target{Name: "h5", Address: "127.0.0.1", Port: 1, Jump: "h6"},
		Target{Name: "h6", Address: "127.0.0.1", Port: 1},
	)
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPool(inv, Config{KnownHostsFiles: []string{known}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	tests := []struct {
		node, want string
	}{
		{node: "a", want: "jump hosts loop: a -> b -> a"},
		{node: "c", want: "jump host: look up node nowhere: node not in inventory"},
		{node: "h1", want: "more than 4 jump hosts"},
	}
	for _, tc := range tests {
		t.Run(tc.node, func(t *testing.T) {
			_, err := p.RunScript(t.Context(), tc.node, []byte("true\n"), nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
	if st := p.Stats(); st.Dials != 0 {
		t.Errorf("Dials = %d, want 0", st.Dials)
	}
}
