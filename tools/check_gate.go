package tools

import (
	"context"

	"github.com/mcp-patch/mcp-patch/kube/gate"
	"github.com/mcp-patch/mcp-patch/round/service"
)

// GateIn optionally names the node whose window the gate closes.
type GateIn struct {
	Node string `json:"node,omitempty" jsonschema:"the node whose window it closes; omit for the cluster only"`
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
		Description: "May the next cordon start: etcd quorum and leader, CloudNativePG ready, webhooks at full replicas, no health" +
			" failure new since the baseline, OIDC discovery.",
		Kind: ReadOnly, Idempotent: true, OpenWorld: true,
	}, func(ctx context.Context, d *Deps, in GateIn, p Progress) (GateOut, error) {
		s, err := d.ReadRound()
		if err != nil {
			return GateOut{}, err
		}
		if in.Node != "" {
			if err := ValidNode(in.Node); err != nil {
				return GateOut{}, err
			}
			if err := s.GatePhase(in.Node); err != nil {
				return GateOut{}, err
			}
		}
		g, err := service.EvaluateGate(ctx, d, s, in.Node)
		if err != nil {
			return GateOut{}, err
		}
		out := GateOut{Gate: &g.Report, Result: Result{Reasons: g.Reasons, NextAction: "The gate is green."}}
		if !g.Report.OK {
			out.Status = StatusFailed
			out.NextAction = "Do not cordon anything until the gate is green (nothing was recorded)."
		} else if in.Node != "" {
			out.NextAction = "close_window with this node records the green gate and closes its window."
		}
		return out, nil
	})
}
