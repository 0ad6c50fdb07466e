package window

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/round"
)

// DrillRecord is a fallback drill in flight, as kept beside the journal:
// the approved plan, its approval and when the canary was rebooted.
type DrillRecord struct {
	Plan       *FallbackDrillPlan
	ApprovalID string
	Started    time.Time
}

// DrillBook keeps the drill in flight (the tools keep it in the node's
// plan file, rounds/<id>/nodes/<node>.json). A drill is not a journal step: the window records its
// verdict as a lesson, or stops the round at the trial boot.
type DrillBook interface {
	// StartDrill records the drill before anything is armed.
	StartDrill(p FallbackDrillPlan, approvalID string, at time.Time) error
	// EndDrill clears the drill in flight; passed records the proof.
	EndDrill(node string, passed bool) error
}

// DrillOutcome is where a fallback drill stands.
type DrillOutcome struct {
	Outcome
	Drill     *steps.DrillState
	TrialBoot *steps.TrialBoot
	// Driver is the driver pod's wait on the old kernel the drill fell
	// back to, on a driver-container node; nil otherwise.
	Driver *DriverOnOldKernel
}

// StartFallbackDrill records the approved drill, arms the one-shot crash
// of the new kernel, prepares its trial boot and requests the reboot.
// Whatever fails before the reboot is undone (disarmed) and the drill
// ended.
func (w *Window) StartFallbackDrill(ctx context.Context, book DrillBook, p FallbackDrillPlan, a Approval) (DrillOutcome, error) {
	if a.ID == "" || a.Digest != p.Digest() {
		return DrillOutcome{}, fmt.Errorf("start the fallback drill on %s: the approval (digest %s) does not cover the plan (digest %s)", p.Node, a.Digest, p.Digest())
	}
	ctx, done, err := w.holdStep(ctx, round.StepTrialBoot, p.Node)
	if err != nil {
		return DrillOutcome{}, err
	}
	defer done()
	if lost := w.LeaseHeld(ctx, p.Node); lost != nil {
		return DrillOutcome{}, w.leaseStop(round.StepTrialBoot, p.Node, lost, "nothing was armed and the node was not rebooted")
	}
	if err := book.StartDrill(p, a.ID, w.now()); err != nil {
		return DrillOutcome{}, fmt.Errorf("record the drill before arming it (nothing was armed): %w", err)
	}
	drill, err := w.Host.FallbackDrill(ctx, p.Node, steps.DrillArm, w.Round, p.TargetKernel)
	if err != nil {
		return DrillOutcome{Drill: &drill}, errors.Join(&HostError{Node: p.Node, Action: "arm the fallback drill", Err: err}, endDrill(book, p.Node, false))
	}
	if _, err := w.Host.TrialBootPrepare(ctx, p.Node, steps.TrialBootInput{Round: w.Round, OldEntry: p.OldEntry, NewEntry: p.NewEntry, PanicSeconds: p.PanicSeconds}); err != nil {
		_, derr := w.Host.FallbackDrill(ctx, p.Node, steps.DrillDisarm, "", "")
		return DrillOutcome{Drill: &drill}, errors.Join(&HostError{Node: p.Node, Action: "prepare the drill's trial boot", Err: err}, derr, endDrill(book, p.Node, false))
	}
	tb, err := w.Host.TrialBootReboot(ctx, p.Node, w.Round)
	if RebootRefused(err) {
		return DrillOutcome{Drill: &drill}, w.drillRebootRefused(ctx, book, p.Node, err)
	}
	if err != nil {
		return DrillOutcome{Drill: &drill}, &Uncertain{Reasons: []string{"request the drill reboot: " + err.Error()},
			Next: "Call fallback_drill again: it checks whether the node rebooted."}
	}
	return DrillOutcome{Drill: &drill, TrialBoot: &tb, Outcome: Outcome{InProgress: true,
		Reasons: []string{fmt.Sprintf("%s armed and rebooting into %s for the drill", p.Node, p.TargetKernel)},
		Next:    "Call fallback_drill again with the same node to follow the crash and the fallback."}}, nil
}

