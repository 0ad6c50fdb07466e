package drain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/mcp-patch/mcp-patch/kube/rbac"
)

// Drain errors callers branch on.
var (
	// ErrPlanDrift: the pods to evict are no longer the approved ones.
	ErrPlanDrift = errors.New("drain plan drifted from the approved digest")
	// ErrBlocked: the policy forbids evicting some pods; nothing changed.
	ErrBlocked = errors.New("drain blocked by pods the policy does not allow evicting")
	// ErrIncomplete: eviction did not finish (PDB, timeout, API error);
	// the node stays cordoned and recorded.
	ErrIncomplete = errors.New("drain incomplete")
)

// Options bound and shape a drain. Round and Identity are required.
type Options struct {
	Policy   Policy
	Round    string
	Identity string
	// ExpectDigest, when set, must equal the plan digest computed now and
	// again after the cordon; a mismatch stops the drain with ErrPlanDrift.
	ExpectDigest string
	// OnlyPods, when not nil, are the pods ("namespace/name") an approval
	// listed: every pod the plan would evict now, before and after the
	// cordon, must be one of them, or the drain stops with ErrPlanDrift
	// and evicts nothing. A drain carried on after some pods went checks
	// it instead of ExpectDigest (its digest changed with every eviction).
	OnlyPods map[string]bool
	// Timeout bounds the eviction phase, PDB retries included. Zero: 10m.
	Timeout time.Duration
	// EvictRetryDelay is the pause after a refused eviction (429 from a
	// PDB) before asking again. Zero: 2s. Negative is invalid: the
	// library would spin on the API server.
	EvictRetryDelay time.Duration
	// DryRun cordons and evicts with the API server's dry run: every
	// admission and PDB check runs, nothing is persisted.
	DryRun bool
	// Logger receives one line per eviction event. Nil: discarded.
	Logger *slog.Logger
}

// Progress is told how many of the planned pods are gone; done <= total.
type Progress func(done, total int, msg string)

// PDBRef is a PodDisruptionBudget that covers a blocked pod.
type PDBRef struct {
	Name               string `json:"name"`
	DisruptionsAllowed int32  `json:"disruptions_allowed"`
	CurrentHealthy     int32  `json:"current_healthy"`
	DesiredHealthy     int32  `json:"desired_healthy"`
	ExpectedPods       int32  `json:"expected_pods"`
}

// BlockedPod is a planned pod that was still there when the drain stopped.
type BlockedPod struct {
	PodRef
	Reason string   `json:"reason"`
	PDBs   []PDBRef `json:"pdbs,omitempty"`
}

// Result is what a drain did; it is filled as far as the drain got, also
// when an error is returned.
type Result struct {
	Node     string        `json:"node"`
	DryRun   bool          `json:"dry_run,omitempty"`
	Plan     Evictions     `json:"plan"`
	Cordon   *CordonResult `json:"cordon,omitempty"`
	Evicted  []PodRef      `json:"evicted,omitempty"`
	Blocked  []BlockedPod  `json:"blocked,omitempty"`
	Duration time.Duration `json:"duration_ns"`
}

