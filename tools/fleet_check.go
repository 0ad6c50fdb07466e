package tools

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/mcp-patch/mcp-patch/host"
	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/round/service"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// FleetNode is one node's kernel.
type FleetNode struct {
	Node   string `json:"node"`
	Kernel string `json:"kernel,omitempty"`
	BootID string `json:"boot_id,omitempty"`
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
func fleetKernels(ctx context.Context, d *Deps, s *window.Round, p Progress) (FleetCheckOut, []string, error) {
	h, err := d.OpenHosts(ctx)
	if err != nil {
		return FleetCheckOut{}, nil, err
	}
	plans := s.NodePlans()
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
			" behind. Without a round: every inventory node's kernel and boot id.",
		Kind: ReadOnly, Idempotent: true, OpenWorld: true,
	}, func(ctx context.Context, d *Deps, _ struct{}, p Progress) (FleetCheckOut, error) {
		s := d.MaybeRound(false)
		if s == nil {
			return fleetKernelsHostOnly(ctx, d, p)
		}
		if err := window.AdmitFleetCheck(s.Journal.State()); err != nil {
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

// fleetKernelsHostOnly is fleet_check without a round: every node of the
// SSH inventory, its running kernel and boot id, with bounded concurrency.
// It needs no cluster and records nothing. A node that cannot be read
// fails the check.
func fleetKernelsHostOnly(ctx context.Context, d *Deps, p Progress) (FleetCheckOut, error) {
	h, err := d.OpenHosts(ctx)
	if err != nil {
		return FleetCheckOut{}, err
	}
	if h.Inventory == nil {
		return FleetCheckOut{}, Refuse("Configure ssh.inventory (an inventory file naming the nodes), or open a round, and call again.", "no round is open and no SSH inventory is configured")
	}
	nodes, jumps := service.InventoryNodes(h.Inventory)
	var done atomic.Int64
	results := host.FanOut(ctx, nodes, d.Config.SSH.Concurrency, func(ctx context.Context, node string) (steps.KernelInfo, error) {
		k, err := h.Steps.Kernel(ctx, node)
		p(float64(done.Add(1)), float64(len(nodes)), node)
		return k, err
	})
	out := FleetCheckOut{Nodes: []FleetNode{}}
	kernels := map[string]int{}
	var hz []steps.Hazard
	firstBad := ""
	for _, r := range results {
		fn := FleetNode{Node: r.Node, OK: r.Err == nil}
		if r.Err != nil {
			if firstBad == "" {
				firstBad = r.Node
			}
			f := service.HostError(r.Node, "read the kernel", r.Err)
			fn.Error = f.Error()
			hz = append(hz, steps.Hazard{Cause: steps.CauseOf(r.Err), Reason: f.Error()})
		} else {
			fn.Kernel, fn.BootID = r.Value.Kernel, r.Value.BootID
			kernels[fn.Kernel]++
		}
		out.Nodes = append(out.Nodes, fn)
	}
	ks := make([]string, 0, len(kernels))
	for k, n := range kernels {
		ks = append(ks, fmt.Sprintf("%s on %d", k, n))
	}
	sort.Strings(ks)
	out.Reasons = []string{fmt.Sprintf("%d of %d inventory nodes read; kernels: %s", len(nodes)-len(hz), len(nodes), orDash(strings.Join(ks, ", ")))}
	if len(jumps) > 0 {
		out.Reasons = append(out.Reasons, "left out as jump hosts: "+strings.Join(jumps, ", "))
	}
	out.Reasons = append(out.Reasons, clip(blockerReasons(hz), 20)...)
	out.Reasons = append(out.Reasons, "no round is open: nothing was compared with a round's kernels and nothing was recorded")
	if len(hz) > 0 {
		out.NextAction = steps.NextStepFor(hz[0].Cause, firstBad)
		if len(hz) > 1 {
			out.NextAction += fmt.Sprintf(" (%d nodes could not be read: each row says why.)", len(hz))
		}
		return out, nil
	}
	out.NextAction = "Every inventory node answered."
	return out, nil
}