// FollowFallbackDrill observes a drill in flight: the crash, the fallback,
// the verdict (a lesson when it passed; a stop at the trial boot when it
// did not, or when the host is not back within Bounds.TrialBoot). Nothing
// is armed or prepared again: a drill whose trial boot is not prepared
// any more needs a fresh approval.
func (w *Window) FollowFallbackDrill(ctx context.Context, book DrillBook, node string, rec DrillRecord) (DrillOutcome, error) {
	w.forget(node)
	tb, err := w.Host.TrialBootStatus(ctx, node, w.Round)
	out := DrillOutcome{TrialBoot: &tb}
	if err != nil || !tb.Rebooted {
		if err == nil && tb.RebootRequestedAt == "" {
			if tb.NextEntry == "" || rec.Plan == nil || tb.NewEntry != rec.Plan.NewEntry {
				return out, errors.Join(ErrNeedApproval, endDrill(book, node, false))
			}
			if _, err := w.Host.TrialBootReboot(ctx, node, w.Round); RebootRefused(err) {
				return out, w.drillRebootRefused(ctx, book, node, err)
			} else if err != nil {
				return out, &HostError{Node: node, Action: "request the drill reboot", Err: err}
			}
		}
		if bound := w.Bounds.TrialBoot; bound > 0 && w.now().Sub(rec.Started) > bound {
			why := fmt.Sprintf("fallback drill on %s: the host did not come back within %s: the panic fallback does not work here (console access needed)", node, bound)
			return out, errors.Join(endDrill(book, node, false), w.Rec.Lesson(why),
				w.Rec.StopWith(round.StepTrialBoot, node, "Stop: the fallback is not proven; a person needs console access to the canary.", why))
		}
		out.InProgress = true
		out.Reasons = []string{node + " is going through the drill's crash and fallback"}
		out.Next = "Call fallback_drill again with the same node in a little while."
		return out, nil
	}
	drill, serr := w.Host.FallbackDrill(ctx, node, steps.DrillStatus, "", "")
	_, derr := w.Host.FallbackDrill(ctx, node, steps.DrillDisarm, "", "")
	out.Drill = &drill
	if serr != nil || derr != nil {
		return out, &HostError{Node: node, Action: "read and disarm the drill", Err: errors.Join(serr, derr)}
	}
	if tb.Outcome == steps.OutcomeFellBack && drill.Fired {
		note := fmt.Sprintf("fallback drill on %s passed: the trial kernel %s crashed after its sysctls loaded (fired %s) and GRUB brought the host back on %s by itself",
			node, tb.NewKernel, drill.FiredAt, tb.Kernel)
		if drv := w.driverOnOldKernel(ctx, node); drv != nil {
			out.Driver = drv
			if drv.Red {
				why := fmt.Sprintf("fallback drill on %s: GRUB brought the host back on %s, but %s", node, tb.Kernel, drv.Line)
				return out, errors.Join(endDrill(book, node, false), w.Rec.Lesson(why),
					w.Rec.StopWith(round.StepTrialBoot, node, "Stop: tell a person; the canary's GPU driver does not come back on the old kernel after a fallback.", why))
			}
			note += "; " + drv.Line
		}
		if err := errors.Join(endDrill(book, node, true), w.Rec.Lesson(note)); err != nil {
			return out, err
		}
		out.Reasons = []string{note}
		out.Next = "trial_boot this node now: a normal trial boot of the new kernel."
		return out, nil
	}
	why := fmt.Sprintf("fallback drill on %s did not prove the fallback: outcome %s on kernel %s (drill fired: %v)", node, tb.Outcome, tb.Kernel, drill.Fired)
	return out, errors.Join(endDrill(book, node, false), w.Rec.Lesson(why),
		w.Rec.StopWith(round.StepTrialBoot, node, "Stop: tell a person; the canary's fallback is not proven.", why))
}

// drillRebootRefused ends a drill whose reboot the node refused: the
// crash unit is disarmed, the drill recorded as not passed and the round
// stopped at the trial boot for a person (RebootRefused).
func (w *Window) drillRebootRefused(ctx context.Context, book DrillBook, node string, refusal error) error {
	why := fmt.Sprintf("fallback drill on %s: the node refused the drill's reboot: %v", node, refusal)
	var derr error
	if _, err := w.Host.FallbackDrill(ctx, node, steps.DrillDisarm, "", ""); err != nil {
		derr = &HostError{Node: node, Action: "disarm the fallback drill", Err: err}
	}
	return errors.Join(derr, endDrill(book, node, false), w.Rec.Lesson(why), w.Rec.StopWith(round.StepTrialBoot, node, refusedRebootNext, why))
}

func endDrill(book DrillBook, node string, passed bool) error {
	if err := book.EndDrill(node, passed); err != nil {
		return fmt.Errorf("record the end of the drill: %w", err)
	}
	return nil
}
