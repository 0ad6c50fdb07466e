// Package apifake gives client-go's fake clientset the behaviours of the
// real API server that the drain and the tools rely on, for tests where no
// control plane runs: field selectors on pod lists, names from
// generateName, the smoke pod run to completion, discovery of the Eviction
// API, evictions judged against PodDisruptionBudgets (the PDB's
// status.disruptionsAllowed, as the real server judges), and server-side
// dry run (dryRun=All changes nothing). kube/drain's
// TestFakeAPIServerDrainContract runs the same drain against this and the
// lab's real API server and wants the same answers.
package apifake

import (
	"fmt"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

var (
	podsGVR = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	pdbsGVR = schema.GroupVersionResource{Group: "policy", Version: "v1", Resource: "poddisruptionbudgets"}
)

// Behave adds the real API server's behaviours to kc.
func Behave(kc *fake.Clientset) {
	kc.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sel := a.(k8stesting.ListAction).GetListRestrictions().Fields
		if sel == nil || sel.Empty() {
			return false, nil, nil
		}
		obj, err := kc.Tracker().List(podsGVR, schema.GroupVersionKind{Version: "v1", Kind: "Pod"}, a.GetNamespace())
		if err != nil {
			return true, nil, err
		}
		out := &corev1.PodList{}
		for _, p := range obj.(*corev1.PodList).Items {
			if sel.Matches(fields.Set{"spec.nodeName": p.Spec.NodeName, "status.phase": string(p.Status.Phase),
				"metadata.name": p.Name, "metadata.namespace": p.Namespace}) {
				out.Items = append(out.Items, p)
			}
		}
		return true, out, nil
	})
	// Discovery names the Eviction API, as the real server does (kubectl's
	// drain looks for pods/eviction before it evicts).
	kc.Resources = []*metav1.APIResourceList{
		{GroupVersion: "v1", APIResources: []metav1.APIResource{{Name: "pods", Namespaced: true, Kind: "Pod"},
			{Name: "pods/eviction", Namespaced: true, Group: "policy", Version: "v1", Kind: "Eviction"}}},
		{GroupVersion: "policy/v1", APIResources: []metav1.APIResource{{Name: "poddisruptionbudgets", Namespaced: true, Kind: "PodDisruptionBudget"}}},
	}
	var seq atomic.Int64
	kc.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		ca, ok := a.(k8stesting.CreateAction)
		if !ok || a.GetSubresource() != "" {
			return false, nil, nil
		}
		p := ca.GetObject().(*corev1.Pod)
		if p.Name == "" && p.GenerateName != "" {
			p.Name = fmt.Sprintf("%s%05d", p.GenerateName, seq.Add(1))
			if p.Spec.NodeName == "" {
				// The smoke pod is pinned by affinity: the scheduler binds
				// it and the kubelet runs it to completion.
				if na := p.Spec.Affinity; na != nil && na.NodeAffinity != nil && na.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
					for _, term := range na.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
						for _, f := range append(term.MatchFields, term.MatchExpressions...) {
							if len(f.Values) == 1 {
								p.Spec.NodeName = f.Values[0]
							}
						}
					}
				}
				p.Status = corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: []corev1.ContainerStatus{{Name: "smoke",
					State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}}}}}
			}
		}
		return false, nil, nil
	})
	kc.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		ev, ok := a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
		if !ok {
			return false, nil, nil
		}
		pdb, err := admitEviction(kc, a.GetNamespace(), ev.Name)
		if err != nil {
			return true, nil, err
		}
		if ev.DeleteOptions != nil && len(ev.DeleteOptions.DryRun) > 0 {
			return true, nil, nil
		}
		if pdb != nil {
			// The eviction spends one of the budget's disruptions until
			// the disruption controller recounts.
			pdb.Status.DisruptionsAllowed--
			if err := kc.Tracker().Update(pdbsGVR, pdb, pdb.Namespace); err != nil {
				return true, nil, err
			}
		}
		return true, nil, kc.Tracker().Delete(podsGVR, a.GetNamespace(), ev.Name)
	})
	// Server-side dry run of the writes the drain makes (the cordon is an
	// update): answered as if done, nothing stored.
	kc.PrependReactor("update", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		ua, ok := a.(k8stesting.UpdateActionImpl)
		if !ok || len(ua.GetUpdateOptions().DryRun) == 0 {
			return false, nil, nil
		}
		return true, ua.GetObject(), nil
	})
}

// admitEviction judges an eviction as the real API server does: a pod
// that does not exist is not found; a pod covered by a PDB that allows no
// disruption now is refused with 429 and the budget named; a pod covered
// by more than one PDB cannot be evicted. It answers the PDB an admitted
// eviction spends, if any.
func admitEviction(kc *fake.Clientset, ns, name string) (*policyv1.PodDisruptionBudget, error) {
	obj, err := kc.Tracker().Get(podsGVR, ns, name)
	if err != nil {
		return nil, err
	}
	pod := obj.(*corev1.Pod)
	list, err := kc.Tracker().List(pdbsGVR, schema.GroupVersionKind{Group: "policy", Version: "v1", Kind: "PodDisruptionBudget"}, ns)
	if err != nil {
		return nil, err
	}
	var covering []policyv1.PodDisruptionBudget
	for _, pdb := range list.(*policyv1.PodDisruptionBudgetList).Items {
		if pdb.Spec.Selector == nil {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(pod.Labels)) {
			continue
		}
		covering = append(covering, pdb)
	}
	switch {
	case len(covering) == 0:
		return nil, nil
	case len(covering) > 1:
		return nil, apierrors.NewInternalError(fmt.Errorf("this pod has more than one PodDisruptionBudget, which the eviction subresource does not support"))
	}
	pdb := covering[0]
	if pdb.Status.DisruptionsAllowed > 0 {
		return &pdb, nil
	}
	serr := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
	serr.ErrStatus.Details.Causes = append(serr.ErrStatus.Details.Causes, metav1.StatusCause{
		Type:    policyv1.DisruptionBudgetCause,
		Message: fmt.Sprintf("The disruption budget %s needs %d healthy pods and has %d currently", pdb.Name, pdb.Status.DesiredHealthy, pdb.Status.CurrentHealthy),
	})
	return nil, serr
}
