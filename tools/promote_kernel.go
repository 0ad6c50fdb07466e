package tools

import (
	"context"

	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/service"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// PromoteIn is the node to promote.
type PromoteIn struct {
	ApprovalArg
	Node string `json:"node"`
}

// PromoteOut says what GRUB boots next.
type PromoteOut struct {
	Result
	Promote *steps.PromoteResult `json:"promote,omitempty"`
}

// PromoteKernel is the promote_kernel tool.
func PromoteKernel() Tool {
	return NewDestructive[PromoteIn, PromoteOut, window.PromotePlan](Spec{
		Name:  "promote_kernel",
		Title: "Promote the new kernel",
		Description: "Make the trial-booted kernel GRUB's default (trial-boot drop-in removed, update-grub), confirmed. Only while" +
			" the node runs the boot its trial boot proved (kernel and boot id, read from the node now) and record_verification" +
			" (and gpu_acceptance on GPU servers) is green on that boot.",
		Idempotent: true, OpenWorld: true,
	}, Steps[PromoteIn, PromoteOut, window.PromotePlan]{
		Target: func(in PromoteIn) string { return in.Node },
		Follow: func(ctx context.Context, d *Deps, s *window.Round, in PromoteIn, p Progress) (PromoteOut, error) {
			if s.InFlightRun(round.StepPromote, in.Node) == nil {
				return PromoteOut{}, errNotInFlight
			}
			w, err := d.Window(ctx, s, 0)
			if err != nil {
				return PromoteOut{}, err
			}
			o, err := w.FollowPromote(ctx, in.Node)
			return PromoteOut{Promote: o.Promote, Result: outcome(o.Outcome).Then(CallTo("close_window", "node", in.Node))}, err
		},
		Plan: func(ctx context.Context, d *Deps, s *window.Round, in PromoteIn) (window.PromotePlan, error) {
			if s.InFlightRun(round.StepPromote, in.Node) == nil {
				if err := s.Admit(round.StepPromote, in.Node); err != nil {
					return window.PromotePlan{}, err
				}
			}
			// Decided from the host observed now: the trial kernel running,
			// on the boot the trial boot proved and the checks ran on.
			w, err := d.Window(ctx, s, service.NeedHost)
			if err != nil {
				return window.PromotePlan{}, err
			}
			np, _ := s.NodePlan(in.Node)
			plan, err := w.PlanPromote(ctx, in.Node, np.TargetKernel)
			return plan, err
		},
		Do: func(ctx context.Context, d *Deps, s *window.Round, in PromoteIn, plan window.PromotePlan, a service.Approved, p Progress) (PromoteOut, error) {
			w, err := d.Window(ctx, s, service.NeedHost)
			if err != nil {
				return PromoteOut{}, err
			}
			o, err := w.Promote(ctx, plan, a.Grant())
			return PromoteOut{Promote: o.Promote, Result: outcome(o.Outcome).Then(CallTo("close_window", "node", in.Node))}, err
		},
	})
}
