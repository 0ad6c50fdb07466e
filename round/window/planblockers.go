package window

import (
	"errors"
	"fmt"
	"strings"

	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/plan"
)

// BlockerCheck is one node's failed preflight check, as the plan's
// blockers on that node record it.
type BlockerCheck struct {
	Node string
	// Step is simulate_upgrade's step when the node's first blocker is its
	// package set (removals, holds), else inspect_node's.
	Step   round.Step
	Detail string
}

// PlanBlockers are the checks the blockers of f fail, one per node in the
// order the plan names them, and the reasons that name every blocker with
// its node and cause. Pure.
func PlanBlockers(f plan.Fleet) ([]BlockerCheck, []string) {
	byNode := map[string][]plan.Blocker{}
	var nodes []string
	for _, b := range f.Blockers {
		if _, ok := byNode[b.Node]; !ok {
			nodes = append(nodes, b.Node)
		}
		byNode[b.Node] = append(byNode[b.Node], b)
	}
	why := []string{fmt.Sprintf("the plan has %d blocker(s): nothing was cordoned, the round stops before its first window", len(f.Blockers))}
	checks := make([]BlockerCheck, 0, len(nodes))
	for _, node := range nodes {
		bs := byNode[node]
		var causes []string
		for _, b := range bs {
			causes = append(causes, b.Cause)
			why = append(why, b.String())
		}
		step := round.StepInspect
		if bs[0].Check == plan.CheckSimulate {
			step = round.StepSimulate
		}
		checks = append(checks, BlockerCheck{Node: node, Step: step, Detail: "plan blocker: " + strings.Join(causes, "; ")})
	}
	return checks, why
}

// StopOnBlockers records each node's blockers in the plan f as its failed
// preflight check (the round stops before anything is cordoned) and
// answers Stopped with every blocker, naming node and cause, and reasons
// after them. A check that cannot be recorded is the error instead.
func (r *Round) StopOnBlockers(f plan.Fleet, reasons []string) error {
	checks, why := PlanBlockers(f)
	var errs []error
	for _, c := range checks {
		if err := r.Check(c.Step, c.Node, false, "", c.Detail); err != nil {
			errs = append(errs, fmt.Errorf("record the blocker of %s: %w", c.Node, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return &Stopped{Next: "Stop: a person fixes each blocker (read rounds/" + f.Round + "/plan.md), signs resume, then plan_round runs the preflight again.",
		Reasons: append(why, reasons...)}
}
