package tools

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// DrillIn names the canary.
type DrillIn struct {
	ApprovalArg
	Node string `json:"node" jsonschema:"the canary GPU server, after install_updates and before its trial_boot"`
}

// DrillOut says how the drill went.
type DrillOut struct {
	Result
	Drill     *steps.DrillState `json:"drill,omitempty"`
	TrialBoot *steps.TrialBoot  `json:"trial_boot,omitempty"`
}

// FallbackDrill is the fallback_drill tool.
func FallbackDrill() Tool {
	return NewDestructive[DrillIn, DrillOut, window.FallbackDrillPlan](Spec{
		Name:  "fallback_drill",
		Title: "Fallback drill on the canary",
		Description: "On the canary, after install and before its trial boot: prove that a trial kernel which panics brings the " +
			"host back on the old kernel by itself. Arms a one-shot unit that crashes the new kernel once after its sysctls " +
			"load (so kernel.panic is in force), then trial-boots it: GRUB boots the new kernel once, it panics, the host " +
			"reboots into the old default. Answers in_progress while that happens; the result is recorded in the round. " +
			"Then run trial_boot as usual.",
		Idempotent: false, OpenWorld: true,
	}, Steps[DrillIn, DrillOut, window.FallbackDrillPlan]{
		Target: func(in DrillIn) string { return in.Node },
		Follow: func(ctx context.Context, d *Deps, in DrillIn, p Progress) (DrillOut, error) {
			s, err := d.openSession()
			if err != nil {
				return DrillOut{}, err
			}
			np, _ := s.nodePlan(d, in.Node)
			if np.DrillStarted.IsZero() {
				return DrillOut{}, errNotInFlight
			}
			w, err := d.window(ctx, s, needHost)
			if err != nil {
				return DrillOut{}, err
			}
			return followDrill(ctx, d, s, w, np)
		},
		Plan: func(ctx context.Context, d *Deps, in DrillIn) (string, window.FallbackDrillPlan, error) {
			s, err := d.openSession()
			if err != nil {
				return "", window.FallbackDrillPlan{}, err
			}
			if err := s.admit(d, round.StepTrialBoot, in.Node); err != nil {
				return "", window.FallbackDrillPlan{}, err
			}
			np, _ := s.nodePlan(d, in.Node)
			w, err := d.window(ctx, s, needHost)
			if err != nil {
				return "", window.FallbackDrillPlan{}, err
			}
			insp, err := w.Host.Inspect(ctx, in.Node, steps.InspectInput{TargetKernel: np.TargetKernel})
			if err != nil {
				return "", window.FallbackDrillPlan{}, hostError(in.Node, "inspect before the drill", err)
			}
			n := s.j.State().Node(in.Node)
			plan, err := window.DecideFallbackDrill(in.Node, insp, np.TargetKernel, n != nil && n.Canary, np.DrillPassed, panicSeconds(s))
			return s.id, plan, err
		},
		Do: func(ctx context.Context, d *Deps, in DrillIn, plan window.FallbackDrillPlan, a Approved, p Progress) (DrillOut, error) {
			s, err := d.openSession()
			if err != nil {
				return DrillOut{}, err
			}
			w, err := d.window(ctx, s, needHost)
			if err != nil {
				return DrillOut{}, err
			}
			if err := w.HoldLease(ctx, round.StepTrialBoot, plan.Node); err != nil {
				return DrillOut{}, err
			}
			np, _ := s.nodePlan(d, plan.Node)
			np.Node, np.DrillStarted, np.Drill, np.DrillApproval = plan.Node, d.now(), &plan, a.ID
			if err := s.saveNodePlan(d, np); err != nil {
				return DrillOut{}, fmt.Errorf("record the drill before arming it (nothing was armed): %w", err)
			}
			drill, err := w.Host.FallbackDrill(ctx, plan.Node, steps.DrillArm, s.id, plan.TargetKernel)
			if err != nil {
				return DrillOut{Drill: &drill}, errors.Join(hostError(plan.Node, "arm the fallback drill", err), s.endDrill(d, np))
			}
			if _, err := w.Host.TrialBootPrepare(ctx, plan.Node, steps.TrialBootInput{Round: s.id, OldEntry: plan.OldEntry, NewEntry: plan.NewEntry, PanicSeconds: plan.PanicSeconds}); err != nil {
				_, derr := w.Host.FallbackDrill(ctx, plan.Node, steps.DrillDisarm, "", "")
				return DrillOut{Drill: &drill}, errors.Join(hostError(plan.Node, "prepare the drill's trial boot", err), derr, s.endDrill(d, np))
			}
			tb, err := w.Host.TrialBootReboot(ctx, plan.Node, s.id)
			if err != nil {
				return DrillOut{Drill: &drill}, Fail("Call fallback_drill again: it checks whether the node rebooted.", "request the drill reboot: "+err.Error())
			}
			return DrillOut{Drill: &drill, TrialBoot: &tb, Result: Result{Status: StatusInProgress,
				Reasons:    []string{fmt.Sprintf("%s armed and rebooting into %s for the drill", plan.Node, plan.TargetKernel)},
				NextAction: "Call fallback_drill again with the same node to follow the crash and the fallback."}}, nil
		},
	})
}

