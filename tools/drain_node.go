package tools

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/mcp-patch/mcp-patch/kube/drain"
	"github.com/mcp-patch/mcp-patch/kube/gate"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// DrainIn is the node to drain.
type DrainIn struct {
	ApprovalArg
	Node   string `json:"node"`
	DryRun bool   `json:"dry_run,omitempty" jsonschema:"the API server's dry run: every check, nothing persisted, no approval"`
}

// DrainOut is what the drain did.
type DrainOut struct {
	Result
	Preview *drain.Plan   `json:"preview,omitempty"`
	Drain   *drain.Result `json:"drain,omitempty"`
}

// DrainNode is the drain_node tool.
func DrainNode() Tool {
	return NewDestructive[DrainIn, DrainOut, window.DrainPlan](Spec{
		Name:  "drain_node",
		Title: "Cordon and drain a node",
		Description: "Cordon the node (as this round's), evict its pods (PDBs respected, DaemonSets left); jobs the intent waits " +
			"for (drain.wait_for_jobs) run out first, bounded. Opens the node's window, one at a time, after a green " +
			"gate. On failure: stays cordoned, blocking pods named.",
		Idempotent: false, OpenWorld: true,
	}, Steps[DrainIn, DrainOut, window.DrainPlan]{
		Target: func(in DrainIn) string { return in.Node },
		Follow: func(ctx context.Context, d *Deps, in DrainIn, p Progress) (DrainOut, error) {
			s, err := d.openSession()
			if err != nil {
				return DrainOut{}, err
			}
			if in.DryRun {
				return dryRunDrain(ctx, d, s, in.Node, p)
			}
			if s.inFlightRun(round.StepDrain, in.Node) == nil {
				return DrainOut{}, errNotInFlight
			}
			w, err := d.window(ctx, s, needCluster)
			if err != nil {
				return DrainOut{}, err
			}
			o, err := w.FollowDrain(ctx, in.Node, d.drainOptions(s), drainProgress(p))
			return DrainOut{Drain: o.Drain, Result: outcome(o.Outcome).then(CallTo("install_updates", "node", in.Node))}, err
		},
		Plan: func(ctx context.Context, d *Deps, in DrainIn) (string, window.DrainPlan, error) {
			s, err := d.openSession()
			if err != nil {
				return "", window.DrainPlan{}, err
			}
			if s.inFlightRun(round.StepDrain, in.Node) == nil {
				if err := s.admit(d, round.StepDrain, in.Node); err != nil {
					return "", window.DrainPlan{}, err
				}
			}
			if err := d.admitMaintenance(s, in.Node); err != nil {
				return "", window.DrainPlan{}, err
			}
			if r := s.stepRun(round.StepSimulate, in.Node); r == nil || !r.Green() {
				return "", window.DrainPlan{}, Refuse("Run simulate_upgrade (and download_updates, snapshot_node) on this node first.",
					"no green simulate_upgrade for "+in.Node+" this round: a drain without a checked package plan is not sure")
			}
			if err := d.etcdBeforeControlPlane(ctx, s, in.Node); err != nil {
				return "", window.DrainPlan{}, err
			}
			jobs, jobWait, err := jobWaitOf(s.settings)
			if err != nil {
				return "", window.DrainPlan{}, err
			}
			w, err := d.window(ctx, s, needCluster)
			if err != nil {
				return "", window.DrainPlan{}, err
			}
			pv, err := w.Cluster.PreviewDrain(ctx, in.Node, d.drainPolicy(s))
			if err != nil {
				return "", window.DrainPlan{}, Fail("Check the node name and the API server.", "preview drain: "+err.Error())
			}
			plan, err := window.DecideDrain(in.Node, pv)
			if err != nil || jobs == nil {
				return s.id, plan, err
			}
			// The jobs it waits for are part of what a person reads (not of
			// the digest: jobs come and go; the wait is bounded).
			holding, err := w.Cluster.HoldingPods(ctx, in.Node, jobs)
			if err != nil {
				return "", window.DrainPlan{}, Fail("Check the API server and call again.", err.Error())
			}
			plan.JobWaitMinutes = int(jobWait / time.Minute)
			for _, p := range holding {
				plan.WaitsFor = append(plan.WaitsFor, p.String())
			}
			return s.id, plan, nil
		},
		Do: func(ctx context.Context, d *Deps, in DrainIn, plan window.DrainPlan, a Approved, p Progress) (DrainOut, error) {
			s, err := d.openSession()
			if err != nil {
				return DrainOut{}, err
			}
			w, err := d.window(ctx, s, needCluster)
			if err != nil {
				return DrainOut{}, err
			}
			o, err := w.StartDrain(ctx, plan, a.grant(), d.drainOptions(s), drainProgress(p))
			return DrainOut{Drain: o.Drain, Result: outcome(o.Outcome).then(CallTo("install_updates", "node", in.Node))}, err
		},
	})
}

