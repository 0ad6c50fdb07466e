package tools

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/kube/drain"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// RollbackIn is the node to bring back to its old kernel.
type RollbackIn struct {
	ApprovalArg
	Node string `json:"node" jsonschema:"the node whose new kernel booted but whose checks are red"`
}

// RollbackOut is where the rollback stands.
type RollbackOut struct {
	Result
	Rollback     *steps.Rollback         `json:"rollback,omitempty"`
	Verification *steps.NodeVerification `json:"verification,omitempty"`
	Uncordoned   bool                    `json:"uncordoned,omitempty"`
}

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
	return window.DigestOf("rollback_node", p.Node, p.FromKernel, p.OldKernel, p.OldEntry, fmt.Sprint(p.Promoted), p.BootID)
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
		return RollbackPlan{}, Refuse("Name a node of the round.", node+" is not in the round's order")
	}
	if st.Stop == nil || st.Stop.Node != node {
		return RollbackPlan{}, Refuse("rollback_node is for a node whose checks are red while the round is stopped at it; call round_status.",
			"the round is not stopped at "+node, "nothing was changed")
	}
	if r := n.Steps[round.StepTrialBoot]; r == nil || !r.Green() {
		return RollbackPlan{}, Refuse("A node whose trial boot did not finish needs no rollback: GRUB's default is still the old kernel; a reboot returns to it.",
			"no green trial_boot for "+node, "nothing was changed")
	}
	old := n.KernelBefore
	if old == "" {
		return RollbackPlan{}, Refuse("Tell a person: the journal does not say which kernel ran before the window.", "no old kernel recorded for "+node)
	}
	if insp.Kernel == old {
		return RollbackPlan{}, Refuse("Nothing to roll back: call round_status.", node+" already runs its old kernel "+old, "nothing was changed")
	}
	if target != "" && insp.Kernel != target {
		return RollbackPlan{}, Refuse("Tell a person: the node runs a kernel this round did not plan.",
			fmt.Sprintf("%s runs %s, neither the old kernel %s nor the planned %s", node, insp.Kernel, old, target), "nothing was changed")
	}
	e, ok := window.PickEntry(insp.Grub.Entries, old)
	if !ok {
		return RollbackPlan{}, Refuse("Tell a person: the old kernel has no GRUB entry any more (was it removed?); a rollback needs console access.",
			"no GRUB entry boots the old kernel "+old+" on "+node, "nothing was changed")
	}
	promoted := false
	if r := n.Steps[round.StepPromote]; r != nil && r.Green() {
		promoted = true
	}
	return RollbackPlan{Node: node, FromKernel: insp.Kernel, OldKernel: old, OldEntry: e.ID, Promoted: promoted, BootID: insp.BootID}, nil
}

// rollbackHost is the host side rollback_node needs (*steps.Steps).
type rollbackHost interface {
	Inspect(ctx context.Context, node string, in steps.InspectInput) (steps.Inspection, error)
	RollbackPrepare(ctx context.Context, node string, in steps.RollbackInput) (steps.Rollback, error)
	RollbackReboot(ctx context.Context, node, round string) (steps.Rollback, error)
	RollbackStatus(ctx context.Context, node, round string) (steps.Rollback, error)
	Verify(ctx context.Context, node string, in steps.VerifyInput) (steps.NodeVerification, error)
}

var _ rollbackHost = (*steps.Steps)(nil)

func (d *Deps) rollbackHost(ctx context.Context) (rollbackHost, error) {
	h, err := d.hosts(ctx)
	if err != nil {
		return nil, err
	}
	rh, ok := h.Steps.(rollbackHost)
	if !ok {
		return nil, Refuse("Run the server with real host steps.", "these host steps cannot roll a node back")
	}
	return rh, nil
}

