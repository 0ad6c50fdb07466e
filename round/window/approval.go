package window

import (
	"fmt"
	"strings"

	"github.com/mcp-patch/mcp-patch/kube/drain"
	"github.com/mcp-patch/mcp-patch/round/plan"
)

// LiveNode turns the plan a window step decided now into the parts of the
// reviewed node plan that step binds, for plan.Fleet.DriftInFleet; false
// for a plan that binds none.
func LiveNode(reviewed plan.Node, p Plan) (plan.Node, plan.Step, bool) {
	live := plan.Node{Node: reviewed.Node, Grub: reviewed.Grub, Target: reviewed.Target, Running: reviewed.Running,
		PackageDigest: reviewed.PackageDigest, Drain: reviewed.Drain}
	switch v := p.(type) {
	case DrainPlan:
		live.Drain = plan.Drain{Workloads: Workloads(v.Evict)}
		return live, plan.StepDrain, true
	case PackagePlan:
		live.PackageDigest, live.PackageLines, live.Target = v.PackageDigest, v.AptLines, v.TargetKernel
		if len(v.AptLines) == 0 {
			live.PackageLines = v.Lines
		}
		return live, plan.StepInstall, true
	case TrialBootPlan:
		live.Running, live.Target = v.RunningKernel, v.TargetKernel
		live.Grub.Old, live.Grub.New = v.OldEntry, v.NewEntry
		return live, plan.StepTrialBoot, true
	case FallbackDrillPlan:
		live.Running, live.Target = v.RunningKernel, v.TargetKernel
		live.Grub.Old, live.Grub.New = v.OldEntry, v.NewEntry
		return live, plan.StepTrialBoot, true
	case PromotePlan:
		live.Target = v.Kernel
		if v.NewEntry != "" {
			live.Grub.New = v.NewEntry
		}
		return live, plan.StepPromote, true
	}
	return plan.Node{}, "", false
}

// Workloads reads the owners back from a drain plan's "evict ns/pod (kind
// owner)" lines; other lines are skipped.
func Workloads(evict []string) []plan.Workload {
	var out []plan.Workload
	for _, e := range evict {
		rest, ok := strings.CutPrefix(e, "evict ")
		if !ok {
			continue
		}
		ref, owner, _ := strings.Cut(rest, " (")
		ns, _, _ := strings.Cut(ref, "/")
		kind, name, _ := strings.Cut(strings.TrimSuffix(owner, ")"), " ")
		out = append(out, plan.Workload{Namespace: ns, Kind: kind, Name: name, Pods: 1})
	}
	return out
}

// WindowTools computes, from the reviewed node plan, the digest each tool
// of the window must show live: the digests the typed plans bind (the
// drain's is its live preview's, known only at the drain).
func WindowTools(n plan.Node, livePreviewDigest string) map[string]string {
	out := map[string]string{
		"drain_node":      livePreviewDigest,
		"install_updates": n.PackageDigest,
		"trial_boot": TrialBootPlan{Node: n.Node, RunningKernel: n.Running, TargetKernel: n.Target,
			OldEntry: n.Grub.Old, NewEntry: n.Grub.New, PanicSeconds: n.Grub.PanicSeconds}.Digest(),
		// The boot promote binds is not known before the trial boot: the
		// window binds the reviewed part (WindowBound).
		"promote_kernel": PromotePlan{Node: n.Node, Kernel: n.Target, NewEntry: n.Grub.New}.ReviewedDigest(),
	}
	if n.Canary {
		out["fallback_drill"] = FallbackDrillPlan{Node: n.Node, RunningKernel: n.Running, TargetKernel: n.Target,
			OldEntry: n.Grub.Old, NewEntry: n.Grub.New, PanicSeconds: n.Grub.PanicSeconds}.Digest()
	}
	return out
}

// AdmitWindowApproval finds node in the plan of round roundID and refuses
// a window approval for a node the intent approves per step.
func AdmitWindowApproval(f plan.Fleet, roundID, node string) (plan.Node, error) {
	n, ok := f.Node(node)
	if !ok {
		return plan.Node{}, refuse("Name a node of the round's plan.", node+" is not in the plan of round "+roundID)
	}
	if n.Approval != plan.PerWindow {
		return plan.Node{}, refuse("Approve each step of this node on its own (the intent sizes it per step).",
			node+" is approved per step: "+n.Role+" nodes, or the intent's approvals.gpu_servers is per_step")
	}
	return n, nil
}

// WindowApproval is what one signature for a node's whole window binds:
// the window's digest, the digest each covered tool must show live, and
// the words the person reads.
type WindowApproval struct {
	Digest  string
	Tools   map[string]string
	Summary []string
}

// DecideWindowApproval binds a window approval in round roundID to the
// reviewed plan of n and the live eviction preview: a preview that drifted from the reviewed
// drain is refused (re-plan the node first).
func DecideWindowApproval(f plan.Fleet, roundID string, n plan.Node, pv drain.Evictions) (WindowApproval, error) {
	live, _, _ := LiveNode(n, DrainPlan{Node: n.Node, PreviewDigest: pv.Digest, Evict: evictLines(pv)})
	if cs := f.DriftInFleet(live, plan.StepDrain); len(cs) > 0 {
		return WindowApproval{}, refuse("Call replan_node for "+n.Node+" first.", plan.FormatDrift(n.Node, cs)...)
	}
	tools := WindowTools(n, pv.Digest)
	summary := []string{fmt.Sprintf("one signature for the whole window of %s (%s -> %s) in round %s, plan revision %d", n.Node,
		dash(n.Running), dash(n.Target), roundID, f.Revision)}
	for _, t := range []string{"drain_node", "install_updates", "fallback_drill", "trial_boot", "promote_kernel"} {
		if dg, ok := tools[t]; ok {
			summary = append(summary, t+" bound to "+dg)
		}
	}
	summary = append(summary, fmt.Sprintf("drain evicts %d pods of %d workloads; %d packages move; trial boot %s, default stays %s",
		len(pv.Evict), len(n.Drain.Workloads), n.Packages.Count(), dash(n.Grub.New), dash(n.Grub.Old)),
		"any step whose live plan differs from these digests is refused", "window digest "+n.Window)
	return WindowApproval{Digest: n.Window, Tools: tools, Summary: summary}, nil
}

// evictLines are a preview's evictions as a drain plan lists them.
func evictLines(pv drain.Evictions) []string {
	var out []string
	for _, e := range pv.Evict {
		out = append(out, "evict "+e.String()+" ("+strings.ToLower(e.OwnerKind)+" "+e.OwnerName+")")
	}
	return out
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