// etcdBeforeControlPlane stops the round before the window of a
// control-plane node while etcd is not fully healthy: its reboot would take
// another member down and could lose quorum.
func (d *Deps) etcdBeforeControlPlane(ctx context.Context, s *session, node string) error {
	n := s.j.State().Node(node)
	if n == nil || n.Role != round.RoleControlPlane {
		return nil
	}
	cfg, err := d.gateConfig(ctx, s)
	if err != nil || cfg.Etcd == nil {
		return nil
	}
	c := gate.CheckEtcd(ctx, *cfg.Etcd)
	if c.OK && len(c.Warnings) == 0 {
		return nil
	}
	why := "etcd is not fully healthy before the window of control-plane node " + node + ": " +
		strings.Join(append([]string{c.Reason}, c.Warnings...), "; ") + " — its reboot would take another member down and could lose quorum"
	return &window.Stop{Step: round.StepDrain, Node: node, Next: "Stop: a person restores the etcd member first, then signs resume.",
		Reasons: []string{why, "nothing was cordoned"}}
}

// dryRunDrain cordons and evicts with the API server's dry run: no
// approval, nothing persisted, nothing journaled.
func dryRunDrain(ctx context.Context, d *Deps, s *session, node string, p Progress) (DrainOut, error) {
	kc, err := d.cluster(ctx)
	if err != nil {
		return DrainOut{}, err
	}
	o := d.drainOptions(s).Options
	o.Policy, o.Round, o.Identity, o.DryRun = d.drainPolicy(s), s.id, d.Identity, true
	res, err := drain.Drain(ctx, kc.Kube, node, o, func(done, total int, msg string) { p(float64(done), float64(total), msg) })
	out := DrainOut{Drain: &res}
	if err != nil {
		return out, Fail("Read the blocked pods: the real drain would stop there too.", "dry-run drain: "+err.Error())
	}
	out.Reasons = []string{fmt.Sprintf("dry run: %d pods would be evicted", len(res.Evicted))}
	out.NextAction = "Call drain_node without dry_run to get the approval request."
	return out, nil
}

func (d *Deps) drainPolicy(s *session) drain.Policy {
	pol := drain.Policy{}
	if ds := s.settings.Drain; ds != nil && ds.EmptyDirPolicy == "delete" {
		pol.DeleteEmptyDirData = true
	}
	return pol
}

func (d *Deps) drainTimeout(s *session) time.Duration {
	if ds := s.settings.Drain; ds != nil && ds.TimeoutMinutes > 0 {
		return time.Duration(ds.TimeoutMinutes) * time.Minute
	}
	return d.Config.Kube.DrainTimeout.D()
}

func (d *Deps) drainOptions(s *session) window.DrainOptions {
	o := window.DrainOptions{Policy: d.drainPolicy(s), Identity: d.Identity,
		Options: drain.Options{Timeout: d.drainTimeout(s), EvictRetryDelay: d.Config.Kube.EvictRetry.D(), Logger: d.Log}}
	// A selector that does not parse was refused by the drain's Plan.
	if sel, wait, err := jobWaitOf(s.settings); err == nil {
		o.JobSelector, o.JobWait = sel, wait
	}
	return o
}

func drainProgress(p Progress) func(done, total int, msg string) {
	return func(done, total int, msg string) { p(float64(done), float64(total), msg) }
}

// outcome words a window outcome as a result.
func outcome(o window.Outcome) Result {
	r := Result{Reasons: o.Reasons, NextAction: o.Next}
	if o.InProgress {
		r.Status = StatusInProgress
	}
	return r
}

// then makes c the next call of an ok result (one in progress calls the
// same tool again).
func (r Result) then(c *Call) Result {
	if r.Status == "" || r.Status == StatusOK {
		r.NextCall = c
	}
	return r
}
