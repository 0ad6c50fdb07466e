package tools

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/mcp-patch/mcp-patch/host"
	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// FleetNode is one node's kernel.
type FleetNode struct {
	Node   string `json:"node"`
	Kernel string `json:"kernel,omitempty"`
	Target string `json:"target,omitempty"`
	OK     bool   `json:"ok"`
	Error  string `json:"error,omitempty"`
}

// FleetCheckOut is the fleet-wide kernel check.
type FleetCheckOut struct {
	Result
	Nodes []FleetNode `json:"nodes"`
}

// fleetKernels reads every node's running kernel and compares it with the
// kernel the round installed there. It writes nothing.
func fleetKernels(ctx context.Context, d *Deps, s *session, p Progress) (FleetCheckOut, []string, error) {
	h, err := d.hosts(ctx)
	if err != nil {
		return FleetCheckOut{}, nil, err
	}
	plans := s.nodePlans(d)
	nodes := roundNodes(s)
	var done atomic.Int64
	results := host.FanOut(ctx, nodes, d.Config.SSH.Concurrency, func(ctx context.Context, node string) (steps.KernelInfo, error) {
		k, err := h.Steps.Kernel(ctx, node)
		p(float64(done.Add(1)), float64(len(nodes)), node)
		return k, err
	})
	out := FleetCheckOut{Nodes: []FleetNode{}}
	var ks []window.FleetKernel
	for _, r := range results {
		k := window.FleetKernel{Node: r.Node, Target: plans[r.Node].TargetKernel, Err: r.Err}
		fn := FleetNode{Node: k.Node, Target: k.Target}
		if r.Err != nil {
			fn.Error = r.Err.Error()
		} else {
			k.Kernel = r.Value.Kernel
		}
		fn.Kernel, fn.OK = k.Kernel, k.OK()
		ks = append(ks, k)
		out.Nodes = append(out.Nodes, fn)
	}
	return out, window.JudgeFleet(ks), nil
}

// FleetCheck is the fleet_check tool.
func FleetCheck() Tool {
	return New[struct{}, FleetCheckOut](Spec{
		Name:  "fleet_check",
		Title: "Fleet kernel check",
		Description: "After every window closed: each node's running kernel against the round's target kernel; names any node left" +
			" behind.",
		Kind: ReadOnly, Idempotent: true, OpenWorld: true,
	}, func(ctx context.Context, d *Deps, _ struct{}, p Progress) (FleetCheckOut, error) {
		s, err := d.readSession()
		if err != nil {
			return FleetCheckOut{}, err
		}
		if err := window.AdmitFleetCheck(s.j.State()); err != nil {
			return FleetCheckOut{}, err
		}
		out, bad, err := fleetKernels(ctx, d, s, p)
		if err != nil {
			return out, err
		}
		if len(bad) > 0 {
			out.Result = Result{Status: StatusFailed, Reasons: bad, NextAction: "The fleet is not consistent: tell a person (nothing was recorded)."}
			return out, nil
		}
		out.Reasons = []string{fmt.Sprintf("all %d nodes run the round's kernels", len(out.Nodes))}
		out.NextAction = "record_fleet_check records it and starts the soak."
		return out, nil
	})
}
