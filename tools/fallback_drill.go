package tools

import (
	"context"
	"time"

	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/service"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// DrillIn names the canary.
type DrillIn struct {
	ApprovalArg
	Node string `json:"node" jsonschema:"the canary GPU server"`
}

// DrillOut says how the drill went.
type DrillOut struct {
	Result
	Drill     *steps.DrillState `json:"drill,omitempty"`
	TrialBoot *steps.TrialBoot  `json:"trial_boot,omitempty"`
	// Driver is the driver pod's wait on the old kernel the drill fell
	// back to, on a driver-container node.
	Driver *window.DriverOnOldKernel `json:"driver_on_old_kernel,omitempty" jsonschema:"the driver pod's wait on the old kernel after the fallback (driver-container nodes)"`
}

// FallbackDrill is the fallback_drill tool.
func FallbackDrill() Tool {
	return NewDestructive[DrillIn, DrillOut, window.FallbackDrillPlan](Spec{
		Name:  "fallback_drill",
		Title: "Fallback drill on the canary",
		Description: "On the canary, after install_updates, before trial_boot: prove a panicking trial kernel falls back to the " +
			"old one (one-shot crash, then trial boot).",
		Idempotent: false, OpenWorld: true,
	}, Steps[DrillIn, DrillOut, window.FallbackDrillPlan]{
		Target: func(in DrillIn) string { return in.Node },
		Follow: func(ctx context.Context, d *Deps, s *window.Round, in DrillIn, p Progress) (DrillOut, error) {
			w, err := d.Window(ctx, s, service.NeedHost)
			if err != nil {
				return DrillOut{}, err
			}
			np, _ := s.NodePlan(in.Node)
			if np.DrillStarted.IsZero() {
				return DrillOut{}, errNotInFlight
			}
			o, err := w.FollowFallbackDrill(ctx, drillBook{d, s}, in.Node, window.DrillRecord{Plan: np.Drill, ApprovalID: np.DrillApproval, Started: np.DrillStarted})
			return DrillOut{Result: outcome(o.Outcome), Drill: o.Drill, TrialBoot: o.TrialBoot, Driver: o.Driver}, err
		},
		Plan: func(ctx context.Context, d *Deps, s *window.Round, in DrillIn) (window.FallbackDrillPlan, error) {
			if err := s.Admit(round.StepTrialBoot, in.Node); err != nil {
				return window.FallbackDrillPlan{}, err
			}
			w, err := d.Window(ctx, s, service.NeedHost)
			if err != nil {
				return window.FallbackDrillPlan{}, err
			}
			np, _ := s.NodePlan(in.Node)
			insp, err := w.Host.Inspect(ctx, in.Node, steps.InspectInput{TargetKernel: np.TargetKernel})
			if err != nil {
				return window.FallbackDrillPlan{}, service.HostError(in.Node, "inspect before the drill", err)
			}
			n := s.Journal.Shared().Node(in.Node)
			plan, err := window.DecideFallbackDrill(in.Node, insp, np.TargetKernel, n != nil && n.Canary, np.DrillPassed, panicSeconds(s))
			return plan, err
		},
		Do: func(ctx context.Context, d *Deps, s *window.Round, in DrillIn, plan window.FallbackDrillPlan, a service.Approved, p Progress) (DrillOut, error) {
			w, err := d.Window(ctx, s, service.NeedHost)
			if err != nil {
				return DrillOut{}, err
			}
			o, err := w.StartFallbackDrill(ctx, drillBook{d, s}, plan, a.Grant())
			return DrillOut{Result: outcome(o.Outcome), Drill: o.Drill, TrialBoot: o.TrialBoot, Driver: o.Driver}, err
		},
	})
}

// drillBook keeps the drill in flight in the node's plan file
// (rounds/<id>/nodes/<node>.json).
type drillBook struct {
	d *Deps
	s *window.Round
}

func (b drillBook) StartDrill(p window.FallbackDrillPlan, approvalID string, at time.Time) error {
	np, _ := b.s.NodePlan(p.Node)
	np.Node, np.DrillStarted, np.Drill, np.DrillApproval = p.Node, at, &p, approvalID
	return b.s.SaveNodePlan(np)
}

func (b drillBook) EndDrill(node string, passed bool) error {
	np, _ := b.s.NodePlan(node)
	np.DrillStarted = time.Time{}
	np.DrillPassed = np.DrillPassed || passed
	return b.s.SaveNodePlan(np)
}
