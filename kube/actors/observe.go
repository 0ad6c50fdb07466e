package actors

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/mcp-patch/mcp-patch/kube/drain"
)

// KuredRef is where kured keeps its lock: its DaemonSet (--ds-namespace,
// --ds-name) and the annotation (--lock-annotation).
type KuredRef struct {
	Namespace, Name, Annotation string
}

// DefaultKured is kured's own default.
var DefaultKured = KuredRef{Namespace: "kube-system", Name: "kured", Annotation: KuredLockAnnotation}

// Observe reads node's other maintainers: the Node, the NodeMaintenance
// objects naming it (none where the resource is not served) and kured's
// lock (none where its DaemonSet does not exist). It writes nothing. An
// error means the cluster could not say: the caller stops, never passes.
func Observe(ctx context.Context, kc kubernetes.Interface, dyn dynamic.Interface, node, identity string, kured KuredRef) (Observation, error) {
	n, err := kc.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return Observation{}, fmt.Errorf("read node %s: %w", node, err)
	}
	st := drain.StateOf(n)
	o := Observation{Node: node, Labels: n.Labels, Annotations: n.Annotations, Unschedulable: n.Spec.Unschedulable,
		CordonIsOurs: st.Owner != nil && st.Owner.Identity == identity, Taints: n.Spec.Taints}
	if dyn != nil {
		if o.Maintenances, err = maintenances(ctx, dyn, node); err != nil {
			return o, err
		}
	}
	if kured.Name != "" {
		ds, err := kc.AppsV1().DaemonSets(kured.Namespace).Get(ctx, kured.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return o, fmt.Errorf("read kured's lock on daemonset %s/%s: %w", kured.Namespace, kured.Name, err)
		default:
			o.KuredDaemonSet = kured.Namespace + "/" + kured.Name
			ann := kured.Annotation
			if ann == "" {
				ann = KuredLockAnnotation
			}
			if o.KuredLocks, err = ParseKuredLock(ds.Annotations[ann]); err != nil {
				return o, fmt.Errorf("daemonset %s: %w", o.KuredDaemonSet, err)
			}
		}
	}
	return o, nil
}

// maintenances lists the NodeMaintenance objects for node in every
// namespace; a cluster that does not serve the resource has none.
func maintenances(ctx context.Context, dyn dynamic.Interface, node string) ([]Maintenance, error) {
	l, err := dyn.Resource(NodeMaintenances).List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list nodemaintenances: %w", err)
	}
	var out []Maintenance
	for _, it := range l.Items {
		name, _, _ := unstructured.NestedString(it.Object, "spec", "nodeName")
		if name != node {
			continue
		}
		m := Maintenance{Namespace: it.GetNamespace(), Name: it.GetName(), Created: it.GetCreationTimestamp().Time}
		m.RequestorID, _, _ = unstructured.NestedString(it.Object, "spec", "requestorID")
		m.Additional, _, _ = unstructured.NestedStringSlice(it.Object, "spec", "additionalRequestors")
		conds, _, _ := unstructured.NestedSlice(it.Object, "status", "conditions")
		for _, c := range conds {
			if cm, ok := c.(map[string]any); ok && cm["type"] == "Ready" {
				m.Phase, _ = cm["reason"].(string)
			}
		}
		out = append(out, m)
	}
	return out, nil
}