// RollbackNode is the rollback_node tool.
func RollbackNode() Tool {
	return NewDestructive[RollbackIn, RollbackOut, RollbackPlan](Spec{
		Name:  "rollback_node",
		Title: "Roll a node back to its old kernel",
		Description: "For a node whose new kernel booted but whose checks are red (verify_node, gpu_acceptance or the gate) while the round " +
			"is stopped at it: reboot into the old kernel (GRUB's default; for a promoted node the default is set back to the old entry " +
			"first), prove it by a new boot_id and uname, keep the drop-in so the new kernel is not the default, verify on the old " +
			"kernel, and uncordon only if green and only if this round cordoned it. Answers in_progress while the node reboots: call " +
			"again with the same node. The round stays stopped for a person's decision.",
		Idempotent: false, OpenWorld: true,
	}, Steps[RollbackIn, RollbackOut, RollbackPlan]{
		Target: func(in RollbackIn) string { return in.Node },
		Follow: func(ctx context.Context, d *Deps, in RollbackIn, p Progress) (RollbackOut, error) {
			s, err := d.openSession()
			if err != nil {
				return RollbackOut{}, err
			}
			run := s.j.State().Rollback(in.Node)
			if run == nil || run.State != round.InFlight {
				return RollbackOut{}, errNotInFlight
			}
			return d.followRollback(ctx, s, in.Node, run)
		},
		Plan: func(ctx context.Context, d *Deps, in RollbackIn) (string, RollbackPlan, error) {
			s, err := d.openSession()
			if err != nil {
				return "", RollbackPlan{}, err
			}
			np, _ := s.nodePlan(d, in.Node)
			rh, err := d.rollbackHost(ctx)
			if err != nil {
				return "", RollbackPlan{}, err
			}
			insp, err := rh.Inspect(ctx, in.Node, steps.InspectInput{})
			if err != nil {
				return "", RollbackPlan{}, hostError(in.Node, "inspect before the rollback", err)
			}
			plan, err := DecideRollback(in.Node, s.j.State(), insp, np.TargetKernel)
			return s.id, plan, err
		},
		Do: func(ctx context.Context, d *Deps, in RollbackIn, plan RollbackPlan, a Approved, p Progress) (RollbackOut, error) {
			s, err := d.openSession()
			if err != nil {
				return RollbackOut{}, err
			}
			rh, err := d.rollbackHost(ctx)
			if err != nil {
				return RollbackOut{}, err
			}
			if _, err := s.j.StartRollback(plan.Node, round.Meta{ApprovalID: a.ID, Detail: strings.Join(plan.Summary()[:2], "; ")}); err != nil {
				return RollbackOut{}, fmt.Errorf("record the rollback of %s: %w", plan.Node, err)
			}
			prep, err := rh.RollbackPrepare(ctx, plan.Node, steps.RollbackInput{Round: s.id, OldEntry: plan.OldEntry, OldKernel: plan.OldKernel})
			if err != nil {
				return RollbackOut{Rollback: &prep}, d.endRollback(s, plan.Node, false, "", "prepare: "+err.Error(),
					"Tell a person: the old kernel could not be made the next boot; nothing was rebooted.")
			}
			rb, err := rh.RollbackReboot(ctx, plan.Node, s.id)
			if err != nil {
				return RollbackOut{Rollback: &rb}, d.endRollback(s, plan.Node, false, "", "reboot: "+err.Error(),
					"Tell a person: GRUB now boots the old kernel by default, but the reboot could not be scheduled; they reboot the node and call rollback_node again.")
			}
			p(1, 3, "rebooting "+plan.Node+" into "+plan.OldKernel)
			return RollbackOut{Rollback: &rb, Result: Result{Status: StatusInProgress,
				Reasons:    []string{fmt.Sprintf("%s reboots into %s (%s)", plan.Node, plan.OldKernel, rb.Method)},
				NextAction: "Call rollback_node again with the same node until it reports the old kernel."}}, nil
		},
	})
}

