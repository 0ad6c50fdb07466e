package tools

import (
	"context"

	"github.com/mcp-patch/mcp-patch/kube/gate"
)

// GateIn optionally names the node whose window the gate closes.
type GateIn struct {
	Node string `json:"node,omitempty" jsonschema:"the node whose window this gate closes; omit for a look at the cluster only"`
}

// GateOut is the gate, each check with its evidence.
type GateOut struct {
	Result
	Gate *gate.Report `json:"gate,omitempty"`
}

// CheckGate is the check_gate tool.
func CheckGate() Tool {
	return New[GateIn, GateOut](Spec{
		Name:  "check_gate",
		Title: "Check the gate",
		Description: "Report whether the next cordon may start: etcd has quorum and a leader (every member's status); every " +
			"CloudNativePG cluster is ready with no switchover in progress; every admission webhook's Deployment is at full ready " +
			"replicas; stack health shows no NEW failure against the baseline taken at round start; the API server's OIDC issuer " +
			"answers discovery. Each check is reported with its evidence. Writes nothing and stops nothing: close_window records " +
			"the gate of a node's window.",
		Kind: ReadOnly, Idempotent: true, OpenWorld: true,
	}, func(ctx context.Context, d *Deps, in GateIn, p Progress) (GateOut, error) {
		s, err := d.openSession()
		if err != nil {
			return GateOut{}, err
		}
		if in.Node != "" {
			if err := ValidNode(in.Node); err != nil {
				return GateOut{}, err
			}
			if err := gatePhase(s, in.Node); err != nil {
				return GateOut{}, err
			}
		}
		g, err := evaluateGate(ctx, d, s, in.Node)
		if err != nil {
			return GateOut{}, err
		}
		out := GateOut{Gate: &g.rep, Result: Result{Reasons: g.reasons, NextAction: "The gate is green."}}
		if !g.rep.OK {
			out.Status = StatusFailed
			out.NextAction = "Do not cordon anything until the gate is green (nothing was recorded)."
		} else if in.Node != "" {
			out.NextAction = "close_window with this node records the green gate and closes its window."
		}
		return out, nil
	})
}
