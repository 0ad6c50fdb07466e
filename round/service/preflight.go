package service

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcp-patch/mcp-patch/answer"
	"github.com/mcp-patch/mcp-patch/intent"
	"github.com/mcp-patch/mcp-patch/kube"
	"github.com/mcp-patch/mcp-patch/kube/driverimage"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/plan"
	"github.com/mcp-patch/mcp-patch/round/plan/preflight"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// The reviewed plan's files in rounds/<id>/.
const (
	FleetPlanFile   = "plan.json"
	FleetPlanMD     = "plan.md"
	PlanSignedFile  = "plan-signatures.json"
	kubeConcurrency = 8
)

// PreflightInput is what the fleet-wide preflight reads before it builds
// the plan.
type PreflightInput struct {
	Round     string
	Order     round.Order
	Inv       kube.Inventory
	Placement kube.Placement
	Settings  intent.Settings
	Revision  int
}

// Preflight reads every node of the order and every node's drain preview
// and builds the reviewed plan (preflight.Run). It changes nothing on
// hosts or cluster.
func (d *Service) Preflight(ctx context.Context, kc *kube.Clients, in PreflightInput, p Progress) (plan.Fleet, error) {
	h, err := d.OpenHosts(ctx)
	if err != nil {
		return plan.Fleet{}, err
	}
	jobs, jobWait, err := window.JobWait(in.Settings)
	if err != nil {
		return plan.Fleet{}, err
	}
	drains := preflight.ClusterDrains{Client: kc.Kube, Policy: preflight.DrainPolicy(in.Settings), Jobs: jobs, JobWait: jobWait}
	pin := preflight.Input{Round: in.Round, Order: in.Order, Inventory: in.Inv, Placement: in.Placement,
		Settings: in.Settings, Revision: in.Revision, Components: d.planComponents(in.Round),
		Risks: d.selectorRisks(ctx, kc, in.Settings, jobs), HostConcurrency: d.Config.SSH.Concurrency, DrainConcurrency: kubeConcurrency}
	if pin.DriverContainer, pin.DriverImage, err = driverContainer(ctx, kc, in.Settings); err != nil {
		return plan.Fleet{}, err
	}
	pin.Others = d.planOthers(kc, in.Settings)
	if pin.Promotion, err = d.PromotionGate(ctx, in.Round); err != nil {
		return plan.Fleet{}, err
	}
	return preflight.Run(ctx, pin, h.Steps, drains, preflight.Progress(p))
}

// driverContainer names the GPU servers the intent's gpu.driver_container
// selects and, for precompiled drivers, how a target kernel's image is
// looked up in its registry (kube/driverimage).
func driverContainer(ctx context.Context, kc *kube.Clients, st intent.Settings) (map[string]bool, func(context.Context, string) driverimage.Result, error) {
	if st.GPU == nil || st.GPU.DriverContainer == nil {
		return nil, nil, nil
	}
	dc := st.GPU.DriverContainer
	l, err := kc.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: dc.NodeLabel})
	if err != nil {
		return nil, nil, answer.Fail("Check the API server and call again.", "list the driver-container GPU servers ("+dc.NodeLabel+"): "+err.Error())
	}
	nodes := map[string]bool{}
	for _, n := range l.Items {
		nodes[n.Name] = true
	}
	if !dc.Precompiled {
		return nodes, nil, nil
	}
	im := driverimage.Image{Registry: dc.Registry, Repository: dc.Repository}
	check := func(ctx context.Context, kernel string) driverimage.Result {
		return driverimage.Checker{}.Check(ctx, im, driverimage.Tag(st.GPU.DriverBranch, kernel, dc.OSTag))
	}
	return nodes, check, nil
}

// PlanIntent is what the intent says that shapes the plan of round
// roundID (preflight.IntentOf), with the promotion gate's verdicts.
func (d *Service) PlanIntent(ctx context.Context, roundID string, st intent.Settings, facts map[string]plan.Facts) (plan.Intent, error) {
	gate, err := d.PromotionGate(ctx, roundID)
	if err != nil {
		return plan.Intent{}, err
	}
	comps := d.planComponents(roundID)
	return preflight.CarryLessons(preflight.WithPromotion(preflight.IntentOf(st, comps, facts), gate, facts), gate, comps), nil
}

// planComponents are the intent's components whose lessons and open
// questions the plan lists; none when the intent repository cannot be
// read (the plan then lists no lessons, and the log says why).
func (d *Service) planComponents(roundID string) []*intent.Component {
	r, err := d.IntentRepo(roundID)
	if err != nil {
		return nil
	}
	comps, err := r.Components()
	if err != nil {
		d.Log.Warn("intent components unreadable: the plan lists no lessons", "err", err)
		return nil
	}
	var out []*intent.Component
	for _, cs := range comps {
		c, err := r.Component(cs.Name)
		if err != nil {
			d.Log.Warn("intent component unreadable: the plan lists none of its lessons", "component", cs.Name, "err", err)
			continue
		}
		out = append(out, c)
	}
	return out
}

// InventoryAndPlacement is preflight.Locate; the API server failing it
// is a failure that asks to check it.
func (d *Service) InventoryAndPlacement(ctx context.Context, kc *kube.Clients, settings intent.Settings) (kube.Inventory, kube.Placement, error) {
	inv, pl, err := preflight.Locate(ctx, kc.Kube, kc.Dynamic, settings)
	if err != nil {
		return kube.Inventory{}, kube.Placement{}, answer.Fail("Check the API server and call again.", err.Error())
	}
	return inv, pl, nil
}

// WritePlanDocument runs the fleet-wide preflight and writes plan.json and
// plan.md. An unchanged plan keeps its revision (and its signature); a
// changed one before any window opened becomes the next revision; once a
// window opened, the plan stays as it is (replan_node changes one node).
func (d *Service) WritePlanDocument(ctx context.Context, kc *kube.Clients, s *window.Round, in PreflightInput, p Progress) (plan.Fleet, error) {
	old, had, err := d.FleetPlan(in.Round)
	if err != nil {
		d.Log.Warn("the old plan is unreadable: writing a new one", "round", in.Round, "err", err)
		had = false
	}
	st := s.Journal.State()
	for _, n := range st.Nodes {
		if had && n.Window != round.WindowPending {
			return old, nil
		}
	}
	if had {
		in.Revision = old.Revision
	}
	f, err := d.Preflight(ctx, kc, in, p)
	if err != nil {
		return plan.Fleet{}, err
	}
	if had && f.Digest == old.Digest {
		return old, nil
	}
	if had {
		f.Revision = old.Revision + 1
	}
	if err := d.WriteFleetPlan(in.Round, f); err != nil {
		return plan.Fleet{}, err
	}
	if err := JournalPromotion(s, f); err != nil {
		return plan.Fleet{}, err
	}
	return f, nil
}
