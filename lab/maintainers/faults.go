package maintainers

import (
	"context"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// The GPU Operator's driver upgrade names (NVIDIA k8s-operator-libs
// pkg/upgrade/consts.go with driver name "gpu").
const (
	LabelGPUDriverUpgradeState = "nvidia.com/gpu-driver-upgrade-state"
	// AnnotationGPUUpgradeInitialState marks a node that was already
	// unschedulable when the upgrade cordoned it ("true"); the upgrade
	// then leaves it cordoned at the end.
	AnnotationGPUUpgradeInitialState = "nvidia.com/gpu-driver-upgrade.node-initial-state.unschedulable"
	UpgradeStateDone                 = "upgrade-done"
)

// upgradeCordoned are the in-place upgrade's states in which the GPU
// Operator has the node cordoned: from cordon-required until it moves to
// upgrade-done (a failed upgrade stays cordoned). In requestor mode
// (node-maintenance-required, post-maintenance-required) the maintenance
// operator cordons instead.
var upgradeCordoned = []string{"cordon-required", "wait-for-jobs-required", "pod-deletion-required", "drain-required",
	"pod-restart-required", "validation-required", "uncordon-required", "upgrade-failed"}

// GPUOperatorUpgrading puts node in the GPU Operator's driver upgrade
// state: the label set and, on entering a state in which the operator
// has the node cordoned, the node cordoned (a node already unschedulable
// marked with AnnotationGPUUpgradeInitialState "true"). Leaving those
// states for one without a cordon lifts the cordon it made. UpgradeDone
// undoes it.
func GPUOperatorUpgrading(ctx context.Context, kc kubernetes.Interface, node, state string) error {
	err := updateNode(ctx, kc, node, func(n *corev1.Node) error {
		was := slices.Contains(upgradeCordoned, n.Labels[LabelGPUDriverUpgradeState])
		now := slices.Contains(upgradeCordoned, state)
		switch {
		case now && !was:
			if n.Spec.Unschedulable {
				setNodeAnnotation(n, AnnotationGPUUpgradeInitialState, "true")
			}
			n.Spec.Unschedulable = true
		case was && !now:
			if n.Annotations[AnnotationGPUUpgradeInitialState] == "true" {
				delete(n.Annotations, AnnotationGPUUpgradeInitialState)
			} else {
				n.Spec.Unschedulable = false
			}
		}
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		n.Labels[LabelGPUDriverUpgradeState] = state
		return nil
	})
	if err != nil {
		return fmt.Errorf("GPU driver upgrade on node %s to state %s: %w", node, state, err)
	}
	return nil
}

// UpgradeDone ends the GPU Operator's upgrade on node: state
// upgrade-done, the node uncordoned if the upgrade cordoned it.
func UpgradeDone(ctx context.Context, kc kubernetes.Interface, node string) error {
	return GPUOperatorUpgrading(ctx, kc, node, UpgradeStateDone)
}

// Requestor is another NodeMaintenance requestor: its ID, the namespace
// its objects live in and the prefix of their names (<prefix>-<node>).
type Requestor struct {
	ID, Namespace, Prefix string
}

// NetworkOperator is NVIDIA's network operator as a requestor (the
// requestor ID and namespace its tests set; the name prefix is
// k8s-operator-libs' default, nvidia-operator).
var NetworkOperator = Requestor{ID: "network-operator.nvidia.com", Namespace: "nvidia-network-operator", Prefix: "nvidia-operator"}

// MaintenanceName is r's NodeMaintenance name for node.
func (r Requestor) MaintenanceName(node string) string { return r.Prefix + "-" + node }

// ErrNotTheRequestors: an object of the requestor's name belongs to
// another requestor.
var ErrNotTheRequestors = errors.New("the NodeMaintenance belongs to another requestor")

// HoldMaintenance has r ask the maintenance operator for node: a
// NodeMaintenance <prefix>-<node> in r's namespace (created if need be)
// with spec.cordon true. Asked already: nothing to do.
// ReleaseMaintenance undoes it.
func HoldMaintenance(ctx context.Context, kc kubernetes.Interface, dyn dynamic.Interface, r Requestor, node string) error {
	name := r.MaintenanceName(node)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.Namespace}}
	if _, err := kc.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("%s holds node %s: create namespace %s: %w", r.ID, node, r.Namespace, err)
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": NodeMaintenances.Group + "/" + NodeMaintenances.Version,
		"kind":       "NodeMaintenance",
		"metadata":   map[string]any{"name": name, "namespace": r.Namespace},
		"spec":       map[string]any{"requestorID": r.ID, "nodeName": node, "cordon": true},
	}}
	res := dyn.Resource(NodeMaintenances).Namespace(r.Namespace)
	_, err := res.Create(ctx, obj, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		got, err := res.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("%s holds node %s: read NodeMaintenance %s/%s: %w", r.ID, node, r.Namespace, name, err)
		}
		return sameRequestor(got, r, "holds node "+node)
	}
	if err != nil {
		return fmt.Errorf("%s holds node %s: create NodeMaintenance %s/%s: %w", r.ID, node, r.Namespace, name, err)
	}
	return nil
}

