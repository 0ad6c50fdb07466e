package host

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcp-patch/mcp-patch/internal/testsupport/sshdtest"
)

func TestRunScript(t *testing.T) {
	f := newFixture(t)
	f.server("node-1", sshdtest.Options{}, "", true)
	cfg := f.config()
	cfg.MaxOutputBytes = 64 << 10
	p := f.pool(cfg)

	tests := []struct {
		name   string
		script string
		env    map[string]string
		want   Output
	}{
		{
			name:   "stdout stderr and exit code",
			script: "echo out; echo err >&2; exit 3\n",
			want:   Output{Stdout: []byte("out\n"), Stderr: []byte("err\n"), ExitCode: 3},
		},
		{
			name:   "runs as root through sh",
			script: "id -u; ps -o comm= -p $$\n",
			want:   Output{Stdout: []byte("0\nsh\n")},
		},
		{
			name:   "env values arrive verbatim",
			script: `printf '%s|' "$A" "$B" "$C" "$EMPTY"` + "\n",
			env: map[string]string{
				"A":     "it's $(touch /tmp/pwned) `x` \"q\" ; \\ *",
				"B":     "line1\nline2",
				"C":     "ünïcode\t'",
				"EMPTY": "",
			},
			want: Output{Stdout: []byte("it's $(touch /tmp/pwned) `x` \"q\" ; \\ *|line1\nline2|ünïcode\t'||")},
		},
		{
			name:   "stdout capped",
			script: "head -c 1000000 /dev/zero | tr '\\0' a; echo done >&2\n",
			want:   Output{Stdout: bytes.Repeat([]byte("a"), 64<<10), Stderr: []byte("done\n"), Truncated: true},
		},
		{
			name:   "stderr capped",
			script: "head -c 200000 /dev/zero | tr '\\0' b >&2\n",
			want:   Output{Stderr: bytes.Repeat([]byte("b"), 64<<10), Truncated: true},
		},
		{
			name:   "killed by a signal",
			script: "kill -KILL $$\n",
			// The guard's wait reports the job's death on stderr.
			want: Output{Stderr: []byte("Killed\n"), ExitCode: 128 + 9},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := p.RunScript(ctxFor(t, 30*time.Second), "node-1", []byte(tc.script), tc.env)
			if err != nil {
				t.Fatalf("RunScript: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Output (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := os.Stat("/tmp/pwned"); err == nil {
		t.Error("an env value was executed by the remote shell")
	}
}

func TestBadInputRefusedBeforeDial(t *testing.T) {
	f := newFixture(t)
	s := f.server("node-1", sshdtest.Options{}, "", true)
	p := f.pool(f.config())

	tests := []struct {
		name    string
		node    string
		env     map[string]string
		wantIs  error
		wantMsg string
	}{
		{name: "unknown node", node: "node-2", wantIs: ErrUnknownNode},
		{name: "node name with shell", node: "node-1;reboot", wantMsg: "invalid node name"},
		{name: "node name with space", node: "node 1", wantMsg: "invalid node name"},
		{name: "node name starting with dash", node: "-oProxyCommand=x", wantMsg: "invalid node name"},
		{name: "empty node name", node: "", wantMsg: "invalid node name"},
		{name: "env name with dash", node: "node-1", env: map[string]string{"A-B": "x"}, wantMsg: "not a shell identifier"},
		{name: "env name with command", node: "node-1", env: map[string]string{"A=1;reboot;B": "x"}, wantMsg: "not a shell identifier"},
		{name: "env name starting with digit", node: "node-1", env: map[string]string{"1A": "x"}, wantMsg: "not a shell identifier"},
		{name: "env name empty", node: "node-1", env: map[string]string{"": "x"}, wantMsg: "not a shell identifier"},
		{name: "env PATH", node: "node-1", env: map[string]string{"PATH": "/tmp"}, wantMsg: "may not be set"},
		{name: "env LD_PRELOAD", node: "node-1", env: map[string]string{"LD_PRELOAD": "/tmp/x.so"}, wantMsg: "may not be set"},
		{name: "env value with NUL", node: "node-1", env: map[string]string{"A": "a\x00b"}, wantMsg: "NUL"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := p.RunScript(ctxFor(t, 10*time.Second), tc.node, []byte("touch /tmp/should-not-run\n"), tc.env)
			if err == nil {
				t.Fatal("RunScript succeeded; want a refusal")
			}
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("err = %v, want errors.Is %v", err, tc.wantIs)
			}
			if tc.wantMsg != "" && !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("err = %v, want it to mention %q", err, tc.wantMsg)
			}
			if tc.env == nil {
				if _, err := p.Dial(ctxFor(t, 10*time.Second), tc.node, "tcp", "127.0.0.1:1"); err == nil {
					t.Error("Dial succeeded for a bad node")
				}
			}
		})
	}
	if st := p.Stats(); st.Dials != 0 {
		t.Errorf("Stats.Dials = %d, want 0: bad input must be refused before dialling", st.Dials)
	}
	if n := s.Count("Connection from"); n != 0 {
		t.Errorf("sshd saw %d connections, want 0", n)
	}
}

