package tools

import (
	"context"

	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/service"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// AutoremoveIn carries the approval for the fleet-wide autoremove.
type AutoremoveIn struct {
	ApprovalArg
}

// AutoremoveOut is what each node removed.
type AutoremoveOut struct {
	Result
	Nodes []steps.AutoremoveResult `json:"nodes"`
}

// FleetTarget is the node name approvals use for a fleet-wide step.
const FleetTarget = window.FleetTarget

// Autoremove is the autoremove tool.
func Autoremove() Tool {
	return NewDestructive[AutoremoveIn, AutoremoveOut, window.AutoremovePlan](Spec{
		Name:  "autoremove",
		Title: "Remove unused packages",
		Description: "After the fleet check and soak: `apt-get autoremove --purge` on every node, simulated, then run on one " +
			"approval. Never the running kernel.",
		Idempotent: true, OpenWorld: true,
	}, Steps[AutoremoveIn, AutoremoveOut, window.AutoremovePlan]{
		Follow: func(ctx context.Context, d *Deps, s *window.Round, in AutoremoveIn, p Progress) (AutoremoveOut, error) {
			if s.InFlightRun(round.StepAutoremove, "") == nil {
				return AutoremoveOut{}, errNotInFlight
			}
			w, err := d.Window(ctx, s, 0)
			if err != nil {
				return AutoremoveOut{}, err
			}
			return AutoremoveOut{}, w.FollowUnobservable(round.StepAutoremove, "", "what each node removed is not known")
		},
		Plan: func(ctx context.Context, d *Deps, s *window.Round, in AutoremoveIn) (window.AutoremovePlan, error) {
			if s.InFlightRun(round.StepAutoremove, "") == nil {
				if err := s.Admit(round.StepAutoremove, ""); err != nil {
					return window.AutoremovePlan{}, err
				}
			}
			w, err := d.Window(ctx, s, service.NeedHost)
			if err != nil {
				return window.AutoremovePlan{}, err
			}
			res, problems := w.SimulateAutoremove(ctx, roundNodes(s), keptKernels(d, s), steps.AutoremoveSimulate, d.Config.SSH.Concurrency)
			plan, err := window.DecideAutoremove(res, problems)
			return plan, err
		},
		Do: func(ctx context.Context, d *Deps, s *window.Round, in AutoremoveIn, plan window.AutoremovePlan, a service.Approved, p Progress) (AutoremoveOut, error) {
			w, err := d.Window(ctx, s, service.NeedHost)
			if err != nil {
				return AutoremoveOut{}, err
			}
			o, err := w.Autoremove(ctx, plan, a.Grant(), keptKernels(d, s), d.Config.SSH.Concurrency)
			return AutoremoveOut{Nodes: o.Nodes, Result: outcome(o.Outcome).Then(CallTo("close_round"))}, err
		},
	})
}

func roundNodes(s *window.Round) []string {
	var nodes []string
	if p := s.Journal.Shared().Plan; p != nil {
		for _, pos := range p.Order.Positions {
			nodes = append(nodes, pos.Node)
		}
	}
	return nodes
}

// keptKernels is the running kernel simulate_upgrade recorded per node:
// autoremove never removes it.
func keptKernels(d *Deps, s *window.Round) map[string]string {
	keep := map[string]string{}
	for n, p := range s.NodePlans() {
		keep[n] = p.RunningKernel
	}
	return keep
}
