package tools

import (
	"testing"

	"github.com/mcp-patch/mcp-patch/round/plan"
	"github.com/mcp-patch/mcp-patch/round/plan/preflight"
)

// signPlan writes the round's reviewed plan as the preflight reads the
// rig's host and cluster now, and has a person sign it (sign_plan): a
// round without a signed plan runs no destructive window step.
func (r *wrig) signPlan(t *testing.T) plan.Fleet {
	t.Helper()
	sim, insp, err := r.host.Preflight(t.Context(), wNode)
	if err != nil {
		t.Fatal(err)
	}
	facts := preflight.FactsOf(sim, insp)
	for _, p := range r.kube.Pods[wNode] {
		facts.Drain.Pods = append(facts.Drain.Pods, plan.Pod{Namespace: p.Namespace, Name: p.Name, OwnerKind: p.OwnerKind, OwnerName: p.OwnerName})
	}
	f := plan.Build(plan.Input{Round: wRound, Order: []plan.Position{{Node: wNode, GPU: true, Canary: true, Reason: "canary"}},
		Facts: map[string]plan.Facts{wNode: facts}, Intent: plan.Intent{GPUApproval: plan.PerStep, PanicSeconds: 10}})
	if !f.Ready() {
		t.Fatalf("the rig's plan has blockers: %v", f.Blockers)
	}
	if err := r.d.WriteFleetPlan(wRound, f); err != nil {
		t.Fatal(err)
	}
	if res := r.approve(t, "sign_plan", nil); res.Status != StatusOK {
		t.Fatalf("sign_plan: %s %v", res.Status, res.Reasons)
	}
	return f
}
