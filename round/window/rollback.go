package window

import (
	"context"
	"fmt"
	"strings"

	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/round"
)

// RollbackPlan is what a person approves: reboot the node from the new
// kernel into its old GRUB entry, the default set back first when the new
// kernel was promoted. Bound to the node's plan (its target kernel) and its
// current boot.
type RollbackPlan struct {
	Node       string `json:"node"`
	FromKernel string `json:"from_kernel"`
	OldKernel  string `json:"old_kernel"`
	OldEntry   string `json:"old_entry"`
	Promoted   bool   `json:"promoted"`
	BootID     string `json:"boot_id"`
}

// Step is empty: a rollback is journaled as its own record kind, while the
// round stays stopped.
func (p RollbackPlan) Step() round.Step { return "" }
func (p RollbackPlan) Target() string   { return p.Node }
func (p RollbackPlan) Digest() string {
	return DigestOf("rollback_node", p.Node, p.FromKernel, p.OldKernel, p.OldEntry, fmt.Sprint(p.Promoted), p.BootID)
}
func (p RollbackPlan) Summary() []string {
	s := []string{fmt.Sprintf("reboot %s from %s into its old kernel %s (GRUB entry %s), proven by a new boot id", p.Node, p.FromKernel, p.OldKernel, p.OldEntry)}
	if p.Promoted {
		s = append(s, "the new kernel was promoted: first set GRUB's default back to the old entry (drop-in GRUB_DEFAULT, update-grub)")
	} else {
		s = append(s, "keep the trial-boot drop-in, so the new kernel does not become the default")
	}
	return append(s, "verify the node on the old kernel; uncordon it only if verify is green and this round cordoned it",
		"the round stays stopped: a person decides what comes next")
}

// DecideRollback checks the node is one rollback_node is for: the round
// stopped at it, its new kernel booted (trial boot green) and runs now,
// and a GRUB entry boots the kernel it ran before the window (pure).
func DecideRollback(node string, st *round.State, insp steps.Inspection, target string) (RollbackPlan, error) {
	n := st.Node(node)
	if n == nil {
		return RollbackPlan{}, refuse("Name a node of the round.", node+" is not in the round's order")
	}
	if st.Stop == nil || st.Stop.Node != node {
		return RollbackPlan{}, refuse("rollback_node is for a node whose checks are red while the round is stopped at it; call round_status.",
			"the round is not stopped at "+node, "nothing was changed")
	}
	if r := n.Steps[round.StepTrialBoot]; r == nil || !r.Green() {
		return RollbackPlan{}, refuse("A node whose trial boot did not finish needs no rollback: GRUB's default is still the old kernel; a reboot returns to it.",
			"no green trial_boot for "+node, "nothing was changed")
	}
	old := n.KernelBefore
	if old == "" {
		return RollbackPlan{}, refuse("Tell a person: the journal does not say which kernel ran before the window.", "no old kernel recorded for "+node)
	}
	if insp.Kernel == old {
		return RollbackPlan{}, refuse("Nothing to roll back: call round_status.", node+" already runs its old kernel "+old, "nothing was changed")
	}
	if target != "" && insp.Kernel != target {
		return RollbackPlan{}, refuse("Tell a person: the node runs a kernel this round did not plan.",
			fmt.Sprintf("%s runs %s, neither the old kernel %s nor the planned %s", node, insp.Kernel, old, target), "nothing was changed")
	}
	e, ok := PickEntry(insp.Grub.Entries, old)
	if !ok {
		return RollbackPlan{}, refuse("Tell a person: the old kernel has no GRUB entry any more (was it removed?); a rollback needs console access.",
			"no GRUB entry boots the old kernel "+old+" on "+node, "nothing was changed")
	}
	promoted := false
	if r := n.Steps[round.StepPromote]; r != nil && r.Green() {
		promoted = true
	}
	return RollbackPlan{Node: node, FromKernel: insp.Kernel, OldKernel: old, OldEntry: e.ID, Promoted: promoted, BootID: insp.BootID}, nil
}

