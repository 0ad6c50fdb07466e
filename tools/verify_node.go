package tools

import (
	"context"
	"strings"

	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/round"
)

// VerifyOut is the node's health after its trial boot.
type VerifyOut struct {
	Result
	Verification *steps.NodeVerification `json:"verification,omitempty"`
}

// VerifyNode is the verify_node tool.
func VerifyNode() Tool { return verifyNode(false) }

// RecordVerification is the record_verification tool: verify_node, recorded in the round.
func RecordVerification() Tool { return verifyNode(true) }

func verifyNode(record bool) Tool {
	return New[NodeIn, VerifyOut](checkSpec(record, "record_verification", Spec{
		Name:  "verify_node",
		Title: "Verify a node",
		Description: "After the trial boot: the target kernel, bonds up with all slaves, RDMA ports active and as many as the " +
			"intent says, sysctls as it says; identity lookups reported apart.",
		Kind: ReadOnly, Idempotent: true, OpenWorld: true,
	}), func(ctx context.Context, d *Deps, in NodeIn, p Progress) (VerifyOut, error) {
		if err := ValidNode(in.Node); err != nil {
			return VerifyOut{}, err
		}
		s, err := d.checkSession(record)
		if err != nil {
			return VerifyOut{}, err
		}
		rec := recording(s, record)
		if err := rec.admit(d, round.StepVerify, in.Node); err != nil {
			return VerifyOut{}, err
		}
		np, ok := s.nodePlan(d, in.Node)
		if !ok || np.TargetKernel == "" {
			return VerifyOut{}, Refuse("Run simulate_upgrade on the node first: it names the target kernel.", "no target kernel is recorded for "+in.Node)
		}
		vin := s.verifyInput(in.Node, np.TargetKernel)
		h, err := d.hosts(ctx)
		if err != nil {
			return VerifyOut{}, err
		}
		v, err := h.Steps.Verify(ctx, in.Node, vin)
		if err != nil {
			return VerifyOut{Verification: &v}, rec.hostFailure(round.StepVerify, in.Node, hostError(in.Node, "verify", err))
		}
		out := VerifyOut{Verification: &v}
		if !v.Passed {
			if err := rec.check(round.StepVerify, in.Node, false, v.Kernel, strings.Join(v.Problems, "; ")); err != nil {
				return out, err
			}
			out.Result = Result{Status: StatusFailed, Reasons: v.Problems,
				NextAction: "Stop: the node is not healthy on the new kernel. Tell a person; the old kernel is still the default, so a reboot returns to it. They sign resume or abort."}
			return out, nil
		}
		if err := rec.check(round.StepVerify, in.Node, true, v.Kernel, "verify green on "+v.Kernel); err != nil {
			return out, err
		}
		out.Reasons = append([]string{"kernel " + v.Kernel + ", bonds, RDMA and sysctls as the intent says"}, v.IdentityProblems...)
		out.NextAction = "uncordon_node this node next."
		if rec != nil {
			out.NextCall = CallTo("uncordon_node", "node", in.Node)
		}
		return out, nil
	})
}
