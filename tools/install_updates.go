package tools

import (
	"context"

	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/service"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// InstallIn is the node to install on.
type InstallIn struct {
	ApprovalArg
	Node string `json:"node"`
}

// InstallOut is where the install stands.
type InstallOut struct {
	Result
	Install *steps.InstallState `json:"install,omitempty"`
}

// InstallUpdates is the install_updates tool.
func InstallUpdates() Tool {
	return NewDestructive[InstallIn, InstallOut, window.PackagePlan](Spec{
		Name:  "install_updates",
		Title: "Install the updates",
		Description: "On the drained node: re-simulate against the approved plan digest, then `apt-get full-upgrade` detached from " +
			"SSH; call again to follow it. The old kernel stays default.",
		Idempotent: false, OpenWorld: true,
	}, Steps[InstallIn, InstallOut, window.PackagePlan]{
		Target: func(in InstallIn) string { return in.Node },
		Follow: func(ctx context.Context, d *Deps, s *window.Round, in InstallIn, p Progress) (InstallOut, error) {
			if s.InFlightRun(round.StepInstall, in.Node) == nil {
				return InstallOut{}, errNotInFlight
			}
			w, err := d.Window(ctx, s, service.NeedHost)
			if err != nil {
				return InstallOut{}, err
			}
			o, err := w.FollowInstall(ctx, in.Node)
			return InstallOut{Install: o.Install, Result: outcome(o.Outcome).Then(CallTo("trial_boot", "node", in.Node))}, err
		},
		Plan: func(ctx context.Context, d *Deps, s *window.Round, in InstallIn) (window.PackagePlan, error) {
			if s.InFlightRun(round.StepInstall, in.Node) == nil {
				if err := s.Admit(round.StepInstall, in.Node); err != nil {
					return window.PackagePlan{}, err
				}
			}
			np, _ := s.NodePlan(in.Node)
			w, err := d.Window(ctx, s, service.NeedHost)
			if err != nil {
				return window.PackagePlan{}, err
			}
			sim, err := w.Host.Simulate(ctx, in.Node)
			if err != nil {
				return window.PackagePlan{}, service.HostError(in.Node, "re-simulate before install", err)
			}
			// The reviewed plan first: a package set that moved since the
			// plan was signed is shown as a diff against what people
			// reviewed, and re-planned there (replan_node).
			live := window.PackagePlan{Node: in.Node, PackageDigest: sim.Plan.Digest, AptLines: sim.Plan.Lines, TargetKernel: sim.Plan.TargetKernel}
			if err := d.CheckReviewed(ctx, s.ID, "install_updates", live); err != nil {
				return window.PackagePlan{}, err
			}
			plan, err := window.DecidePackage(in.Node, sim, window.Simulated{PackageDigest: np.PackageDigest, TargetKernel: np.TargetKernel, RunningKernel: np.RunningKernel})
			return plan, err
		},
		Do: func(ctx context.Context, d *Deps, s *window.Round, in InstallIn, plan window.PackagePlan, a service.Approved, p Progress) (InstallOut, error) {
			w, err := d.Window(ctx, s, service.NeedHost)
			if err != nil {
				return InstallOut{}, err
			}
			o, err := w.StartInstall(ctx, plan, a.Grant())
			return InstallOut{Install: o.Install, Result: outcome(o.Outcome).Then(CallTo("trial_boot", "node", in.Node))}, err
		},
	})
}
