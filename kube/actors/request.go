package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// The round as one maintenance requestor among others: where the
// maintenance operator runs, each window asks for its node through a
// NodeMaintenance of its own (named <prefix>-<node>, requestorID this
// server's), so the GPU and network operators see the node is taken and
// wait; the operator's Ready says the node is the round's to work on. The
// request neither cordons nor drains (cordon: false, no drainSpec): the
// round does both itself, under its own records. The window removes it on
// every ending.

// RequestPrefix names this server's NodeMaintenance objects.
const RequestPrefix = "mcp-patch"

// ErrNotServed: the cluster does not serve NodeMaintenance (no maintenance
// operator); there is nothing to request.
var ErrNotServed = errors.New("the cluster does not serve nodemaintenances.maintenance.nvidia.com")

// RequestName is this server's NodeMaintenance name for node.
func RequestName(node string) string { return RequestPrefix + "-" + node }

// Request is the outcome of asking.
type Request struct {
	Namespace, Name string
	// Ready: the maintenance operator marked it Ready (the node is the
	// round's); Phase is its Ready condition's reason.
	Ready bool
	Phase string
	// Created: this call created it (false: it was there already).
	Created bool
}

// RequestMaintenance creates this server's NodeMaintenance for node in ns
// (or finds the one it made before) and says whether the operator made it
// Ready. ErrNotServed where no maintenance operator is installed.
func RequestMaintenance(ctx context.Context, dyn dynamic.Interface, ns, node, requestorID, round string) (Request, error) {
	res := dyn.Resource(NodeMaintenances).Namespace(ns)
	r := Request{Namespace: ns, Name: RequestName(node)}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": NodeMaintenances.Group + "/" + NodeMaintenances.Version,
		"kind":       "NodeMaintenance",
		"metadata": map[string]any{"name": r.Name, "namespace": ns,
			"labels":      map[string]any{"app.kubernetes.io/managed-by": "mcp-patch"},
			"annotations": map[string]any{"mcp-patch.io/round": round}},
		"spec": map[string]any{"requestorID": requestorID, "nodeName": node, "cordon": false},
	}}
	got, err := res.Create(ctx, obj, metav1.CreateOptions{})
	switch {
	case err == nil:
		r.Created = true
	case apierrors.IsAlreadyExists(err):
		got, err = res.Get(ctx, r.Name, metav1.GetOptions{})
		if err != nil {
			return r, fmt.Errorf("read NodeMaintenance %s/%s: %w", ns, r.Name, err)
		}
		if id, _, _ := unstructured.NestedString(got.Object, "spec", "requestorID"); id != requestorID {
			return r, fmt.Errorf("NodeMaintenance %s/%s belongs to requestor %q, not this server's %q: it is left as it is", ns, r.Name, id, requestorID)
		}
	case notServed(err):
		return r, ErrNotServed
	default:
		return r, fmt.Errorf("create NodeMaintenance %s/%s: %w", ns, r.Name, err)
	}
	r.Phase, r.Ready = readyOf(got)
	return r, nil
}

// MaintenanceReady reads this server's request for node again.
func MaintenanceReady(ctx context.Context, dyn dynamic.Interface, ns, node string) (Request, error) {
	r := Request{Namespace: ns, Name: RequestName(node)}
	got, err := dyn.Resource(NodeMaintenances).Namespace(ns).Get(ctx, r.Name, metav1.GetOptions{})
	if err != nil {
		return r, fmt.Errorf("read NodeMaintenance %s/%s: %w", ns, r.Name, err)
	}
	r.Phase, r.Ready = readyOf(got)
	return r, nil
}

