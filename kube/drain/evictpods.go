package drain

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/mcp-patch/mcp-patch/kube/rbac"
)

// evictOptions pace evictPods.
type evictOptions struct {
	// timeout bounds the whole drain (0: no bound); retry is the pause
	// after a refused (429) eviction.
	timeout, retry time.Duration
	// grace is DeleteOptions.GracePeriodSeconds (<0: the pod's own).
	grace  int
	dryRun bool
	// refused is told each refusal before its retry; gone each pod that
	// left the node (never on a dry run).
	refused func(line string)
	gone    func(pod *corev1.Pod)
}

// evictPods evicts every pod at once through the Eviction API (PDBs
// respected), as kubectl drain does: a refusal (429: a disruption budget)
// is retried every retry until the timeout; a pod already gone is done;
// in a terminating namespace a pod being deleted is waited for. Once its
// eviction is admitted each pod is waited for until it is gone (or
// replaced under the same name). A server dry run waits for nothing.
func evictPods(ctx context.Context, kc kubernetes.Interface, pods []corev1.Pod, o evictOptions) error {
	if o.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	errs := make([]error, len(pods))
	var wg sync.WaitGroup
	for i := range pods {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			errs[i] = evictOne(ctx, kc, &pods[i], o)
		}(i)
	}
	wg.Wait()
	return errors.Join(errs...)
}

func evictOne(ctx context.Context, kc kubernetes.Interface, p *corev1.Pod, o evictOptions) error {
	del := metav1.DeleteOptions{}
	if o.grace >= 0 {
		g := int64(o.grace)
		del.GracePeriodSeconds = &g
	}
	if o.dryRun {
		del.DryRun = []string{metav1.DryRunAll}
	}
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}, DeleteOptions: &del}
	for {
		if ctx.Err() != nil {
			return fmt.Errorf("error when evicting pods/%q -n %q: global timeout reached: %v", p.Name, p.Namespace, o.timeout)
		}
		err := kc.PolicyV1().Evictions(p.Namespace).Evict(ctx, ev)
		terminating := apierrors.IsForbidden(err) && apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause)
		switch {
		case err == nil, terminating && p.DeletionTimestamp != nil:
		case apierrors.IsNotFound(err):
			return nil
		case apierrors.IsTooManyRequests(err) || terminating:
			if o.refused != nil {
				o.refused(fmt.Sprintf("error when evicting pods/%q -n %q (will retry after %v): %v", p.Name, p.Namespace, o.retry, err))
			}
			t := time.NewTimer(o.retry)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
			continue
		case ctx.Err() != nil:
			continue // the timeout's words
		default:
			// A refusal for want of a permission names the rule that grants it.
			return fmt.Errorf("error when evicting pods/%q -n %q: %v", p.Name, p.Namespace, rbac.Explain(err, rbac.Options{}))
		}
		break
	}
	if o.dryRun {
		return nil
	}
	// Wait for the pod to be gone, asking again after 100 ms, doubling up
	// to kubectl's 1 s: a pod that goes at once is seen at once, a slow
	// one costs the API server no more than kubectl's wait does.
	pause := 100 * time.Millisecond
	for {
		cur, err := kc.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err) || (err == nil && cur.UID != p.UID):
			if o.gone != nil {
				o.gone(p)
			}
			return nil
		case err != nil && ctx.Err() == nil:
			return fmt.Errorf("error when waiting for pod %q in namespace %q to terminate: %v", p.Name, p.Namespace, err)
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("error when waiting for pod %q in namespace %q to terminate: %v", p.Name, p.Namespace, ctx.Err())
		case <-t.C:
		}
		pause = min(2*pause, time.Second)
	}
}
