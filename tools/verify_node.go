package tools

import (
	"context"
	"sort"
	"strings"

	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/service"
	"github.com/mcp-patch/mcp-patch/round/window"
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
		s := d.MaybeRound(record)
		if s == nil && record {
			if _, err := d.OpenRound(); err != nil {
				return VerifyOut{}, err
			}
			return VerifyOut{}, RefuseWith(CallTo("verify_node", "node", in.Node), "Call verify_node instead: it checks the node and records nothing.",
				"no round is open: record_verification records into a round", "nothing was done")
		}
		rec := recording(s, record)
		if err := rec.Admit(round.StepVerify, in.Node); err != nil {
			return VerifyOut{}, err
		}
		h, err := d.OpenHosts(ctx)
		if err != nil {
			return VerifyOut{}, err
		}
		var vin steps.VerifyInput
		if s == nil {
			// Host-only: the node is checked on the kernel it runs, against
			// the intent's sysctls and bonds when an intent repository is
			// at hand.
			k, err := h.Steps.Kernel(ctx, in.Node)
			if err != nil {
				return VerifyOut{}, service.HostError(in.Node, "verify", err)
			}
			vin = hostOnlyVerifyInput(d, k.Kernel)
		} else {
			np, ok := s.NodePlan(in.Node)
			if !ok || np.TargetKernel == "" {
				return VerifyOut{}, Refuse("Run simulate_upgrade on the node first: it names the target kernel.", "no target kernel is recorded for "+in.Node)
			}
			vin = s.VerifyInput(in.Node, np.TargetKernel)
		}
		v, err := h.Steps.Verify(ctx, in.Node, vin)
		if err != nil {
			return VerifyOut{Verification: &v}, service.HostFailure(rec, round.StepVerify, in.Node, service.HostError(in.Node, "verify", err))
		}
		out := VerifyOut{Verification: &v}
		if !v.Passed {
			if err := rec.CheckOn(round.StepVerify, in.Node, false, window.Boot{Kernel: v.Kernel, ID: v.BootID}, strings.Join(v.Problems, "; ")); err != nil {
				return out, err
			}
			out.Result = Result{Status: StatusFailed, Reasons: v.Problems,
				NextAction: "Stop: the node is not healthy on the new kernel. Tell a person; the old kernel is still the default, so a reboot returns to it. They sign resume or abort."}
			if s == nil {
				out.Result = Result{Status: StatusFailed, Reasons: append(v.Problems, notRecorded(nil)...),
					NextAction: "Tell a person: the node is not as the intent says (the reasons name each check); fix it on the node, then verify again."}
			}
			return out, nil
		}
		if err := rec.CheckOn(round.StepVerify, in.Node, true, window.Boot{Kernel: v.Kernel, ID: v.BootID}, "verify green on "+v.Kernel+", boot id "+v.BootID); err != nil {
			return out, err
		}
		out.Reasons = append([]string{"kernel " + v.Kernel + ", bonds, RDMA and sysctls as the intent says"}, v.IdentityProblems...)
		out.NextAction = "uncordon_node this node next."
		if rec != nil {
			out.NextCall = CallTo("uncordon_node", "node", in.Node)
		}
		if s == nil {
			out.Reasons = append(out.Reasons, notRecorded(nil)...)
			out.NextAction = "The node is healthy on the kernel it runs."
		}
		return out, nil
	})
}

// hostOnlyVerifyInput is what verify expects of a node outside a round: the
// kernel it runs, and the intent's sysctls and bonds when the intent
// repository can be read.
func hostOnlyVerifyInput(d *Deps, kernel string) steps.VerifyInput {
	vin := steps.VerifyInput{TargetKernel: kernel}
	if d.Intent == nil {
		return vin
	}
	r, err := d.Intent("")
	if err != nil {
		return vin
	}
	st, err := r.RoundSettings()
	if err != nil || st.Node == nil {
		return vin
	}
	vin.ExpectedSysctls = st.Node.Sysctls
	for b := range st.Node.Bonds {
		vin.ExpectedBonds = append(vin.ExpectedBonds, b)
	}
	sort.Strings(vin.ExpectedBonds)
	return vin
}
