package service

import (
	"context"
	"sync"

	"github.com/mcp-patch/mcp-patch/kube/windowlock"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// leaseKeeping is the process's one keeper of the window Lease, made on
// first use.
type leaseKeeping struct {
	mu     sync.Mutex
	keeper *window.LeaseKeeper
}

// LeaseKeeper is the process's keeper of the window Lease
// (window.LeaseKeeper: a window step runs bound to it, and a lost Lease
// stops the step), renewing it between the window's calls as long as the
// process runs; nil without a cluster (nothing to hold). Its Lease is
// d.Lease when set (tests), else the Lease on the cluster, timed by
// kube.lease_renew and kube.lease_duration.
func (d *Service) LeaseKeeper(ctx context.Context) (*window.LeaseKeeper, error) {
	d.keeper.mu.Lock()
	defer d.keeper.mu.Unlock()
	if d.keeper.keeper != nil {
		return d.keeper.keeper, nil
	}
	lease := d.Lease
	if lease == nil {
		if d.Cluster == nil {
			return nil, nil
		}
		kc, err := d.KubeClients(ctx)
		if err != nil {
			return nil, err
		}
		lease = &windowlock.Lease{Kube: kc.Kube, Config: d.WindowLockConfig()}
	}
	d.keeper.keeper = &window.LeaseKeeper{Lease: lease, BetweenSteps: true, Log: d.Log,
		Timing: window.LeaseTiming{Renew: d.Config.Kube.LeaseRenew.D(), Duration: d.Config.Kube.LeaseDuration.D()}}
	return d.keeper.keeper, nil
}

// renewLease ends the keeper of an earlier term (with leader election,
// a server that led before: its keeper's holding, which it could not
// renew while it followed, is not this term's), so that the next window
// step holds the window Lease afresh, taking it over from a server that
// no longer leads (supersedes).
func (d *Service) renewLease() {
	d.keeper.mu.Lock()
	k := d.keeper.keeper
	d.keeper.keeper = nil
	d.keeper.mu.Unlock()
	if k != nil {
		k.Close()
	}
}

// loseLease gives the window Lease up as lost when this server stops
// leading: the step it has in flight stops at its next safe point (no
// further eviction, no further wait on the host), its record stays with
// this server (a follower commits nothing), and the next leader takes the
// window over and follows the step by observing the node.
func (d *Service) loseLease() {
	if k := d.keptLease(); k != nil {
		k.Lose("this server no longer leads")
	}
}

// keptLease is the keeper when one was made, without making one.
func (d *Service) keptLease() *window.LeaseKeeper {
	d.keeper.mu.Lock()
	defer d.keeper.mu.Unlock()
	return d.keeper.keeper
}

// CloseLease stops renewing the window Lease without releasing it (the
// process ends: the Lease lapses, and the same identity takes it again
// when it starts).
func (d *Service) CloseLease() {
	if k := d.keptLease(); k != nil {
		k.Close()
	}
}

func (d *Service) WindowLockConfig() windowlock.Config {
	return windowlock.Config{Namespace: d.Config.Kube.LeaseNamespace, Identity: d.Identity, LeaseDuration: d.Config.Kube.LeaseDuration.D(),
		Supersedes: d.supersedes}
}

// supersedes: with leader election on, the leader takes the window in
// flight over from holder, a server that no longer leads (a dead or cut
// off leader's window would otherwise wait out its Lease, or forever for
// a server still renewing it after its term ended).
func (d *Service) supersedes(holder string) bool {
	if d.Config == nil || !d.Config.LeaderElection.Enabled {
		return false
	}
	l := d.started()
	return l != nil && l.IsLeader() && holder != l.Identity()
}

// noClusterLease is the Lease of a cluster that cannot be reached: its
// release answers why.
type noClusterLease struct{ err error }

func (l noClusterLease) Hold(context.Context, string, string) error    { return l.err }
func (l noClusterLease) Release(context.Context, string, string) error { return l.err }
