package preflight

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/mcp-patch/mcp-patch/host"
	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/kube/drain"
	"github.com/mcp-patch/mcp-patch/kube/driverimage"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/plan"
)

// A /boot the host step finds too small is a blocker of the plan, named
// once, whether the plan can state the figures itself or only the host's
// reason is known; it is never dropped between the two.
func TestFactsOfShortBootIsABlocker(t *testing.T) {
	const running, target = "6.8.0-48-generic", "6.8.0-51-generic"
	free := int64(20 << 10)
	cases := []struct {
		name string
		boot steps.BootSpace
		want string // "" = no /boot blocker
	}{
		{"short, figures known", steps.BootSpace{Dir: "/boot", FreeKB: &free, NeedKB: 150 << 10, NewKernels: []string{target}, Short: true},
			"/boot has 20 MiB free, the new kernel and its initrd need 150 MiB"},
		{"short, free space unknown", steps.BootSpace{Dir: "/boot", NeedKB: 150 << 10, NewKernels: []string{target}, Short: true},
			"/boot has unknown free"},
		{"short, need unknown", steps.BootSpace{Dir: "/boot", FreeKB: &free, NewKernels: []string{target}, Short: true},
			"/boot has 20 MiB free, the new kernel(s) " + target},
		{"room enough", steps.BootSpace{Dir: "/boot", FreeKB: &free, NeedKB: 10 << 10, NewKernels: []string{target}}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var sim steps.Simulation
			sim.Boot = c.boot
			sim.Plan.TargetKernel, sim.Plan.Digest = target, "sha256:p"
			sim.Plan.Packages = []steps.PlannedPackage{{Name: "linux-image-" + target, Action: "install", NewVersion: "1", Class: "kernel"}}
			if c.boot.Short {
				sim.Plan.Blockers = append(sim.Plan.Blockers, c.boot.ShortReason())
			}
			insp := steps.Inspection{Kernel: running, KernelPanic: 10}
			insp.Grub.EnvWritableAtBoot = true
			f := FactsOf(sim, insp)
			f.Entries = []plan.Entry{{ID: "gnulinux-advanced-u>gnulinux-" + running + "-advanced-u", Kernel: running}}
			n := plan.BuildNode(1, plan.Position{Node: "cp-2", ControlPlane: true}, f, plan.Placement{}, plan.Intent{PanicSeconds: 10})
			var boot []string
			for _, b := range n.Blockers {
				if strings.Contains(b.Cause, "/boot") {
					boot = append(boot, b.Cause)
				}
			}
			if c.want == "" {
				if len(boot) != 0 {
					t.Fatalf("blockers %v for a /boot with room", boot)
				}
				return
			}
			if len(boot) != 1 || !strings.Contains(boot[0], c.want) {
				t.Fatalf("/boot blockers %q; want one naming %q (all: %v)", boot, c.want, n.Blockers)
			}
		})
	}
}

// A node whose host cannot be read, or refuses the simulation, is in the
// facts with its reason (a blocker of the plan), never left out; a node
// read in full has its facts.
func TestReadHostsKeepsEveryNode(t *testing.T) {
	hosts := hostsByNode{
		"ok-1":      {sim: steps.Simulation{Plan: steps.BuildPlan("Inst linux-image-6.8.0-51-generic (6.8.0-51.52 noble [amd64])\n")}, insp: steps.Inspection{Kernel: "6.8.0-48-generic"}},
		"refused-1": {err: fmt.Errorf("preflight: %w: dpkg was interrupted", steps.ErrRefused)},
		"down-1":    {err: errors.New("dial tcp 10.0.0.9:22: connect: connection refused")},
		"key-1":     {err: &host.HostKeyError{Node: "key-1", Host: "10.0.0.8"}},
	}
	var told []string
	var mu sync.Mutex
	facts := ReadHosts(t.Context(), hosts, []string{"ok-1", "refused-1", "down-1", "key-1"}, 2, func(node string, _ plan.Facts) {
		mu.Lock()
		told = append(told, node)
		mu.Unlock()
	})
	if len(facts) != 4 || len(told) != 4 {
		t.Fatalf("facts of %d nodes, told %v; want all 4", len(facts), told)
	}
	for _, c := range []struct {
		node string
		ok   func(plan.Facts) bool
	}{
		{"ok-1", func(f plan.Facts) bool {
			return f.Err == "" && f.Running == "6.8.0-48-generic" && f.Target == "6.8.0-51-generic"
		}},
		{"refused-1", func(f plan.Facts) bool {
			return strings.Contains(f.SimulateRefused, "dpkg was interrupted") && f.Err == ""
		}},
		{"down-1", func(f plan.Facts) bool { return strings.Contains(f.Err, "connection refused") && !f.HostKeyChanged }},
		{"key-1", func(f plan.Facts) bool { return f.Err != "" && f.HostKeyChanged }},
	} {
		if f := facts[c.node]; !c.ok(f) {
			t.Errorf("%s: %+v", c.node, f)
		}
	}
}

type hostRead struct {
	sim  steps.Simulation
	insp steps.Inspection
	err  error
}

type hostsByNode map[string]hostRead

func (h hostsByNode) Preflight(_ context.Context, node string) (steps.Simulation, steps.Inspection, error) {
	r := h[node]
	return r.sim, r.insp, r.err
}

type noDrains struct{}

func (noDrains) DrainFacts(context.Context, string) (plan.DrainFacts, []drain.PodRef) {
	return plan.DrainFacts{}, nil
}

// The driver-container GPU servers get the image check of their target
// kernel (asked once per kernel), the others none; a missing image is
// the plan's blocker on each of them.
func TestRunChecksTheDriverImageOncePerKernel(t *testing.T) {
	sim := steps.Simulation{Plan: steps.BuildPlan("Inst linux-image-6.8.0-51-generic (6.8.0-51.52 noble [amd64])\n")}
	hosts := hostsByNode{"gpu-1": {sim: sim, insp: steps.Inspection{Kernel: "6.8.0-48-generic"}},
		"gpu-2": {sim: sim, insp: steps.Inspection{Kernel: "6.8.0-48-generic"}},
		"gpu-3": {sim: sim, insp: steps.Inspection{Kernel: "6.8.0-48-generic"}}}
	var asked []string
	in := Input{Round: "2026-12", Order: round.Order{Positions: []round.Position{{Node: "gpu-1", GPU: true}, {Node: "gpu-2", GPU: true}, {Node: "gpu-3", GPU: true}}},
		DriverContainer: map[string]bool{"gpu-1": true, "gpu-2": true},
		DriverImage: func(_ context.Context, kernel string) driverimage.Result {
			asked = append(asked, kernel)
			return driverimage.Result{Ref: "nvcr.io/nvidia/driver:550-" + kernel + "-ubuntu22.04", Verdict: driverimage.Absent, Reason: "not listed"}
		}}
	fl, err := Run(t.Context(), in, hosts, noDrains{}, func(float64, float64, string) {})
	if err != nil {
		t.Fatal(err)
	}
	if len(asked) != 1 || asked[0] != "6.8.0-51-generic" {
		t.Fatalf("image checks %v, want one for the target kernel", asked)
	}
	var on []string
	for _, b := range fl.Blockers {
		if strings.Contains(b.Cause, "no precompiled driver image for the target kernel 6.8.0-51-generic") {
			on = append(on, b.Node)
		}
	}
	if strings.Join(on, ",") != "gpu-1,gpu-2" {
		t.Fatalf("driver image blockers on %v, want gpu-1 and gpu-2 (all: %v)", on, fl.Blockers)
	}
}