// endDrill clears the drill in flight from the node's plan.
func (s *session) endDrill(d *Deps, np NodePlan) error {
	np.DrillStarted = time.Time{}
	if err := s.saveNodePlan(d, np); err != nil {
		return fmt.Errorf("record the end of the drill: %w", err)
	}
	return nil
}

// followDrill observes a drill in flight: the crash, the fallback, the
// verdict. Nothing is armed or prepared again without a fresh approval.
func followDrill(ctx context.Context, d *Deps, s *session, w *window.Window, np NodePlan) (DrillOut, error) {
	node := np.Node
	w.Forget(node)
	tb, err := w.Host.TrialBootStatus(ctx, node, s.id)
	out := DrillOut{TrialBoot: &tb}
	if err != nil || !tb.Rebooted {
		if err == nil && tb.RebootRequestedAt == "" {
			if tb.NextEntry == "" || np.Drill == nil || tb.NewEntry != np.Drill.NewEntry {
				return out, errors.Join(window.ErrNeedApproval, s.endDrill(d, np))
			}
			if _, err := w.Host.TrialBootReboot(ctx, node, s.id); err != nil {
				return out, hostError(node, "request the drill reboot", err)
			}
		}
		if d.now().Sub(np.DrillStarted) > d.Config.SSH.RebootTimeout.D() {
			why := fmt.Sprintf("fallback drill on %s: the host did not come back within %s: the panic fallback does not work here (console access needed)", node, d.Config.SSH.RebootTimeout.D())
			return out, errors.Join(s.endDrill(d, np), w.Rec.Lesson(why),
				w.Rec.StopWith(round.StepTrialBoot, node, "Stop: the fallback is not proven; a person needs console access to the canary.", why))
		}
		out.Result = Result{Status: StatusInProgress, Reasons: []string{node + " is going through the drill's crash and fallback"},
			NextAction: "Call fallback_drill again with the same node in a little while."}
		return out, nil
	}
	drill, serr := w.Host.FallbackDrill(ctx, node, steps.DrillStatus, "", "")
	_, derr := w.Host.FallbackDrill(ctx, node, steps.DrillDisarm, "", "")
	out.Drill = &drill
	if serr != nil || derr != nil {
		return out, errors.Join(hostError(node, "read and disarm the drill", errors.Join(serr, derr)))
	}
	if tb.Outcome == steps.OutcomeFellBack && drill.Fired {
		np.DrillPassed = true
		note := fmt.Sprintf("fallback drill on %s passed: the trial kernel %s crashed after its sysctls loaded (fired %s) and GRUB brought the host back on %s by itself",
			node, tb.NewKernel, drill.FiredAt, tb.Kernel)
		if err := errors.Join(s.endDrill(d, np), w.Rec.Lesson(note)); err != nil {
			return out, err
		}
		out.Reasons = []string{note}
		out.NextAction = "trial_boot this node now: a normal trial boot of the new kernel."
		return out, nil
	}
	why := fmt.Sprintf("fallback drill on %s did not prove the fallback: outcome %s on kernel %s (drill fired: %v)", node, tb.Outcome, tb.Kernel, drill.Fired)
	return out, errors.Join(s.endDrill(d, np), w.Rec.Lesson(why),
		w.Rec.StopWith(round.StepTrialBoot, node, "Stop: tell a person; the canary's fallback is not proven.", why))
}
