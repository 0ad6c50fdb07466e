package service

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/mcp-patch/mcp-patch/answer"
	"github.com/mcp-patch/mcp-patch/kube/leader"
	"github.com/mcp-patch/mcp-patch/kube/windowlock"
)

// Leadership is this server's place among the servers of its cluster
// when leader_election is on: only the leader acts, and each destructive
// step is fenced on the leader and window Leases just before it acts.
type Leadership interface {
	// Identity is this server's identity on the leader Lease.
	Identity() string
	// Observed waits, bounded by ctx, until the leader Lease was read once.
	Observed(ctx context.Context) error
	// Wait waits, bounded by ctx, until IsLeader is leading.
	Wait(ctx context.Context, leading bool) error
	// IsLeader: this server leads, by its own elector.
	IsLeader() bool
	// Leader is the identity of the leader last seen.
	Leader() string
	// Admit reads the Leases a step is fenced on when it is admitted;
	// Check reads them again just before it acts.
	Admit(ctx context.Context) (leader.Fence, error)
	Check(ctx context.Context, f leader.Fence) error
	// StepDown hands the lead over: the leader lets the Lease go and
	// campaigns again after sitOut; it answers the Lease as held then.
	StepDown(ctx context.Context, sitOut time.Duration) (leader.LeaseState, error)
}

var _ Leadership = (*leader.Elector)(nil)

// leaderKeeping is the process's one elector, made and started on first
// use.
type leaderKeeping struct {
	mu      sync.Mutex
	elector *leader.Elector
}

// Leadership is the election this server takes part in: d.Leader when set
// (tests), else the elector over the cluster, made and started on first
// use; nil when leader_election is off (this server acts alone).
func (d *Service) Leadership(ctx context.Context) (Leadership, error) {
	if d.Leader != nil {
		return d.Leader, nil
	}
	if d.Config == nil || !d.Config.LeaderElection.Enabled {
		return nil, nil
	}
	d.leader.mu.Lock()
	defer d.leader.mu.Unlock()
	if d.leader.elector != nil {
		return d.leader.elector, nil
	}
	if d.Cluster == nil {
		return nil, answer.Refuse("Ask the operator to configure the cluster (kubeconfig), or to turn leader_election off.",
			"leader_election is on but this server has no cluster to hold the leader Lease on", "nothing was executed")
	}
	kc, err := d.KubeClients(ctx)
	if err != nil {
		return nil, fmt.Errorf("leader election: %w", err)
	}
	le := d.Config.LeaderElection
	window := d.WindowLockConfig()
	if window.Name == "" {
		window.Name = windowlock.DefaultName
	}
	e, err := leader.New(kc.Kube, leader.Config{Namespace: d.Config.Kube.LeaseNamespace, Name: le.LeaseName, WindowLease: window.Name,
		Identity: d.Identity, LeaseDuration: le.LeaseDuration.D(), RenewDeadline: le.RenewDeadline.D(), RetryPeriod: le.RetryPeriod.D(),
		OnStopped: d.loseLease},
		d.Log, d.Clock)
	if err != nil {
		return nil, err
	}
	// The election outlives the call that started it: it runs until the
	// server ends (CloseLeader).
	e.Start(context.WithoutCancel(ctx))
	d.leader.elector = e
	return e, nil
}

// Following reports, without waiting, whether this server takes part in
// an election and does not lead now: what it answers then changes nothing
// of the round the leader writes.
func (d *Service) Following() bool {
	l := d.started()
	return l != nil && !l.IsLeader()
}

// started is the election this server takes part in, without starting
// it: nil when leader election is off or not started yet.
func (d *Service) started() Leadership {
	if d.Leader != nil {
		return d.Leader
	}
	d.leader.mu.Lock()
	defer d.leader.mu.Unlock()
	if e := d.leader.elector; e != nil {
		return e
	}
	return nil
}

// CloseLeader ends this server's part in the election; a leader lets
// the leader Lease go, so another server takes over at once.
func (d *Service) CloseLeader() {
	d.leader.mu.Lock()
	e := d.leader.elector
	d.leader.elector = nil
	d.leader.mu.Unlock()
	if e != nil {
		e.Stop()
	}
}

