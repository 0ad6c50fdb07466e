package window

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/mcp-patch/mcp-patch/kube/drain"
	"github.com/mcp-patch/mcp-patch/kube/gate"
	"github.com/mcp-patch/mcp-patch/round"
)

// DecideEtcdBeforeWindow stops the round before the window of a
// control-plane node while etcd is not fully healthy (etcd is its check;
// nil: no etcd check configured): the node's reboot would take another
// member down and could lose quorum. Other roles are not asked.
func DecideEtcdBeforeWindow(node string, role round.Role, etcd *gate.Check) error {
	if role != round.RoleControlPlane || etcd == nil || (etcd.OK && len(etcd.Warnings) == 0) {
		return nil
	}
	why := "etcd is not fully healthy before the window of control-plane node " + node + ": " +
		strings.Join(append([]string{etcd.Reason}, etcd.Warnings...), "; ") + " — its reboot would take another member down and could lose quorum"
	return &Stop{Step: round.StepDrain, Node: node, Next: "Stop: a person restores the etcd member first, then signs resume.",
		Reasons: []string{why, "nothing was cordoned"}}
}

// DryRunDrain cordons and evicts with the API server's dry run: every
// check runs and nothing is persisted; no approval, no journal record, no
// Lease. The error is the drain's (the pods that would block are in the
// result).
func DryRunDrain(ctx context.Context, c Cluster, roundID, node string, o DrainOptions, progress func(done, total int, msg string)) (DrainOutcome, error) {
	opts := o.Options
	opts.Policy, opts.Round, opts.Identity, opts.DryRun = o.Policy, roundID, o.Identity, true
	res, err := c.Drain(ctx, node, opts, progress)
	out := DrainOutcome{Drain: &res}
	if err != nil {
		return out, err
	}
	out.Reasons = []string{fmt.Sprintf("dry run: %d pods would be evicted", len(res.Evicted))}
	out.Next = "Call drain_node without dry_run to get the approval request."
	return out, nil
}

// WaitFor adds to a drain plan the jobs (drain.wait_for_jobs) running on
// its node, which the drain waits for after it cordons, and the wait's
// bound: what a person reads, not what the digest binds (jobs come and
// go; the wait is bounded).
func (p DrainPlan) WaitFor(holding []drain.PodRef, wait time.Duration) DrainPlan {
	p.JobWaitMinutes = int(wait / time.Minute)
	p.WaitsFor = nil
	for _, h := range holding {
		p.WaitsFor = append(p.WaitsFor, h.String())
	}
	return p
}
