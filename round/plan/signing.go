package plan

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// StepDigests are the step digests of every node of f, as a plan
// signature keeps them: the next signature after a re-plan covers only
// what differs from them (Changes).
func StepDigests(f Fleet) map[string]map[Step]string {
	out := make(map[string]map[Step]string, len(f.Nodes))
	for _, n := range f.Nodes {
		out[n.Node] = n.Steps
	}
	return out
}

// Changes lists, per node, the steps whose digest differs between the
// signed digests and the plan f now ("node: step, step"); a node new to
// the plan counts whole.
func Changes(signed map[string]map[Step]string, f Fleet) []string {
	var out []string
	for _, n := range f.Nodes {
		was, ok := signed[n.Node]
		if !ok {
			out = append(out, n.Node+": whole window (new in the plan)")
			continue
		}
		var steps []string
		for _, s := range WindowSteps {
			if was[s] != n.Steps[s] {
				steps = append(steps, string(s))
			}
		}
		if len(steps) > 0 {
			out = append(out, n.Node+": "+strings.Join(steps, ", "))
		}
	}
	return out
}

// SummaryNodes is how many nodes the plan's signing request lists one by
// one (the control plane and the canary come first in the order); the
// rest is one line of counts, so a thousand-node plan's request stays
// within what a person reads and a request may hold. The digest binds
// every node either way.
const SummaryNodes = 24

// SigningSummary is the plan in plain words for the request a person
// signs: the whole plan, or, after a re-plan, only what changed since the
// last signature (changed, from Changes).
func SigningSummary(f Fleet, changed []string) []string {
	out := append([]string{}, f.Summary...)
	if len(changed) > 0 {
		out = append([]string{fmt.Sprintf("re-plan (revision %d): only these changed since the last signature:", f.Revision)}, changed...)
		return append(out, "plan digest "+f.Digest)
	}
	for i, n := range f.Nodes {
		if i == SummaryNodes && len(f.Nodes) > SummaryNodes+1 {
			out = append(out, restSummary(f.Nodes[i:]))
			break
		}
		out = append(out, oneLine(fmt.Sprintf("%d. %s (%s): %s -> %s, %d packages, evicts %d pods, new GRUB entry %s, %s (%d signature(s))",
			n.Position, n.Node, n.Role, orDash(n.Running), orDash(n.Target), n.Packages.Count(), n.Drain.Pods, orDash(n.Grub.New),
			strings.ReplaceAll(n.Approval, "_", " "), n.Signatures())))
	}
	return append(out, "mcp-patch approve shows the whole plan, every package, GRUB id and pod, rendered from rounds/"+f.Round+"/plan.json (plan.md is the same render)",
		"plan digest "+f.Digest)
}

// restSummary is one line for the nodes the request does not list.
func restSummary(nodes []Node) string {
	roles := map[string]int{}
	kernels := map[string]int{}
	var pkgs, pods, sigs int
	for _, n := range nodes {
		roles[string(n.Role)]++
		kernels[orDash(n.Running)+" -> "+orDash(n.Target)]++
		pkgs += n.Packages.Count()
		pods += n.Drain.Pods
		sigs += n.Signatures()
	}
	count := func(m map[string]int) string {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(m)) {
			parts = append(parts, fmt.Sprintf("%d %s", m[k], k))
		}
		return strings.Join(parts, ", ")
	}
	return oneLine(fmt.Sprintf("%d.-%d. %s ... %s, %d nodes (%s): kernels %s, %d packages, evicts %d pods, %d signature(s) in all",
		nodes[0].Position, nodes[len(nodes)-1].Position, nodes[0].Node, nodes[len(nodes)-1].Node, len(nodes),
		count(roles), count(kernels), pkgs, pods, sigs))
}