func TestAuth(t *testing.T) {
	t.Run("agent only", func(t *testing.T) {
		f := newFixture(t)
		f.server("node-1", sshdtest.Options{}, "", true)
		sock := sshdtest.StartAgent(t, f.keyPath)
		cfg := f.config()
		cfg.IdentityFiles = nil
		cfg.AgentSocket = sock
		p := f.pool(cfg)
		if _, err := p.RunScript(ctxFor(t, 30*time.Second), "node-1", []byte("true\n"), nil); err != nil {
			t.Fatalf("RunScript with agent: %v", err)
		}
	})
	t.Run("per-host key file", func(t *testing.T) {
		f := newFixture(t)
		s := f.server("node-1", sshdtest.Options{}, "", true)
		f.inv.Set(Target{Name: "node-1", Address: s.Host, Port: s.Port, IdentityFiles: []string{f.keyPath}})
		cfg := f.config()
		cfg.IdentityFiles = nil
		p := f.pool(cfg)
		if _, err := p.RunScript(ctxFor(t, 30*time.Second), "node-1", []byte("true\n"), nil); err != nil {
			t.Fatalf("RunScript with per-host key: %v", err)
		}
	})
	t.Run("wrong key refused", func(t *testing.T) {
		f := newFixture(t)
		f.server("node-1", sshdtest.Options{}, "", true)
		_, other := sshdtest.NewKey(t, f.dir, "id_other", "ed25519")
		cfg := f.config()
		cfg.IdentityFiles = []string{other}
		p := f.pool(cfg)
		_, err := p.RunScript(ctxFor(t, 30*time.Second), "node-1", []byte("true\n"), nil)
		if !errors.Is(err, ErrAuthFailed) || !strings.Contains(err.Error(), "as user root") {
			t.Fatalf("err = %v, want ErrAuthFailed naming the user", err)
		}
	})
	t.Run("passphrase-protected key file", func(t *testing.T) {
		f := newFixture(t)
		f.server("node-1", sshdtest.Options{}, "", true)
		_, path := sshdtest.NewKeyWithPassphrase(t, f.dir, "id_locked", "ed25519", "pw")
		cfg := f.config()
		cfg.IdentityFiles = []string{path}
		p := f.pool(cfg)
		_, err := p.RunScript(ctxFor(t, 30*time.Second), "node-1", []byte("true\n"), nil)
		if err == nil || !strings.Contains(err.Error(), "ssh-agent") {
			t.Fatalf("err = %v, want advice to use ssh-agent", err)
		}
	})
}

// sudoUser is the login user the sudo tests create (and remove).
const sudoUser = "mcpptest"