func (o *Options) defaults() error {
	if err := (Owner{Identity: o.Identity, Round: o.Round}).Validate(); err != nil {
		return err
	}
	if o.Timeout < 0 {
		return fmt.Errorf("timeout %v is negative", o.Timeout)
	}
	if o.Timeout == 0 {
		o.Timeout = 10 * time.Minute
	}
	if o.EvictRetryDelay < 0 {
		return fmt.Errorf("evict retry delay %v is negative", o.EvictRetryDelay)
	}
	if o.EvictRetryDelay == 0 {
		o.EvictRetryDelay = 2 * time.Second
	}
	if o.Policy.GracePeriodSeconds < 0 {
		return fmt.Errorf("grace period %ds is negative", o.Policy.GracePeriodSeconds)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Drain cordons node (recording the cordon, or noting someone else's) and
// evicts the planned pods through the Eviction API, PDBs respected. Order:
//
//  1. plan; refuse with ErrBlocked or ErrPlanDrift before changing anything;
//  2. cordon (recorded in the same update);
//  3. plan again (pods may have landed before the cordon) and compare;
//  4. evict, retrying 429s every EvictRetryDelay until Timeout.
//
// On failure after step 2 the node stays cordoned and recorded, and the
// result names each pod still there with the reason and the PDBs covering
// it.
func Drain(ctx context.Context, kc kubernetes.Interface, node string, opts Options, progress Progress) (Result, error) {
	start := time.Now()
	res := Result{Node: node, DryRun: opts.DryRun}
	fail := func(err error) (Result, error) {
		res.Duration = time.Since(start)
		return res, fmt.Errorf("drain node %s: %w", node, err)
	}
	if err := opts.defaults(); err != nil {
		return fail(err)
	}
	if progress == nil {
		progress = func(int, int, string) {}
	}
	log := opts.Logger.With("node", node, "round", opts.Round, "step", "drain")

	plan, err := Preview(ctx, kc, node, opts.Policy)
	if err != nil {
		return fail(err)
	}
	res.Plan = plan
	if len(plan.Blockers) > 0 {
		return fail(fmt.Errorf("%w: %s", ErrBlocked, strings.Join(plan.Blockers, "; ")))
	}
	if opts.ExpectDigest != "" && plan.Digest != opts.ExpectDigest {
		return fail(fmt.Errorf("%w: approved %s, now %s", ErrPlanDrift, opts.ExpectDigest, plan.Digest))
	}
	if err := onlyApproved(plan, opts.OnlyPods); err != nil {
		return fail(err)
	}

	cr, err := cordon(ctx, kc, node, Owner{Identity: opts.Identity, Round: opts.Round}, opts.DryRun)
	if err != nil {
		return fail(err)
	}
	res.Cordon = &cr
	log.Info("cordon", "outcome", cr.Outcome, "foreign", cr.Foreign, "dry_run", opts.DryRun)

	if !opts.DryRun {
		again, err := Preview(ctx, kc, node, opts.Policy)
		if err != nil {
			return fail(fmt.Errorf("re-plan after cordon (node left cordoned): %w", err))
		}
		if err := onlyApproved(again, opts.OnlyPods); err != nil {
			res.Plan = again
			return fail(fmt.Errorf("%w (node left cordoned)", err))
		}
		if again.Digest != plan.Digest {
			res.Plan = again
			return fail(fmt.Errorf("%w: pods changed between plan and cordon (node left cordoned): was %s, now %s",
				ErrPlanDrift, plan.Digest, again.Digest))
		}
		plan = again
	}

	total := len(plan.pods)
	progress(0, total, fmt.Sprintf("cordoned (%s); evicting %d pods", cr.Outcome, total))
	var (
		mu      sync.Mutex
		done    int
		retried = map[string]bool{}
	)
	grace := -1 // the pod's own terminationGracePeriodSeconds
	if opts.Policy.GracePeriodSeconds > 0 {
		grace = opts.Policy.GracePeriodSeconds
	}
	evictErr := evictPods(ctx, kc, plan.pods, evictOptions{timeout: opts.Timeout, retry: opts.EvictRetryDelay, grace: grace, dryRun: opts.DryRun,
		gone: func(pod *corev1.Pod) {
			mu.Lock()
			defer mu.Unlock()
			done++
			log.Info("evicted", "pod", pod.Namespace+"/"+pod.Name)
			progress(done, total, "evicted "+pod.Namespace+"/"+pod.Name)
		},
		refused: func(line string) {
			// Each refused eviction is reported before its retry; pass the
			// first one per pod on so the caller sees what it waits for.
			mu.Lock()
			defer mu.Unlock()
			key, _, _ := strings.Cut(line, " (will retry")
			if retried[key] {
				return
			}
			retried[key] = true
			log.Warn("eviction refused", "detail", line)
			progress(done, total, line)
		}})
	res.Duration = time.Since(start)

	if opts.DryRun {
		if evictErr != nil {
			res.Blocked = blockedPods(ctx, kc, plan.pods, true)
			return fail(fmt.Errorf("%w (server dry run): %s: %w", ErrIncomplete, summarize(res.Blocked), evictErr))
		}
		res.Evicted = plan.Evict
		progress(total, total, "server dry run: every eviction admitted")
		return res, nil
	}
	if evictErr == nil {
		res.Evicted = plan.Evict
		return res, nil
	}
	gone, left := splitGone(ctx, kc, plan.pods)
	res.Evicted = gone
	res.Blocked = blockedPods(ctx, kc, left, false)
	res.Duration = time.Since(start)
	return fail(fmt.Errorf("%w after %v, %d of %d pods still on the node (node left cordoned): %s: %w",
		ErrIncomplete, res.Duration.Round(time.Millisecond), len(left), total, summarize(res.Blocked), evictErr))
}

// summarize names the blocked pods and what holds each.
func summarize(blocked []BlockedPod) string {
	parts := make([]string, 0, len(blocked))
	for _, b := range blocked {
		s := b.String()
		if len(b.PDBs) > 0 {
			var names []string
			for _, p := range b.PDBs {
				names = append(names, fmt.Sprintf("%s (%d disruptions allowed, %d/%d healthy)", p.Name, p.DisruptionsAllowed, p.CurrentHealthy, p.DesiredHealthy))
			}
			s += " held by PDB " + strings.Join(names, ", ")
		} else {
			s += ": " + b.Reason
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// splitGone sorts the planned pods into those gone (or replaced by a pod
// of the same name) and those still present.
func splitGone(ctx context.Context, kc kubernetes.Interface, pods []corev1.Pod) (gone []PodRef, left []corev1.Pod) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	for i := range pods {
		p := &pods[i]
		cur, err := kc.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && cur.UID != p.UID) {
			gone = append(gone, podRef(p))
			continue
		}
		if err == nil {
			left = append(left, *cur)
		} else {
			left = append(left, *p)
		}
	}
	sortRefs(gone)
	return gone, left
}

// blockedPods asks the API server, with a dry-run eviction, why each pod
// cannot go now, and finds the PDBs that select it.
func blockedPods(ctx context.Context, kc kubernetes.Interface, pods []corev1.Pod, dryRunOnly bool) []BlockedPod {
	// The drain's own context may be what ended; the diagnosis gets its
	// own short bound.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	pdbs := map[string][]policyv1.PodDisruptionBudget{}
	out := make([]BlockedPod, 0, len(pods))
	for i := range pods {
		p := &pods[i]
		b := BlockedPod{PodRef: podRef(p)}
		if p.DeletionTimestamp != nil && !dryRunOnly {
			b.Reason = "evicted, still terminating"
		} else {
			b.Reason = evictionVerdict(ctx, kc, p)
		}
		list, ok := pdbs[p.Namespace]
		if !ok {
			l, err := kc.PolicyV1().PodDisruptionBudgets(p.Namespace).List(ctx, metav1.ListOptions{})
			if err == nil {
				list = l.Items
			}
			pdbs[p.Namespace] = list
		}
		for _, pdb := range list {
			if pdb.Spec.Selector == nil {
				continue
			}
			sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
			if err != nil || !sel.Matches(labels.Set(p.Labels)) {
				continue
			}
			b.PDBs = append(b.PDBs, PDBRef{
				Name:               pdb.Name,
				DisruptionsAllowed: pdb.Status.DisruptionsAllowed,
				CurrentHealthy:     pdb.Status.CurrentHealthy,
				DesiredHealthy:     pdb.Status.DesiredHealthy,
				ExpectedPods:       pdb.Status.ExpectedPods,
			})
		}
		sort.Slice(b.PDBs, func(i, j int) bool { return b.PDBs[i].Name < b.PDBs[j].Name })
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

func evictionVerdict(ctx context.Context, kc kubernetes.Interface, p *corev1.Pod) string {
	v, _ := evictionCheck(ctx, kc, p)
	return v
}

// evictionCheck is evictionVerdict, and the error when the caller may not
// evict at all (a permission its roles lack: no retry will change that).
func evictionCheck(ctx context.Context, kc kubernetes.Interface, p *corev1.Pod) (string, error) {
	ev := &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name},
		DeleteOptions: &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}},
	}
	err := kc.PolicyV1().Evictions(p.Namespace).Evict(ctx, ev)
	if err == nil {
		return "eviction would be admitted now (it was refused or timed out earlier)", nil
	}
	if apierrors.IsForbidden(err) && !apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
		return err.Error(), fmt.Errorf("dry-run eviction of %s/%s: %w", p.Namespace, p.Name, rbac.Explain(err, rbac.Options{}))
	}
	msg := err.Error()
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Details != nil {
		for _, c := range status.Status().Details.Causes {
			if c.Message != "" {
				msg += " " + c.Message
			}
		}
	}
	return msg, nil
}

// onlyApproved refuses a plan that would evict a pod the approval did not
// list (nil: no list to hold it to).
func onlyApproved(p Evictions, only map[string]bool) error {
	if only == nil {
		return nil
	}
	var extra []string
	for _, e := range p.Evict {
		if !only[e.Namespace+"/"+e.Name] {
			extra = append(extra, e.Namespace+"/"+e.Name)
		}
	}
	if len(extra) > 0 {
		return fmt.Errorf("%w: %d pods appeared since the approval and are not in it: %s", ErrPlanDrift, len(extra), strings.Join(extra, ", "))
	}
	return nil
}
