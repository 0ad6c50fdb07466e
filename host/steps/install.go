package steps

import (
	"context"
	"fmt"
	"strings"

	"github.com/mcp-patch/mcp-patch/host/parse"
)

// Install actions.
const (
	InstallStart  = "start"
	InstallStatus = "status"
)

// Install states.
const (
	InstallNotStarted = "not_started"
	InstallRunning    = "running"
	InstallFinished   = "finished"
	// InstallLost: the process is gone without leaving an exit code (killed,
	// or the node rebooted under it).
	InstallLost = "lost"
)

// InstallState is where the detached `apt-get full-upgrade` of a round
// stands on a node.
type InstallState struct {
	Node     string `json:"node"`
	Round    string `json:"round"`
	State    string `json:"state"`
	ExitCode *int   `json:"exit_code,omitempty"`
	PID      *int   `json:"pid,omitempty"`
	// Launcher is "systemd-run --unit=…" or "setsid nohup".
	Launcher  string `json:"launcher,omitempty"`
	StartedAt string `json:"started_at,omitempty"`
	LogTail   string `json:"log_tail"`
	StateDir  string `json:"state_dir"`
	// PlanDigest is the digest the node computed before starting (start
	// only); on a drift refusal DriftLines is the node's package set now.
	PlanDigest string   `json:"plan_digest,omitempty"`
	DriftLines []string `json:"drift_lines,omitempty"`
	// Progress is what the log says apt has done so far.
	Progress InstallProgress `json:"progress"`
	// Lock is set when start refused because another apt or dpkg held
	// dpkg's lock for longer than the lock timeout.
	Lock *DpkgLock `json:"lock,omitempty"`
	// DpkgInterrupted: start refused because dpkg stopped half-way;
	// FixCommand is what a person runs on the node.
	DpkgInterrupted bool   `json:"dpkg_interrupted,omitempty"`
	FixCommand      string `json:"fix_command,omitempty"`
	// Boot is /boot's room for the new kernels as start found it.
	Boot *BootSpace `json:"boot,omitempty"`
}

// DpkgLock names the process that held dpkg's lock.
type DpkgLock struct {
	PID           *int   `json:"pid"`
	Command       string `json:"command"`
	WaitedSeconds int    `json:"waited_seconds"`
}

// InstallProgress counts dpkg's "Unpacking"/"Setting up" lines in the log
// tail and notes dpkg errors.
type InstallProgress struct {
	Unpacked   int      `json:"unpacked"`
	SetUp      int      `json:"set_up"`
	DpkgErrors []string `json:"dpkg_errors"`
}

// Install starts the approved upgrade detached on the node, or reports how
// it is going (install.sh). start refuses (ErrRefused) when an install of
// this round was already started or when the node's plan digest differs
// from expectedDigest; the returned state says what the node has.
func (s *Steps) Install(ctx context.Context, node, action, round, expectedDigest string) (InstallState, error) {
	st := InstallState{Node: node, Round: round, Progress: InstallProgress{DpkgErrors: []string{}}}
	if action != InstallStart && action != InstallStatus {
		return st, fmt.Errorf("install on node %s: %w: action %q must be start or status", node, ErrBadInput, action)
	}
	if err := ValidateRound(round); err != nil {
		return st, fmt.Errorf("install on node %s: %w", node, err)
	}
	env := s.lockEnv(map[string]string{"ACTION": action, "ROUND": round})
	if action == InstallStart {
		if err := ValidatePlanDigest(expectedDigest); err != nil {
			return st, fmt.Errorf("install on node %s: %w", node, err)
		}
		env["EXPECTED_PLAN_DIGEST"] = expectedDigest
	}
	var o struct {
		State      string   `json:"state"`
		ExitCode   *int     `json:"exit_code"`
		PID        *int     `json:"pid"`
		Launcher   string   `json:"launcher"`
		StartedAt  string   `json:"started_at"`
		LogTail    string   `json:"log_tail"`
		StateDir   string   `json:"state_dir"`
		PlanDigest string   `json:"plan_digest"`
		PlanLines  []string `json:"plan_lines"`
		lockOut
		BootDir    string   `json:"boot_dir"`
		BootFreeKB *int64   `json:"boot_free_kb"`
		BootNeedKB int64    `json:"boot_need_kb"`
		BootNew    []string `json:"boot_new_kernels"`
		BootShort  bool     `json:"boot_short"`
	}
	_, err := s.run(ctx, "install", node, env, &o, false)
	st.Lock, st.DpkgInterrupted, st.FixCommand = o.lock(), o.Interrupted, o.FixCommand
	if o.BootDir != "" {
		st.Boot = &BootSpace{Dir: o.BootDir, FreeKB: o.BootFreeKB, NeedKB: o.BootNeedKB, NewKernels: nonNil(o.BootNew), Short: o.BootShort}
	}
	st.State, st.ExitCode, st.PID, st.Launcher, st.StartedAt = o.State, o.ExitCode, o.PID, o.Launcher, o.StartedAt
	st.LogTail, st.StateDir, st.PlanDigest, st.DriftLines = o.LogTail, o.StateDir, o.PlanDigest, o.PlanLines
	st.Progress = installProgress(o.LogTail)
	if o.PlanLines != nil && o.PlanDigest != parse.DigestPlanLines(o.PlanLines) {
		return st, fmt.Errorf("install on node %s: %w: plan lines do not match digest %s", node, ErrProtocol, o.PlanDigest)
	}
	return st, err
}