func TestSudo(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("TestSudo creates a user and a sudoers drop-in: run the host tests as root")
	}
	sshdtest.RequireSudo(t)
	sshdtest.EnsureUser(t, sudoUser)

	t.Run("NOPASSWD rule runs the script as root", func(t *testing.T) {
		sshdtest.SudoRule(t, "mcp-patch-test", sudoUser, true)
		f := newFixture(t)
		f.server("node-1", sshdtest.Options{}, sudoUser, true)
		p := f.pool(f.config())
		out, err := p.RunScript(ctxFor(t, 30*time.Second), "node-1", []byte("id -un; echo \"$SUDO_USER:$GREETING\"\n"), map[string]string{"GREETING": "it's me"})
		if err != nil {
			t.Fatalf("RunScript: %v (stderr %q)", err, out.Stderr)
		}
		if diff := cmp.Diff("root\n"+sudoUser+":it's me\n", string(out.Stdout)); diff != "" {
			t.Errorf("stdout (-want +got):\n%s", diff)
		}
	})
	t.Run("rule needing a password is a SudoError", func(t *testing.T) {
		sshdtest.SudoRule(t, "mcp-patch-test", sudoUser, false)
		f := newFixture(t)
		f.server("node-1", sshdtest.Options{}, sudoUser, true)
		p := f.pool(f.config())
		_, err := p.RunScript(ctxFor(t, 30*time.Second), "node-1", []byte("touch /tmp/mcpp-sudo-ran\n"), nil)
		var sErr *SudoError
		if !errors.As(err, &sErr) {
			t.Fatalf("err = %v, want SudoError", err)
		}
		if diff := cmp.Diff(&SudoError{Node: "node-1", User: sudoUser, Reason: "sudo: a password is required"}, sErr); diff != "" {
			t.Errorf("SudoError (-want +got):\n%s", diff)
		}
		if _, err := os.Stat("/tmp/mcpp-sudo-ran"); err == nil {
			os.Remove("/tmp/mcpp-sudo-ran")
			t.Error("the script ran although sudo refused")
		}
	})
	t.Run("no rule at all is a SudoError", func(t *testing.T) {
		f := newFixture(t)
		f.server("node-1", sshdtest.Options{}, sudoUser, true)
		p := f.pool(f.config())
		_, err := p.RunScript(ctxFor(t, 30*time.Second), "node-1", []byte("true\n"), nil)
		if !errors.As(err, new(*SudoError)) {
			t.Fatalf("err = %v, want SudoError", err)
		}
	})
	t.Run("script exiting 1 with output is not a SudoError", func(t *testing.T) {
		sshdtest.SudoRule(t, "mcp-patch-test", sudoUser, true)
		f := newFixture(t)
		f.server("node-1", sshdtest.Options{}, sudoUser, true)
		p := f.pool(f.config())
		out, err := p.RunScript(ctxFor(t, 30*time.Second), "node-1", []byte("echo failing; echo 'apt: broken' >&2; exit 1\n"), nil)
		if err != nil || out.ExitCode != 1 {
			t.Fatalf("RunScript = %+v, %v; want exit 1 and no error", out, err)
		}
	})
}

// cancelScript writes the pids of the script's shell and of a foreground
// sleep (the child shell execs into sleep) and then blocks.
func cancelScript(dir string) string {
	return fmt.Sprintf("echo $$ > %[1]s/sh.pid\nsh -c 'echo $$ > %[1]s/sleep.pid; exec sleep 300'\necho not reached\n", dir)
}

func TestCancelEndsRemoteProcesses(t *testing.T) {
	tests := []struct {
		name    string
		user    string
		timeout bool // CommandTimeout instead of cancelling ctx
	}{
		{name: "root, context cancelled"},
		{name: "root, command timeout", timeout: true},
		{name: "sudo user, context cancelled", user: sudoUser},
		{name: "sudo user, command timeout", user: sudoUser, timeout: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			if tc.user != "" {
				if os.Geteuid() != 0 {
					t.Fatal("needs root to create the sudo test user")
				}
				sshdtest.EnsureUser(t, tc.user)
				sshdtest.SudoRule(t, "mcp-patch-test", tc.user, true)
			}
			srv := f.server("node-1", sshdtest.Options{}, tc.user, true)
			srvLog := srv.Log
			cfg := f.config()
			if tc.timeout {
				cfg.CommandTimeout = 2 * time.Second
			}
			p := f.pool(cfg)
			pidDir := sshdtest.TempDir(t, "pids-")
			os.Chmod(pidDir, 0o777)

			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			type result struct {
				out Output
				err error
			}
			done := make(chan result, 1)
			start := time.Now()
			go func() {
				out, err := p.RunScript(ctx, "node-1", []byte(cancelScript(pidDir)), nil)
				done <- result{out, err}
			}()
			shPID := sshdtest.ReadPIDFile(t, filepath.Join(pidDir, "sh.pid"), 20*time.Second)
			sleepPID := sshdtest.ReadPIDFile(t, filepath.Join(pidDir, "sleep.pid"), 20*time.Second)
			if !tc.timeout {
				cancel()
			}
			var r result
			select {
			case r = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("RunScript did not return after cancellation")
			}
			t.Logf("returned after %s: %v", time.Since(start), r.err)
			wantErr := context.Canceled
			if tc.timeout {
				wantErr = ErrCommandTimeout
				if !errors.Is(r.err, context.DeadlineExceeded) {
					t.Errorf("err = %v, want it to wrap context.DeadlineExceeded too", r.err)
				}
			}
			if !errors.Is(r.err, wantErr) {
				t.Errorf("err = %v, want %v", r.err, wantErr)
			}
			if strings.Contains(string(r.out.Stdout), "not reached") {
				t.Error("the script went on after cancellation")
			}
			waitGone(t, map[string]int{"remote sh": shPID, "remote sleep": sleepPID})
			if t.Failed() {
				t.Log(srvLog())
			}

			// The connection stays usable after a cancelled command.
			if _, err := p.RunScript(ctxFor(t, 30*time.Second), "node-1", []byte("true\n"), nil); err != nil {
				t.Errorf("next RunScript: %v", err)
			}
		})
	}
}

