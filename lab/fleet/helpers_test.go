package fleet

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// TestMain lets this test binary play the hosts' commands, as mcp-patch
// does: the fleet links them to the running executable.
func TestMain(m *testing.M) {
	if code, ran := HostCommandMain(os.Args); ran {
		os.Exit(code)
	}
	os.Exit(m.Run())
}

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.DiscardHandler)
}

// newTestFleet starts a small fleet with fast reboots and closes it at
// the end of the test.
func newTestFleet(t testing.TB, opts Options) *Fleet {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	if opts.ControlPlanes+opts.Canary+opts.GPUServers == 0 {
		opts.ControlPlanes, opts.GPUServers = 1, 1
	}
	if opts.RebootDowntime == 0 {
		opts.RebootDowntime = 150 * time.Millisecond
	}
	if opts.ShutdownDelay == 0 {
		opts.ShutdownDelay = 100 * time.Millisecond
	}
	if opts.PanicDelay == 0 {
		opts.PanicDelay = 150 * time.Millisecond
	}
	if opts.InstallStep == 0 {
		opts.InstallStep = 5 * time.Millisecond
	}
	if opts.TimerScale == 0 {
		opts.TimerScale = 0.2 // the scripts' 5 s reboot timer becomes 1 s: time for the script to finish first
	}
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	f, err := New(ctx, opts)
	if err != nil {
		t.Fatalf("fleet.New: %v", err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// dial connects to a host as the operator, checking its host key against
// the fleet's known_hosts file.
func dial(t testing.TB, f *Fleet, h *Host, user string) (*ssh.Client, error) {
	t.Helper()
	cb, err := knownhosts.New(f.KnownHostsFile())
	if err != nil {
		t.Fatalf("read known_hosts: %v", err)
	}
	cfg := &ssh.ClientConfig{
		User:            user,
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(f.OperatorSigner())},
		HostKeyCallback: cb,
		Timeout:         5 * time.Second,
	}
	return ssh.Dial("tcp", h.Addr(), cfg)
}

type result struct {
	stdout, stderr string
	code           int
}

// run runs command on h over a fresh SSH connection, stdin given.
func run(t testing.TB, f *Fleet, h *Host, command, stdin string) result {
	t.Helper()
	c, err := dial(t, f, h, "root")
	if err != nil {
		t.Fatalf("ssh %s: %v", h.Name, err)
	}
	defer c.Close()
	return runOn(t, c, command, stdin)
}

func runOn(t testing.TB, c *ssh.Client, command, stdin string) result {
	t.Helper()
	s, err := c.NewSession()
	if err != nil {
		t.Fatalf("new session: %v", err)
	}
	defer s.Close()
	var out, errb bytes.Buffer
	s.Stdout, s.Stderr = &out, &errb
	s.Stdin = strings.NewReader(stdin)
	err = s.Run(command)
	code := 0
	var ee *ssh.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitStatus()
	case err != nil:
		t.Fatalf("run %q: %v (stderr: %s)", command, err, errb.String())
	}
	return result{out.String(), errb.String(), code}
}

// sh runs a shell command and fails the test on a non-zero exit.
func sh(t testing.TB, f *Fleet, h *Host, command string) string {
	t.Helper()
	r := run(t, f, h, command, "")
	if r.code != 0 {
		t.Fatalf("%s: %q exited %d\nstdout: %s\nstderr: %s", h.Name, command, r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// waitUp waits for the host to answer SSH again after a reboot.
func waitUp(t testing.TB, h *Host, limit time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	if err := h.WaitPower(ctx, PowerUp); err != nil {
		t.Fatalf("%v (boot history: %+v)", err, h.BootHistory())
	}
	for {
		c, err := net.DialTimeout("tcp", h.Addr(), time.Second)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: power is up but SSH does not answer: %v", h.Name, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
