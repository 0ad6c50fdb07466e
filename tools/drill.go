package tools

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/round"
)

// ---- fallback_drill ----

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
	wait := func(ctx context.Context, d *Deps, s *session, node string, np NodePlan) (DrillOut, error) {
		h, err := d.hosts(ctx)
		if err != nil {
			return DrillOut{}, err
		}
		h.Pool.Forget(node)
		tb, err := h.Steps.TrialBootStatus(ctx, node, s.id)
		out := DrillOut{TrialBoot: &tb}
		if err != nil || !tb.Rebooted {
			if err == nil && tb.RebootRequestedAt == "" {
				if _, err := h.Steps.TrialBootReboot(ctx, node, s.id); err != nil {
					return out, hostError(node, "request the drill reboot", err)
				}
			}
			if d.now().Sub(np.DrillStarted) > d.Config.SSH.RebootTimeout.D() {
				np.DrillStarted = time.Time{}
				_ = s.saveNodePlan(d, np)
				why := fmt.Sprintf("fallback drill on %s: the host did not come back within %s: the panic fallback does not work here (console access needed)", node, d.Config.SSH.RebootTimeout.D())
				_, _ = s.j.Lesson(why)
				if err := s.start(round.StepTrialBoot, node, ""); err == nil {
					_ = s.fail(round.StepTrialBoot, node, why)
				}
				return out, Fail("Stop: the fallback is not proven; a person needs console access to the canary.", why)
			}
			out.Result = Result{Status: StatusInProgress, Reasons: []string{node + " is going through the drill's crash and fallback"},
				NextAction: "Call fallback_drill again with the same node in a little while."}
			return out, nil
		}
		drill, _ := h.Steps.FallbackDrill(ctx, node, steps.DrillStatus, "", "")
		_, _ = h.Steps.FallbackDrill(ctx, node, steps.DrillDisarm, "", "")
		out.Drill = &drill
		np.DrillStarted = time.Time{}
		switch {
		case tb.Outcome == steps.OutcomeFellBack && drill.Fired:
			np.DrillPassed = true
			_ = s.saveNodePlan(d, np)
			note := fmt.Sprintf("fallback drill on %s passed: the trial kernel %s crashed after its sysctls loaded (fired %s) and GRUB brought the host back on %s by itself",
				node, tb.NewKernel, drill.FiredAt, tb.Kernel)
			if _, err := s.j.Lesson(note); err != nil {
				return out, err
			}
			out.Reasons = []string{note}
			out.NextAction = "trial_boot this node now: a normal trial boot of the new kernel."
			return out, nil
		default:
			_ = s.saveNodePlan(d, np)
			why := fmt.Sprintf("fallback drill on %s did not prove the fallback: outcome %s on kernel %s (drill fired: %v)", node, tb.Outcome, tb.Kernel, drill.Fired)
			_, _ = s.j.Lesson(why)
			if err := s.start(round.StepTrialBoot, node, ""); err == nil {
				_ = s.fail(round.StepTrialBoot, node, why)
			}
			return out, Fail("Stop: tell a person; the canary's fallback is not proven.", why)
		}
	}
	return NewDestructive[DrillIn, DrillOut](Spec{
		Name:  "fallback_drill",
		Title: "Fallback drill on the canary",
		Description: "On the canary, after install and before its trial boot: prove that a trial kernel which panics brings the " +
			"host back on the old kernel by itself. Arms a one-shot unit that crashes the new kernel once after its sysctls " +
			"load (so kernel.panic is in force), then trial-boots it: GRUB boots the new kernel once, it panics, the host " +
			"reboots into the old default. Answers in_progress while that happens; the result is recorded in the round. " +
			"Then run trial_boot as usual.",
		Idempotent: false, OpenWorld: true,
	}, Steps[DrillIn, DrillOut]{
		Reenter: func(ctx context.Context, d *Deps, in DrillIn, p Progress) (DrillOut, bool, error) {
			if err := ValidNode(in.Node); err != nil {
				return DrillOut{}, true, err
			}
			s, err := d.openSession()
			if err != nil {
				return DrillOut{}, true, err
			}
			np, _ := s.nodePlan(d, in.Node)
			if np.DrillStarted.IsZero() {
				return DrillOut{}, false, nil
			}
			out, err := wait(ctx, d, s, in.Node, np)
			return out, true, err
		},
		Plan: func(ctx context.Context, d *Deps, in DrillIn) (Plan, error) {
			s, err := d.openSession()
			if err != nil {
				return Plan{}, err
			}
			n := s.j.State().Node(in.Node)
			if n == nil || !n.Canary {
				return Plan{}, Refuse("Run the drill on the round's canary GPU server.", in.Node+" is not the canary of this round")
			}
			if err := s.admit(d, round.StepTrialBoot, in.Node); err != nil {
				return Plan{}, err
			}
			np, _ := s.nodePlan(d, in.Node)
			if np.DrillPassed {
				return Plan{}, Refuse("trial_boot this node: the drill already passed this round.", "the fallback drill on "+in.Node+" already passed")
			}
			h, err := d.hosts(ctx)
			if err != nil {
				return Plan{}, err
			}
			insp, err := h.Steps.Inspect(ctx, in.Node, steps.InspectInput{TargetKernel: np.TargetKernel})
			if err != nil {
				return Plan{}, hostError(in.Node, "inspect before the drill", err)
			}
			oldE, okOld := pickEntry(insp.Grub.Entries, insp.Kernel)
			newE, okNew := pickEntry(insp.Grub.Entries, np.TargetKernel)
			var problems []string
			if !okOld || !okNew {
				problems = append(problems, "the GRUB entries of the running and the new kernel are not both there")
			}
			if insp.KernelPanic <= 0 {
				problems = append(problems, "kernel.panic is 0: the drill's panic would hang the host")
			}
			if !insp.Grub.EnvWritableAtBoot {
				problems = append(problems, "grubenv is not writable at boot here")
			}
			if len(problems) > 0 {
				return Plan{}, Refuse("Fix these first; the drill needs a working one-shot boot and kernel.panic.", problems...)
			}
			np.OldEntry, np.NewEntry = oldE.ID, newE.ID
			if err := s.saveNodePlan(d, np); err != nil {
				return Plan{}, err
			}
			return Plan{Node: in.Node, Round: s.id,
				Digest: digestOf("fallback_drill", in.Node, insp.Kernel, oldE.ID, np.TargetKernel, newE.ID),
				Summary: []string{
					fmt.Sprintf("fallback drill on %s: the new kernel %s boots once and crashes on purpose after its sysctls load", in.Node, np.TargetKernel),
					fmt.Sprintf("expected: the host reboots by itself into %s (GRUB entry %s), which stays the default", insp.Kernel, oldE.ID),
				}}, nil
		},
		Do: func(ctx context.Context, d *Deps, in DrillIn, plan Plan, a Approved, p Progress) (DrillOut, error) {
			s, err := d.openSession()
			if err != nil {
				return DrillOut{}, err
			}
			np, _ := s.nodePlan(d, in.Node)
			h, err := d.hosts(ctx)
			if err != nil {
				return DrillOut{}, err
			}
			drill, err := h.Steps.FallbackDrill(ctx, in.Node, steps.DrillArm, s.id, np.TargetKernel)
			if err != nil {
				return DrillOut{Drill: &drill}, hostError(in.Node, "arm the fallback drill", err)
			}
			np.DrillStarted = d.now()
			if err := s.saveNodePlan(d, np); err != nil {
				return DrillOut{}, err
			}
			if _, err := h.Steps.TrialBootPrepare(ctx, in.Node, steps.TrialBootInput{Round: s.id, OldEntry: np.OldEntry, NewEntry: np.NewEntry, PanicSeconds: panicSeconds(s)}); err != nil {
				_, _ = h.Steps.FallbackDrill(ctx, in.Node, steps.DrillDisarm, "", "")
				np.DrillStarted = time.Time{}
				_ = s.saveNodePlan(d, np)
				return DrillOut{Drill: &drill}, hostError(in.Node, "prepare the drill's trial boot", err)
			}
			tb, err := h.Steps.TrialBootReboot(ctx, in.Node, s.id)
			if err != nil {
				return DrillOut{Drill: &drill}, Fail("Call fallback_drill again: it checks whether the node rebooted.", "request the drill reboot: "+err.Error())
			}
			return DrillOut{Drill: &drill, TrialBoot: &tb, Result: Result{Status: StatusInProgress,
				Reasons:    []string{strings.TrimSpace(fmt.Sprintf("%s armed and rebooting into %s for the drill", in.Node, np.TargetKernel))},
				NextAction: "Call fallback_drill again with the same node to follow the crash and the fallback."}}, nil
		},
	})
}
