package maintainers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
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
// Held for another: ErrKuredLockHeld. A conflict (the DaemonSet
// controller writes the object's status as pods come and go) reads the
// lock again, as kured's next try would.
func HoldKuredLock(ctx context.Context, kc kubernetes.Interface, nodeID string) error {
	err := updateKured(ctx, kc, func(ds *appsv1.DaemonSet) error {
		if v := ds.Annotations[KuredLockAnnotation]; v != "" {
			var cur kuredLock
			if err := json.Unmarshal([]byte(v), &cur); err != nil {
				return fmt.Errorf("read %q: %w", v, err)
			}
			if cur.NodeID == nodeID {
				return errNothingToDo
			}
			return fmt.Errorf("%w (%s)", ErrKuredLockHeld, cur.NodeID)
		}
		lock := kuredLock{NodeID: nodeID, Created: time.Now().UTC()}
		node, err := kc.CoreV1().Nodes().Get(ctx, nodeID, metav1.GetOptions{})
		switch {
		case err == nil:
			lock.Metadata.Unschedulable = node.Spec.Unschedulable
		case !apierrors.IsNotFound(err):
			return fmt.Errorf("read the node: %w", err)
		}
		v, err := json.Marshal(lock)
		if err != nil {
			return err
		}
		if ds.Annotations == nil {
			ds.Annotations = map[string]string{}
		}
		ds.Annotations[KuredLockAnnotation] = string(v)
		return nil
	})
	if err != nil && !errors.Is(err, errNothingToDo) {
		return fmt.Errorf("hold kured's lock for %s: %w", nodeID, err)
	}
	return nil
}

// ReleaseKuredLock removes kured's lock if it names nodeID, as kured's
// Release does; no lock: nothing to do; another holder's:
// ErrKuredLockHeld, and the lock stays.
func ReleaseKuredLock(ctx context.Context, kc kubernetes.Interface, nodeID string) error {
	err := updateKured(ctx, kc, func(ds *appsv1.DaemonSet) error {
		v := ds.Annotations[KuredLockAnnotation]
		if v == "" {
			return errNothingToDo
		}
		var cur kuredLock
		if err := json.Unmarshal([]byte(v), &cur); err != nil {
			return fmt.Errorf("read %q: %w", v, err)
		}
		if cur.NodeID != nodeID {
			return fmt.Errorf("%w (%s)", ErrKuredLockHeld, cur.NodeID)
		}
		delete(ds.Annotations, KuredLockAnnotation)
		return nil
	})
	if err != nil && !errors.Is(err, errNothingToDo) {
		return fmt.Errorf("release kured's lock for %s: %w", nodeID, err)
	}
	return nil
}

// updateKured reads kured's DaemonSet, lets change edit it and writes it
// back with an optimistic update, reading again after a conflict.
func updateKured(ctx context.Context, kc kubernetes.Interface, change func(*appsv1.DaemonSet) error) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ds, err := kc.AppsV1().DaemonSets(KuredNamespace).Get(ctx, KuredName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := change(ds); err != nil {
			return err
		}
		_, err = kc.AppsV1().DaemonSets(KuredNamespace).Update(ctx, ds, metav1.UpdateOptions{})
		return err
	})
}
