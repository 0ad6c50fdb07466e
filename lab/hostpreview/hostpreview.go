// Package hostpreview is the first screen of scripts/demo.sh: the lab's
// emulated hosts behind real SSH, and the host-side part of the preflight
// (inspect_node's inspection, simulate_upgrade's simulation) run on two of
// them through the production SSH pool (package host) and host steps
// (package host/steps), printed by the table printer of
// `mcp-patch tool NAME -o table` (package cli/table). It links no
// Kubernetes, git or MCP code, so lab/cmd/lab-preview compiles in a fraction
// of mcp-patch's time from empty caches and shows the product while the
// rest builds. It owns nothing but the fleet it starts and stops; the
// tools' verdicts (status, reasons, next action) are mcp-patch's, shown by
// `mcp-patch lab preview` once mcp-patch is built.
package hostpreview

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/mcp-patch/mcp-patch/host"
	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/internal/table"
	"github.com/mcp-patch/mcp-patch/lab/fleet"
)

// DefaultNodes are the hosts the preview surveys: a control-plane node and
// the canary, one of each kind the round treats differently (the same two
// as `mcp-patch lab preview`).
var DefaultNodes = []string{"cp-1", "gpu-canary-1"}

// Options configure one preview. Zero values take the defaults named.
type Options struct {
	// Dir holds the fleet (host directories, keys, inventory,
	// known_hosts). Required; created when missing.
	Dir string
	// Nodes are surveyed in this order. nil means DefaultNodes.
	Nodes []string
	// ToolBinary plays the hosts' emulated commands (fleet.Options.ToolBinary).
	// "" means the running executable, which must call
	// fleet.HostCommandMain first in main.
	ToolBinary string
	// CommandTimeout bounds each host step. 0 means 2 minutes.
	CommandTimeout time.Duration
	// Logger receives the fleet's and the pool's events. nil discards.
	Logger *slog.Logger
	// Tables receives each command's full answer as the table printer
	// shows it. nil writes them to Run's writer after each node's summary.
	Tables io.Writer
	// TablesName names where Tables goes, for the line that points a
	// person there ("" when Tables is nil).
	TablesName string
}

// Run starts the lab's 8 hosts (3 control-plane, a canary, 4 GPU servers)
// behind SSH on 127.0.0.1, surveys opts.Nodes read-only, prints what it
// found to w and stops the hosts. A host step that fails is printed and
// named in the error; the other nodes are still surveyed.
func Run(ctx context.Context, opts Options, w io.Writer) (err error) {
	if opts.Dir == "" {
		return errors.New("host preview: Options.Dir is required")
	}
	nodes := opts.Nodes
	if nodes == nil {
		nodes = DefaultNodes
	}
	timeout := opts.CommandTimeout
	if timeout == 0 {
		timeout = 2 * time.Minute
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	start := time.Now()
	f, err := fleet.New(ctx, fleet.Options{Dir: filepath.Join(opts.Dir, "fleet"), ControlPlanes: 3, Canary: 1, GPUServers: 4,
		RebootDowntime: time.Second, InstallStep: 20 * time.Millisecond, TimerScale: 0.1, Logger: log, ToolBinary: opts.ToolBinary})
	if err != nil {
		return fmt.Errorf("host preview: start the hosts: %w", err)
	}
	defer func() {
		if cerr := f.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("host preview: stop the hosts: %w", cerr))
		}
	}()
	inv, err := host.LoadInventory(f.InventoryFile())
	if err != nil {
		return fmt.Errorf("host preview: %w", err)
	}
	pool, err := host.NewPool(inv, host.Config{KnownHostsFiles: []string{f.KnownHostsFile()},
		IdentityFiles: []string{f.OperatorKeyFile()}, CommandTimeout: timeout, Logger: log})
	if err != nil {
		return fmt.Errorf("host preview: %w", err)
	}
	defer func() {
		if cerr := pool.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("host preview: close the SSH pool: %w", cerr))
		}
	}()
	st := steps.New(pool, log)
	fmt.Fprintf(w, "Lab hosts up in %s: %d emulated Ubuntu GPU and control-plane hosts behind SSH on 127.0.0.1 (host keys checked against %s)\n",
		time.Since(start).Round(time.Second), len(f.Hosts()), f.KnownHostsFile())
	fmt.Fprintln(w, "The host-side preflight, read-only: what inspect_node and simulate_upgrade read on each host (the same host steps and scripts/host/*.sh)")
	tables := opts.Tables
	if tables == nil {
		tables = w
	} else if opts.TablesName != "" {
		fmt.Fprintf(w, "Each command's full answer: %s\n", opts.TablesName)
	}
	var errs []error
	for _, node := range nodes {
		var full bytes.Buffer
		fmt.Fprintf(&full, "\n$ mcp-patch tool inspect_node --node %s -o table   # its inspection\n", node)
		insp, ierr := st.Inspect(ctx, node, steps.InspectInput{})
		errs = append(errs, show(&full, node, "inspect", "inspection", insp, ierr))
		fmt.Fprintf(&full, "\n$ mcp-patch tool simulate_upgrade --node %s -o table   # its simulation\n", node)
		sim, serr := st.Simulate(ctx, node)
		errs = append(errs, show(&full, node, "simulate upgrade", "simulation", sim, serr))
		if ierr == nil && serr == nil {
			fmt.Fprintf(w, "\n%s\n", strings.Join(Summary(insp, sim), "\n"))
		} else {
			fmt.Fprintf(w, "\n%s: %v\n", node, errors.Join(ierr, serr))
		}
		if _, err := tables.Write(full.Bytes()); err != nil {
			errs = append(errs, fmt.Errorf("host preview: write the answers for %s: %w", node, err))
		}
	}
	fmt.Fprintf(w, "\nHost-side preview done in %s: the round follows once mcp-patch and the control plane are built.\n",
		time.Since(start).Round(time.Second))
	return errors.Join(errs...)
}