// Fenced is what a destructive step was admitted under when leader
// election is on; nil when it is off.
type Fenced struct {
	l     Leadership
	fence leader.Fence
}

// AdmitLeader is the leader rule of a call that acts (tool, on node:
// window.FleetTarget for the fleet), before anything is done: a follower,
// or a server that cannot tell who leads, is refused with the leader
// named; a server asked to work on the node it runs on is refused, the
// leader after handing the lead over (ownNode); with leader election off,
// nil, nil; the leader gets the fence its step is checked against
// (CheckFence) just before it acts.
func (d *Service) AdmitLeader(ctx context.Context, tool, node string) (*Fenced, error) {
	l, err := d.Leadership(ctx)
	if err != nil {
		return nil, err
	}
	if err := d.Follower(ctx, l, tool); err != nil {
		return nil, err
	}
	if err := d.ownNode(ctx, l, tool, node); err != nil || l == nil {
		return nil, err
	}
	f, err := l.Admit(ctx)
	if err != nil {
		d.Log.Warn("destructive step refused: the fence failed at admission", "tool", tool, "err", err)
		return nil, fenceRefusal(tool, l, err)
	}
	fenced := &Fenced{l: l, fence: f}
	// A term begins from what the previous leader left on the remote.
	if err := d.takeOver(ctx, fenced); err != nil {
		return nil, err
	}
	return fenced, nil
}

// Follower refuses tool on a server that does not lead, naming the
// leader; nil on the leader or with leader election off.
func (d *Service) Follower(ctx context.Context, l Leadership, tool string) error {
	if l == nil {
		return nil
	}
	wait, cancel := context.WithTimeout(ctx, d.Config.LeaderElection.LeaseDuration.D())
	defer cancel()
	if err := l.Observed(wait); err != nil {
		return answer.Refuse("Call again in a moment; if this persists, ask the operator whether this server reaches the API server.",
			fmt.Sprintf("this server cannot tell which server leads: %v", err), tool+" runs only on the leader", "nothing was executed")
	}
	if l.Leader() == l.Identity() {
		// Seen as the holder: the term may be starting or ending.
		if err := l.Wait(wait, true); err == nil {
			return nil
		}
	}
	if l.IsLeader() {
		return nil
	}
	who := l.Leader()
	if who == "" || who == l.Identity() {
		return answer.Refuse("Call again in a moment: the servers are electing their leader.",
			"no server leads now (the leader Lease is free or changing hands)", tool+" runs only on the leader", "nothing was executed")
	}
	return answer.Refuse(fmt.Sprintf("Call the leader, %s: this server answers read-only tools only.", who),
		fmt.Sprintf("this server (%s) is a follower; the leader is %s; call it", l.Identity(), who), "nothing was executed")
}

// Leads is the rule of a call that writes (any tool but a read-only one):
// a follower is refused, naming the leader (Follower); the leader, at the
// first such call of its term, takes the round over from what the previous
// leader left on the remote (takeOver) before the call opens the round.
func (d *Service) Leads(ctx context.Context, l Leadership, tool string) error {
	if err := d.Follower(ctx, l, tool); err != nil || l == nil || !d.handsOver() {
		return err
	}
	f, err := l.Admit(ctx)
	if err != nil {
		return fenceRefusal(tool, l, err)
	}
	return d.takeOver(ctx, &Fenced{l: l, fence: f})
}

// CheckFence is the fence just before a step admitted under f acts: nil
// when the step may act (or leader election is off); else a refusal saying
// nothing was executed, logged.
func (d *Service) CheckFence(ctx context.Context, tool, node string, f *Fenced) error {
	if f == nil {
		return nil
	}
	if err := f.l.Check(ctx, f.fence); err != nil {
		d.Log.Error("destructive step fenced off: it does nothing", "tool", tool, "node", node, "err", err)
		return fenceRefusal(tool, f.l, err)
	}
	return nil
}

// fenceRefusal words a failed fence.
func fenceRefusal(tool string, l Leadership, err error) error {
	next := "Look at round_status on the leader"
	if who := l.Leader(); who != "" && who != l.Identity() {
		next += ", " + who
	}
	next += ", and call the step there; a person checks that only one server works on the cluster."
	return answer.Refuse(next, fmt.Sprintf("%s was fenced off just before it acted: %v", tool, err), "nothing was executed")
}
