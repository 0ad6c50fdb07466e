package drain

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
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