// Summary is a node's preflight in three lines: the kernel it runs and
// the one the upgrade brings, the packages it moves by class with the
// holds, and what blocks it (removals, changed holds, /boot too small,
// the plan's digest when nothing does).
func Summary(insp steps.Inspection, sim steps.Simulation) []string {
	p := sim.Plan
	target := p.TargetKernel
	if target == "" {
		target = "no new kernel"
	}
	lines := []string{
		fmt.Sprintf("%s  kernel %s -> %s; %d kernels installed; /boot %s", insp.Node, insp.Kernel, target, len(insp.InstalledKernels), bootRoom(sim.Boot)),
		fmt.Sprintf("%s  %d packages: %d kernel, %d NVIDIA, %d Kubernetes; %d kept back; holds: %s",
			pad(insp.Node), len(p.Packages), len(p.Kernel), len(p.Nvidia), len(p.Kubernetes), len(p.KeptBack), cmpOr(strings.Join(sim.Holds, ", "), "none")),
	}
	blockers := slices.Clone(p.Blockers)
	if sim.Boot.Short {
		blockers = append(blockers, fmt.Sprintf("/boot too small (%d KiB needed)", sim.Boot.NeedKB))
	}
	if len(sim.Unheld) > 0 {
		blockers = append(blockers, "not held: "+strings.Join(sim.Unheld, ", "))
	}
	if len(blockers) == 0 {
		lines = append(lines, fmt.Sprintf("%s  blockers: none (plan %s)", pad(insp.Node), short(p.Digest)))
	} else {
		lines = append(lines, fmt.Sprintf("%s  blockers: %s", pad(insp.Node), strings.Join(blockers, "; ")))
	}
	return lines
}

// bootRoom is the room on /boot against what the new kernels need.
func bootRoom(b steps.BootSpace) string {
	if b.FreeKB == nil {
		return fmt.Sprintf("free space unknown, %d MiB needed", b.NeedKB/1024)
	}
	return fmt.Sprintf("%d MiB free for %d MiB", *b.FreeKB/1024, b.NeedKB/1024)
}

func pad(node string) string { return strings.Repeat(" ", len(node)) }

func cmpOr(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}

// short is a digest's first 12 hex digits.
func short(digest string) string {
	if i := strings.IndexByte(digest, ':'); i >= 0 && len(digest) > i+13 {
		return digest[:i+13]
	}
	return digest
}

// show prints one host step's result under the key the tool's output uses
// for it, or the step's error; it returns that error, named.
func show(w io.Writer, node, action, key string, result any, stepErr error) error {
	if stepErr != nil {
		fmt.Fprintf(w, "error: %v\n", stepErr)
		return fmt.Errorf("host preview: %s on %s: %w", action, node, stepErr)
	}
	if err := table.Write(w, map[string]any{key: result}); err != nil {
		return fmt.Errorf("host preview: print %s of %s: %w", key, node, err)
	}
	return nil
}
