package tools

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/mcp-patch/mcp-patch/host"
	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/round"
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

// fleetPhase refuses the fleet check before its phase: every window of
// the round must be closed. "Not yet" is a refusal, never a failure.
func fleetPhase(s *session) error {
	st := s.j.State()
	if st.Plan == nil {
		return Refuse("Plan the round first (plan_round).", "not yet: the round has no order")
	}
	var open []string
	for _, n := range st.Nodes {
		if n.Window != round.WindowClosed {
			open = append(open, fmt.Sprintf("%s (%s)", n.Node, n.Window))
		}
	}
	if len(open) > 0 {
		return Refuse("Not yet: finish every node's window first (round_status names the next step).",
			"not yet: the fleet check runs after every window closed; not closed: "+strings.Join(open, ", "), "nothing was checked or recorded")
	}
	return nil
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
	var bad []string
	for _, r := range results {
		fn := FleetNode{Node: r.Node, Target: plans[r.Node].TargetKernel}
		if r.Err != nil {
			fn.Error = r.Err.Error()
			bad = append(bad, fmt.Sprintf("%s: not reachable (%v)", r.Node, r.Err))
		} else {
			fn.Kernel = r.Value.Kernel
			fn.OK = fn.Target == "" || fn.Kernel == fn.Target
			if !fn.OK {
				bad = append(bad, fmt.Sprintf("%s runs %s, the round installed %s", r.Node, fn.Kernel, fn.Target))
			}
		}
		out.Nodes = append(out.Nodes, fn)
	}
	return out, bad, nil
}

// FleetCheck is the fleet_check tool.
func FleetCheck() Tool {
	return New[struct{}, FleetCheckOut](Spec{
		Name:  "fleet_check",
		Title: "Fleet kernel check",
		Description: "After every window closed: each node's running kernel against the kernel the round installed; names any " +
			"node left behind.",
		Kind: ReadOnly, Idempotent: true, OpenWorld: true,
	}, func(ctx context.Context, d *Deps, _ struct{}, p Progress) (FleetCheckOut, error) {
		s, err := d.openSession()
		if err != nil {
			return FleetCheckOut{}, err
		}
		if err := fleetPhase(s); err != nil {
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
