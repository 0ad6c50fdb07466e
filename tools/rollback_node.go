package tools

import (
	"context"

	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/service"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// RollbackIn is the node to bring back to its old kernel.
type RollbackIn struct {
	ApprovalArg
	Node string `json:"node"`
}

// RollbackOut is where the rollback stands.
type RollbackOut struct {
	Result
	Rollback     *steps.Rollback         `json:"rollback,omitempty"`
	Verification *steps.NodeVerification `json:"verification,omitempty"`
	Uncordoned   bool                    `json:"uncordoned,omitempty"`
	// Driver is the driver pod's wait on the old kernel, on a
	// driver-container node.
	Driver *window.DriverOnOldKernel `json:"driver_on_old_kernel,omitempty" jsonschema:"the driver pod's wait on the old kernel (driver-container nodes)"`
}

// RollbackNode is the rollback_node tool.
func RollbackNode() Tool {
	return NewDestructive[RollbackIn, RollbackOut, window.RollbackPlan](Spec{
		Name:  "rollback_node",
		Title: "Roll a node back",
		Description: "For a node whose new kernel booted with red checks (the round stopped there): reboot into the old kernel " +
			"(default restored if promoted), prove it by boot_id, verify, uncordon if green and ours.",
		Idempotent: false, OpenWorld: true,
	}, Steps[RollbackIn, RollbackOut, window.RollbackPlan]{
		Target: func(in RollbackIn) string { return in.Node },
		Follow: func(ctx context.Context, d *Deps, s *window.Round, in RollbackIn, p Progress) (RollbackOut, error) {
			w, rh, err := d.RollbackWindow(ctx, s)
			if err != nil {
				return RollbackOut{}, err
			}
			if run := s.Journal.Shared().Rollback(in.Node); run == nil || run.State != round.InFlight {
				return RollbackOut{}, errNotInFlight
			}
			o, err := w.FollowRollback(ctx, rh, in.Node, s.VerifyInput(in.Node, ""), func(ctx context.Context) (bool, string) {
				return d.UncordonIfOurs(ctx, s.ID, in.Node)
			})
			if o.RolledBack {
				d.Ops.RolledBack(s.ID, in.Node, o.Detail)
			}
			return rollbackOut(o), err
		},
		Plan: func(ctx context.Context, d *Deps, s *window.Round, in RollbackIn) (window.RollbackPlan, error) {
			_, rh, err := d.RollbackWindow(ctx, s)
			if err != nil {
				return window.RollbackPlan{}, err
			}
			np, _ := s.NodePlan(in.Node)
			insp, err := rh.Inspect(ctx, in.Node, steps.InspectInput{})
			if err != nil {
				return window.RollbackPlan{}, service.HostError(in.Node, "inspect before the rollback", err)
			}
			plan, err := window.DecideRollback(in.Node, s.Journal.State(), insp, np.TargetKernel)
			return plan, err
		},
		Do: func(ctx context.Context, d *Deps, s *window.Round, in RollbackIn, plan window.RollbackPlan, a service.Approved, p Progress) (RollbackOut, error) {
			w, rh, err := d.RollbackWindow(ctx, s)
			if err != nil {
				return RollbackOut{}, err
			}
			o, err := w.StartRollback(ctx, rh, plan, a.Grant())
			if err == nil {
				p(1, 3, "rebooting "+plan.Node+" into "+plan.OldKernel)
			}
			return rollbackOut(o), err
		},
	})
}

func rollbackOut(o window.RollbackOutcome) RollbackOut {
	return RollbackOut{Result: outcome(o.Outcome), Rollback: o.Rollback, Verification: o.Verification, Uncordoned: o.Uncordoned, Driver: o.Driver}
}