// followRollback observes a rollback in flight: the reboot, the proof
// (new boot id, old uname), verify on the old kernel and the uncordon.
func (d *Deps) followRollback(ctx context.Context, s *session, node string, run *round.RollbackRun) (RollbackOut, error) {
	rh, err := d.rollbackHost(ctx)
	if err != nil {
		return RollbackOut{}, err
	}
	overdue := d.now().Sub(run.Started) > d.Config.SSH.RebootTimeout.D()
	waiting := func(why string) (RollbackOut, error) {
		if overdue {
			return RollbackOut{}, d.endRollback(s, node, false, "", fmt.Sprintf("not back on the old kernel after %s: %s", d.Config.SSH.RebootTimeout.D(), why),
				"Tell a person: the node needs console access.")
		}
		return RollbackOut{Result: Result{Status: StatusInProgress, Reasons: []string{why},
			NextAction: "Call rollback_node again with the same node in a little while."}}, nil
	}
	st, err := rh.RollbackStatus(ctx, node, s.id)
	if err != nil {
		return waiting("the node does not answer yet (rebooting): " + err.Error())
	}
	switch st.Outcome {
	case steps.OutcomeNotRebooted:
		if st.RebootRequestedAt == "" {
			// Prepared under this approval but the reboot was never
			// scheduled (the server stopped in between): finish it.
			rb, err := rh.RollbackReboot(ctx, node, s.id)
			if err != nil {
				return RollbackOut{Rollback: &rb}, d.endRollback(s, node, false, "", "reboot: "+err.Error(), "Tell a person: the reboot could not be scheduled.")
			}
			return RollbackOut{Rollback: &rb, Result: Result{Status: StatusInProgress, Reasons: []string{node + " reboots into its old kernel"},
				NextAction: "Call rollback_node again with the same node."}}, nil
		}
		return waiting(node + " has not rebooted yet (same boot id)")
	case steps.OutcomeRolledBack:
	default:
		return RollbackOut{Rollback: &st}, d.endRollback(s, node, false, st.Kernel,
			fmt.Sprintf("%s rebooted into %s, not the old kernel %s", node, st.Kernel, st.OldKernel), "Tell a person: the node needs console access.")
	}
	out := RollbackOut{Rollback: &st}
	vin := steps.VerifyInput{TargetKernel: st.OldKernel}
	n := s.j.State().Node(node)
	if ns := s.settings.Node; ns != nil {
		vin.ExpectedSysctls = ns.Sysctls
		for b := range ns.Bonds {
			vin.ExpectedBonds = append(vin.ExpectedBonds, b)
		}
		sort.Strings(vin.ExpectedBonds)
	}
	if g := s.settings.GPU; g != nil && n != nil && n.GPU {
		vin.ExpectedRDMAPorts = g.RDMADevices
	}
	v, err := rh.Verify(ctx, node, vin)
	if err != nil {
		return waiting("verify on the old kernel could not run yet: " + err.Error())
	}
	out.Verification = &v
	proof := fmt.Sprintf("boot id %s → %s, uname %s", st.RecordedBootID, st.BootID, st.Kernel)
	if !v.Passed {
		return out, d.endRollback(s, node, false, st.Kernel, "back on "+st.Kernel+" ("+proof+") but verify is red there too: "+strings.Join(v.Problems, "; "),
			"Tell a person: the node stays cordoned; the problem is not the new kernel.")
	}
	uncordoned, why := d.uncordonIfOurs(ctx, s.id, node)
	detail := "back on " + st.Kernel + " (" + proof + "), verify green; " + why
	if err := d.endRollback(s, node, true, st.Kernel, detail, ""); err != nil {
		return out, err
	}
	d.Ops.rolledBack(s.id, node, detail)
	out.Uncordoned = uncordoned
	out.Reasons = []string{detail}
	out.NextAction = "The round stays stopped at " + node + ": a person decides (resume with the node on its old kernel, or abort) and signs record_decision."
	return out, nil
}

// uncordonIfOurs uncordons a node only when this server cordoned it in
// this round; it says what it did in words.
func (d *Deps) uncordonIfOurs(ctx context.Context, roundID, node string) (bool, string) {
	kc, err := d.cluster(ctx)
	if err != nil {
		return false, "left cordoned: " + err.Error()
	}
	st, err := drain.ReadState(ctx, kc.Kube, node)
	if err != nil {
		return false, "left cordoned: read its cordon: " + err.Error()
	}
	if !st.Unschedulable {
		return false, "it was not cordoned"
	}
	if st.Owner == nil || st.Owner.Identity != d.Identity || st.Owner.Round != roundID {
		return false, "left cordoned: this round did not cordon it (" + st.Describe() + ")"
	}
	if _, err := drain.Uncordon(ctx, kc.Kube, node, d.Identity); err != nil {
		return false, "left cordoned: " + err.Error()
	}
	return true, "uncordoned (this round had cordoned it)"
}

// endRollback records how the rollback ended; a failure is returned as
// the tool's failure, joined with any journal error.
func (d *Deps) endRollback(s *session, node string, ok bool, kernel, detail, next string) error {
	outcome := round.OutcomeDone
	if !ok {
		outcome = round.OutcomeFailed
	}
	_, jerr := s.j.EndRollback(node, outcome, round.Meta{Kernel: kernel, Detail: detail})
	if jerr != nil {
		jerr = fmt.Errorf("record the end of the rollback of %s: %w", node, jerr)
	}
	if ok {
		return jerr
	}
	return errors.Join(Fail(next, "rollback of "+node+": "+detail), jerr)
}
