package tools

import (
	"context"
	"fmt"

	"github.com/mcp-patch/mcp-patch/kube/drain"
	"github.com/mcp-patch/mcp-patch/round/plan"
	"github.com/mcp-patch/mcp-patch/round/plan/preflight"
	"github.com/mcp-patch/mcp-patch/round/service"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// ReplanIn is the node to plan again.
type ReplanIn struct {
	Node string `json:"node"`
}

// ReplanOut is the new plan revision.
type ReplanOut struct {
	Result
	Changed []plan.Step         `json:"changed" jsonschema:"the steps whose digest changed: only they need signing again"`
	Plan    *service.PlanStatus `json:"plan,omitempty"`
}

// ReplanNode is the replan_node tool.
func ReplanNode() Tool {
	return New[ReplanIn, ReplanOut](Spec{
		Name:  "replan_node",
		Title: "Plan one node again",
		Description: "Read one node again (simulate, inspect, drain preview) and replace its part of the plan (a new revision, " +
			"committed); sign_plan then asks only for changed steps. A drained node is re-planned for the steps ahead; " +
			"once install started, its plan is fixed.",
		Kind: Write, Idempotent: true, OpenWorld: true,
	}, func(ctx context.Context, d *Deps, in ReplanIn, p Progress) (ReplanOut, error) {
		if err := ValidNode(in.Node); err != nil {
			return ReplanOut{}, err
		}
		s, err := d.OpenRound()
		if err != nil {
			return ReplanOut{}, err
		}
		f, ok, err := d.FleetPlan(s.ID)
		if err != nil || !ok {
			return ReplanOut{}, Refuse("Call plan_round: it writes the whole plan.", "round "+s.ID+" has no usable plan document")
		}
		reviewed, ok := f.Node(in.Node)
		if !ok {
			return ReplanOut{}, Refuse("Name a node of the round's plan.", in.Node+" is not in the plan of round "+s.ID)
		}
		st := s.Journal.State()
		done, err := window.ReplanScope(st.Node(in.Node))
		if err != nil {
			return ReplanOut{}, err
		}
		h, err := d.OpenHosts(ctx)
		if err != nil {
			return ReplanOut{}, err
		}
		kc, err := d.KubeClients(ctx)
		if err != nil {
			return ReplanOut{}, err
		}
		p(0, 2, "preflight "+in.Node)
		facts := preflight.ReadNode(ctx, h.Steps, in.Node)
		var evicted []drain.PodRef
		if len(done) == 0 {
			p(1, 2, "drain preview "+in.Node)
			jobs, jobWait, err := window.JobWait(s.Settings)
			if err != nil {
				return ReplanOut{}, err
			}
			facts.Drain, evicted = preflight.ClusterDrains{Client: kc.Kube, Policy: preflight.DrainPolicy(s.Settings), Jobs: jobs, JobWait: jobWait}.DrainFacts(ctx, in.Node)
		}
		var pos plan.Position
		for _, ps := range preflight.Positions(st.Plan.Order) {
			if ps.Node == in.Node {
				pos = ps
			}
		}
		pl := plan.Placement{}
		if inv, pla, err := d.InventoryAndPlacement(ctx, kc, s.Settings); err == nil {
			pl = preflight.PlacementOf(pla, inv, map[string][]drain.PodRef{in.Node: evicted}, s.Settings)
		}
		it, err := d.PlanIntent(ctx, s.ID, s.Settings, map[string]plan.Facts{in.Node: facts})
		if err != nil {
			return ReplanOut{}, err
		}
		live := plan.KeepDone(reviewed, plan.BuildNode(reviewed.Position, pos, facts, pl, it), done...)
		g, changed, err := plan.Replan(f, live)
		if err != nil {
			return ReplanOut{}, err
		}
		out := ReplanOut{Changed: changed}
		if g.Digest == f.Digest {
			out.Reasons = []string{in.Node + " matches its reviewed plan: nothing changed"}
			out.Plan, err = d.PlanStatus(ctx, s.ID, s.Journal.Shared())
			return out, err
		}
		if err := d.WriteFleetPlan(s.ID, g); err != nil {
			return out, err
		}
		if err := service.JournalPromotion(s, g); err != nil {
			return out, err
		}
		out.Reasons = append(out.Reasons, fmt.Sprintf("%s re-planned: revision %d, digest %s", in.Node, g.Revision, g.Digest))
		for _, b := range live.Blockers {
			out.Reasons = append(out.Reasons, "blocker: "+b.String())
		}
		commitRoundLast(ctx, d, s, "re-plan of "+in.Node, func(c string) string { return "plan committed (" + c + ")" },
			"plan not committed: ", &out.Reasons)
		if out.Plan, err = d.PlanStatus(ctx, s.ID, s.Journal.Shared()); err != nil {
			return out, err
		}
		out.NextAction = "A person signs only what changed: call sign_plan."
		if !g.Ready() {
			out.NextAction = "Fix the blockers on " + in.Node + ", then call replan_node again."
		}
		return out, nil
	})
}
