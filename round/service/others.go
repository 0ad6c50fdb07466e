package service

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/mcp-patch/mcp-patch/answer"
	"github.com/mcp-patch/mcp-patch/intent"
	"github.com/mcp-patch/mcp-patch/kube"
	"github.com/mcp-patch/mcp-patch/kube/actors"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/plan/preflight"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// othersKeeping is the server's memory of the other actors: when it first
// saw each hold and first asked the maintenance operator for each node
// (kube/actors' Watch and Requests), across calls.
type othersKeeping struct {
	mu       sync.Mutex
	watch    *actors.Watch
	requests *actors.Requests
}

// defaultOthersWait bounds the wait for another party when the intent
// names no other_actors.wait_minutes.
const defaultOthersWait = 30 * time.Minute

// watchOthers sets who else maintains a node, looked at before a cordon,
// on w: the intent's other_actors settings (kured's lock, this server's
// NodeMaintenance requestor id, the standing taints, the wait's bound) or
// their defaults; and what the round claims from them (kured's lock,
// unless other_actors.kured.take_lock is false; a GPU node's
// driver-upgrade skip). Test doubles of the cluster (Drainer) look for nobody
// unless Others is set.
func (d *Service) watchOthers(ctx context.Context, s *window.Round, w *window.Window) error {
	oa := s.Settings.OtherActors
	w.OthersWait = defaultOthersWait
	if oa != nil && oa.WaitMinutes > 0 {
		w.OthersWait = time.Duration(oa.WaitMinutes) * time.Minute
	}
	if d.Others != nil {
		w.Others, w.Claims = d.Others, d.Claims
		return nil
	}
	if d.Drainer != nil || d.Cluster == nil {
		return nil
	}
	kc, err := d.KubeClients(ctx)
	if err != nil {
		return err
	}
	kured, self := d.othersSettings(oa)
	d.others.mu.Lock()
	defer d.others.mu.Unlock()
	if d.others.watch == nil {
		d.others.watch = &actors.Watch{Now: d.Clock}
	}
	wt := d.others.watch
	wt.Kube, wt.Dynamic, wt.Identity, wt.Kured, wt.Self = kc.Kube, kc.Dynamic, d.ActorIdentity(), kured, self
	w.Others = wt
	w.Claims = &actors.Claims{Kube: kc.Kube, Kured: kured, TakeLock: oa == nil || oa.Kured.TakesLock(),
		LockID: self.KuredLockID, Round: s.ID, Now: d.Clock}
	if self.RequestorID != "" && kc.Dynamic != nil {
		if d.others.requests == nil {
			d.others.requests = &actors.Requests{Now: d.Clock}
		}
		q := d.others.requests
		q.Dynamic, q.Namespace, q.RequestorID, q.Round = kc.Dynamic, d.Config.Kube.LeaseNamespace, self.RequestorID, s.ID
		w.Requestor, w.Asked = q, q.Asked
	}
	return nil
}

// othersSettings are kured's lock and how this server shows itself to the
// others, from the intent's other_actors (nil: the defaults).
func (d *Service) othersSettings(oa *intent.OtherActorsSettings) (actors.KuredRef, actors.Self) {
	kured, self := actors.DefaultKured, actors.Self{KuredLockID: "mcp-patch:" + d.ActorIdentity()}
	if oa != nil {
		if oa.Kured != nil {
			kured = actors.KuredRef{Namespace: oa.Kured.Namespace, Name: oa.Kured.DaemonSet, Annotation: oa.Kured.LockAnnotation}
		}
		self.RequestorID, self.StandingTaints = oa.RequestorID, oa.StandingTaints
	}
	return kured, self
}

// planOthers is who else maintains a node as plan_round shows it: a
// Watch of its own (it reads only), nil for a test double of the cluster.
func (d *Service) planOthers(kc *kube.Clients, st intent.Settings) preflight.Others {
	if d.Others != nil {
		return d.Others
	}
	if d.Drainer != nil || kc == nil || kc.Kube == nil {
		return nil
	}
	kured, self := d.othersSettings(st.OtherActors)
	return &actors.Watch{Kube: kc.Kube, Dynamic: kc.Dynamic, Identity: d.ActorIdentity(), Kured: kured, Self: self, Now: d.Clock}
}

// ReleaseKuredLock gives kured's lock back as the round ends (close_round,
// an abort), journaled (window.Window.ReleaseKuredLock). A cluster that
// cannot be reached while the journal says the round holds the lock is a
// journaled failure too: kured stays held back until a person or a later
// call lets go.
func (d *Service) ReleaseKuredLock(ctx context.Context, s *window.Round) ([]string, error) {
	w := &window.Window{Round: s.ID, Rec: s.Rec(), Now: d.Clock, Log: d.Log}
	if err := d.watchOthers(ctx, s, w); err != nil {
		k := s.Journal.Shared().KuredLock
		if k == nil || !k.Held {
			return nil, nil
		}
		why := "kured's reboot lock was not given back: the cluster could not be reached: " + err.Error()
		if _, jerr := s.Journal.OtherActors(round.Record{Event: round.EventKuredLockReleaseFailed, Detail: why}); jerr != nil {
			return nil, errors.Join(err, fmt.Errorf("record that kured's lock was not given back: %w", jerr))
		}
		return []string{why}, answer.Fail("Call again once the API server answers; or a person removes the round's holder (mcp-patch:…) from kured's lock annotation on its DaemonSet.", why)
	}
	reasons, err := w.ReleaseKuredLock(ctx)
	return reasons, FromWindow(err)
}

// ReleaseWindow lets go of what node's ended window held (releaseEnded's
// work for a window close_window ended): the Lease, the silence, the
// NodeMaintenance request and the driver-upgrade skip, journaled.
func (d *Service) ReleaseWindow(ctx context.Context, s *window.Round, node string) ([]string, error) {
	return d.releaseNode(ctx, s, node)
}
