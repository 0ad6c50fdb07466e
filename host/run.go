package host

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
)

// SudoError says the login user could not become root with `sudo -n`: no
// sudo rule without a password, no sudo rule at all, or no sudo installed.
// The script did not run.
type SudoError struct {
	Node   string
	User   string
	Reason string // sudo's own words, e.g. "sudo: a password is required"
}

func (e *SudoError) Error() string {
	return fmt.Sprintf("run script on node %s: user %s cannot run commands as root without a password (%s); "+
		"give it a NOPASSWD sudo rule (e.g. /etc/sudoers.d/mcp-patch: %s ALL=(root) NOPASSWD: ALL) or log in as root",
		e.Node, e.User, e.Reason, e.User)
}

// The remote command. The script arrives on the standard input of `sh -s`;
// around it sits a guard so that ending a cancelled script ends all of it,
// children included. sshd cannot be relied on for that: closing a session
// leaves its processes running, and OpenSSH refuses "signal" requests on
// root logins. So the guard
//   - carries a per-call token as its $0 (guardName), by which the client
//     finds it from a second session with pkill (procps) when it cancels;
//     nothing is printed for it, so a normal run costs no extra traffic;
//   - runs `sh -s` as a background job (reading the real stdin through fd 3,
//     since a background job's stdin would be /dev/null) and waits for it,
//     because a shell runs traps only after a foreground child finishes;
//   - on SIGTERM/SIGHUP/SIGINT signals its whole process group with TERM,
//     then, a second later, with KILL (itself included): a signal that
//     lands on the background job between its fork and its exec is lost
//     (the forked shell still runs the guard's trap, then drops it), and
//     the script would run on with no guard left to find.
//
// A script that must outlive its session (a detached apt run) starts that
// work with setsid and redirects its output.
const scriptGuard = `trap 'trap "" TERM HUP INT; kill -TERM 0; sleep 1; kill -KILL 0' TERM HUP INT; exec 3<&0; sh -s <&3 3<&- & wait $!`

const guardPrefix = "mcp-patch-guard-"

// newGuardToken returns 12 random hex digits naming one call's guard.
func newGuardToken() string {
	return fmt.Sprintf("%012x", rand.Uint64()&(1<<48-1))
}

func guardName(token string) string { return guardPrefix + token }

// guardPattern is a pkill -f regular expression matching the guard's
// command line but not itself (the bracket), so neither pkill nor a shell
// or sudo running it matches.
func guardPattern(token string) string {
	return guardPrefix + "[" + token[:1] + "]" + token[1:]
}

func remoteCommand(viaSudo bool, token string) string {
	cmd := "sh -c " + shellQuote(scriptGuard) + " " + guardName(token)
	if viaSudo {
		cmd = "sudo -n " + cmd
	}
	return cmd
}

// shellQuote wraps s in single quotes so that a POSIX shell reads it back
// verbatim.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

var envNamePattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`) })

// envNamesRefused change how the script itself is read or run; a caller
// has no business setting them through env.
var envNamesRefused = []string{"IFS", "PATH", "ENV", "BASH_ENV", "PS4", "SHELLOPTS", "CDPATH"}

// ValidateEnv refuses env names that are not shell identifiers (or that
// would change how the script is interpreted: IFS, PATH, ENV, LD_*, ...)
// and values holding a NUL byte, which no shell can carry.
func ValidateEnv(env map[string]string) error {
	for name, value := range env {
		if !envNamePattern().MatchString(name) {
			return fmt.Errorf("env name %q is not a shell identifier ([A-Za-z_][A-Za-z0-9_]*)", name)
		}
		if slices.Contains(envNamesRefused, name) || strings.HasPrefix(name, "LD_") {
			return fmt.Errorf("env name %s may not be set by a caller: it changes how the script runs", name)
		}
		if strings.IndexByte(value, 0) >= 0 {
			return fmt.Errorf("env %s: value holds a NUL byte", name)
		}
	}
	return nil
}

// scriptWithEnv prepends one `export NAME='value'` line per env entry
// (sorted by name) to script.
func scriptWithEnv(script []byte, env map[string]string) ([]byte, error) {
	if err := ValidateEnv(env); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(env))
	for n := range env {
		names = append(names, n)
	}
	slices.Sort(names)
	var b bytes.Buffer
	for _, n := range names {
		fmt.Fprintf(&b, "export %s=%s\n", n, shellQuote(env[n]))
	}
	b.Write(script)
	return b.Bytes(), nil
}

// RunScript runs script with `sh -s` on node (through `sudo -n` when the
// login user is not root), env exported first. See Runner. Bad input
// (invalid node name or env, unknown node, jump loop) is refused before
// any dial.
//
// Errors, besides those of the dial (HostKeyError, ErrAuthFailed, ...):
//   - cancellation or CommandTimeout: the remote script and its children
//     are ended (see scriptGuard), the error wraps context.Cause
//     (ErrCommandTimeout for the timeout), Output holds what arrived so far
//     and ExitCode is -1;
//   - ErrConnectionLost: the connection broke mid-script; the script may
//     have partly run and may still run on the host;
//   - *SudoError: the login user has no password-less sudo; nothing ran.
//
// A script killed by a signal reports 128+n as ExitCode (and the guard's
// shell notes it on stderr, e.g. "Killed").
func (p *Pool) RunScript(ctx context.Context, node string, script []byte, env map[string]string) (Output, error) {
	payload, err := scriptWithEnv(script, env)
	if err != nil {
		return Output{}, fmt.Errorf("run script on node %s: %w", node, err)
	}
	t, err := p.lookup(node)
	if err != nil {
		return Output{}, fmt.Errorf("run script on node %s: %w", node, err)
	}
	ctx, cancel := context.WithTimeoutCause(ctx, p.cfg.CommandTimeout, &commandTimeoutError{node, p.cfg.CommandTimeout})
	defer cancel()

	c, sess, err := p.openSession(ctx, t)
	if err != nil {
		return Output{}, fmt.Errorf("run script on node %s: %w", node, err)
	}
	defer sess.Close()
	return p.runSession(ctx, t, c, sess, payload)
}

func (p *Pool) runSession(ctx context.Context, t Target, c *conn, sess *ssh.Session, payload []byte) (Output, error) {
	stdout := &capBuffer{max: p.cfg.MaxOutputBytes}
	stderr := &capBuffer{max: p.cfg.MaxOutputBytes}
	stdin, err := sess.StdinPipe()
	if err != nil {
		return Output{}, fmt.Errorf("run script on node %s: %w", t.Name, err)
	}
	sess.Stdout = stdout
	sess.Stderr = stderr
	viaSudo := t.LoginUser() != "root"
	token := newGuardToken()
	if err := sess.Start(remoteCommand(viaSudo, token)); err != nil {
		if isConnectionLoss(err) {
			p.drop(c, "exec failed: "+err.Error())
			return Output{}, fmt.Errorf("run script on node %s: start: %w: %w", t.Name, ErrConnectionLost, err)
		}
		return Output{}, fmt.Errorf("run script on node %s: start: %w", t.Name, err)
	}
	// Cancellation runs beside the wait below rather than in a select, which
	// keeps the common path to the goroutines x/crypto needs anyway.
	finished := make(chan struct{})
	cancelDone := make(chan struct{})
	var ended bool // by endSession; read after cancelDone
	stop := context.AfterFunc(ctx, func() {
		defer close(cancelDone)
		ended = p.endSession(c, sess, viaSudo, token, finished)
	})
	// A write blocked on a full channel window ends when a cancellation
	// closes the session; a write error (the remote exited without reading
	// everything, as sudo does when it refuses) shows in Wait's result.
	_, _ = stdin.Write(payload)
	_ = stdin.Close()
	waitErr := sess.Wait()
	c.touch()
	close(finished)
	if !stop() {
		<-cancelDone
	}
	if ended {
		out := collect(stdout, stderr)
		out.ExitCode = -1
		return out, fmt.Errorf("run script on node %s: ended the remote script: %w", t.Name, context.Cause(ctx))
	}

	out := collect(stdout, stderr)
	switch err := waitErr.(type) {
	case nil:
	case *ssh.ExitError:
		out.ExitCode = err.ExitStatus()
		if sig := err.Signal(); sig != "" {
			out.ExitCode = signalExitCode(ssh.Signal(sig))
		}
	default:
		out.ExitCode = -1
		if isConnectionLoss(err) {
			p.drop(c, "connection lost during script: "+err.Error())
			return out, fmt.Errorf("run script on node %s: the connection broke while the script ran, so it may have partly run; check the host before running it again (the next call reconnects): %w: %w",
				t.Name, ErrConnectionLost, err)
		}
		return out, fmt.Errorf("run script on node %s: %w", t.Name, err)
	}
	if viaSudo {
		if reason, ok := sudoRefusal(out); ok {
			return out, &SudoError{Node: t.Name, User: t.LoginUser(), Reason: reason}
		}
	}
	return out, nil
}

// endSession stops a remote script whose context ended: it kills the guard
// from a second session on the same connection (see scriptGuard), also
// sends a "signal" request (honoured by sshd for non-root logins), waits
// a short grace for the exit report and closes the session. If the
// connection does not answer within the grace it is dropped, so this is
// bounded in every case. It reports false, doing nothing, when the script
// had already finished (done closed).
func (p *Pool) endSession(c *conn, sess *ssh.Session, viaSudo bool, token string, done <-chan struct{}) (ended bool) {
	select {
	case <-done:
		return false
	default:
	}
	_ = sess.Signal(ssh.SIGTERM) // best effort; refused for root logins
	if err := p.killGuard(c, token, viaSudo, done); err != nil {
		p.log.Warn("could not end cancelled remote script", "node", c.node, "guard", guardName(token), "err", err)
	}
	grace := time.NewTimer(p.cfg.CancelGrace)
	defer grace.Stop()
	select {
	case <-done:
		return true
	case <-grace.C:
	}
	sess.Close()
	closeWait := time.NewTimer(p.cfg.CancelGrace)
	defer closeWait.Stop()
	select {
	case <-done:
	case <-closeWait.C:
		p.drop(c, "session did not close after cancellation")
		<-done
	}
	return true
}

// killGuard sends SIGTERM to the call's guard with pkill from new sessions.
// The guard may not be running yet when a call is cancelled right after it
// started, and a signal that lands while the login shell that starts it
// still carries the token on its command line ends that shell, not the
// guard it is about to become or start: so pkill is repeated until the
// script ends (done), a hit included. On a loaded host the session's start
// (sshd's fork, the login shell, the guard) can take longer than
// CancelGrace, and a session closed meanwhile leaves the script to run
// once it starts, so the search lasts cancelSearchGraces times the grace.
func (p *Pool) killGuard(c *conn, token string, viaSudo bool, done <-chan struct{}) error {
	cmd := "pkill -TERM -f " + shellQuote(guardPattern(token))
	if viaSudo {
		cmd = "sudo -n " + cmd
	}
	deadline := time.NewTimer(cancelSearchGraces * p.cfg.CancelGrace)
	defer deadline.Stop()
	hit := false
	for {
		err := runBounded(c.client, cmd, deadline.C)
		var exitErr *ssh.ExitError
		switch {
		case err == nil:
			hit = true
		case errors.As(err, &exitErr) && exitErr.ExitStatus() == 1:
			// No such process (yet, or any more).
		case hit && errors.Is(err, errNoAnswer):
			return nil // signalled once; the grace that follows waits for the end
		default:
			return fmt.Errorf("%s: %w", cmd, err)
		}
		select {
		case <-done:
			return nil
		case <-deadline.C:
			if hit {
				return nil
			}
			return fmt.Errorf("%s: no guard process found within %s", cmd, cancelSearchGraces*p.cfg.CancelGrace)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// cancelSearchGraces bounds killGuard's search for a cancelled script's
// guard, in CancelGraces (10 s at the default 2 s).
const cancelSearchGraces = 5

var errNoAnswer = errors.New("no answer in time")

// runBounded runs cmd in a new session, giving up when stop fires.
func runBounded(client *ssh.Client, cmd string, stop <-chan time.Time) error {
	sess, err := client.NewSession()
	if err != nil {
		return err
	}
	defer sess.Close()
	result := make(chan error, 1)
	go func() { result <- sess.Run(cmd) }()
	select {
	case err := <-result:
		return err
	case <-stop:
		return errNoAnswer
	}
}

// commandTimeoutError is the cause of a CommandTimeout expiry (built on
// every call, so it formats only when printed).
type commandTimeoutError struct {
	node  string
	limit time.Duration
}

func (e *commandTimeoutError) Error() string {
	return fmt.Sprintf("node %s: after %s: %v", e.node, e.limit, ErrCommandTimeout)
}

func (e *commandTimeoutError) Unwrap() error { return ErrCommandTimeout }

// sudoRefusal recognises `sudo -n` failing before the script started:
// sudo exits 1 with its own "sudo: ..." line as the only output; a shell
// that cannot find sudo exits 127. (A script that itself exits 1 with no
// stdout and a stderr starting "sudo: " would be taken for a refusal.)
func sudoRefusal(out Output) (string, bool) {
	msg := strings.TrimSpace(string(out.Stderr))
	switch {
	case out.ExitCode == 1 && len(out.Stdout) == 0 && strings.HasPrefix(msg, "sudo: "):
		return firstLine(msg), true
	case out.ExitCode == 127 && (strings.Contains(msg, "sudo: not found") || strings.Contains(msg, "sudo: command not found")):
		return "sudo is not installed", true
	}
	return "", false
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// signalExitCode maps an exit-signal name to the shell's 128+n convention;
// unknown names give -1.
func signalExitCode(sig ssh.Signal) int {
	n, ok := map[ssh.Signal]int{
		ssh.SIGHUP: 1, ssh.SIGINT: 2, ssh.SIGQUIT: 3, ssh.SIGILL: 4, ssh.SIGABRT: 6,
		ssh.SIGFPE: 8, ssh.SIGKILL: 9, ssh.SIGUSR1: 10, ssh.SIGSEGV: 11, ssh.SIGUSR2: 12,
		ssh.SIGPIPE: 13, ssh.SIGALRM: 14, ssh.SIGTERM: 15,
	}[sig]
	if !ok {
		return -1
	}
	return 128 + n
}

func collect(stdout, stderr *capBuffer) Output {
	o, oTrunc := stdout.snapshot()
	e, eTrunc := stderr.snapshot()
	return Output{Stdout: o, Stderr: e, Truncated: oTrunc || eTrunc}
}

// capBuffer keeps the first max bytes written to it and counts the rest as
// truncated; it never refuses a write, so the remote side is never blocked.
type capBuffer struct {
	mu        sync.Mutex
	max       int
	buf       []byte
	truncated bool
}

func (b *capBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	room := b.max - len(b.buf)
	if len(p) > room {
		b.truncated = true
		b.buf = append(b.buf, p[:max(room, 0)]...)
	} else {
		b.buf = append(b.buf, p...)
	}
	return len(p), nil
}

func (b *capBuffer) snapshot() ([]byte, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf), b.truncated
}