// RollbackHost is the host side of a rollback (*steps.Steps).
type RollbackHost interface {
	Inspect(ctx context.Context, node string, in steps.InspectInput) (steps.Inspection, error)
	RollbackPrepare(ctx context.Context, node string, in steps.RollbackInput) (steps.Rollback, error)
	RollbackReboot(ctx context.Context, node, round string) (steps.Rollback, error)
	RollbackStatus(ctx context.Context, node, round string) (steps.Rollback, error)
	Verify(ctx context.Context, node string, in steps.VerifyInput) (steps.NodeVerification, error)
}

var _ RollbackHost = (*steps.Steps)(nil)

// RollbackOutcome is where a rollback stands.
type RollbackOutcome struct {
	Outcome
	Rollback     *steps.Rollback
	Verification *steps.NodeVerification
	Uncordoned   bool
	// Driver is the driver pod's wait on the old kernel, on a
	// driver-container node; nil otherwise.
	Driver *DriverOnOldKernel
	// RolledBack: the node is back on its old kernel, verified green (its
	// driver pod Ready, on a driver-container node), and the journal says
	// so; Detail says how.
	RolledBack bool
	Detail     string
}

// StartRollback records the approved rollback, makes the old entry the
// next boot and requests the reboot.
func (w *Window) StartRollback(ctx context.Context, rh RollbackHost, p RollbackPlan, a Approval) (RollbackOutcome, error) {
	if err := w.Rec.StartRollback(p, a); err != nil {
		return RollbackOutcome{}, err
	}
	prep, err := rh.RollbackPrepare(ctx, p.Node, steps.RollbackInput{Round: w.Round, OldEntry: p.OldEntry, OldKernel: p.OldKernel})
	if err != nil {
		return RollbackOutcome{Rollback: &prep}, w.Rec.EndRollback(p.Node, false, "", "prepare: "+err.Error(),
			"Tell a person: the old kernel could not be made the next boot; nothing was rebooted.")
	}
	rb, err := rh.RollbackReboot(ctx, p.Node, w.Round)
	if err != nil {
		return RollbackOutcome{Rollback: &rb}, w.Rec.EndRollback(p.Node, false, "", "reboot: "+err.Error(),
			"Tell a person: GRUB now boots the old kernel by default, but the reboot could not be scheduled; they reboot the node and call rollback_node again.")
	}
	return RollbackOutcome{Rollback: &rb, Outcome: Outcome{InProgress: true,
		Reasons: []string{fmt.Sprintf("%s reboots into %s (%s)", p.Node, p.OldKernel, rb.Method)},
		Next:    "Call rollback_node again with the same node until it reports the old kernel."}}, nil
}

