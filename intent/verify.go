package intent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Bounds of RunVerify's timeout.
const (
	DefaultVerifyTimeout = 2 * time.Minute
	MaxVerifyTimeout     = 30 * time.Minute
)

// VerifyResult is what one run of a component's verify.sh left behind.
type VerifyResult struct {
	Component string `json:"component"`
	// Passed is true when the script exited 0 within its time.
	Passed bool `json:"passed" jsonschema:"true when verify.sh exited 0 within its time"`
	// ExitCode is the script's exit status; -1 when it was killed.
	ExitCode int `json:"exit_code" jsonschema:"exit status of verify.sh: 0 pass, 1 a check failed, 3 live checks required but not possible; -1 killed"`
	// TimedOut is true when the time ran out and the script's process
	// group was killed.
	TimedOut bool `json:"timed_out" jsonschema:"the time limit ran out and the script was killed"`
	// DurationMS is how long it ran, in milliseconds.
	DurationMS int64 `json:"duration_ms" jsonschema:"run time in milliseconds"`
	// Output is stdout and stderr interleaved, the last
	// MaxVerifyOutputBytes of it when longer.
	Output string `json:"output" jsonschema:"stdout and stderr interleaved (the tail when truncated)"`
	// OutputBytes is the full output's size; Truncated says Output is its tail.
	OutputBytes int64 `json:"output_bytes"`
	Truncated   bool  `json:"truncated"`
	// Summary is the script's last output line when it is the JSON summary
	// the repository's verify scripts print; nil otherwise.
	Summary *VerifySummary `json:"summary,omitempty" jsonschema:"the JSON summary line verify.sh printed last, when present"`
}

// VerifySummary is the one-line JSON a verify.sh prints last.
type VerifySummary struct {
	Result  string `json:"result"`
	Passed  int    `json:"passed"`
	Failed  int    `json:"failed"`
	Skipped int    `json:"skipped"`
}

