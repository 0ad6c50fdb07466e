package maintainers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// The maintenance operator's names (Mellanox/maintenance-operator
// api/v1alpha1/nodemaintenance_types.go, internal/cordon/cordon.go,
// internal/controller/nodemaintenance_controller.go).
const (
	ConditionReady = "Ready"
	// Reasons of the Ready condition, in the order the stand-in moves
	// through them (upstream has WaitForPodCompletion and Draining
	// between Cordon and Ready; the stand-in neither waits nor drains).
	ReasonPending   = "Pending"
	ReasonScheduled = "Scheduled"
	ReasonCordon    = "Cordon"
	ReasonReady     = "Ready"
	// Finalizer is added when the object is scheduled; the operator
	// removes it once it has cleaned up after a deletion.
	Finalizer = "maintenance.nvidia.com/finalizer"
	// AnnotationInitialUnschedulable records on the NodeMaintenance
	// whether the node was cordoned before the operator cordoned it
	// ("true"/"false"); the node is uncordoned on cleanup only for
	// "false".
	AnnotationInitialUnschedulable = "maintenance.nvidia.com/node-initial-state.unschedulable"
	// AnnotationReadyTime is when the object became Ready (RFC3339 UTC).
	AnnotationReadyTime = "maintenance.nvidia.com/ready-time"
)

// NodeMaintenances is the maintenance operator's resource.
var NodeMaintenances = schema.GroupVersionResource{Group: "maintenance.nvidia.com", Version: "v1alpha1", Resource: "nodemaintenances"}

// DefaultPeriod is the time between two of the operator's passes.
const DefaultPeriod = 250 * time.Millisecond

// Operator plays the maintenance operator: on each node the
// NodeMaintenance objects are served one at a time, oldest first (ties
// by name); the served one moves Pending → Scheduled (finalizer added) →
// Cordon (spec.cordon only: the node's state recorded, then the node
// cordoned) → Ready (status True, ready-time recorded); the others on
// the node stay Pending. A deleted one is cleaned up: its node
// uncordoned if it was schedulable before, its finalizer removed. Status
// is written through the status subresource, as the CRD declares one.
type Operator struct {
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
	// Period is the time between passes; zero means DefaultPeriod.
	Period time.Duration
	// Logger receives each pass that failed; nil discards.
	Logger *slog.Logger
}

