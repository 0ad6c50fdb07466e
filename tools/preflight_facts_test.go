package tools

import (
	"strings"
	"testing"

	"github.com/mcp-patch/mcp-patch/host/steps"
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
			f := factsOf(sim, insp)
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
