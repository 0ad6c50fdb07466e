package lab

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-patch/mcp-patch/host"
	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/lab/fleet"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/plan"
	"github.com/mcp-patch/mcp-patch/round/plan/preflight"
)

// BenchmarkLabRound runs the whole round on a 3+1+2 lab with the lab's own
// waits cut to the minimum (reboot downtime and dpkg steps ~0, the
// scripts' reboot timer at 0.5 s), and reports the wall time of the round
// and of each window (drain to green gate), plus the orchestration
// overhead: a window's time minus the lab's reboot and install waits.
func BenchmarkLabRound(b *testing.B) {
	for i := 0; i < b.N; i++ {
		dir := b.TempDir()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		l, err := Up(ctx, Options{Dir: dir, ControlPlanes: 3, Canary: 1, GPUServers: 2,
			RebootDowntime: time.Millisecond, InstallStep: time.Millisecond, GateSettle: 30 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		res, err := l.RunRound(ctx, "2026-11", io.Discard, nil)
		if err != nil || !res.Outcome.Closed {
			b.Fatalf("round: %v %+v", err, res.Outcome.Stopped)
		}
		total := time.Since(start)
		st, _, err := round.ReadState(filepath.Join(l.IntentRepo, "rounds", "2026-11"))
		if err != nil {
			b.Fatal(err)
		}
		var ws []time.Duration
		for _, d := range st.WindowDurations() {
			ws = append(ws, d)
		}
		sort.Slice(ws, func(i, j int) bool { return ws[i] < ws[j] })
		// The lab's own waits per window: the scripts' reboot timer (5 s
		// scaled by 0.1), the agent's poll pauses while install and the
		// reboot run (counted from its calls), downtime and dpkg steps (~0).
		const rebootTimer = 500 * time.Millisecond
		polls := time.Duration(0)
		for _, s := range res.Outcome.Steps {
			if len(s) > 12 && s[len(s)-11:] == "in_progress" {
				polls += 200 * time.Millisecond
			}
		}
		perWindowWait := rebootTimer + polls/time.Duration(len(ws))
		median := ws[len(ws)/2]
		var active []time.Duration
		for node, d := range res.Outcome.Active {
			if node != "" {
				active = append(active, d)
			}
		}
		sort.Slice(active, func(i, j int) bool { return active[i] < active[j] })
		b.ReportMetric(total.Seconds(), "s/round")
		b.ReportMetric(median.Seconds(), "s/window-median")
		b.ReportMetric((median - perWindowWait).Seconds(), "s/window-minus-timer-and-polls")
		// The time mcp-patch itself worked for a node: every call that did
		// something (SSH, host scripts, API calls, journal), not the calls
		// that only reported a wait (reboot, install, gate settling).
		b.ReportMetric(active[len(active)/2].Seconds(), "s/window-active-median")
		b.Logf("active time by tool over the round: %v", res.Outcome.ActiveByTool)
		b.ReportMetric(float64(res.Outcome.Calls)/float64(len(ws)), "calls/window")
		l.Close()
		cancel()
	}
}

// benchFleet starts a lab fleet for a benchmark (closed when it ends) and
// returns it, its node names in order, and what opens a new SSH pool over
// its inventory with its operator key and known hosts.
func benchFleet(b *testing.B, o fleet.Options) (*fleet.Fleet, []string, func() *host.Pool) {
	b.Helper()
	o.Dir = b.TempDir()
	f, err := fleet.New(context.Background(), o)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := f.Close(); err != nil {
			b.Logf("close the lab fleet: %v", err)
		}
	})
	inv, err := host.LoadInventory(f.InventoryFile())
	if err != nil {
		b.Fatal(err)
	}
	var nodes []string
	for _, h := range f.Hosts() {
		nodes = append(nodes, h.Name)
	}
	return f, nodes, func() *host.Pool {
		pool, err := host.NewPool(inv, host.Config{KnownHostsFiles: []string{f.KnownHostsFile()}, IdentityFiles: []string{f.OperatorKeyFile()}})
		if err != nil {
			b.Fatal(err)
		}
		return pool
	}
}

// BenchmarkFleetCheck200 fans the fleet check's host step (kernel.sh) out
// over 200 lab hosts through the production SSH pool at concurrency 50:
// cold (new connections) and pooled.
func BenchmarkFleetCheck200(b *testing.B) {
	ctx := context.Background()
	_, nodes, newPool := benchFleet(b, fleet.Options{ControlPlanes: 3, Canary: 1, GPUServers: 196, Parallelism: 16})
	run := func(pool *host.Pool) time.Duration {
		st := steps.New(pool, nil)
		start := time.Now()
		res := host.FanOut(ctx, nodes, 50, func(ctx context.Context, node string) (steps.KernelInfo, error) {
			return st.Kernel(ctx, node)
		})
		for _, r := range res {
			if r.Err != nil {
				b.Fatalf("%s: %v", r.Node, r.Err)
			}
		}
		return time.Since(start)
	}
	for i := 0; i < b.N; i++ {
		pool := newPool()
		cold := run(pool)
		warm := run(pool)
		b.ReportMetric(cold.Seconds(), "s/cold-200")
		b.ReportMetric(warm.Seconds(), "s/pooled-200")
		pool.Close()
	}
}