func waitGone(t *testing.T, pids map[string]int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for name, pid := range pids {
		for sshdtest.ProcessAlive(pid) {
			if time.Now().After(deadline) {
				t.Errorf("%s (pid %d) still runs after the command ended", name, pid)
				syscall.Kill(pid, syscall.SIGKILL)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func TestConnectionKilledMidCommand(t *testing.T) {
	f := newFixture(t)
	s := f.server("node-1", sshdtest.Options{}, "", true)
	p := f.pool(f.config())
	pidDir := sshdtest.TempDir(t, "pids-")

	done := make(chan error, 1)
	go func() {
		_, err := p.RunScript(ctxFor(t, 60*time.Second), "node-1", []byte(cancelScript(pidDir)), nil)
		done <- err
	}()
	sleepPID := sshdtest.ReadPIDFile(t, filepath.Join(pidDir, "sleep.pid"), 20*time.Second)
	t.Cleanup(func() { syscall.Kill(sleepPID, syscall.SIGKILL) })
	if pids, err := s.SignalConnections(syscall.SIGKILL); err != nil || len(pids) == 0 {
		t.Fatalf("kill sshd connection processes: %v (%d found)", err, len(pids))
	}
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("RunScript did not return after the connection was killed")
	}
	if !errors.Is(err, ErrConnectionLost) || !strings.Contains(err.Error(), "may have partly run") {
		t.Fatalf("err = %v, want ErrConnectionLost saying the script may have partly run", err)
	}

	out, err := p.RunScript(ctxFor(t, 30*time.Second), "node-1", []byte("echo again\n"), nil)
	if err != nil || string(out.Stdout) != "again\n" {
		t.Fatalf("next RunScript = %q, %v; want a redial and success", out.Stdout, err)
	}
	if got := s.Count("Accepted publickey"); got != 2 {
		t.Errorf("sshd logins = %d, want 2 (first connection and the redial)", got)
	}
}

func TestDeadPooledConnectionRedialledOnce(t *testing.T) {
	f := newFixture(t)
	s := f.server("node-1", sshdtest.Options{}, "", true)
	cfg := f.config()
	cfg.KeepaliveInterval = -1 // nothing notices the break before the next call
	p := f.pool(cfg)
	ctx := ctxFor(t, 30*time.Second)
	if _, err := p.RunScript(ctx, "node-1", []byte("true\n"), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SignalConnections(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if _, err := p.RunScript(ctx, "node-1", []byte("true\n"), nil); err != nil {
		t.Fatalf("RunScript after the pooled connection died: %v", err)
	}
	if got := s.Count("Accepted publickey"); got != 2 {
		t.Errorf("sshd logins = %d, want 2", got)
	}
	s.Stop()
	_, err := p.RunScript(ctx, "node-1", []byte("true\n"), nil)
	if err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("with sshd gone: err = %v, want connection refused", err)
	}
}

func TestPoolReusesOneConnection(t *testing.T) {
	f := newFixture(t)
	s := f.server("node-1", sshdtest.Options{}, "", true)
	cfg := f.config()
	cfg.KeepaliveInterval = 50 * time.Millisecond
	cfg.KeepaliveTimeout = 5 * time.Second
	p := f.pool(cfg)
	ctx := ctxFor(t, 60*time.Second)

	const calls = 20
	results := FanOut(ctx, slicesRepeat("node-1", calls), 5, func(ctx context.Context, node string) (string, error) {
		out, err := p.RunScript(ctx, node, []byte("echo $PPID\n"), nil)
		return string(out.Stdout), err
	})
	for _, r := range results {
		if r.Err != nil {
			t.Fatalf("%s: %v", r.Node, r.Err)
		}
	}
	time.Sleep(300 * time.Millisecond) // a few keepalive rounds on the idle connection
	if _, err := p.RunScript(ctx, "node-1", []byte("true\n"), nil); err != nil {
		t.Fatal(err)
	}
	st := p.Stats()
	if st.Handshakes != 1 || st.Dials != 1 || st.Open != 1 {
		t.Errorf("Stats = %+v, want one dial and one handshake for %d calls", st, calls+1)
	}
	if st.KeepalivesSent < 2 || st.KeepalivesFailed != 0 {
		t.Errorf("Stats = %+v, want keepalives sent and answered", st)
	}
	if got := s.Count("Accepted publickey"); got != 1 {
		t.Errorf("sshd logins = %d, want 1", got)
	}
}

func TestKeepaliveDropsUnresponsiveConnection(t *testing.T) {
	f := newFixture(t)
	s := f.server("node-1", sshdtest.Options{}, "", true)
	cfg := f.config()
	cfg.KeepaliveInterval = 100 * time.Millisecond
	cfg.KeepaliveTimeout = 300 * time.Millisecond
	p := f.pool(cfg)
	ctx := ctxFor(t, 30*time.Second)
	if _, err := p.RunScript(ctx, "node-1", []byte("true\n"), nil); err != nil {
		t.Fatal(err)
	}
	// Freeze the connection's sshd processes: the TCP connection stays up
	// but nothing answers, as with a hung host or a silent network cut.
	stopped, err := s.SignalConnections(syscall.SIGSTOP)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, pid := range stopped {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for p.Stats().Open != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("connection still pooled; Stats = %+v", p.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st := p.Stats(); st.KeepalivesFailed != 1 || st.Dropped != 1 {
		t.Errorf("Stats = %+v, want one failed keepalive and one drop", st)
	}
	if _, err := p.RunScript(ctx, "node-1", []byte("true\n"), nil); err != nil {
		t.Fatalf("RunScript after the drop: %v", err)
	}
	if st := p.Stats(); st.Handshakes != 2 {
		t.Errorf("Handshakes = %d, want 2", st.Handshakes)
	}
}

func TestForget(t *testing.T) {
	f := newFixture(t)
	s := f.server("node-1", sshdtest.Options{}, "", true)
	p := f.pool(f.config())
	ctx := ctxFor(t, 30*time.Second)
	for range 2 {
		if _, err := p.RunScript(ctx, "node-1", []byte("true\n"), nil); err != nil {
			t.Fatal(err)
		}
		p.Forget("node-1")
	}
	if got := s.Count("Accepted publickey"); got != 2 {
		t.Errorf("sshd logins = %d, want 2 (Forget forces a new connection)", got)
	}
	p.Forget("never-connected") // no-op
}

func TestPoolClose(t *testing.T) {
	f := newFixture(t)
	f.server("node-1", sshdtest.Options{}, "", true)
	p := f.pool(f.config())
	ctx := ctxFor(t, 30*time.Second)
	if _, err := p.RunScript(ctx, "node-1", []byte("true\n"), nil); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.RunScript(ctx, "node-1", []byte("true\n"), nil); !errors.Is(err, ErrPoolClosed) {
		t.Errorf("after Close: err = %v, want ErrPoolClosed", err)
	}
	if st := p.Stats(); st.Open != 0 {
		t.Errorf("after Close: Open = %d", st.Open)
	}
}

func TestDialTunnel(t *testing.T) {
	f := newFixture(t)
	f.server("cp-1", sshdtest.Options{AllowTCPForwarding: true}, "", true)
	f.server("cp-2", sshdtest.Options{AllowTCPForwarding: false}, "", true)
	p := f.pool(f.config())

	// Stand-in for etcd on the node's loopback.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()

	ctx := ctxFor(t, 30*time.Second)
	c, err := p.Dial(ctx, "cp-1", "tcp", l.Addr().String())
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo through tunnel = %q, %v", buf, err)
	}

	if _, err := p.Dial(ctx, "cp-2", "tcp", l.Addr().String()); err == nil || !strings.Contains(err.Error(), "prohibited") {
		t.Errorf("Dial through a host refusing forwarding: err = %v, want administratively prohibited", err)
	}
	if _, err := p.Dial(ctx, "cp-1", "unix", "/run/x.sock"); err == nil {
		t.Error("Dial accepted network unix")
	}
	// The refused tunnel must not have cost cp-2 its connection.
	if _, err := p.RunScript(ctx, "cp-2", []byte("true\n"), nil); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Handshakes != 2 {
		t.Errorf("Handshakes = %d, want 2", st.Handshakes)
	}
}

func TestJumpHost(t *testing.T) {
	tests := []struct {
		name             string
		jumpForwards     bool
		wantErrSubstring string
	}{
		{name: "target reached through the jump host", jumpForwards: true},
		{name: "jump host refusing forwarding stops the connection", jumpForwards: false, wantErrSubstring: "through jump host bastion"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			jump := f.server("bastion", sshdtest.Options{AllowTCPForwarding: tc.jumpForwards, LogLevel: "DEBUG1"}, "", true)
			target := f.server("gpu-01", sshdtest.Options{}, "", true)
			f.inv.Set(Target{Name: "gpu-01", Address: target.Host, Port: target.Port, Jump: "bastion"})
			p := f.pool(f.config())
			ctx := ctxFor(t, 30*time.Second)

			out, err := p.RunScript(ctx, "gpu-01", []byte("echo $SSH_CONNECTION\n"), nil)
			if tc.wantErrSubstring != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErrSubstring) {
					t.Fatalf("err = %v, want it to mention %q", err, tc.wantErrSubstring)
				}
				if n := target.Count("Connection from"); n != 0 {
					t.Errorf("target saw %d direct connections; it must only be reached through the jump", n)
				}
				return
			}
			if err != nil {
				t.Fatalf("RunScript through jump: %v", err)
			}
			// The jump host's sshd logs the direct-tcpip it opened to the target.
			want := fmt.Sprintf("target 127.0.0.1 port %d", target.Port)
			if jump.Count(want) != 1 {
				t.Errorf("jump host log lacks %q: the connection did not go through it\n%s", want, jump.Log())
			}
			// The target sees the connection coming from the jump sshd's
			// socket, not from this process: its source port is not one
			// of ours.
			fields := strings.Fields(string(out.Stdout))
			if len(fields) != 4 || fields[2] != "127.0.0.1" || fields[3] != fmt.Sprint(target.Port) {
				t.Fatalf("SSH_CONNECTION = %q", out.Stdout)
			}
			owner := socketOwner(t, fields[1])
			if !slices.Contains(jump.ConnectionPIDs(), owner) {
				t.Errorf("the target's peer socket (port %s) belongs to pid %d, not to the jump host's sshd %v (this process is %d)",
					fields[1], owner, jump.ConnectionPIDs(), os.Getpid())
			}
			if _, err := p.RunScript(ctx, "gpu-01", []byte("true\n"), nil); err != nil {
				t.Fatal(err)
			}
			if st := p.Stats(); st.Handshakes != 2 {
				t.Errorf("Handshakes = %d, want 2 (jump and target, both pooled)", st.Handshakes)
			}
		})
	}
}

// socketOwner returns the pid owning the local TCP socket bound to port on
// 127.0.0.1, or 0 if none is found.
func socketOwner(t *testing.T, port string) int {
	t.Helper()
	data, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	var portNum int
	fmt.Sscan(port, &portNum)
	local := fmt.Sprintf("0100007F:%04X", portNum)
	var inode string
	for _, line := range strings.Split(string(data), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 9 && f[1] == local {
			inode = f[9]
		}
	}
	if inode == "" {
		return 0
	}
	target := "socket:[" + inode + "]"
	procs, _ := os.ReadDir("/proc")
	for _, pd := range procs {
		fds, err := os.ReadDir("/proc/" + pd.Name() + "/fd")
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if l, _ := os.Readlink("/proc/" + pd.Name() + "/fd/" + fd.Name()); l == target {
				var pid int
				fmt.Sscan(pd.Name(), &pid)
				return pid
			}
		}
	}
	return 0
}

func TestFanOutWithOneHostDown(t *testing.T) {
	f := newFixture(t)
	f.server("node-a", sshdtest.Options{}, "", true)
	down := f.server("node-b", sshdtest.Options{}, "", true)
	f.server("node-c", sshdtest.Options{}, "", true)
	down.Stop()
	p := f.pool(f.config())

	nodes := []string{"node-c", "node-b", "node-a", "node-x"}
	results := FanOut(ctxFor(t, 30*time.Second), nodes, 2, func(ctx context.Context, node string) (string, error) {
		out, err := p.RunScript(ctx, node, []byte("echo \"$N\"\n"), map[string]string{"N": node})
		return strings.TrimSpace(string(out.Stdout)), err
	})
	type row struct {
		Node, Value, Err string
	}
	var got []row
	for _, r := range results {
		e := ""
		switch {
		case r.Err == nil:
		case errors.Is(r.Err, ErrUnknownNode):
			e = "unknown"
		case strings.Contains(r.Err.Error(), "connection refused"):
			e = "refused"
		default:
			e = r.Err.Error()
		}
		got = append(got, row{r.Node, r.Value, e})
	}
	want := []row{
		{"node-c", "node-c", ""},
		{"node-b", "", "refused"},
		{"node-a", "node-a", ""},
		{"node-x", "", "unknown"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
}

func slicesRepeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// When the inventory moves a node (a new InternalIP, another port), the
// pooled connection to the old place is not used again.
func TestPoolFollowsInventoryChanges(t *testing.T) {
	f := newFixture(t)
	old := f.server("node-1", sshdtest.Options{}, "", true)
	moved := f.server("node-1-new", sshdtest.Options{}, "", true)
	p := f.pool(f.config())
	ctx := ctxFor(t, 30*time.Second)
	if _, err := p.RunScript(ctx, "node-1", []byte("true\n"), nil); err != nil {
		t.Fatal(err)
	}
	if err := f.inv.Set(Target{Name: "node-1", Address: moved.Host, Port: moved.Port}); err != nil {
		t.Fatal(err)
	}
	out, err := p.RunScript(ctx, "node-1", []byte("echo \"${SSH_CONNECTION##* }\"\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(fmt.Sprintf("%d\n", moved.Port), string(out.Stdout)); diff != "" {
		t.Errorf("served by port (-want +got):\n%s", diff)
	}
	if got := []int{old.Count("Accepted publickey"), moved.Count("Accepted publickey")}; !slices.Equal(got, []int{1, 1}) {
		t.Errorf("logins (old, moved) = %v, want [1 1]", got)
	}
}

// A cancellation that lands while the remote side is still starting (the
// guard not yet running) must still end the script once it appears.
func TestCancelRightAfterStart(t *testing.T) {
	f := newFixture(t)
	f.server("node-1", sshdtest.Options{}, "", true)
	p := f.pool(f.config())
	if _, err := p.RunScript(ctxFor(t, 30*time.Second), "node-1", []byte("true\n"), nil); err != nil {
		t.Fatal(err) // connection up, so the delays below are about the session only
	}
	for _, delay := range []time.Duration{0, time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond, 80 * time.Millisecond} {
		t.Run(delay.String(), func(t *testing.T) {
			pidDir := sshdtest.TempDir(t, "pids-")
			ctx, cancel := context.WithCancel(t.Context())
			time.AfterFunc(delay, cancel)
			_, err := p.RunScript(ctx, "node-1", []byte(cancelScript(pidDir)), nil)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want context.Canceled", err)
			}
			// Whatever got started must be gone (or never start).
			time.Sleep(300 * time.Millisecond)
			for _, name := range []string{"sh.pid", "sleep.pid"} {
				b, err := os.ReadFile(filepath.Join(pidDir, name))
				if err != nil {
					continue
				}
				var pid int
				fmt.Sscan(string(b), &pid)
				waitGone(t, map[string]int{name: pid})
			}
		})
	}
}
