package steps

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/mcp-patch/mcp-patch/host"
)

// DefaultPath is the PATH a LocalRunner gives scripts: sudo's secure_path
// on Ubuntu, which is what a script sent over SSH with `sudo -n sh -s` sees.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// LocalRunner runs scripts on this machine with `sh -s`, the way the SSH
// runner does on a node: env becomes `export NAME='value'` lines in front of
// the script, the environment is otherwise clean (PATH, HOME, LANG only).
// The node name is only checked, not used. It serves tests and running
// steps on the local host by hand.
type LocalRunner struct {
	// Path is the PATH the script sees; empty means DefaultPath. Tests put
	// a directory of stand-in tools first.
	Path string
	// MaxOutput caps stdout and stderr each, in bytes; 0 means 64 MiB.
	MaxOutput int
	// WaitDelay bounds how long to wait for output pipes after the
	// script's process group was killed on cancellation; 0 means 5 s.
	WaitDelay time.Duration
}

var _ host.Runner = (*LocalRunner)(nil)

// RunScript implements host.Runner. The script runs in its own process
// group, killed as a whole when ctx ends.
func (l *LocalRunner) RunScript(ctx context.Context, node string, script []byte, env map[string]string) (host.Output, error) {
	if err := ValidateNode(node); err != nil {
		return host.Output{}, err
	}
	if err := host.ValidateEnv(env); err != nil {
		return host.Output{}, fmt.Errorf("run script locally: %w", err)
	}
	names := make([]string, 0, len(env))
	for n := range env {
		names = append(names, n)
	}
	slices.Sort(names)
	var payload bytes.Buffer
	for _, n := range names {
		fmt.Fprintf(&payload, "export %s='%s'\n", n, strings.ReplaceAll(env[n], "'", `'\''`))
	}
	payload.Write(script)

	pathEnv := l.Path
	if pathEnv == "" {
		pathEnv = DefaultPath
	}
	limit := l.MaxOutput
	if limit <= 0 {
		limit = 64 << 20
	}
	cmd := exec.CommandContext(ctx, "sh", "-s")
	cmd.Env = []string{"PATH=" + pathEnv, "HOME=/root", "LANG=C.UTF-8"}
	cmd.Stdin = &payload
	stdout, stderr := &capped{max: limit}, &capped{max: limit}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = l.WaitDelay
	if cmd.WaitDelay == 0 {
		cmd.WaitDelay = 5 * time.Second
	}
	err := cmd.Run()
	out := host.Output{Stdout: stdout.buf.Bytes(), Stderr: stderr.buf.Bytes(), Truncated: stdout.cut || stderr.cut}
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return out, fmt.Errorf("run script locally: %w", context.Cause(ctx))
	case errors.As(err, &exit):
		out.ExitCode = exit.ExitCode()
		return out, nil
	case err != nil:
		return out, fmt.Errorf("run script locally: %w", err)
	}
	return out, nil
}

type capped struct {
	buf bytes.Buffer
	max int
	cut bool
}

func (c *capped) Write(p []byte) (int, error) {
	room := c.max - c.buf.Len()
	if room < len(p) {
		c.cut = true
		if room > 0 {
			c.buf.Write(p[:room])
		}
		return len(p), nil
	}
	return c.buf.Write(p)
}
