package service

import (
	"context"
	"errors"
	"fmt"

	"github.com/mcp-patch/mcp-patch/answer"
	"github.com/mcp-patch/mcp-patch/kube/leader"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// OwnNode is what a server does with a destructive step on a node, seen
// from the node it runs on.
type OwnNode int

const (
	// OwnNodeGoOn: the step works on another node, the fleet, or this
	// server runs on no cluster node.
	OwnNodeGoOn OwnNode = iota
	// OwnNodeHandOver: the leader is asked to work on the node it runs
	// on; it steps down so that another server runs that window.
	OwnNodeHandOver
	// OwnNodeRefuse: the server runs on the node and has no one to hand
	// over to (leader election off), or does not lead.
	OwnNodeRefuse
)

// DecideOwnNode is the rule that a server never runs a destructive step on
// the node it runs on (runsOn, config node_name): a drain would evict the
// server mid-step and a reboot would stop it. target is the step's node
// (window.FleetTarget for the fleet); election is leader_election on,
// leads whether this server leads.
func DecideOwnNode(runsOn, target string, election, leads bool) OwnNode {
	switch {
	case runsOn == "" || target == "" || target == window.FleetTarget || target != runsOn:
		return OwnNodeGoOn
	case election && leads:
		return OwnNodeHandOver
	}
	return OwnNodeRefuse
}

// ownNode applies DecideOwnNode to tool on node before anything is done:
// nil to go on; else a refusal saying nothing was executed. The leader
// steps down first, so that the other server runs the window, and the
// refusal says who leads now.
func (d *Service) ownNode(ctx context.Context, l Leadership, tool, node string) error {
	runsOn := ""
	if d.Config != nil {
		runsOn = d.Config.NodeName
	}
	leads := l != nil && l.IsLeader()
	rule := fmt.Sprintf("this server runs on %s, the node %s works on: a server never runs a destructive step on the node it runs on (a drain would evict it, a reboot stop it)", runsOn, tool)
	switch DecideOwnNode(runsOn, node, l != nil, leads) {
	case OwnNodeGoOn:
		return nil
	case OwnNodeRefuse:
		if l == nil {
			return answer.Refuse(fmt.Sprintf("Run %s's window from a server that does not run on %s: an admin host, or a second replica with leader_election on.", node, runsOn),
				rule, "leader_election is off: there is no other server to hand the window to", "nothing was executed")
		}
		return answer.Refuse("Call round_status, then the leader named there.", rule, "this server does not lead", "nothing was executed")
	}
	wait := d.Config.LeaderElection.LeaseDuration.D()
	bounded, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	held, err := l.StepDown(bounded, wait)
	switch {
	case errors.Is(err, leader.ErrNotLeading):
		return answer.Refuse("Call round_status, then the leader named there.", rule, "this server no longer leads", "nothing was executed")
	case err != nil:
		d.Log.Error("leader could not hand over before the window of the node it runs on", "tool", tool, "node", node, "err", err)
		return answer.Refuse("Call round_status in a moment; if this server still leads, a person looks at the leader Lease.",
			rule, fmt.Sprintf("handing the lead over was not confirmed: %v", err), "nothing was executed")
	}
	d.Log.Warn("leader handed over before the window of the node it runs on", "tool", tool, "node", node, "leader_lease", held.String())
	reasons := []string{rule, "this server (" + l.Identity() + ") handed the lead over: the leader Lease is " + held.String()}
	switch {
	case held.Holder != "" && held.Holder != l.Identity():
		return answer.Refuse(fmt.Sprintf("Call %s again on the new leader, %s.", tool, held.Holder), append(reasons, "nothing was executed")...)
	case held.Holder == l.Identity():
		reasons = append(reasons, fmt.Sprintf("its release did not reach the API server: the Lease lapses within %v", wait))
	}
	return answer.Refuse(fmt.Sprintf("Call %s again in a few seconds: the other server takes the lead within %v (round_status there names it).", tool, wait),
		append(reasons, "nothing was executed")...)
}
