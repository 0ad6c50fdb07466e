package service

import (
	"context"
	"sync"
	"time"

	"github.com/mcp-patch/mcp-patch/kube/actors"
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
// their defaults. Test doubles of the cluster (Drainer) look for nobody
// unless Others is set.
func (d *Service) watchOthers(ctx context.Context, s *window.Round, w *window.Window) error {
	oa := s.Settings.OtherActors
	w.OthersWait = defaultOthersWait
	if oa != nil && oa.WaitMinutes > 0 {
		w.OthersWait = time.Duration(oa.WaitMinutes) * time.Minute
	}
	if d.Others != nil {
		w.Others = d.Others
		return nil
	}
	if d.Drainer != nil || d.Cluster == nil {
		return nil
	}
	kc, err := d.KubeClients(ctx)
	if err != nil {
		return err
	}
	kured, self := actors.DefaultKured, actors.Self{KuredLockID: "mcp-patch:" + d.Identity}
	if oa != nil {
		if oa.Kured != nil {
			kured = actors.KuredRef{Namespace: oa.Kured.Namespace, Name: oa.Kured.DaemonSet, Annotation: oa.Kured.LockAnnotation}
		}
		self.RequestorID, self.StandingTaints = oa.RequestorID, oa.StandingTaints
	}
	d.others.mu.Lock()
	defer d.others.mu.Unlock()
	if d.others.watch == nil {
		d.others.watch = &actors.Watch{Now: d.Clock}
	}
	wt := d.others.watch
	wt.Kube, wt.Dynamic, wt.Identity, wt.Kured, wt.Self = kc.Kube, kc.Dynamic, d.Identity, kured, self
	w.Others = wt
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
