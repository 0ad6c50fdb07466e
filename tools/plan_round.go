package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/mcp-patch/mcp-patch/kube"
	"github.com/mcp-patch/mcp-patch/kube/gate"
	"github.com/mcp-patch/mcp-patch/round"
)

// PlanRoundIn names the round.
type PlanRoundIn struct {
	Round string `json:"round" jsonschema:"e.g. 2026-11 (one round a month)"`
}

// PlanRoundOut is the order with its reasons, the placement it rests on,
// the baseline and the compliance clock.
type PlanRoundOut struct {
	Result
	Round     string          `json:"round"`
	Order     *round.Order    `json:"order,omitempty"`
	Placement *kube.Placement `json:"placement,omitempty"`
	Baseline  *gate.Baseline  `json:"baseline,omitempty"`
	ETA       *round.Estimate `json:"eta,omitempty"`
	// Plan is the reviewed plan written to rounds/<id>/plan.md and plan.json.
	Plan *PlanStatus `json:"plan,omitempty"`
}

// PlanRound is the plan_round tool.
func PlanRound() Tool {
	return New[PlanRoundIn, PlanRoundOut](Spec{
		Name:  "plan_round",
		Title: "Plan the round",
		Description: "The order with a reason each (control plane first, the node with the Postgres primary and API VIP last of " +
			"them, a canary GPU server, the rest), the health baseline, the ETA, each node's preflight (packages, kernel, " +
			"GRUB ids, drain preview): plan.md and plan.json, committed. A blocker stops the round before any cordon.",
		Kind: Write, Idempotent: true, OpenWorld: true,
	}, func(ctx context.Context, d *Deps, in PlanRoundIn, p Progress) (PlanRoundOut, error) {
		if d.Book == nil {
			return PlanRoundOut{}, Refuse("Start the server with --intent-repo.", "no intent repository is configured")
		}
		if !round.ValidRoundID(in.Round) {
			return PlanRoundOut{}, Refuse("Use a round id such as 2026-11.", fmt.Sprintf("round id %q is not valid", in.Round))
		}
		if open := d.Book.CurrentID(); open != "" && open != in.Round {
			return PlanRoundOut{}, Refuse("Finish (close or abort) round "+open+" first.", "round "+open+" is still open")
		}
		r, err := d.intentRepo(in.Round)
		if err != nil {
			return PlanRoundOut{}, err
		}
		settings, err := r.RoundSettings()
		if err != nil {
			return PlanRoundOut{}, intentError("read the intent's settings", err)
		}
		kc, err := d.cluster(ctx)
		if err != nil {
			return PlanRoundOut{}, err
		}
		p(0, 5, "inventory and placement")
		inv, pl, err := d.inventoryAndPlacement(ctx, kc, settings)
		if err != nil {
			return PlanRoundOut{}, err
		}
		var nodes []round.NodeInfo
		for _, n := range inv.Nodes {
			nodes = append(nodes, round.NodeInfo{Name: n.Name, ControlPlane: n.ControlPlane, GPU: n.GPUServer, Canary: n.Canary,
				RunningGPUPods: n.RunningGPUPods, VM: n.Machine == "vm"})
		}
		rp := round.Placement{VIPNode: pl.VIP.Node, CanaryNode: pl.Canary.Node}
		for _, pg := range pl.Postgres {
			if pg.Node != "" {
				rp.PostgresPrimaryNodes = append(rp.PostgresPrimaryNodes, pg.Node)
			}
		}
		order, err := round.PlanOrder(nodes, rp)
		if err != nil {
			return PlanRoundOut{}, Fail("Read the reason; the inventory may be incomplete.", "plan the order: "+err.Error())
		}
		soak := 48 * time.Hour
		if k := settings.Kernel; k != nil && k.SoakHours > 0 {
			soak = time.Duration(k.SoakHours) * time.Hour
		}
		j, err := d.Book.Journal(in.Round, true)
		if err != nil {
			return PlanRoundOut{}, err
		}
		s := &session{j: j, id: in.Round, settings: settings, events: d.WindowEvents, now: d.now}
		if st := j.State(); st.Closed || st.Aborted {
			return PlanRoundOut{}, Refuse("Plan a new round with a new id.", "round "+in.Round+" is closed or aborted")
		}
		if j.State().Plan == nil || j.State().Admit(round.StepPlan, "", d.now()) == nil {
			if _, err := j.Plan(order, soak, round.Meta{Detail: fmt.Sprintf("%d nodes", len(order.Positions))}); err != nil {
				return PlanRoundOut{}, ruleRefusal(err)
			}
		}
		out := PlanRoundOut{Round: in.Round, Order: &order, Placement: &pl}
		p(1, 5, "baseline")
		if !j.State().BaselineTaken {
			hc := gate.HealthConfig{}
			if sh := settings.StackHealth; sh != nil {
				hc.CriticalNamespaces = sh.CriticalNamespaces
			}
			if err := s.begin(round.StepBaseline, ""); err != nil {
				return out, err
			}
			base, err := gate.TakeBaseline(ctx, kc.Kube, hc, d.failingVerify(ctx))
			if err != nil {
				return out, errors.Join(Fail("Check the API server; a person signs resume, then plan_round again.", "take the baseline: "+err.Error()),
					s.fail(round.StepBaseline, "", err.Error()))
			}
			b, _ := json.MarshalIndent(base, "", "  ")
			if err := d.Book.WriteFile(in.Round, baselineFile, append(b, '\n')); err != nil {
				return out, err
			}
			if err := s.finish(round.StepBaseline, "", "", fmt.Sprintf("%d not-ready nodes, %d unhealthy workloads, %d failing verify", len(base.NotReadyNodes), len(base.UnhealthyWorkloads), len(base.FailingVerify))); err != nil {
				return out, err
			}
			out.Baseline = &base
		}
		p(2, 5, "estimate")
		deadline := time.Time{}
		if k := settings.Kernel; k != nil && k.ComplianceDeadlineDays.Internal > 0 {
			deadline = d.now().Add(time.Duration(k.ComplianceDeadlineDays.Internal) * 24 * time.Hour)
		}
		st := j.State()
		if est, err := round.ETA(st, st.WindowDurations(), d.now(), deadline, etaConfig(settings)); err == nil {
			out.ETA = &est
			if !deadline.IsZero() && !est.Meets {
				out.Reasons = append(out.Reasons, "the estimate does not meet the intent's compliance deadline: tell a person (escalate, do not rush)")
			}
		}
		out.Reasons = append(out.Reasons, order.Notes...)
		p(3, 5, "fleet-wide preflight")
		fl, perr := d.writePlanDocument(ctx, kc, s, preflightInput{round: in.Round, order: order, inv: inv, placement: pl, settings: settings}, p)
		if perr == nil {
			out.Plan, perr = d.planStatus(in.Round)
		}
		p(4, 5, "commit")
		if c, err := d.commitRound(ctx, s, "plan"); err == nil {
			out.Reasons = append(out.Reasons, "plan committed to the intent repository ("+short(c)+"): rounds/"+in.Round+"/plan.md")
		} else {
			out.Reasons = append(out.Reasons, "plan not committed: "+err.Error())
		}
		if perr != nil {
			return out, perr
		}
		if !fl.Ready() {
			return out, d.stopOnBlockers(s, fl, out.Reasons)
		}
		out.Reasons = append(out.Reasons, fl.Summary...)
		out.NextAction = "A person reads rounds/" + in.Round + "/plan.md and signs the plan (sign_plan); then start with " + order.Positions[0].Node + "."
		// sign_plan answers approval_required with the plan's statement.
		out.NextCall = CallTo("sign_plan")
		return out, nil
	})
}