// ReleaseMaintenance deletes this server's request for node, if it is
// there and this server's; gone already is released. Another requestor's
// object of that name is left as it is.
func ReleaseMaintenance(ctx context.Context, dyn dynamic.Interface, ns, node, requestorID string) (bool, error) {
	res := dyn.Resource(NodeMaintenances).Namespace(ns)
	name := RequestName(node)
	got, err := res.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		return false, nil // gone already, or never served
	case err != nil:
		return false, fmt.Errorf("read NodeMaintenance %s/%s: %w", ns, name, err)
	}
	if id, _, _ := unstructured.NestedString(got.Object, "spec", "requestorID"); id != requestorID {
		return false, fmt.Errorf("NodeMaintenance %s/%s belongs to requestor %q, not this server's: left as it is", ns, name, id)
	}
	uid := got.GetUID()
	err = res.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) {
		return false, fmt.Errorf("delete NodeMaintenance %s/%s: %w", ns, name, err)
	}
	return err == nil, nil
}

// notServed says whether err means the resource is not served at all
// (a NotFound on the collection, a no-match from a REST mapper).
func notServed(err error) bool {
	if err == nil {
		return false
	}
	if meta.IsNoMatchError(err) {
		return true
	}
	var st apierrors.APIStatus
	if errors.As(err, &st) && st.Status().Details != nil && st.Status().Details.Name != "" {
		return false // a named object (a namespace, say) was not found
	}
	return apierrors.IsNotFound(err)
}

func readyOf(obj *unstructured.Unstructured) (string, bool) {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		if cm, ok := c.(map[string]any); ok && cm["type"] == "Ready" {
			reason, _ := cm["reason"].(string)
			return reason, cm["status"] == "True"
		}
	}
	return "", false
}

// errConflict marks a write refused because the object changed since it
// was read: the caller reads again and decides again.
var errConflict = errors.New("changed since it was read")

func conflicted(err error) bool { return errors.Is(err, errConflict) }

// KuredHold is kured's lock as the round takes it.
type KuredHold struct {
	// Installed: kured's DaemonSet exists (false: nothing to take).
	Installed bool
	// Taken: this call wrote the lock; Held: the round holds it now.
	Taken, Held bool
	// Other is kured's own holder when the lock is someone else's.
	Other []KuredLock
}

// TakeKuredLock takes kured's lock for the round, as kured's own
// protocol takes it (the annotation on its DaemonSet, written only while
// free, with an optimistic update), so kured reboots no node while the
// round runs. Held by kured for a node: not taken, Other says whose. A
// kured that is not installed: nothing to take.
//
// The DaemonSet's status changes under the lock (its controller writes
// it): a conflict reads the lock again and decides again, a few times.
func TakeKuredLock(ctx context.Context, kc kubernetes.Interface, ref KuredRef, lockID string, now time.Time) (KuredHold, error) {
	var h KuredHold
	err := retry.OnError(retry.DefaultRetry, conflicted, func() error {
		var err error
		h, err = takeKuredLock(ctx, kc, ref, lockID, now)
		return err
	})
	return h, err
}

