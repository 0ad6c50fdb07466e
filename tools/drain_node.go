package tools

import (
	"context"

	"github.com/mcp-patch/mcp-patch/kube/drain"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/service"
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
	Preview *drain.Evictions `json:"preview,omitempty"`
	Drain   *drain.Result    `json:"drain,omitempty"`
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
		Follow: func(ctx context.Context, d *Deps, s *window.Round, in DrainIn, p Progress) (DrainOut, error) {
			if in.DryRun {
				c, err := d.DrainCluster(ctx)
				if err != nil {
					return DrainOut{}, err
				}
				o, err := window.DryRunDrain(ctx, c, s.ID, in.Node, d.DrainOptions(s), service.DrainProgress(p))
				if err != nil {
					return DrainOut{Drain: o.Drain}, Fail("Read the blocked pods: the real drain would stop there too.", "dry-run drain: "+err.Error())
				}
				return DrainOut{Drain: o.Drain, Result: outcome(o.Outcome)}, nil
			}
			run := s.InFlightRun(round.StepDrain, in.Node)
			if run == nil {
				return DrainOut{}, errNotInFlight
			}
			w, err := d.Window(ctx, s, service.NeedCluster)
			if err != nil {
				return DrainOut{}, err
			}
			// The drain carried on is held to the plan its approval signed,
			// as this server kept it beside the signature (verified again
			// now), never to the journal's copy: an empty plan stands for
			// "not known", which needs a fresh approval.
			opts := d.DrainOptions(s)
			opts.Approved = &window.DrainPlan{}
			if last := run.Last(); last != nil {
				approved, err := d.ApprovedDrain(ctx, s.ID, in.Node, last.ApprovalID)
				if err != nil {
					return DrainOut{}, Refuse("Ask a person to sign a new request: call drain_node again to get it.", err.Error(), "nothing was evicted")
				}
				if approved != nil {
					opts.Approved = approved
				}
			}
			o, err := w.FollowDrain(ctx, in.Node, opts, service.DrainProgress(p))
			return DrainOut{Drain: o.Drain, Result: outcome(o.Outcome).Then(CallTo("install_updates", "node", in.Node))}, err
		},
		Plan: func(ctx context.Context, d *Deps, s *window.Round, in DrainIn) (window.DrainPlan, error) {
			if err := d.AdmitDrain(ctx, s, in.Node); err != nil {
				return window.DrainPlan{}, err
			}
			jobs, jobWait, err := window.JobWait(s.Settings)
			if err != nil {
				return window.DrainPlan{}, err
			}
			w, err := d.Window(ctx, s, service.NeedCluster)
			if err != nil {
				return window.DrainPlan{}, err
			}
			if err := w.OthersLetGo(ctx, in.Node); err != nil {
				return window.DrainPlan{}, err // waiting costs no signature
			}
			pv, err := w.Cluster.PreviewDrain(ctx, in.Node, s.DrainPolicy())
			if err != nil {
				return window.DrainPlan{}, Fail("Check the node name and the API server.", "preview drain: "+err.Error())
			}
			plan, err := window.DecideDrain(in.Node, pv)
			if err != nil || jobs == nil {
				return plan, err
			}
			// The jobs it waits for are part of what a person reads (not of
			// the digest: jobs come and go; the wait is bounded).
			holding, err := w.Cluster.HoldingPods(ctx, in.Node, jobs)
			if err != nil {
				return window.DrainPlan{}, Fail("Check the API server and call again.", err.Error())
			}
			return plan.WaitFor(holding, jobWait), nil
		},
		Do: func(ctx context.Context, d *Deps, s *window.Round, in DrainIn, plan window.DrainPlan, a service.Approved, p Progress) (DrainOut, error) {
			w, err := d.Window(ctx, s, service.NeedCluster)
			if err != nil {
				return DrainOut{}, err
			}
			o, err := w.StartDrain(ctx, plan, a.Grant(), d.DrainOptions(s), service.DrainProgress(p))
			return DrainOut{Drain: o.Drain, Result: outcome(o.Outcome).Then(CallTo("install_updates", "node", in.Node))}, err
		},
	})
}
