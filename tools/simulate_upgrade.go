package tools

import (
	"context"
	"fmt"
	"strings"

	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/service"
)

// SimulateOut is the package plan.
type SimulateOut struct {
	Result
	Simulation *steps.Simulation `json:"simulation,omitempty"`
}

// SimulateUpgrade is the simulate_upgrade tool.
func SimulateUpgrade() Tool { return simulateUpgrade(false) }

// RecordSimulation is the record_simulation tool: simulate_upgrade, recorded in the round (the package plan install_updates binds).
func RecordSimulation() Tool { return simulateUpgrade(true) }

func simulateUpgrade(record bool) Tool {
	return New[NodeIn, SimulateOut](checkSpec(record, "record_simulation", Spec{
		Name:  "simulate_upgrade",
		Title: "Simulate the upgrade",
		Description: "Kubernetes package holds and `apt-get -s full-upgrade`: the package plan, its digest (what install_updates " +
			"is approved for), the target kernel. A removal, a missing hold or a held package moving fails it.",
		Kind: ReadOnly, Idempotent: true, OpenWorld: true,
	}), func(ctx context.Context, d *Deps, in NodeIn, p Progress) (SimulateOut, error) {
		if err := ValidNode(in.Node); err != nil {
			return SimulateOut{}, err
		}
		s := d.MaybeRound(record)
		rec := recording(s, record)
		if err := rec.Admit(round.StepSimulate, in.Node); err != nil {
			return SimulateOut{}, err
		}
		h, err := d.OpenHosts(ctx)
		if err != nil {
			return SimulateOut{}, err
		}
		sim, err := h.Steps.Simulate(ctx, in.Node)
		if err != nil {
			return SimulateOut{}, service.HostFailure(rec, round.StepSimulate, in.Node, service.HostError(in.Node, "simulate upgrade", err))
		}
		kern, _ := h.Steps.Kernel(ctx, in.Node)
		hz := steps.SimulationHazards(sim)
		for _, u := range sim.Unheld {
			hz = append(hz, steps.Hazard{Cause: steps.CausePackages, Reason: "package " + u + " is installed but not held (apt-mark hold " + u + ")"})
		}
		var problems []string
		for _, h := range hz {
			problems = append(problems, h.Reason)
		}
		out := SimulateOut{Simulation: &sim}
		detail := fmt.Sprintf("plan %s: %d packages, target kernel %q", sim.Plan.Digest, len(sim.Plan.Packages), sim.Plan.TargetKernel)
		if len(sim.Plan.Phased) > 0 {
			detail += "; kept back by phasing (not a removal, a later round gets them): " + strings.Join(sim.Plan.Phased, ", ")
		}
		if len(problems) > 0 {
			if err := rec.Check(round.StepSimulate, in.Node, false, kern.Kernel, strings.Join(problems, "; ")); err != nil {
				return out, err
			}
			next := steps.NextForHazards(in.Node, hz)
			if rec != nil {
				next = "Stop: the round cannot go on with this plan. " + next + " A person signs resume (after fixing it) or abort."
			}
			out.Result = Result{Status: StatusFailed, Reasons: append(blockerReasons(hz), notRecorded(rec)...), NextAction: next}
			return out, nil
		}
		if rec != nil {
			np, _ := s.NodePlan(in.Node)
			np.Node, np.TargetKernel, np.RunningKernel = in.Node, sim.Plan.TargetKernel, kern.Kernel
			np.PackageDigest, np.PackageLines, np.Kernel, np.Nvidia = sim.Plan.Digest, sim.Plan.Lines, sim.Plan.Kernel, sim.Plan.Nvidia
			if err := rec.SaveNodePlan(np); err != nil {
				return out, fmt.Errorf("record the node plan: %w", err)
			}
		}
		if err := rec.Check(round.StepSimulate, in.Node, true, kern.Kernel, detail); err != nil {
			return out, err
		}
		out.Reasons = []string{detail}
		out.NextAction = "download_updates, then snapshot_node, then drain_node on this node when its turn comes."
		if rec != nil {
			out.NextCall = CallTo("download_updates", "node", in.Node)
		}
		if sim.Plan.TargetKernel == "" {
			out.Reasons = append(out.Reasons, "no new kernel in this plan: the trial boot will reboot into the running kernel's successor only if one is installed")
		}
		out.Reasons = append(out.Reasons, notRecorded(rec)...)
		return out, nil
	})
}
