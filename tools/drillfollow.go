package tools

import (
	"context"
	"errors"
	"fmt"

	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/window"
)

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
