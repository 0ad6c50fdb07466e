package plan

import (
	"fmt"
	"slices"
	"strings"
)

// Change is one way a live node differs from its reviewed plan.
type Change struct {
	Step Step   `json:"step"`
	What string `json:"what"`
	// Lines are the diff, "- reviewed" and "+ live".
	Lines []string `json:"lines"`
}

func (c Change) String() string {
	return string(c.Step) + ": " + c.What + "\n  " + strings.Join(c.Lines, "\n  ")
}

// Drift compares the live plan of a node with the reviewed one for the
// steps given (every bound step when none): another package, another
// kernel, another GRUB entry, a drain that now evicts a workload the
// reviewed plan did not, or a new blocker. A drain that evicts fewer
// workloads, or fewer pods of one, is not drift.
func Drift(reviewed, live Node, steps ...Step) []Change {
	if len(steps) == 0 {
		steps = WindowSteps
	}
	var out []Change
	for _, s := range steps {
		switch s {
		case StepDrain:
			var extra []string
			have := map[string]bool{}
			for _, w := range reviewed.Drain.Workloads {
				have[strings.ToLower(w.Key())] = true
			}
			for _, w := range live.Drain.Workloads {
				if !have[strings.ToLower(w.Key())] {
					extra = append(extra, fmt.Sprintf("+ evict %s (%d pod(s))", w.Key(), w.Pods))
				}
			}
			if len(extra) > 0 {
				out = append(out, Change{Step: s, What: "the drain now evicts workloads the reviewed plan does not", Lines: extra})
			}
		case StepInstall:
			if reviewed.PackageDigest != live.PackageDigest {
				lines := lineDiff(reviewed.PackageLines, live.PackageLines)
				if len(lines) == 0 {
					lines = []string{"- " + reviewed.PackageDigest, "+ " + live.PackageDigest}
				}
				out = append(out, Change{Step: s, What: "the package plan changed", Lines: lines})
			}
			if reviewed.Target != live.Target {
				out = append(out, Change{Step: s, What: "the target kernel changed", Lines: []string{"- " + orDash(reviewed.Target), "+ " + orDash(live.Target)}})
			}
		case StepTrialBoot, StepPromote:
			if reviewed.Running != live.Running && s == StepTrialBoot {
				out = append(out, Change{Step: s, What: "the running kernel changed", Lines: []string{"- " + reviewed.Running, "+ " + live.Running}})
			}
			if s == StepTrialBoot && reviewed.Grub.Old != live.Grub.Old {
				out = append(out, Change{Step: s, What: "the GRUB entry of the running kernel changed", Lines: []string{"- " + reviewed.Grub.Old, "+ " + live.Grub.Old}})
			}
			if reviewed.Grub.New != live.Grub.New && live.Grub.New != "" {
				out = append(out, Change{Step: s, What: "the GRUB entry of the target kernel differs", Lines: []string{"- " + reviewed.Grub.New, "+ " + live.Grub.New}})
			}
			if s == StepPromote && reviewed.Target != live.Target {
				out = append(out, Change{Step: s, What: "the kernel to promote changed", Lines: []string{"- " + reviewed.Target, "+ " + live.Target}})
			}
		}
	}
	var added []string
	for _, b := range live.Blockers {
		if !slices.ContainsFunc(reviewed.Blockers, func(r Blocker) bool { return r.Cause == b.Cause }) {
			added = append(added, "+ "+b.Cause)
		}
	}
	if len(added) > 0 {
		out = append(out, Change{Step: "blockers", What: "the node has blockers now", Lines: added})
	}
	return out
}

// DriftInFleet is Drift against the node's reviewed plan, where a drain
// may also evict a workload the plan lists on another node: the round's
// own drains move replicas between nodes (a Deployment's pod evicted from
// one node lands on the next), and people reviewed those workloads. A
// workload the plan lists nowhere is drift.
func (f Fleet) DriftInFleet(live Node, steps ...Step) []Change {
	reviewed, ok := f.Node(live.Node)
	if !ok {
		return []Change{{Step: "plan", What: "the node is not in the reviewed plan", Lines: []string{"+ " + live.Node}}}
	}
	// The reviewed node's workloads are added to on a slice of its own:
	// f may be shared (a plan decoded once and kept), never written.
	reviewed.Drain.Workloads = slices.Clone(reviewed.Drain.Workloads)
	known := map[string]bool{}
	for _, w := range reviewed.Drain.Workloads {
		known[strings.ToLower(w.Key())] = true
	}
	for _, n := range f.Nodes {
		for _, w := range n.Drain.Workloads {
			if !known[strings.ToLower(w.Key())] {
				known[strings.ToLower(w.Key())] = true
				reviewed.Drain.Workloads = append(reviewed.Drain.Workloads, w)
			}
		}
	}
	return Drift(reviewed, live, steps...)
}

// FormatDrift is the diff in words, for a refusal.
func FormatDrift(node string, cs []Change) []string {
	out := []string{fmt.Sprintf("%s differs from its reviewed plan in %d way(s):", node, len(cs))}
	for _, c := range cs {
		out = append(out, c.String())
	}
	return out
}

// lineDiff is a set difference of two line lists, in order: reviewed
// lines the live plan lost, then live lines it gained.
func lineDiff(a, b []string) []string {
	inA, inB := map[string]bool{}, map[string]bool{}
	for _, l := range a {
		inA[l] = true
	}
	for _, l := range b {
		inB[l] = true
	}
	var out []string
	for _, l := range a {
		if !inB[l] {
			out = append(out, "- "+l)
		}
	}
	for _, l := range b {
		if !inA[l] {
			out = append(out, "+ "+l)
		}
	}
	return out
}

// Replan replaces one node's plan with a freshly built one and reseals the
// fleet plan. It returns the new plan and the steps whose digest changed:
// only those need a new signature (with the new plan digest).
func Replan(f Fleet, live Node) (Fleet, []Step, error) {
	i := slices.IndexFunc(f.Nodes, func(n Node) bool { return n.Node == live.Node })
	if i < 0 {
		return Fleet{}, nil, fmt.Errorf("re-plan %s: the node is not in the plan of round %s", live.Node, f.Round)
	}
	old := f.Nodes[i]
	out := f
	out.Nodes = slices.Clone(f.Nodes)
	live.Position, live.Reason = old.Position, old.Reason
	live.seal()
	out.Nodes[i] = live
	out.Blockers = []Blocker{}
	for _, n := range out.Nodes {
		out.Blockers = append(out.Blockers, n.Blockers...)
	}
	out.Revision++
	out.seal()
	out.Summary = summary(&out)
	var changed []Step
	for _, s := range WindowSteps {
		if old.Steps[s] != live.Steps[s] {
			changed = append(changed, s)
		}
	}
	return out, changed, nil
}

// KeepDone is the live plan of a node whose window is under way, for a
// re-plan: the steps it has done stay as reviewed, the rest is live. Only
// a done drain is kept (a re-plan is refused once install has started):
// a drained node's preview is empty now, and what its drain evicted and
// what ran there are history, not a change to sign again.
func KeepDone(reviewed, live Node, done ...Step) Node {
	if slices.Contains(done, StepDrain) {
		live.Drain, live.Runs = reviewed.Drain, slices.Clone(reviewed.Runs)
	}
	return live
}