// ReleaseMaintenance deletes r's NodeMaintenance for node (the operator
// then cleans up and removes it); gone already: nothing to do; another
// requestor's object of that name: ErrNotTheRequestors, left as it is.
func ReleaseMaintenance(ctx context.Context, dyn dynamic.Interface, r Requestor, node string) error {
	name := r.MaintenanceName(node)
	res := dyn.Resource(NodeMaintenances).Namespace(r.Namespace)
	got, err := res.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s releases node %s: read NodeMaintenance %s/%s: %w", r.ID, node, r.Namespace, name, err)
	}
	if err := sameRequestor(got, r, "releases node "+node); err != nil {
		return err
	}
	uid := got.GetUID()
	err = res.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("%s releases node %s: delete NodeMaintenance %s/%s: %w", r.ID, node, r.Namespace, name, err)
	}
	return nil
}

// sameRequestor says whether obj is r's; ErrNotTheRequestors if not.
func sameRequestor(obj *unstructured.Unstructured, r Requestor, doing string) error {
	id, _, err := unstructured.NestedString(obj.Object, "spec", "requestorID")
	if err != nil {
		return fmt.Errorf("%s %s: NodeMaintenance %s/%s: %w", r.ID, doing, obj.GetNamespace(), obj.GetName(), err)
	}
	if id != r.ID {
		return fmt.Errorf("%s %s: NodeMaintenance %s/%s: %w (%s)", r.ID, doing, obj.GetNamespace(), obj.GetName(), ErrNotTheRequestors, id)
	}
	return nil
}

// PersonCordonReason is where the lab's people write why they cordoned a
// node (kube/actors reads keys ending in cordon-reason).
const PersonCordonReason = "platform.example.com/cordon-reason"

// ErrCordoned: the node is cordoned already, and not by a person of the
// lab; a person's cordon on it would be undone wrongly.
var ErrCordoned = errors.New("the node is cordoned already, by someone else")

// PersonCordon cordons node as a person does, the reason in
// PersonCordonReason. Cordoned by a person already: the reason replaced.
// Cordoned by anyone else: ErrCordoned. PersonUncordon undoes it.
func PersonCordon(ctx context.Context, kc kubernetes.Interface, node, reason string) error {
	err := updateNode(ctx, kc, node, func(n *corev1.Node) error {
		if _, mine := n.Annotations[PersonCordonReason]; n.Spec.Unschedulable && !mine {
			return ErrCordoned
		}
		n.Spec.Unschedulable = true
		setNodeAnnotation(n, PersonCordonReason, reason)
		return nil
	})
	if err != nil {
		return fmt.Errorf("a person cordons node %s: %w", node, err)
	}
	return nil
}

// PersonUncordon lifts a person's cordon and its reason; a node without
// one is left as it is.
func PersonUncordon(ctx context.Context, kc kubernetes.Interface, node string) error {
	err := updateNode(ctx, kc, node, func(n *corev1.Node) error {
		if _, mine := n.Annotations[PersonCordonReason]; !mine {
			return errNothingToDo
		}
		n.Spec.Unschedulable = false
		delete(n.Annotations, PersonCordonReason)
		return nil
	})
	if err != nil && !errors.Is(err, errNothingToDo) {
		return fmt.Errorf("a person uncordons node %s: %w", node, err)
	}
	return nil
}

var errNothingToDo = errors.New("nothing to do")

// updateNode reads node, lets change edit it and writes it back,
// reading again after a conflict.
func updateNode(ctx context.Context, kc kubernetes.Interface, node string, change func(*corev1.Node) error) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := kc.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := change(n); err != nil {
			return err
		}
		_, err = kc.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
}

func setNodeAnnotation(n *corev1.Node, key, value string) {
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	n.Annotations[key] = value
}
