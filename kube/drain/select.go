package drain

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/mcp-patch/mcp-patch/kube"
)

// verdict is what a drain does with one pod of the node: evict it or not,
// and the warning or the error that goes with it.
type verdict struct {
	evict   bool
	warning string // grouped into Evictions.Warnings
	fatal   string // grouped into Evictions.Blockers
}

// The words of the verdicts, grouped with the pods they name.
const (
	daemonSetWarning = "ignoring DaemonSet-managed Pods"
	localStorageFail = "cannot delete Pods with local storage (policy delete_emptydir_data is false)"
	unmanagedFail    = "cannot delete Pods that declare no controller (policy delete_unmanaged_pods is false)"
	unmanagedWarning = "deleting Pods that declare no controller"
)

// judgePod decides one pod as `kubectl drain --ignore-daemonsets` does,
// the checks in its order, the last one run deciding: a DaemonSet's pod
// stays (a pod whose DaemonSet is gone is unmanaged), a mirror pod stays,
// a pod with emptyDir data needs DeleteEmptyDirData, a pod without a
// controller needs DeleteUnmanagedPods; a finished pod always goes.
// dsGone says whether the pod's DaemonSet is gone (nil error) or could
// not be read.
func judgePod(p *corev1.Pod, pol Policy, dsGone func() (bool, error)) verdict {
	finished := p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
	c := metav1.GetControllerOf(p)
	if c != nil && c.Kind == "DaemonSet" && !finished {
		gone, err := dsGone()
		switch {
		case err != nil:
			return verdict{fatal: err.Error()}
		case !gone:
			return verdict{warning: daemonSetWarning}
		case !pol.DeleteUnmanagedPods:
			return verdict{fatal: fmt.Sprintf("daemonsets.apps %q not found", c.Name)}
		}
	}
	if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		return verdict{}
	}
	if !finished && hasEmptyDir(p) && !pol.DeleteEmptyDirData {
		return verdict{fatal: localStorageFail}
	}
	if finished || c != nil {
		return verdict{evict: true}
	}
	if !pol.DeleteUnmanagedPods {
		return verdict{fatal: unmanagedFail}
	}
	return verdict{evict: true, warning: unmanagedWarning}
}

func hasEmptyDir(p *corev1.Pod) bool {
	for _, v := range p.Spec.Volumes {
		if v.EmptyDir != nil {
			return true
		}
	}
	return false
}

// selection is the node's pods as a drain sees them.
type selection struct {
	all      []corev1.Pod
	evict    []corev1.Pod
	warnings []string // "words: ns/a, ns/b", sorted
	blockers []string
}

// selectPods lists the node's pods and judges each (judgePod).
func selectPods(ctx context.Context, kc kubernetes.Interface, node string, pol Policy) (selection, error) {
	all, err := kube.ListPods(ctx, kc, "", "spec.nodeName="+node)
	if err != nil {
		return selection{}, err
	}
	s := selection{all: all}
	warn, fatal := map[string][]string{}, map[string][]string{}
	for i := range all {
		p := &all[i]
		v := judgePod(p, pol, func() (bool, error) {
			c := metav1.GetControllerOf(p)
			_, err := kc.AppsV1().DaemonSets(p.Namespace).Get(ctx, c.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return true, nil
			}
			return false, err
		})
		ref := p.Namespace + "/" + p.Name
		if v.evict {
			s.evict = append(s.evict, *p)
		}
		if v.warning != "" {
			warn[v.warning] = append(warn[v.warning], ref)
		}
		if v.fatal != "" {
			fatal[v.fatal] = append(fatal[v.fatal], ref)
		}
	}
	s.warnings, s.blockers = grouped(warn), grouped(fatal)
	return s, nil
}

func grouped(m map[string][]string) []string {
	var out []string
	for words, pods := range m {
		sort.Strings(pods)
		out = append(out, words+": "+strings.Join(pods, ", "))
	}
	sort.Strings(out)
	return out
}
