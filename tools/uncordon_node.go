package tools

import (
	"context"
	"errors"
	"fmt"

	"github.com/mcp-patch/mcp-patch/kube/drain"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/service"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// UncordonOut says what happened.
type UncordonOut struct {
	Result
	Uncordon *drain.UncordonResult `json:"uncordon,omitempty"`
}

// UncordonNode is the uncordon_node tool.
func UncordonNode() Tool {
	return New[NodeIn, UncordonOut](Spec{
		Name:  "uncordon_node",
		Title: "Uncordon a node",
		Description: "Make the node schedulable again, only if this round cordoned it. After record_verification is green on the boot " +
			"the node runs now (its trial boot's, read from the node); needed before gpu_acceptance.",
		Kind: Write, Idempotent: true, OpenWorld: true,
	}, func(ctx context.Context, d *Deps, in NodeIn, p Progress) (UncordonOut, error) {
		if err := ValidNode(in.Node); err != nil {
			return UncordonOut{}, err
		}
		s, err := d.OpenRound()
		if err != nil {
			return UncordonOut{}, err
		}
		resumed := s.InFlight(round.StepUncordon, in.Node)
		if !resumed {
			if err := s.Admit(round.StepUncordon, in.Node); err != nil {
				return UncordonOut{}, err
			}
		}
		kc, err := d.KubeClients(ctx)
		if err != nil {
			return UncordonOut{}, err
		}
		st, err := drain.ReadState(ctx, kc.Kube, in.Node)
		if err != nil {
			return UncordonOut{}, Fail("Check the node name and the API server.", "read the cordon of "+in.Node+": "+err.Error())
		}
		if resumed && !st.Unschedulable {
			// Uncordoned before the process that did it stopped.
			if err := s.Finish(round.StepUncordon, in.Node, "", "found uncordoned (resumed)"); err != nil {
				return UncordonOut{}, err
			}
			return UncordonOut{Result: Result{Reasons: []string{in.Node + " is schedulable again"}, NextAction: "Call round_status for the next step."}}, nil
		}
		if st.Owner == nil || st.Owner.Identity != d.ActorIdentity() {
			return UncordonOut{}, Refuse("Leave it: only the person or tool that cordoned the node may uncordon it.",
				fmt.Sprintf("%s was not cordoned by this server (%s)", in.Node, st.Describe()), "nothing was changed")
		}
		w, err := d.Window(ctx, s, service.NeedHost)
		if err != nil {
			return UncordonOut{}, err
		}
		// Workloads come back only to the boot that was verified: the node,
		// read now, still runs the boot its trial boot proved, and verify
		// was green on that boot (the journal alone does not say so).
		now, err := w.ObserveBoot(ctx, in.Node)
		if err != nil {
			return UncordonOut{}, err
		}
		if _, err := window.DecideOnTrialBoot(in.Node, s.StepRun(round.StepTrialBoot, in.Node), now,
			window.Checked{Step: round.StepVerify, Run: s.StepRun(round.StepVerify, in.Node), Tool: "record_verification"}); err != nil {
			return UncordonOut{}, err
		}
		if err := w.HoldLease(ctx, round.StepUncordon, in.Node); err != nil {
			return UncordonOut{}, err
		}
		if err := s.Begin(round.StepUncordon, in.Node); err != nil {
			return UncordonOut{}, err
		}
		res, err := drain.Uncordon(ctx, kc.Kube, in.Node, d.ActorIdentity())
		if err != nil {
			return UncordonOut{Uncordon: &res}, errors.Join(Fail("Tell a person: the node could not be uncordoned.", "uncordon "+in.Node+": "+err.Error()),
				s.Fail(round.StepUncordon, in.Node, err.Error()))
		}
		if err := s.Finish(round.StepUncordon, in.Node, "", ""); err != nil {
			return UncordonOut{}, err
		}
		next, call := "promote_kernel this node next.", CallTo("promote_kernel", "node", in.Node)
		if n := s.Journal.Shared().Node(in.Node); n != nil && n.GPU {
			next, call = "gpu_acceptance this node next.", CallTo("gpu_acceptance", "node", in.Node)
		}
		return UncordonOut{Uncordon: &res, Result: Result{Reasons: []string{in.Node + " is schedulable again"}, NextAction: next, NextCall: call}}, nil
	})
}
