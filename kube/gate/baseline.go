package gate

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/mcp-patch/mcp-patch/kube"
)

// HealthConfig says what stack health covers.
type HealthConfig struct {
	// CriticalNamespaces are the namespaces whose pods count. Empty:
	// kube-system only.
	CriticalNamespaces []string
	// StartupGrace: a pod younger than this that is not Ready yet (and has
	// not restarted) is a warning, not a failure, because a drained node's
	// pods are being recreated. Zero: 2 minutes.
	StartupGrace time.Duration
}

func (h HealthConfig) namespaces() []string {
	if len(h.CriticalNamespaces) == 0 {
		return []string{metav1.NamespaceSystem}
	}
	ns := append([]string(nil), h.CriticalNamespaces...)
	sort.Strings(ns)
	return ns
}

// PodRecord is one pod as the baseline saw it.
type PodRecord struct {
	UID      string `json:"uid"`
	Workload string `json:"workload"`
	Healthy  bool   `json:"healthy"`
	Restarts int32  `json:"restarts"`
}

// Baseline is stack health at round start; only failures that are not in
// it block a gate. It is plain data, kept in the round journal.
type Baseline struct {
	TakenAt       time.Time `json:"taken_at"`
	Namespaces    []string  `json:"namespaces"`
	NotReadyNodes []string  `json:"not_ready_nodes"`
	// Pods by "namespace/name".
	Pods map[string]PodRecord `json:"pods"`
	// UnhealthyWorkloads are the workloads (see workloadKey) with a pod
	// failing at round start.
	UnhealthyWorkloads []string `json:"unhealthy_workloads"`
	FailingVerify      []string `json:"failing_verify"`
}

// TakeBaseline records NotReady nodes, the critical namespaces' pods (their
// health and restart counts) and the intent verify checks failing now.
func TakeBaseline(ctx context.Context, kc kubernetes.Interface, cfg HealthConfig, failingVerify []string) (Baseline, error) {
	b := Baseline{TakenAt: time.Now().UTC(), Namespaces: cfg.namespaces(), Pods: map[string]PodRecord{}}
	nodes, err := kube.ListNodes(ctx, kc)
	if err != nil {
		return Baseline{}, fmt.Errorf("take health baseline: %w", err)
	}
	b.NotReadyNodes = notReadyNodes(nodes)
	unhealthy := map[string]bool{}
	for _, ns := range b.Namespaces {
		pods, err := kube.ListPods(ctx, kc, ns, "")
		if err != nil {
			return Baseline{}, fmt.Errorf("take health baseline: %w", err)
		}
		for i := range pods {
			p := &pods[i]
			rec := PodRecord{UID: string(p.UID), Workload: workloadKey(p), Healthy: podHealthy(p), Restarts: restarts(p)}
			b.Pods[p.Namespace+"/"+p.Name] = rec
			if !rec.Healthy {
				unhealthy[rec.Workload] = true
			}
		}
	}
	b.UnhealthyWorkloads = sortedSet(unhealthy)
	b.FailingVerify = sortedSet(toSet(failingVerify))
	return b, nil
}

