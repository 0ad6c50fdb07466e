package tools

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/mcp-patch/mcp-patch/host"
	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/service"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// InspectIn is inspect_node's input: one node, or every node of the SSH
// inventory.
type InspectIn struct {
	Node string `json:"node,omitempty"`
	All  bool   `json:"all,omitempty" jsonschema:"inspect every node of the SSH inventory instead of one (no cluster needed)"`
}

// InspectOut is what inspect_node found.
type InspectOut struct {
	Result
	Inspection *steps.Inspection `json:"inspection,omitempty"`
	// Nodes is the fleet's table when every node was inspected.
	Nodes []InspectRow `json:"nodes,omitempty"`
}

// InspectRow is one node of inspect_node --all: a line a person reads.
type InspectRow struct {
	Node     string `json:"node"`
	Status   Status `json:"status"`
	Kernel   string `json:"kernel,omitempty"`
	Target   string `json:"target,omitempty"`
	Packages int    `json:"packages"`
	Blockers int    `json:"blockers"`
	// Reason is the first blocker or error ("" when none).
	Reason string `json:"reason,omitempty"`
}

// InspectNode is the inspect_node tool.
func InspectNode() Tool { return inspectNode(false) }

// RecordInspection is the record_inspection tool: inspect_node, recorded in the round.
func RecordInspection() Tool { return inspectNode(true) }

func inspectNode(record bool) Tool {
	return New[InspectIn, InspectOut](checkSpec(record, "record_inspection", Spec{
		Name:  "inspect_node",
		Title: "Inspect a node",
		Description: "Read a node over SSH: kernels, boot_id, apt holds, pending upgrades, dpkg's state (lock holder, interrupted), " +
			"/boot's room, GRUB entry ids, grubenv, kernel.panic, Livepatch, NVIDIA modules for the target kernel. all: every inventory node.",
		Kind: ReadOnly, Idempotent: true, OpenWorld: true,
	}), func(ctx context.Context, d *Deps, in InspectIn, p Progress) (InspectOut, error) {
		if in.All {
			if record || in.Node != "" {
				return InspectOut{}, Refuse("Call inspect_node with all alone (record_inspection takes one node).", "all inspects every inventory node: it takes no node and records nothing")
			}
			return inspectAll(ctx, d, p)
		}
		if err := ValidNode(in.Node); err != nil {
			return InspectOut{}, err
		}
		s := d.MaybeRound(record)
		rec := recording(s, record)
		if record && s == nil {
			return InspectOut{}, RefuseWith(CallTo("inspect_node", "node", in.Node), "Call inspect_node instead: it reads the node and records nothing.",
				"no round is open: record_inspection records into a round", "nothing was done")
		}
		if err := rec.Admit(round.StepInspect, in.Node); err != nil {
			return InspectOut{}, err
		}
		h, err := d.OpenHosts(ctx)
		if err != nil {
			return InspectOut{}, err
		}
		var target string
		if np, ok := s.NodePlan(in.Node); ok {
			target = np.TargetKernel
		}
		insp, err := h.Steps.Inspect(ctx, in.Node, steps.InspectInput{TargetKernel: target})
		if err != nil {
			return InspectOut{}, service.HostFailure(rec, round.StepInspect, in.Node, service.HostError(in.Node, "inspect", err))
		}
		hz := steps.InspectionHazards(insp, target)
		reasons := blockerReasons(hz)
		var causes []string
		for _, h := range hz {
			causes = append(causes, h.Reason)
		}
		if err := rec.Check(round.StepInspect, in.Node, len(hz) == 0, insp.Kernel, strings.Join(causes, "; ")); err != nil {
			return InspectOut{}, err
		}
		out := InspectOut{Inspection: &insp}
		if len(hz) > 0 {
			next := steps.NextForHazards(in.Node, hz)
			if rec != nil {
				next = "Stop: " + next + " A person signs resume (after fixing it) or abort."
			} else if s != nil {
				next += " Tell a person before the window; flag what stays (record_lesson open_question)."
			}
			out.Result = Result{Reasons: append(reasons, notRecorded(rec)...), NextAction: next}
			return out, nil
		}
		reasons = []string{inspectSummary(insp)}
		next, call := "Run simulate_upgrade on this node next.", CallTo("simulate_upgrade", "node", in.Node)
		if rec != nil {
			next, call = "Run record_simulation on this node next.", CallTo("record_simulation", "node", in.Node)
		}
		out.Result = Result{Reasons: append(reasons, notRecorded(rec)...), NextAction: next, NextCall: call}
		return out, nil
	})
}

