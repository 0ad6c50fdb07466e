package tools

import (
	"context"

	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/service"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// TrialBootIn is the node to trial-boot.
type TrialBootIn struct {
	ApprovalArg
	Node string `json:"node"`
}

// TrialBootOut is where the trial boot stands.
type TrialBootOut struct {
	Result
	TrialBoot *steps.TrialBoot `json:"trial_boot,omitempty"`
	// Driver is the driver pod's wait on the old kernel after a fallback,
	// on a driver-container node.
	Driver *window.DriverOnOldKernel `json:"driver_on_old_kernel,omitempty" jsonschema:"the driver pod's wait on the old kernel after a fallback (driver-container nodes)"`
}

// TrialBoot is the trial_boot tool.
func TrialBoot() Tool {
	return NewDestructive[TrialBootIn, TrialBootOut, window.TrialBootPlan](Spec{
		Name:  "trial_boot",
		Title: "Trial-boot the new kernel",
		Description: "Boot the new kernel once, the old one staying GRUB's default (refused if grubenv is not writable at boot or " +
			"kernel.panic is 0); call again until it names the booted kernel: the old one means fallback and stops the " +
			"round.",
		Idempotent: false, OpenWorld: true,
	}, Steps[TrialBootIn, TrialBootOut, window.TrialBootPlan]{
		Target: func(in TrialBootIn) string { return in.Node },
		Follow: func(ctx context.Context, d *Deps, s *window.Round, in TrialBootIn, p Progress) (TrialBootOut, error) {
			if s.InFlightRun(round.StepTrialBoot, in.Node) == nil {
				return TrialBootOut{}, errNotInFlight
			}
			w, err := d.Window(ctx, s, service.NeedHost)
			if err != nil {
				return TrialBootOut{}, err
			}
			o, err := w.FollowTrialBoot(ctx, in.Node)
			return TrialBootOut{TrialBoot: o.TrialBoot, Driver: o.Driver, Result: outcome(o.Outcome).Then(CallTo("record_verification", "node", in.Node))}, err
		},
		Plan: func(ctx context.Context, d *Deps, s *window.Round, in TrialBootIn) (window.TrialBootPlan, error) {
			if s.InFlightRun(round.StepTrialBoot, in.Node) == nil {
				if err := s.Admit(round.StepTrialBoot, in.Node); err != nil {
					return window.TrialBootPlan{}, err
				}
			}
			np, _ := s.NodePlan(in.Node)
			w, err := d.Window(ctx, s, service.NeedHost)
			if err != nil {
				return window.TrialBootPlan{}, err
			}
			insp, err := w.Host.Inspect(ctx, in.Node, steps.InspectInput{TargetKernel: np.TargetKernel})
			if err != nil {
				return window.TrialBootPlan{}, service.HostError(in.Node, "inspect before the trial boot", err)
			}
			if err := window.TrialBootDone(in.Node, s.Journal.StepRun(round.StepTrialBoot, in.Node), insp.Kernel, np.TargetKernel); err != nil {
				return window.TrialBootPlan{}, err
			}
			n := s.Journal.Shared().Node(in.Node)
			plan, err := window.DecideTrialBoot(in.Node, insp, np.TargetKernel, n != nil && n.GPU, panicSeconds(s))
			return plan, err
		},
		Do: func(ctx context.Context, d *Deps, s *window.Round, in TrialBootIn, plan window.TrialBootPlan, a service.Approved, p Progress) (TrialBootOut, error) {
			w, err := d.Window(ctx, s, service.NeedHost)
			if err != nil {
				return TrialBootOut{}, err
			}
			o, err := w.StartTrialBoot(ctx, plan, a.Grant(), p)
			return TrialBootOut{TrialBoot: o.TrialBoot, Driver: o.Driver, Result: outcome(o.Outcome).Then(CallTo("record_verification", "node", in.Node))}, err
		},
	})
}

func panicSeconds(s *window.Round) int {
	if k := s.Settings.Kernel; k != nil && k.PanicRebootSeconds > 0 {
		return k.PanicRebootSeconds
	}
	return 10
}
