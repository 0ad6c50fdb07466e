package cluster

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// stopGrace is how long a component may take to exit after SIGTERM before it
// is killed.
const stopGrace = 10 * time.Second

// process is one control-plane component running in its own process group.
type process struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has been reaped
	waitErr error         // valid after done is closed
}

// startProcess starts bin with args in a new process group, stdout and
// stderr appended to logPath. The process is not tied to any context: it
// lives until stop is called (or, on Linux, until the caller exits).
func startProcess(logger *slog.Logger, name, bin string, args, env []string, logPath string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("start %s: open log: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = childAttributes()
	fmt.Fprintf(logFile, "### %s %s %s\n", time.Now().Format(time.RFC3339), bin, strings.Join(args, " "))
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	fmt.Fprintf(logFile, "### pid %d\n", cmd.Process.Pid)
	p := &process{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	logger.Debug("started", "component", name, "pid", cmd.Process.Pid, "log", logPath)
	return p, nil
}

// pid is the process id, which is also its process group id.
func (p *process) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has ended, and how.
func (p *process) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.waitErr
	default:
		return false, nil
	}
}

// stop sends SIGTERM to the process group, waits up to stopGrace, then sends
// SIGKILL. It returns once the process is reaped.
func (p *process) stop() error {
	if done, _ := p.exited(); done {
		return nil
	}
	pgid := p.pid()
	if err := syscall.Kill(-pgid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stop %s (pid %d): %w", p.name, pgid, err)
	}
	select {
	case <-p.done:
	case <-time.After(stopGrace):
		if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("kill %s (pid %d): %w", p.name, pgid, err)
		}
		<-p.done
	}
	// Anything the component forked into its group goes with it.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	return nil
}

// kill sends SIGKILL to the process group at once, as a crash or a power
// loss would end it, and returns once the process is reaped.
func (p *process) kill() error {
	if done, _ := p.exited(); done {
		return nil
	}
	if err := killGroup(p.pid()); err != nil {
		return fmt.Errorf("kill %s: %w", p.name, err)
	}
	<-p.done
	return nil
}

// logTail returns the last n lines of the process log, for error messages.
func (p *process) logTail(n int) string {
	return tailFile(p.logPath, n)
}

func tailFile(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// exitedError is a component that ended while it was expected to run.
type exitedError struct {
	name, logPath, tail string
	err                 error
}

func (e *exitedError) Error() string {
	return fmt.Sprintf("%s exited (%v); last log lines of %s:\n%s", e.name, e.err, e.logPath, e.tail)
}

func (e *exitedError) Unwrap() error { return e.err }

// exitError describes the process's unexpected end, with its last log lines.
func (p *process) exitError(err error) error {
	return &exitedError{name: p.name, logPath: p.logPath, tail: p.logTail(20), err: err}
}

// rssBytes returns the resident set size of the process from /proc.
func rssBytes(pid int) (int64, error) {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, fmt.Errorf("read memory of pid %d: %w", pid, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "VmRSS:") {
			continue
		}
		fields := strings.Fields(strings.TrimPrefix(line, "VmRSS:"))
		if len(fields) != 2 || fields[1] != "kB" {
			return 0, fmt.Errorf("read memory of pid %d: unexpected line %q", pid, line)
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("read memory of pid %d: %w", pid, err)
		}
		return kb * 1024, nil
	}
	return 0, fmt.Errorf("read memory of pid %d: no VmRSS line", pid)
}

// killGroup sends SIGKILL to the process group led by pid.
func killGroup(pid int) error {
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill process group %d: %w", pid, err)
	}
	return nil
}