// FollowRollback observes a rollback in flight: the reboot, the proof (new
// boot id, old uname), verify on the old kernel (vin) and the uncordon,
// which uncordon does only when this round cordoned the node. Past
// Bounds.Rollback without the old kernel, the rollback fails.
func (w *Window) FollowRollback(ctx context.Context, rh RollbackHost, node string, vin steps.VerifyInput,
	uncordon func(ctx context.Context) (bool, string)) (RollbackOutcome, error) {
	run := w.Rec.J.Shared().Rollback(node)
	if run == nil || run.State != round.InFlight {
		return RollbackOutcome{}, fmt.Errorf("rollback of %s is not in flight", node)
	}
	bound := w.Bounds.Rollback
	waiting := func(why string) (RollbackOutcome, error) {
		if bound > 0 && w.now().Sub(run.Started) > bound {
			return RollbackOutcome{}, w.Rec.EndRollback(node, false, "", fmt.Sprintf("not back on the old kernel after %s: %s", bound, why),
				"Tell a person: the node needs console access.")
		}
		return RollbackOutcome{Outcome: Outcome{InProgress: true, Reasons: []string{why},
			Next: "Call rollback_node again with the same node in a little while."}}, nil
	}
	st, err := rh.RollbackStatus(ctx, node, w.Round)
	if err != nil {
		return waiting("the node does not answer yet (rebooting): " + err.Error())
	}
	switch st.Outcome {
	case steps.OutcomeNotRebooted:
		if st.RebootRequestedAt == "" {
			// Prepared under this approval but the reboot was never
			// scheduled (the server stopped in between): finish it.
			rb, err := rh.RollbackReboot(ctx, node, w.Round)
			if err != nil {
				return RollbackOutcome{Rollback: &rb}, w.Rec.EndRollback(node, false, "", "reboot: "+err.Error(), "Tell a person: the reboot could not be scheduled.")
			}
			return RollbackOutcome{Rollback: &rb, Outcome: Outcome{InProgress: true, Reasons: []string{node + " reboots into its old kernel"},
				Next: "Call rollback_node again with the same node."}}, nil
		}
		return waiting(node + " has not rebooted yet (same boot id)")
	case steps.OutcomeRolledBack:
	default:
		return RollbackOutcome{Rollback: &st}, w.Rec.EndRollback(node, false, st.Kernel,
			fmt.Sprintf("%s rebooted into %s, not the old kernel %s", node, st.Kernel, st.OldKernel), "Tell a person: the node needs console access.")
	}
	out := RollbackOutcome{Rollback: &st}
	vin.TargetKernel = st.OldKernel
	v, err := rh.Verify(ctx, node, vin)
	if err != nil {
		return waiting("verify on the old kernel could not run yet: " + err.Error())
	}
	out.Verification = &v
	proof := fmt.Sprintf("boot id %s → %s, uname %s", st.RecordedBootID, st.BootID, st.Kernel)
	if !v.Passed {
		return out, w.Rec.EndRollback(node, false, st.Kernel, "back on "+st.Kernel+" ("+proof+") but verify is red there too: "+strings.Join(v.Problems, "; "),
			"Tell a person: the node stays cordoned; the problem is not the new kernel.")
	}
	verified := "verify green"
	if out.Driver = w.driverOnOldKernel(ctx, node); out.Driver != nil {
		if out.Driver.Red {
			return out, w.Rec.EndRollback(node, false, st.Kernel, "back on "+st.Kernel+" ("+proof+"), verify green, but "+out.Driver.Line,
				"Tell a person: the node stays cordoned; its GPU driver (the driver container) must come back on the old kernel first.")
		}
		verified += "; " + out.Driver.Line
	}
	uncordoned, why := uncordon(ctx)
	detail := "back on " + st.Kernel + " (" + proof + "), " + verified + "; " + why
	if err := w.Rec.EndRollback(node, true, st.Kernel, detail, ""); err != nil {
		return out, err
	}
	out.Uncordoned, out.RolledBack, out.Detail = uncordoned, true, detail
	out.Reasons = []string{detail}
	out.Next = "The round stays stopped at " + node + ": a person decides (resume with the node on its old kernel, or abort) and signs record_decision."
	return out, nil
}

// StartRollback records that an approved rollback begins on the node,
// with the approval id and plan digest, before it acts.
func (r *Recorder) StartRollback(p RollbackPlan, a Approval) error {
	if a.ID == "" || a.Digest != p.Digest() {
		return fmt.Errorf("start the rollback of %s: the approval (digest %s) does not cover the plan (digest %s)", p.Node, a.Digest, p.Digest())
	}
	if _, err := r.J.StartRollback(p.Node, round.Meta{ApprovalID: a.ID, PlanDigest: a.Digest, Detail: strings.Join(p.Summary()[:2], "; ")}); err != nil {
		return fmt.Errorf("record the rollback of %s: %w", p.Node, err)
	}
	return nil
}

// EndRollback records how the node's rollback ended. A failure comes back
// as *Stopped (the round stays stopped) naming next, with the journal's
// error, if any, among its reasons; a success returns only the journal's
// error.
func (r *Recorder) EndRollback(node string, ok bool, kernel, detail, next string) error {
	outcome := round.OutcomeDone
	if !ok {
		outcome = round.OutcomeFailed
	}
	_, jerr := r.J.EndRollback(node, outcome, round.Meta{Kernel: kernel, Detail: detail})
	if jerr != nil {
		jerr = fmt.Errorf("record the end of the rollback of %s: %w", node, jerr)
	}
	if ok {
		return jerr
	}
	reasons := []string{"rollback of " + node + ": " + detail}
	if jerr != nil {
		reasons = append(reasons, "the failure could not be recorded in the journal: "+jerr.Error())
	}
	return &Stopped{Reasons: reasons, Next: next, Journal: jerr}
}