// Run makes a pass every Period until ctx ends, then returns nil. A
// failed pass is logged and the next one tries again, as a controller's
// requeue does.
func (o *Operator) Run(ctx context.Context) error {
	if o.Kube == nil || o.Dynamic == nil {
		return errors.New("maintenance operator stand-in: Kube and Dynamic are required")
	}
	period := cmp.Or(o.Period, DefaultPeriod)
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		if err := o.Sync(ctx); err != nil && ctx.Err() == nil {
			logger.Warn("maintenance operator stand-in: pass failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// Sync makes one pass over every NodeMaintenance. A write that lost a
// race (conflict, object gone) is left to the next pass; other failures
// are returned, all of them.
func (o *Operator) Sync(ctx context.Context) error {
	l, err := o.Dynamic.Resource(NodeMaintenances).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list nodemaintenances: %w", err)
	}
	byNode := map[string][]read{}
	var errs []error
	for i := range l.Items {
		m, err := readMaintenance(&l.Items[i])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		byNode[m.Node] = append(byNode[m.Node], read{&l.Items[i], m})
	}
	for _, node := range slices.Sorted(maps.Keys(byNode)) {
		if err := o.syncNode(ctx, byNode[node]); err != nil {
			errs = append(errs, fmt.Errorf("node %s: %w", node, err))
		}
	}
	return errors.Join(errs...)
}

// read is one NodeMaintenance as listed and as the operator reads it.
type read struct {
	obj *unstructured.Unstructured
	m   maintenance
}

// syncNode cleans up the node's deleted objects, then serves one of the
// rest and keeps the others Pending.
func (o *Operator) syncNode(ctx context.Context, objs []read) error {
	var live []*unstructured.Unstructured
	var ms []maintenance
	for _, r := range objs {
		obj, m := r.obj, r.m
		if m.Deleting {
			if m.Finalized {
				if err := o.finish(ctx, obj, m); err != nil {
					// It still holds the node: serve no other.
					if lostRace(err) {
						return nil
					}
					return err
				}
			}
			continue
		}
		live = append(live, obj)
		ms = append(ms, m)
	}
	served := serve(ms)
	var errs []error
	for i, obj := range live {
		var err error
		switch {
		case i == served:
			err = o.advance(ctx, obj, ms[i])
		case ms[i].Phase != ReasonPending:
			err = o.setReady(ctx, obj, ReasonPending, "another NodeMaintenance holds the node")
		}
		if lostRace(err) {
			err = nil
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("NodeMaintenance %s/%s: %w", ms[i].Namespace, ms[i].Name, err))
		}
	}
	return errors.Join(errs...)
}

// maintenance is what the operator reads of one NodeMaintenance.
type maintenance struct {
	Namespace, Name string
	Node            string
	Created         time.Time
	// Cordon is spec.cordon (the CRD defaults it to true).
	Cordon bool
	// Phase is the Ready condition's reason, "" before the first pass.
	Phase     string
	Finalized bool
	Deleting  bool
}

func readMaintenance(obj *unstructured.Unstructured) (maintenance, error) {
	m := maintenance{Namespace: obj.GetNamespace(), Name: obj.GetName(), Created: obj.GetCreationTimestamp().Time,
		Finalized: slices.Contains(obj.GetFinalizers(), Finalizer), Deleting: obj.GetDeletionTimestamp() != nil}
	var (
		err         error
		cordon, set bool
		conds       []any
	)
	if m.Node, _, err = unstructured.NestedString(obj.Object, "spec", "nodeName"); err != nil {
		return m, fmt.Errorf("NodeMaintenance %s/%s: %w", m.Namespace, m.Name, err)
	}
	if cordon, set, err = unstructured.NestedBool(obj.Object, "spec", "cordon"); err != nil {
		return m, fmt.Errorf("NodeMaintenance %s/%s: %w", m.Namespace, m.Name, err)
	}
	m.Cordon = cordon || !set
	if conds, _, err = unstructured.NestedSlice(obj.Object, "status", "conditions"); err != nil {
		return m, fmt.Errorf("NodeMaintenance %s/%s: %w", m.Namespace, m.Name, err)
	}
	for _, c := range conds {
		if cm, ok := c.(map[string]any); ok && cm["type"] == ConditionReady {
			m.Phase, _ = cm["reason"].(string) // a reason that is no string is no reason
		}
	}
	return m, nil
}

// serve picks the one of a node's live NodeMaintenances that holds the
// node (-1 for none): one already scheduled keeps it (creation times are
// whole seconds, so an object sorted before it can appear later);
// otherwise the oldest, ties by name, then namespace.
func serve(ms []maintenance) int {
	best := -1
	for i, m := range ms {
		if best < 0 {
			best = i
			continue
		}
		b := ms[best]
		if scheduled(m) != scheduled(b) {
			if scheduled(m) {
				best = i
			}
			continue
		}
		if c := cmp.Or(m.Created.Compare(b.Created), cmp.Compare(m.Name, b.Name), cmp.Compare(m.Namespace, b.Namespace)); c < 0 {
			best = i
		}
	}
	return best
}

func scheduled(m maintenance) bool {
	return m.Finalized || (m.Phase != "" && m.Phase != ReasonPending)
}

// advance moves the served object one step on.
func (o *Operator) advance(ctx context.Context, obj *unstructured.Unstructured, m maintenance) error {
	res := o.Dynamic.Resource(NodeMaintenances).Namespace(m.Namespace)
	switch m.Phase {
	case "", ReasonPending:
		if !m.Finalized {
			obj.SetFinalizers(append(obj.GetFinalizers(), Finalizer))
			var err error
			if obj, err = res.Update(ctx, obj, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("add the finalizer: %w", raced(err))
			}
		}
		return o.setReady(ctx, obj, ReasonScheduled, "maintenance scheduled")
	case ReasonScheduled:
		if !m.Cordon {
			return o.ready(ctx, obj)
		}
		node, err := o.Kube.CoreV1().Nodes().Get(ctx, m.Node, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("read node %s: %w", m.Node, err)
		}
		if _, ok := obj.GetAnnotations()[AnnotationInitialUnschedulable]; !ok {
			// Recorded before the cordon, so a cleanup never lifts a
			// cordon that was someone else's.
			setAnnotation(obj, AnnotationInitialUnschedulable, fmt.Sprintf("%v", node.Spec.Unschedulable))
			if obj, err = res.Update(ctx, obj, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("record the node's initial state: %w", raced(err))
			}
		}
		if !node.Spec.Unschedulable {
			if err := setUnschedulable(ctx, o.Kube, m.Node, true); err != nil {
				return err
			}
		}
		return o.setReady(ctx, obj, ReasonCordon, "node cordoned")
	case ReasonCordon:
		return o.ready(ctx, obj)
	}
	return nil // Ready, or a reason the stand-in does not play
}

// ready records the ready time and makes the object Ready.
func (o *Operator) ready(ctx context.Context, obj *unstructured.Unstructured) error {
	if _, ok := obj.GetAnnotations()[AnnotationReadyTime]; !ok {
		setAnnotation(obj, AnnotationReadyTime, time.Now().UTC().Format(time.RFC3339))
		var err error
		obj, err = o.Dynamic.Resource(NodeMaintenances).Namespace(obj.GetNamespace()).Update(ctx, obj, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("record the ready time: %w", raced(err))
		}
	}
	return o.setReady(ctx, obj, ReasonReady, "maintenance ready")
}

// finish cleans up after a deletion: the node uncordoned where it was
// schedulable before the operator cordoned it, then the finalizer
// removed.
func (o *Operator) finish(ctx context.Context, obj *unstructured.Unstructured, m maintenance) error {
	if obj.GetAnnotations()[AnnotationInitialUnschedulable] == "false" {
		if err := setUnschedulable(ctx, o.Kube, m.Node, false); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("NodeMaintenance %s/%s deleted: %w", m.Namespace, m.Name, err)
		}
	}
	obj.SetFinalizers(slices.DeleteFunc(obj.GetFinalizers(), func(f string) bool { return f == Finalizer }))
	if _, err := o.Dynamic.Resource(NodeMaintenances).Namespace(m.Namespace).Update(ctx, obj, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("NodeMaintenance %s/%s deleted: remove the finalizer: %w", m.Namespace, m.Name, raced(err))
	}
	return nil
}