// CompareBaseline fails only on what is new since the baseline: a node
// NotReady now that was Ready, a pod failing (not Ready, or restarted since)
// whose workload was healthy, a verify check failing that passed. Old
// failures are evidence, not blockers.
func CompareBaseline(ctx context.Context, kc kubernetes.Interface, base Baseline, cfg HealthConfig, failingVerify []string) Check {
	return timed(func() Check {
		c := Check{Name: NameBaseline}
		grace := cfg.StartupGrace
		if grace == 0 {
			grace = 2 * time.Minute
		}
		now := time.Now()
		var fresh []string

		nodes, err := kube.ListNodes(ctx, kc)
		if err != nil {
			c.Reason = err.Error()
			return c
		}
		wasNotReady := toSet(base.NotReadyNodes)
		notReady := notReadyNodes(nodes)
		var old []string
		for _, n := range notReady {
			if wasNotReady[n] {
				old = append(old, n)
			} else {
				fresh = append(fresh, "node "+n+" NotReady")
			}
		}
		c.Evidence = append(c.Evidence, fmt.Sprintf("nodes: %d, NotReady now %d (%d already at baseline)", len(nodes), len(notReady), len(old)))
		if len(old) > 0 {
			c.Evidence = append(c.Evidence, "NotReady at baseline, ignored: "+strings.Join(old, ", "))
		}

		baseBad := toSet(base.UnhealthyWorkloads)
		var oldPods, starting []string
		checked := 0
		namespaces := base.Namespaces
		if len(namespaces) == 0 {
			namespaces = cfg.namespaces()
		}
		for _, ns := range namespaces {
			pods, err := kube.ListPods(ctx, kc, ns, "")
			if err != nil {
				c.Reason = err.Error()
				return c
			}
			for i := range pods {
				p := &pods[i]
				checked++
				key := p.Namespace + "/" + p.Name
				prev, seen := base.Pods[key]
				samePod := seen && prev.UID == string(p.UID)
				r := restarts(p)
				healthy := podHealthy(p)
				var why []string
				if !healthy {
					why = append(why, podState(p))
				}
				switch {
				case samePod && r > prev.Restarts:
					why = append(why, fmt.Sprintf("restarted %d times since baseline", r-prev.Restarts))
				case !samePod && r > 0:
					why = append(why, fmt.Sprintf("new pod restarted %d times", r))
				}
				if len(why) == 0 {
					continue
				}
				w := workloadKey(p)
				desc := fmt.Sprintf("pod %s (%s): %s", key, w, strings.Join(why, ", "))
				switch {
				case baseBad[w]:
					oldPods = append(oldPods, desc)
				case !healthy && r == 0 && now.Sub(p.CreationTimestamp.Time) < grace:
					starting = append(starting, desc)
				default:
					fresh = append(fresh, desc)
				}
			}
		}
		c.Evidence = append(c.Evidence, fmt.Sprintf("pods in %s: %d checked, %d failing as at baseline, %d starting",
			strings.Join(namespaces, ","), checked, len(oldPods), len(starting)))
		for _, d := range oldPods {
			c.Evidence = append(c.Evidence, "already failing at baseline, ignored: "+d)
		}
		for _, d := range starting {
			c.Warnings = append(c.Warnings, fmt.Sprintf("starting (younger than %v): %s", grace, d))
		}

		wasFailing := toSet(base.FailingVerify)
		var oldVerify []string
		for _, v := range sortedSet(toSet(failingVerify)) {
			if wasFailing[v] {
				oldVerify = append(oldVerify, v)
			} else {
				fresh = append(fresh, "verify check "+v+" failing")
			}
		}
		if len(oldVerify) > 0 {
			c.Evidence = append(c.Evidence, "verify checks failing at baseline, ignored: "+strings.Join(oldVerify, ", "))
		}
		c.Evidence = append(c.Evidence, "baseline taken "+base.TakenAt.UTC().Format(time.RFC3339))
		if len(fresh) > 0 {
			c.Reason = fmt.Sprintf("%d new failure(s) since baseline: %s", len(fresh), strings.Join(fresh, "; "))
			return c
		}
		c.OK = true
		return c
	})
}

func notReadyNodes(nodes []corev1.Node) []string {
	var out []string
	for i := range nodes {
		if !kube.NodeReady(&nodes[i]) {
			out = append(out, nodes[i].Name)
		}
	}
	sort.Strings(out)
	return out
}

// podHealthy: finished successfully, or running with the Ready condition.
func podHealthy(p *corev1.Pod) bool {
	switch p.Status.Phase {
	case corev1.PodSucceeded:
		return true
	case corev1.PodRunning:
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady {
				return c.Status == corev1.ConditionTrue
			}
		}
	}
	return false
}

func podState(p *corev1.Pod) string {
	s := "phase " + string(p.Status.Phase)
	if p.Status.Phase == corev1.PodRunning {
		s = "not Ready"
	}
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && w.Reason != "" {
			return s + " (" + cs.Name + ": " + w.Reason + ")"
		}
	}
	return s
}

func restarts(p *corev1.Pod) int32 {
	var n int32
	for _, cs := range p.Status.InitContainerStatuses {
		n += cs.RestartCount
	}
	for _, cs := range p.Status.ContainerStatuses {
		n += cs.RestartCount
	}
	return n
}

// workloadKey names what a pod belongs to, stable across its replacement:
// "ns/Deployment/name" for ReplicaSet pods (the pod-template-hash suffix
// stripped), "ns/<Kind>/name" for other controllers, "ns/Pod/name" for a
// bare pod.
func workloadKey(p *corev1.Pod) string {
	ref := metav1.GetControllerOf(p)
	if ref == nil {
		return p.Namespace + "/Pod/" + p.Name
	}
	if ref.Kind == "ReplicaSet" {
		if h := p.Labels["pod-template-hash"]; h != "" && strings.HasSuffix(ref.Name, "-"+h) {
			return p.Namespace + "/Deployment/" + strings.TrimSuffix(ref.Name, "-"+h)
		}
	}
	return p.Namespace + "/" + ref.Kind + "/" + ref.Name
}

func toSet(s []string) map[string]bool {
	m := make(map[string]bool, len(s))
	for _, v := range s {
		m[v] = true
	}
	return m
}

func sortedSet(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
