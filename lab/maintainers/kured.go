package maintainers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// KuredLockAnnotation is kured's default --lock-annotation, on its
// DaemonSet (kubereboot/kured cmd/kured/main.go).
const KuredLockAnnotation = "weave.works/kured-node-lock"

// ErrKuredLockHeld: kured's lock names another holder.
var ErrKuredLockHeld = errors.New("kured's lock is held by another node")

// kuredLock is kured 1.23's lock value for --concurrency=1
// (pkg/daemonsetlock: LockAnnotationValue, NodeMeta).
type kuredLock struct {
	NodeID   string `json:"nodeID"`
	Metadata struct {
		Unschedulable bool `json:"unschedulable"`
	} `json:"metadata,omitempty"`
	Created time.Time     `json:"created"`
	TTL     time.Duration `json:"TTL"`
}

// HoldKuredLock takes kured's lock on kube-system/kured for nodeID as
// kured 1.23 does with --concurrency=1 and no --lock-ttl: written only
// while free (an optimistic update), metadata.unschedulable the node's
// cordon before kured would cordon it (false where no such node exists),
// created now in UTC, TTL 0. Held for nodeID already: nothing to do.
// Held for another: ErrKuredLockHeld.
func HoldKuredLock(ctx context.Context, kc kubernetes.Interface, nodeID string) error {
	ds, err := kc.AppsV1().DaemonSets(KuredNamespace).Get(ctx, KuredName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("hold kured's lock for %s: %w", nodeID, err)
	}
	if v := ds.Annotations[KuredLockAnnotation]; v != "" {
		var cur kuredLock
		if err := json.Unmarshal([]byte(v), &cur); err != nil {
			return fmt.Errorf("hold kured's lock for %s: read %q: %w", nodeID, v, err)
		}
		if cur.NodeID == nodeID {
			return nil
		}
		return fmt.Errorf("hold kured's lock for %s: %w (%s)", nodeID, ErrKuredLockHeld, cur.NodeID)
	}
	lock := kuredLock{NodeID: nodeID, Created: time.Now().UTC()}
	node, err := kc.CoreV1().Nodes().Get(ctx, nodeID, metav1.GetOptions{})
	switch {
	case err == nil:
		lock.Metadata.Unschedulable = node.Spec.Unschedulable
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("hold kured's lock for %s: read the node: %w", nodeID, err)
	}
	v, err := json.Marshal(lock)
	if err != nil {
		return fmt.Errorf("hold kured's lock for %s: %w", nodeID, err)
	}
	if ds.Annotations == nil {
		ds.Annotations = map[string]string{}
	}
	ds.Annotations[KuredLockAnnotation] = string(v)
	if _, err := kc.AppsV1().DaemonSets(KuredNamespace).Update(ctx, ds, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("hold kured's lock for %s: %w", nodeID, err)
	}
	return nil
}

// ReleaseKuredLock removes kured's lock if it names nodeID, as kured's
// Release does; no lock: nothing to do; another holder's:
// ErrKuredLockHeld, and the lock stays.
func ReleaseKuredLock(ctx context.Context, kc kubernetes.Interface, nodeID string) error {
	ds, err := kc.AppsV1().DaemonSets(KuredNamespace).Get(ctx, KuredName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("release kured's lock for %s: %w", nodeID, err)
	}
	v := ds.Annotations[KuredLockAnnotation]
	if v == "" {
		return nil
	}
	var cur kuredLock
	if err := json.Unmarshal([]byte(v), &cur); err != nil {
		return fmt.Errorf("release kured's lock for %s: read %q: %w", nodeID, v, err)
	}
	if cur.NodeID != nodeID {
		return fmt.Errorf("release kured's lock for %s: %w (%s)", nodeID, ErrKuredLockHeld, cur.NodeID)
	}
	delete(ds.Annotations, KuredLockAnnotation)
	if _, err := kc.AppsV1().DaemonSets(KuredNamespace).Update(ctx, ds, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("release kured's lock for %s: %w", nodeID, err)
	}
	return nil
}
