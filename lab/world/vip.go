package world

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcp-patch/mcp-patch/kube"
)

// reconcileVIP plays kube-vip's leader election: the holder renews the
// Lease while its host is up; once the Lease has expired (its holder's
// host down) or has been released (no holder), a control-plane node whose
// host is up takes it, preferring one that is not cordoned.
func (w *World) reconcileVIP(ctx context.Context) error {
	o := w.opts
	leases := w.kc.CoordinationV1().Leases(o.Names.VIPLeaseNamespace)
	lease, err := leases.Get(ctx, o.Names.VIPLeaseName, metav1.GetOptions{})
	if isNotFound(err) {
		// Deleted: kube-vip's election creates it again.
		holder := w.pickVIPHolder("")
		if holder == "" {
			return nil
		}
		return w.createVIPLease(ctx, holder)
	}
	if err != nil {
		return fmt.Errorf("read VIP lease: %w", err)
	}
	now := time.Now()
	holder := ""
	if lease.Spec.HolderIdentity != nil {
		holder = *lease.Spec.HolderIdentity
	}
	dur := o.VIPLeaseDuration
	if lease.Spec.LeaseDurationSeconds != nil {
		dur = time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second
	}
	renewed := time.Time{}
	if lease.Spec.RenewTime != nil {
		renewed = lease.Spec.RenewTime.Time
	}
	expired := renewed.Add(dur).Before(now)

	switch {
	case holder != "" && w.isCP(holder) && w.hostUp(holder):
		if now.Sub(renewed) < dur/3 {
			return nil
		}
		lease.Spec.RenewTime = &metav1.MicroTime{Time: now}
	case holder == "" || expired || !w.isCP(holder):
		next := w.pickVIPHolder(holder)
		if next == "" {
			return nil
		}
		t := metav1.NewMicroTime(now)
		secs := int32(o.VIPLeaseDuration / time.Second)
		transitions := int32(0)
		if lease.Spec.LeaseTransitions != nil {
			transitions = *lease.Spec.LeaseTransitions
		}
		transitions++
		lease.Spec.HolderIdentity = &next
		lease.Spec.AcquireTime = &t
		lease.Spec.RenewTime = &t
		lease.Spec.LeaseDurationSeconds = &secs
		lease.Spec.LeaseTransitions = &transitions
		w.log.Info("lab VIP moved", "from", holder, "to", next)
	default:
		// The holder is down and its lease has not expired yet.
		return nil
	}
	if _, err := leases.Update(ctx, lease, metav1.UpdateOptions{FieldManager: fieldManager}); err != nil {
		return fmt.Errorf("update VIP lease: %w", err)
	}
	return nil
}

// pickVIPHolder returns a control-plane host that is up with a Ready
// Node, preferring an uncordoned one and not the previous holder.
func (w *World) pickVIPHolder(previous string) string {
	var fallback string
	for _, pass := range []int{0, 1} {
		for _, h := range w.cps {
			if !w.hostUp(h.Name) {
				continue
			}
			node, err := w.nodes.Get(h.Name)
			if err != nil || !kube.NodeReady(node) {
				continue
			}
			if pass == 0 && (node.Spec.Unschedulable || h.Name == previous) {
				if fallback == "" {
					fallback = h.Name
				}
				continue
			}
			return h.Name
		}
	}
	return fallback
}

func (w *World) isCP(name string) bool {
	_, ok := w.etcdIndex[name]
	return ok
}

// VIPHolder reads the kube-vip Lease's holder.
func (w *World) VIPHolder(ctx context.Context) (string, error) {
	o := w.opts
	lease, err := w.kc.CoordinationV1().Leases(o.Names.VIPLeaseNamespace).Get(ctx, o.Names.VIPLeaseName, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("read VIP lease: %w", err)
	}
	if lease.Spec.HolderIdentity == nil {
		return "", nil
	}
	return *lease.Spec.HolderIdentity, nil
}
