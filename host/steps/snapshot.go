package steps

import (
	"context"
	"fmt"
	"regexp"
	"sync"
)

// Node roles for Snapshot.
const (
	RoleControlPlane = "control-plane"
	RoleWorker       = "worker"
)

// SnapshotFile is one file of a node backup.
type SnapshotFile struct {
	Name   string `json:"name"`
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// SnapshotResult is the backup taken before install.
type SnapshotResult struct {
	Node string `json:"node"`
	Dir  string `json:"dir"`
	Role string `json:"role"`
	// Reused is true when a complete, verified snapshot of the round was
	// already there and was kept.
	Reused bool           `json:"reused"`
	Files  []SnapshotFile `json:"files"`
	// EtcdMethod is "etcdctl", "crictl" or "none" (workers).
	EtcdMethod string `json:"etcd_method"`
	// HostConfigPaths are the /etc paths in host-config.tar.gz.
	HostConfigPaths []string `json:"host_config_paths"`
}

var etcdEndpointPattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^https?://[A-Za-z0-9.:\[\]-]+$`) })

// Snapshot backs up /etc/kubernetes, host configuration and, on control
// planes, etcd into the round's backup directory (snapshot.sh).
// etcdEndpoint "" means https://127.0.0.1:2379.
func (s *Steps) Snapshot(ctx context.Context, node, round, role, etcdEndpoint string) (SnapshotResult, error) {
	res := SnapshotResult{Node: node, Role: role, Files: []SnapshotFile{}, HostConfigPaths: []string{}}
	if err := ValidateRound(round); err != nil {
		return res, fmt.Errorf("snapshot node %s: %w", node, err)
	}
	if role != RoleControlPlane && role != RoleWorker {
		return res, fmt.Errorf("snapshot node %s: %w: role %q must be control-plane or worker", node, ErrBadInput, role)
	}
	env := map[string]string{"ROUND": round, "ROLE": role}
	if etcdEndpoint != "" {
		if !etcdEndpointPattern().MatchString(etcdEndpoint) {
			return res, fmt.Errorf("snapshot node %s: %w: etcd endpoint %q", node, ErrBadInput, etcdEndpoint)
		}
		env["ETCD_ENDPOINT"] = etcdEndpoint
	}
	var o struct {
		Dir    string         `json:"backup_dir"`
		Reused bool           `json:"reused"`
		Files  []SnapshotFile `json:"files"`
		Etcd   string         `json:"etcd_method"`
		Paths  []string       `json:"host_config_paths"`
	}
	_, err := s.run(ctx, "snapshot", node, env, &o, false)
	res.Dir, res.Reused, res.Files, res.EtcdMethod, res.HostConfigPaths = o.Dir, o.Reused, nonNil(o.Files), o.Etcd, nonNil(o.Paths)
	return res, err
}

// Autoremove actions.
const (
	AutoremoveSimulate = "simulate"
	AutoremoveRun      = "run"
)

// AutoremoveInput are the inputs of Autoremove.
type AutoremoveInput struct {
	// Action is "simulate" or "run".
	Action string `json:"action"`
	// KeepKernel is the previous kernel release, protected until SoakDone.
	KeepKernel string `json:"keep_kernel,omitempty"`
	SoakDone   bool   `json:"soak_done"`
}

// AutoremoveResult is what `apt-get autoremove --purge` would remove or
// removed.
type AutoremoveResult struct {
	Node          string   `json:"node"`
	Action        string   `json:"action"`
	RunningKernel string   `json:"running_kernel"`
	Removals      []string `json:"removals"`
	// Protected are removals refused because they belong to the running
	// kernel or to KeepKernel before the soak is over.
	Protected []string `json:"protected"`
	Removed   bool     `json:"removed"`
	// Lock, DpkgInterrupted and FixCommand: see InstallState.
	Lock            *DpkgLock `json:"lock,omitempty"`
	DpkgInterrupted bool      `json:"dpkg_interrupted,omitempty"`
	FixCommand      string    `json:"fix_command,omitempty"`
}

// Autoremove simulates, then (Action "run") runs `apt-get autoremove
// --purge` (autoremove.sh). It refuses (ErrRefused) when the running
// kernel, or KeepKernel before the soak is over, would go.
func (s *Steps) Autoremove(ctx context.Context, node string, in AutoremoveInput) (AutoremoveResult, error) {
	res := AutoremoveResult{Node: node, Action: in.Action, Removals: []string{}, Protected: []string{}}
	if in.Action != AutoremoveSimulate && in.Action != AutoremoveRun {
		return res, fmt.Errorf("autoremove on node %s: %w: action %q must be simulate or run", node, ErrBadInput, in.Action)
	}
	env := s.lockEnv(map[string]string{"ACTION": in.Action, "SOAK_DONE": "0"})
	if in.SoakDone {
		env["SOAK_DONE"] = "1"
	}
	if in.KeepKernel != "" {
		if err := ValidateKernel("keep kernel", in.KeepKernel); err != nil {
			return res, fmt.Errorf("autoremove on node %s: %w", node, err)
		}
		env["KEEP_KERNEL"] = in.KeepKernel
	}
	var o struct {
		Running   string   `json:"running_kernel"`
		Removals  []string `json:"removals"`
		Protected []string `json:"protected"`
		AptExit   *int     `json:"apt_exit"`
		lockOut
	}
	_, err := s.run(ctx, "autoremove", node, env, &o, false)
	res.RunningKernel, res.Removals, res.Protected = o.Running, nonNil(o.Removals), nonNil(o.Protected)
	res.Lock, res.DpkgInterrupted, res.FixCommand = o.lock(), o.Interrupted, o.FixCommand
	res.Removed = err == nil && in.Action == AutoremoveRun && o.AptExit != nil && *o.AptExit == 0
	return res, err
}