// BenchmarkPreflight200 is plan_round's fleet-wide preflight on 200 lab
// hosts: preflight.sh (simulate and inspect in one session) on every node
// over the production SSH pool at concurrency 50, then build, encode and
// render the plan. It reports the wall time, the CPU time of this process
// (the client, with the lab's in-process SSH servers) and of the lab
// hosts' processes (their shells, tools and emulated commands: the
// server side), the SSH sessions per host and the process's peak RSS. On
// a shared machine the CPU seconds are the fair figure.
//
// Two sub-benchmarks: "self", the hosts' commands played by this test
// binary (as mcp-patch lab up plays them with itself: every start pays the
// server's package inits), and "lab-host", played by lab/cmd/lab-host
// (package emul alone). Each reports the start cost of one command.
func BenchmarkPreflight200(b *testing.B) {
	self, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	labHost := buildLabHost(b)
	for _, tool := range []struct{ name, bin string }{{"self", ""}, {"lab-host", labHost}} {
		b.Run(tool.name, func(b *testing.B) {
			bin := tool.bin
			if bin == "" {
				bin = self
			}
			b.ReportMetric(commandStart(b, bin).Seconds()*1000, "ms/command-start")
			preflight200(b, tool.bin)
		})
	}
}

// buildLabHost builds lab/cmd/lab-host into a temp dir and returns its path.
func buildLabHost(b *testing.B) string {
	labHost := filepath.Join(b.TempDir(), "lab-host")
	if out, err := exec.Command("go", "build", "-o", labHost, "github.com/mcp-patch/mcp-patch/lab/cmd/lab-host").CombinedOutput(); err != nil {
		b.Fatalf("build lab-host: %v\n%s", err, out)
	}
	return labHost
}

// benchOrder is the round order of nodes: the first three control-plane
// nodes, the fourth the canary GPU server, the rest GPU servers.
func benchOrder(nodes []string) []plan.Position {
	order := make([]plan.Position, 0, len(nodes))
	for i, n := range nodes {
		order = append(order, plan.Position{Node: n, ControlPlane: i < 3, GPU: i >= 3, Canary: i == 3})
	}
	return order
}

// planFromPreflight is plan_round's fleet-wide part: preflight.sh on every
// node over pool (50 at a time), then the plan built, encoded and rendered.
func planFromPreflight(b *testing.B, ctx context.Context, pool *host.Pool, nodes []string) (map[string]plan.Facts, plan.Fleet) {
	facts := preflight.ReadHosts(ctx, steps.New(pool, nil), nodes, 50, func(string, plan.Facts) {})
	fl := plan.Build(plan.Input{Round: "bench", Order: benchOrder(nodes), Facts: facts, Intent: plan.Intent{GPUApproval: plan.PerWindow, PanicSeconds: 10}})
	if _, err := fl.Encode(); err != nil {
		b.Fatal(err)
	}
	if err := plan.Markdown(io.Discard, fl); err != nil {
		b.Fatal(err)
	}
	return facts, fl
}

// commandStart is the median wall time of 20 starts of bin as a lab-host
// command that exits at once (labtool without a command: its usage).
func commandStart(b *testing.B, bin string) time.Duration {
	var ds []time.Duration
	for i := 0; i < 20; i++ {
		start := time.Now()
		cmd := exec.Command(bin)
		cmd.Args = []string{"labtool"}
		err := cmd.Run()
		ds = append(ds, time.Since(start))
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 { // its usage
			b.Fatalf("%s as labtool: %v, want exit status 2", bin, err)
		}
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2]
}

func preflight200(b *testing.B, toolBinary string) {
	ctx := context.Background()
	f, nodes, newPool := benchFleet(b, fleet.Options{ControlPlanes: 3, Canary: 1, GPUServers: 196, Parallelism: 16, ToolBinary: toolBinary})
	for i := 0; i < b.N; i++ {
		pool := newPool()
		var ru0, ru1, ch0, ch1 syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
		_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ch0)
		cmds0 := f.Commands()
		start := time.Now()
		_, fl := planFromPreflight(b, ctx, pool, nodes)
		wall := time.Since(start)
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
		_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ch1)
		pool.Close()
		for _, n := range fl.Nodes {
			for _, bl := range n.Blockers {
				if strings.Contains(bl.Cause, "not reachable") {
					b.Fatalf("%s", bl)
				}
			}
		}
		cpu := time.Duration(ru1.Utime.Nano()+ru1.Stime.Nano()-ru0.Utime.Nano()-ru0.Stime.Nano()) * time.Nanosecond
		b.ReportMetric(wall.Seconds(), "s/wall-200")
		hostsCPU := time.Duration(ch1.Utime.Nano()+ch1.Stime.Nano()-ch0.Utime.Nano()-ch0.Stime.Nano()) * time.Nanosecond
		b.ReportMetric(cpu.Seconds(), "s/cpu-200")
		b.ReportMetric(hostsCPU.Seconds(), "s/cpu-hosts-200")
		b.ReportMetric((cpu + hostsCPU).Seconds(), "s/cpu-total-200")
		b.ReportMetric(float64(f.Commands()-cmds0)/float64(len(nodes)), "sessions/host")
		b.ReportMetric(float64(ru1.Maxrss)/1024, "MiB/maxrss")
		b.ReportMetric(float64(fl.Signatures), "signatures")
		b.ReportMetric(float64(fl.PerStepSignatures), "signatures-per-step")
	}
}
