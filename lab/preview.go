package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Preview starts the lab's hosts only, behind real SSH, with an intent
// repository and a configuration that reach them: what the host-side tools
// (inspect_node, simulate_upgrade, ...) need, without etcd, the API server
// or the workloads. scripts/demo.sh shows it while the control plane is
// still compiling. Close stops it. On error everything started is stopped.
func Preview(ctx context.Context, opts Options) (l *Lab, err error) {
	opts.defaults()
	if opts.Dir == "" {
		return nil, errors.New("lab: Options.Dir is required")
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(opts.Dir, MarkerFile), []byte(markerText), 0o644); err != nil {
		return nil, fmt.Errorf("lab: mark %s as a lab directory: %w", opts.Dir, err)
	}
	started := &Lab{Dir: opts.Dir, Clock: &Clock{}}
	defer func() {
		if err != nil {
			started.Close()
		}
	}()
	if opts.HostBinary == "" {
		if opts.HostBinary, err = FindHostBinary(); err != nil {
			return nil, err
		}
	}
	if err := started.startFleet(ctx, opts); err != nil {
		return nil, err
	}
	opts.Progress("intent repository (from examples/intent) and a lab-only approval key")
	if err := started.writeIntentRepo(opts.DrainTimeoutMinutes, ""); err != nil {
		return nil, fmt.Errorf("lab: intent repository: %w", err)
	}
	if err := started.writeApprover(""); err != nil {
		return nil, fmt.Errorf("lab: approval key: %w", err)
	}
	if err := started.writeConfig(opts); err != nil {
		return nil, fmt.Errorf("lab: config: %w", err)
	}
	return started, nil
}
