package tools

import (
	"context"
	"strings"

	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/round"
)

// InspectOut is what inspect_node found.
type InspectOut struct {
	Result
	Inspection *steps.Inspection `json:"inspection,omitempty"`
}

// InspectNode is the inspect_node tool.
func InspectNode() Tool { return inspectNode(false) }

// RecordInspection is the record_inspection tool: inspect_node, recorded in the round.
func RecordInspection() Tool { return inspectNode(true) }

func inspectNode(record bool) Tool {
	return New[NodeIn, InspectOut](checkSpec(record, "record_inspection", Spec{
		Name:  "inspect_node",
		Title: "Inspect a node",
		Description: "Read a node over SSH: kernels, boot_id, apt holds, pending upgrades, GRUB entry ids, grubenv, kernel.panic, " +
			"Livepatch, NVIDIA driver and modules for the target kernel.",
		Kind: ReadOnly, Idempotent: true, OpenWorld: true,
	}), func(ctx context.Context, d *Deps, in NodeIn, p Progress) (InspectOut, error) {
		if err := ValidNode(in.Node); err != nil {
			return InspectOut{}, err
		}
		s := d.maybeSession(record)
		rec := recording(s, record)
		if err := rec.admit(d, round.StepInspect, in.Node); err != nil {
			return InspectOut{}, err
		}
		h, err := d.hosts(ctx)
		if err != nil {
			return InspectOut{}, err
		}
		var target string
		if np, ok := s.nodePlan(d, in.Node); ok {
			target = np.TargetKernel
		}
		insp, err := h.Steps.Inspect(ctx, in.Node, steps.InspectInput{TargetKernel: target})
		if err != nil {
			return InspectOut{}, rec.hostFailure(round.StepInspect, in.Node, hostError(in.Node, "inspect", err))
		}
		var reasons []string
		if !insp.Grub.EnvWritableAtBoot {
			reasons = append(reasons, "grubenv is not writable at boot here ("+strings.Join(insp.Grub.Reasons, "; ")+"): a one-shot trial boot is unreliable")
		}
		if insp.KernelPanic <= 0 {
			reasons = append(reasons, "kernel.panic is 0: a panicking kernel would hang instead of falling back")
		}
		if target != "" && !insp.TargetModules.Present && len(insp.NvidiaPackages) > 0 {
			reasons = append(reasons, "no NVIDIA kernel modules for the target kernel "+target)
		}
		for _, b := range insp.Pending.Blockers {
			reasons = append(reasons, "the pending upgrade would stop the round: "+b)
		}
		if insp.PendingError != "" {
			reasons = append(reasons, "the pending upgrade could not be simulated: "+insp.PendingError)
		}
		if err := rec.check(round.StepInspect, in.Node, true, insp.Kernel, strings.Join(reasons, "; ")); err != nil {
			return InspectOut{}, err
		}
		next, call := "Run simulate_upgrade on this node next.", CallTo("simulate_upgrade", "node", in.Node)
		if rec != nil {
			next, call = "Run record_simulation on this node next.", CallTo("record_simulation", "node", in.Node)
		}
		if len(reasons) > 0 {
			next, call = "Read the reasons: each is something the window would trip over. Tell a person; fix or flag it (record_lesson open_question) before the window.", nil
		}
		return InspectOut{Inspection: &insp, Result: Result{Reasons: reasons, NextAction: next, NextCall: call}}, nil
	})
}