// lockOut are the apt-guard fields of download, install and autoremove.
type lockOut struct {
	Locked      bool   `json:"dpkg_locked"`
	HolderPID   *int   `json:"lock_holder_pid"`
	HolderCmd   string `json:"lock_holder_command"`
	Waited      int    `json:"lock_waited_seconds"`
	Interrupted bool   `json:"dpkg_interrupted"`
	FixCommand  string `json:"fix_command"`
}

func (o lockOut) lock() *DpkgLock {
	if !o.Locked {
		return nil
	}
	return &DpkgLock{PID: o.HolderPID, Command: o.HolderCmd, WaitedSeconds: o.Waited}
}

func installProgress(log string) InstallProgress {
	p := InstallProgress{DpkgErrors: []string{}}
	for _, l := range strings.Split(log, "\n") {
		switch {
		case strings.HasPrefix(l, "Unpacking "):
			p.Unpacked++
		case strings.HasPrefix(l, "Setting up "):
			p.SetUp++
		case strings.HasPrefix(l, "dpkg: error"), strings.HasPrefix(l, "E: "), strings.HasPrefix(l, "Errors were encountered"):
			p.DpkgErrors = append(p.DpkgErrors, l)
		}
	}
	return p
}

// Download fetches the upgrade's packages into apt's cache while workloads
// still run (download.sh: apt-get -d -y full-upgrade).
func (s *Steps) Download(ctx context.Context, node string) (DownloadResult, error) {
	var o struct {
		AptOutput string `json:"apt_output"`
		AptStderr string `json:"apt_stderr"`
		AptExit   int    `json:"apt_exit"`
		lockOut
	}
	_, err := s.run(ctx, "download", node, s.lockEnv(nil), &o, false)
	d := DownloadResult{Node: node, AptDownload: parse.ParseAptDownload(o.AptOutput), AptExit: o.AptExit, AptStderr: tail(o.AptStderr, 2000),
		Lock: o.lock(), DpkgInterrupted: o.Interrupted, FixCommand: o.FixCommand}
	d.Fetched = nonNil(d.Fetched)
	return d, err
}

// DownloadResult is what download.sh fetched.
type DownloadResult struct {
	Node string `json:"node"`
	parse.AptDownload
	AptExit   int    `json:"apt_exit"`
	AptStderr string `json:"apt_stderr,omitempty"`
	// Lock, DpkgInterrupted and FixCommand: see InstallState.
	Lock            *DpkgLock `json:"lock,omitempty"`
	DpkgInterrupted bool      `json:"dpkg_interrupted,omitempty"`
	FixCommand      string    `json:"fix_command,omitempty"`
}