// inspectSummary is a clean survey in one line.
func inspectSummary(insp steps.Inspection) string {
	s := fmt.Sprintf("kernel %s; %d package(s) pending", insp.Kernel, len(insp.Pending.Packages))
	if insp.Pending.TargetKernel != "" {
		s += ", new kernel " + insp.Pending.TargetKernel
	}
	if insp.Boot.FreeKB != nil && insp.Boot.NeedKB > 0 {
		s += fmt.Sprintf("; %s has %s free for %s", orDash(insp.Boot.Dir), steps.SizeKB(*insp.Boot.FreeKB), steps.SizeKB(insp.Boot.NeedKB))
	}
	return s + "; dpkg idle, not interrupted"
}

// notRecorded says, outside a round's recording, that nothing was recorded.
func notRecorded(rec *window.Round) []string {
	if rec != nil {
		return nil
	}
	return []string{"read-only: nothing was recorded (no round needed)"}
}

// inspectAll inspects every node of the SSH inventory with bounded
// concurrency and answers a table; it needs no cluster and records nothing.
func inspectAll(ctx context.Context, d *Deps, p Progress) (InspectOut, error) {
	h, err := d.OpenHosts(ctx)
	if err != nil {
		return InspectOut{}, err
	}
	if h.Inventory == nil {
		return InspectOut{}, Refuse("Configure ssh.inventory (an inventory file naming the nodes) and call again.", "no SSH inventory is configured: all needs one")
	}
	nodes, jumps := service.InventoryNodes(h.Inventory)
	if len(nodes) == 0 {
		return InspectOut{}, Refuse("Add the nodes to the SSH inventory file and call again.", "the SSH inventory names no node")
	}
	var done atomic.Int64
	res := host.FanOut(ctx, nodes, d.Config.SSH.Concurrency, func(ctx context.Context, node string) (InspectRow, error) {
		insp, err := h.Steps.Inspect(ctx, node, steps.InspectInput{})
		p(float64(done.Add(1)), float64(len(nodes)), node)
		if err != nil {
			return InspectRow{}, err
		}
		hz := steps.InspectionHazards(insp, "")
		row := InspectRow{Node: node, Status: StatusOK, Kernel: insp.Kernel, Target: insp.Pending.TargetKernel,
			Packages: len(insp.Pending.Packages), Blockers: len(hz)}
		if len(hz) > 0 {
			row.Status, row.Reason = StatusFailed, hz[0].Reason
		}
		return row, nil
	})
	out := InspectOut{Nodes: make([]InspectRow, 0, len(res))}
	var bad []string
	var hz []steps.Hazard
	for _, r := range res {
		row := r.Value
		if r.Err != nil {
			f := service.HostError(r.Node, "inspect", r.Err)
			row = InspectRow{Node: r.Node, Status: StatusFailed, Blockers: 1, Reason: f.Error()}
			hz = append(hz, steps.Hazard{Cause: steps.CauseOf(r.Err), Reason: r.Node + ": " + f.Error()})
		} else if row.Blockers > 0 {
			hz = append(hz, steps.Hazard{Cause: steps.CauseOfText(row.Reason), Reason: r.Node + ": " + row.Reason})
		}
		if row.Status != StatusOK {
			bad = append(bad, r.Node)
		}
		out.Nodes = append(out.Nodes, row)
	}
	reasons := []string{fmt.Sprintf("%d of %d inventory nodes ready, %d with blockers", len(nodes)-len(bad), len(nodes), len(bad))}
	if len(jumps) > 0 {
		reasons = append(reasons, "left out as jump hosts: "+strings.Join(jumps, ", "))
	}
	reasons = append(reasons, clip(blockerReasons(hz), 20)...)
	out.Reasons = append(reasons, notRecorded(nil)...)
	if len(bad) > 0 {
		out.NextAction = "Each node's row names its first blocker: inspect_node on that node shows them all and the next step for each (" + strings.Join(clip(bad, 10), ", ") + ")."
		return out, nil
	}
	out.NextAction = "Every inventory node is ready: simulate_upgrade (and download_updates before the window) on each."
	return out, nil
}