// setReady writes the Ready condition (status True only for reason
// Ready) through the status subresource.
func (o *Operator) setReady(ctx context.Context, obj *unstructured.Unstructured, reason, message string) error {
	raw, _, err := unstructured.NestedSlice(obj.Object, "status", "conditions")
	if err != nil {
		return fmt.Errorf("read conditions: %w", err)
	}
	conds := make([]metav1.Condition, 0, len(raw)+1)
	for _, r := range raw {
		rm, ok := r.(map[string]any)
		if !ok {
			continue
		}
		var c metav1.Condition
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(rm, &c); err != nil {
			return fmt.Errorf("read conditions: %w", err)
		}
		conds = append(conds, c)
	}
	status := metav1.ConditionFalse
	if reason == ReasonReady {
		status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&conds, metav1.Condition{Type: ConditionReady, Status: status, Reason: reason, Message: message,
		ObservedGeneration: obj.GetGeneration()})
	out := make([]any, 0, len(conds))
	for i := range conds {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&conds[i])
		if err != nil {
			return fmt.Errorf("write conditions: %w", err)
		}
		out = append(out, u)
	}
	if err := unstructured.SetNestedSlice(obj.Object, out, "status", "conditions"); err != nil {
		return fmt.Errorf("write conditions: %w", err)
	}
	if _, err := o.Dynamic.Resource(NodeMaintenances).Namespace(obj.GetNamespace()).UpdateStatus(ctx, obj, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("set Ready reason %s: %w", reason, raced(err))
	}
	return nil
}

func setAnnotation(obj *unstructured.Unstructured, key, value string) {
	ann := obj.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[key] = value
	obj.SetAnnotations(ann)
}

// setUnschedulable cordons or uncordons a node.
func setUnschedulable(ctx context.Context, kc kubernetes.Interface, node string, on bool) error {
	p := []byte(fmt.Sprintf(`{"spec":{"unschedulable":%v}}`, on))
	if _, err := kc.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, p, metav1.PatchOptions{}); err != nil {
		if on {
			return fmt.Errorf("cordon node %s: %w", node, err)
		}
		return fmt.Errorf("uncordon node %s: %w", node, err)
	}
	return nil
}

// errRace marks a write to a NodeMaintenance that lost a race: someone
// wrote first (conflict) or the object is gone. The next pass reads it
// again; a node that is missing is no race and is reported.
type errRace struct{ err error }

func (e errRace) Error() string { return e.err.Error() }
func (e errRace) Unwrap() error { return e.err }

// raced marks err as a lost race where it is one.
func raced(err error) error {
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return errRace{err}
	}
	return err
}

func lostRace(err error) bool {
	var r errRace
	return errors.As(err, &r)
}
