package service

import (
	"context"
	"fmt"
	"time"

	"github.com/mcp-patch/mcp-patch/answer"
	"github.com/mcp-patch/mcp-patch/intent"
	"github.com/mcp-patch/mcp-patch/kube"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/plan/preflight"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// Planning is a round being planned: its order recorded, the cluster's
// inventory and placement it was decided from, and its clocks.
type Planning struct {
	Round     *window.Round
	Clients   *kube.Clients
	Settings  intent.Settings
	Inventory kube.Inventory
	Placement kube.Placement
	Order     round.Order
	// Deadline is the round's compliance deadline (zero: none).
	Deadline time.Time
}

// PlanOrder opens round id for planning (window.AdmitPlanRound): it reads
// the intent's settings, the cluster's inventory and placement, decides
// the order and records it in the round's journal when it is due
// (window.DecidePlanOrder).
func (d *Service) PlanOrder(ctx context.Context, id string, p Progress) (Planning, error) {
	if d.Book == nil {
		return Planning{}, answer.Refuse("Start the server with --intent-repo.", "no intent repository is configured")
	}
	if err := window.AdmitPlanRound(id, d.Book.CurrentID()); err != nil {
		return Planning{}, err
	}
	env, envs, inEnv, err := d.Environment()
	if err != nil {
		return Planning{}, err
	}
	if inEnv {
		if err := RoundOfEnvironment(id, env.Name, envs); err != nil {
			return Planning{}, err
		}
	}
	r, err := d.IntentRepo(id)
	if err != nil {
		return Planning{}, err
	}
	settings, err := r.RoundSettings()
	if err != nil {
		return Planning{}, IntentError("read the intent's settings", err)
	}
	kc, err := d.KubeClients(ctx)
	if err != nil {
		return Planning{}, err
	}
	if inEnv {
		if err := EnvironmentReach(env, kc.Context, d.Config.SSH.Inventory, d.Config.IntentRepo); err != nil {
			return Planning{}, err
		}
	}
	p(0, 0, "inventory and placement") // the total is known with the order
	inv, pl, err := d.InventoryAndPlacement(ctx, kc, settings)
	if err != nil {
		return Planning{}, err
	}
	nodes, rp := preflight.OrderInput(inv, pl)
	order, err := round.PlanOrder(nodes, rp)
	if err != nil {
		return Planning{}, answer.Fail("Read the reason; the inventory may be incomplete.", "plan the order: "+err.Error())
	}
	var soakHours, deadlineDays int
	if k := settings.Kernel; k != nil {
		soakHours, deadlineDays = k.SoakHours, k.ComplianceDeadlineDays.Internal
	}
	if inEnv {
		// The environment's compliance clock: 2 days external-facing,
		// 14 internal, unless environments.yaml says otherwise.
		deadlineDays = env.ComplianceDeadlineDays
	}
	soak, deadline := window.RoundClocks(soakHours, deadlineDays, d.Clock())
	j, err := d.Book.Journal(id, true)
	if err != nil {
		return Planning{}, err
	}
	s := &window.Round{Journal: j, ID: id, Settings: settings, Book: d.Book, Events: d.WindowEvents, Now: d.Clock, Log: d.Log}
	due, err := window.DecidePlanOrder(j.State(), d.Clock())
	if err != nil {
		return Planning{}, err
	}
	if due {
		if _, err := j.Plan(order, soak, round.Meta{Detail: fmt.Sprintf("%d nodes", len(order.Positions))}); err != nil {
			return Planning{}, RuleRefusal(err)
		}
	}
	return Planning{Round: s, Clients: kc, Settings: settings, Inventory: inv, Placement: pl, Order: order, Deadline: deadline}, nil
}