func takeKuredLock(ctx context.Context, kc kubernetes.Interface, ref KuredRef, lockID string, now time.Time) (KuredHold, error) {
	ann := ref.Annotation
	if ann == "" {
		ann = KuredLockAnnotation
	}
	ds, err := kc.AppsV1().DaemonSets(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return KuredHold{}, nil
	}
	if err != nil {
		return KuredHold{}, fmt.Errorf("read kured's daemonset %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	locks, err := ParseKuredLock(ds.Annotations[ann])
	if err != nil {
		return KuredHold{Installed: true}, err
	}
	var others []KuredLock
	for _, l := range locks {
		if l.NodeID == lockID {
			return KuredHold{Installed: true, Held: true}, nil
		}
		if l.TTL > 0 && !l.Created.IsZero() && now.After(l.Created.Add(l.TTL)) {
			continue
		}
		others = append(others, l)
	}
	if len(others) > 0 {
		return KuredHold{Installed: true, Other: others}, nil
	}
	v, err := json.Marshal(map[string]any{"nodeID": lockID, "metadata": map[string]any{"unschedulable": false},
		"created": now.UTC().Format(time.RFC3339Nano), "TTL": 0})
	if err != nil {
		return KuredHold{Installed: true}, err
	}
	if ds.Annotations == nil {
		ds.Annotations = map[string]string{}
	}
	ds.Annotations[ann] = string(v)
	if _, err := kc.AppsV1().DaemonSets(ref.Namespace).Update(ctx, ds, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsConflict(err) {
			return KuredHold{Installed: true}, fmt.Errorf("kured's lock on %s/%s changed while the round took it: look again: %w", ref.Namespace, ref.Name, errConflict)
		}
		return KuredHold{Installed: true}, fmt.Errorf("take kured's lock on %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	return KuredHold{Installed: true, Taken: true, Held: true}, nil
}

// ReleaseKuredLock lets go of kured's lock if the round holds it; a lock
// that is kured's own, or absent, is left as it is.
// A conflict (the DaemonSet changed since it was read) reads it again.
func ReleaseKuredLock(ctx context.Context, kc kubernetes.Interface, ref KuredRef, lockID string) (bool, error) {
	var gone bool
	err := retry.OnError(retry.DefaultRetry, conflicted, func() error {
		var err error
		gone, err = releaseKuredLock(ctx, kc, ref, lockID)
		return err
	})
	return gone, err
}

func releaseKuredLock(ctx context.Context, kc kubernetes.Interface, ref KuredRef, lockID string) (bool, error) {
	ann := ref.Annotation
	if ann == "" {
		ann = KuredLockAnnotation
	}
	ds, err := kc.AppsV1().DaemonSets(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read kured's daemonset %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	locks, err := ParseKuredLock(ds.Annotations[ann])
	if err != nil {
		return false, fmt.Errorf("daemonset %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	if len(locks) != 1 || locks[0].NodeID != lockID {
		return false, nil // not the round's: never touched
	}
	p, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": ds.ResourceVersion, "annotations": map[string]any{ann: nil}}})
	if err != nil {
		return false, err
	}
	if _, err := kc.AppsV1().DaemonSets(ref.Namespace).Patch(ctx, ref.Name, types.MergePatchType, p, metav1.PatchOptions{}); err != nil {
		if apierrors.IsConflict(err) {
			err = fmt.Errorf("%w: %w", errConflict, err)
		}
		return false, fmt.Errorf("release kured's lock on %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	return true, nil
}

// Requests answers round/window's Requestor with this server's
// NodeMaintenance requests in Namespace; it remembers when it first asked
// for each node (Asked), for the wait's bound.
type Requests struct {
	Dynamic     dynamic.Interface
	Namespace   string
	RequestorID string
	Round       string
	Now         func() time.Time

	mu    sync.Mutex
	asked map[string]time.Time
}

// Request makes or finds the request for node.
func (q *Requests) Request(ctx context.Context, node string) (served, ready bool, phase string, err error) {
	r, err := RequestMaintenance(ctx, q.Dynamic, q.Namespace, node, q.RequestorID, q.Round)
	if errors.Is(err, ErrNotServed) {
		return false, false, "", nil
	}
	if err != nil {
		return true, false, "", err
	}
	q.mu.Lock()
	if q.asked == nil {
		q.asked = map[string]time.Time{}
	}
	if _, ok := q.asked[node]; !ok {
		q.asked[node] = q.now()
	}
	q.mu.Unlock()
	return true, r.Ready, r.Phase, nil
}

// Release removes the request for node.
func (q *Requests) Release(ctx context.Context, node string) (bool, error) {
	q.mu.Lock()
	delete(q.asked, node)
	q.mu.Unlock()
	return ReleaseMaintenance(ctx, q.Dynamic, q.Namespace, node, q.RequestorID)
}

// Asked is when this process first asked for node (now if it has not).
func (q *Requests) Asked(node string) time.Time {
	q.mu.Lock()
	defer q.mu.Unlock()
	if t, ok := q.asked[node]; ok {
		return t
	}
	return q.now()
}

func (q *Requests) now() time.Time {
	if q.Now != nil {
		return q.Now()
	}
	return time.Now()
}
