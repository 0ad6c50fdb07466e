package drain

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/mcp-patch/mcp-patch/kube"
)

// Holding returns the pods that hold a drain: those matching sel (batch
// training jobs, say) that have not finished — neither Succeeded nor
// Failed. Notebooks and serving pods do not match and are evicted as
// usual. Pure; sorted by namespace and name.
func Holding(pods []corev1.Pod, sel labels.Selector) []PodRef {
	if sel == nil || sel.Empty() {
		return nil
	}
	var out []PodRef
	for i := range pods {
		p := &pods[i]
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if sel.Matches(labels.Set(p.Labels)) {
			out = append(out, podRef(p))
		}
	}
	sortRefs(out)
	return out
}

// HoldingPods lists the pods on node that hold its drain.
func HoldingPods(ctx context.Context, kc kubernetes.Interface, node string, sel labels.Selector) ([]PodRef, error) {
	if sel == nil || sel.Empty() {
		return nil, nil
	}
	pods, err := kube.ListPods(ctx, kc, "", "spec.nodeName="+node)
	if err != nil {
		return nil, fmt.Errorf("list the jobs holding the drain of %s: %w", node, err)
	}
	return Holding(pods, sel), nil
}

// Hold is the decision about jobs still running before a drain.
type Hold struct {
	// Wait: jobs still run and the bounded wait has time left; the drain
	// does not start yet.
	Wait bool
	// Stop: jobs still run and the wait is over; the round stops and a
	// person decides (let them finish, or drain anyway).
	Stop   bool
	Until  time.Time
	Reason string
}

// DecideHold decides from the holding pods, when the wait began and its
// bound (pure). No holding pods: the drain goes ahead.
func DecideHold(holding []PodRef, since, now time.Time, bound time.Duration) Hold {
	if len(holding) == 0 {
		return Hold{}
	}
	names := make([]string, 0, len(holding))
	for _, p := range holding {
		names = append(names, p.String())
	}
	sort.Strings(names)
	list := strings.Join(names, ", ")
	until := since.Add(bound)
	if now.Before(until) {
		return Hold{Wait: true, Until: until, Reason: fmt.Sprintf("%d jobs still run on the node (%s); the drain waits for them until %s",
			len(holding), list, until.UTC().Format(time.RFC3339))}
	}
	return Hold{Stop: true, Until: until, Reason: fmt.Sprintf("%d jobs still run on the node after waiting %s (%s): a person decides whether to wait longer or drain anyway",
		len(holding), bound, list)}
}

// AnyPodMatches says whether a pod anywhere in the cluster matches sel
// (one List call of one item).
func AnyPodMatches(ctx context.Context, kc kubernetes.Interface, sel labels.Selector) (bool, error) {
	l, err := kc.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: sel.String(), Limit: 1})
	if err != nil {
		return false, fmt.Errorf("list the pods drain.wait_for_jobs.selector %s picks: %w", sel, err)
	}
	return len(l.Items) > 0, nil
}

// SelectorRisk is what the plan says of drain.wait_for_jobs.selector when
// it picks no pod in the cluster (matched, err: AnyPodMatches' answer);
// "" when it picks one or no selector is set. Pure.
func SelectorRisk(sel labels.Selector, matched bool, err error) string {
	switch {
	case sel == nil || sel.Empty():
		return ""
	case err != nil:
		return fmt.Sprintf("drain.wait_for_jobs.selector %s could not be checked against the cluster's pods: %v", sel, err)
	case !matched:
		return fmt.Sprintf("drain.wait_for_jobs.selector %s matches no pod in the cluster: the drain will wait for nothing", sel)
	}
	return ""
}