var envName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`) })

// ErrVerifyDisabled is returned by RunVerify when this handle may not run
// verify scripts (Options.VerifyDisabled).
var ErrVerifyDisabled = errors.New("verify.sh may not run here")

// BaseVerifyEnv are the variables of the server's environment every verify
// script sees. Nothing else of it reaches the script unless named in
// Options.VerifyPassEnv: an allowlist, so that a secret the server holds
// (a token, an agent socket, cloud credentials) never reaches the script
// or its output by accident.
var BaseVerifyEnv = []string{"PATH", "HOME", "LANG"}

// SetByVerify are the variables RunVerify sets itself.
var SetByVerify = []string{"MCP_PATCH_COMPONENT", "MCP_PATCH_INTENT_DIR"}

// RunVerify runs <component>/verify.sh with sh, in the component's folder,
// for at most timeout (0: DefaultVerifyTimeout; at most MaxVerifyTimeout).
// The intent repository is trusted code: the script runs as the server's
// user. When the time runs out or ctx ends, the script's whole process
// group is killed. The script sees PATH, HOME and LANG from the server's
// environment (PATH and LANG have defaults), the variables named in
// Options.VerifyPassEnv, then env (which overrides them), then
// MCP_PATCH_COMPONENT and MCP_PATCH_INTENT_DIR; nothing else. A non-zero
// exit is a result, not an error; errors are for a script that could not be
// started, bad input, or a handle that may not run scripts
// (ErrVerifyDisabled).
func (r *Repo) RunVerify(ctx context.Context, component string, timeout time.Duration, env map[string]string) (VerifyResult, error) {
	res, err := r.runVerify(ctx, component, timeout, env)
	if err != nil {
		return res, fmt.Errorf("run verify of %s: %w", component, err)
	}
	r.log.InfoContext(ctx, "verify ran", "component", component, "exit_code", res.ExitCode,
		"timed_out", res.TimedOut, "duration_ms", res.DurationMS)
	return res, nil
}

func (r *Repo) runVerify(ctx context.Context, component string, timeout time.Duration, env map[string]string) (VerifyResult, error) {
	if why := r.opts.VerifyDisabled; why != "" {
		return VerifyResult{}, fmt.Errorf("%w: %s", ErrVerifyDisabled, why)
	}
	if err := r.checkComponent(component); err != nil {
		return VerifyResult{}, err
	}
	switch {
	case timeout == 0:
		timeout = DefaultVerifyTimeout
	case timeout < 0 || timeout > MaxVerifyTimeout:
		return VerifyResult{}, fmt.Errorf("%w: timeout %s, want 0 < timeout <= %s", ErrInvalid, timeout, MaxVerifyTimeout)
	}
	if len(env) > 64 {
		return VerifyResult{}, fmt.Errorf("%w: %d environment variables, at most 64", ErrInvalid, len(env))
	}
	for k, v := range env {
		if !envName().MatchString(k) || strings.ContainsRune(v, 0) || len(v) > 4096 {
			return VerifyResult{}, fmt.Errorf("%w: environment variable %q: want a shell name and a value without NUL, at most 4 KiB", ErrInvalid, k)
		}
		if slices.Contains(SetByVerify, k) {
			return VerifyResult{}, fmt.Errorf("%w: %s is set by run_verify", ErrInvalid, k)
		}
	}
	dir := filepath.Join(r.root, component)
	script := filepath.Join(dir, DocVerify)
	fi, err := os.Lstat(script)
	if err != nil {
		return VerifyResult{}, fmt.Errorf("%w: %s/%s: %w", ErrUnknownDocument, component, DocVerify, err)
	}
	if !fi.Mode().IsRegular() {
		return VerifyResult{}, fmt.Errorf("%w: %s/%s is not a regular file", ErrInvalid, component, DocVerify)
	}

	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(runCtx, "sh", script)
	cmd.Dir = dir
	cmd.Env = r.verifyEnv(component, env)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return killGroup(cmd) }
	// A grandchild that keeps the output pipe open after the group is killed
	// (it moved to its own group) must not hold us past this.
	cmd.WaitDelay = 2 * time.Second
	out := &tailBuffer{max: r.opts.MaxVerifyOutputBytes}
	cmd.Stdout, cmd.Stderr = out, out

	start := time.Now()
	err = cmd.Start()
	if err != nil {
		return VerifyResult{}, fmt.Errorf("start sh: %w", err)
	}
	waitErr := cmd.Wait()
	_ = killGroup(cmd) // whatever the script left running in its group
	res := VerifyResult{Component: component, DurationMS: time.Since(start).Milliseconds(), ExitCode: -1}
	res.Output, res.OutputBytes, res.Truncated = out.result()
	if cmd.ProcessState != nil {
		res.ExitCode = cmd.ProcessState.ExitCode()
	}
	res.TimedOut = errors.Is(runCtx.Err(), context.DeadlineExceeded) && ctx.Err() == nil
	res.Passed = res.ExitCode == 0 && !res.TimedOut && waitErr == nil
	res.Summary = lastSummary(res.Output)
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	var exitErr *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &exitErr) && !errors.Is(waitErr, exec.ErrWaitDelay) && !res.TimedOut {
		return res, waitErr
	}
	return res, nil
}

func killGroup(cmd *exec.Cmd) error {
	if cmd.Process == nil {
		return nil
	}
	err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

func (r *Repo) verifyEnv(component string, extra map[string]string) []string {
	vars := map[string]string{"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
	lookup := r.opts.LookupEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}
	for _, k := range slices.Concat(BaseVerifyEnv, r.opts.VerifyPassEnv) {
		if slices.Contains(SetByVerify, k) || !envName().MatchString(k) {
			continue
		}
		if v, ok := lookup(k); ok && !strings.ContainsRune(v, 0) {
			vars[k] = v
		}
	}
	for k, v := range extra {
		vars[k] = v
	}
	vars["MCP_PATCH_COMPONENT"] = component
	vars["MCP_PATCH_INTENT_DIR"] = r.root
	out := make([]string, 0, len(vars))
	for k, v := range vars {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}

func lastSummary(output string) *VerifySummary {
	lines := strings.Split(strings.TrimRight(output, "\n"), "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	if !strings.HasPrefix(last, "{") {
		return nil
	}
	var s VerifySummary
	if json.Unmarshal([]byte(last), &s) != nil || s.Result == "" {
		return nil
	}
	return &s
}

// tailBuffer keeps the last max bytes written to it and counts them all.
type tailBuffer struct {
	mu    sync.Mutex
	max   int
	buf   []byte
	total int64
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.total += int64(len(p))
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) result() (string, int64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.ToValidUTF8(string(t.buf), "\uFFFD"), t.total, t.total > int64(len(t.buf))
}
