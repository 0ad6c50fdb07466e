package world

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/mcp-patch/mcp-patch/kube"
)

var (
	_ Fault     = PDBBlocksDrain{}
	_ Fault     = EtcdMemberLost{}
	_ Fault     = PostgresNotReady{}
	_ resolver  = PostgresNotReady{}
	_ podHolder = PostgresNotReady{}
	_ Fault     = WebhookShort{}
	_ podHolder = WebhookShort{}
	_ Fault     = NewFailingPod{}
	_ podHolder = NewFailingPod{}
	_ Fault     = ModelErrors{}
	_ Fault     = GPUsExhausted{}
)

// Fault is a cluster-side failure the World plays. World.Inject applies
// it; World.Clear (by name) takes it back.
type Fault interface {
	// Name is the fault's CLI name ("pdb-blocks-drain", ...).
	Name() string
	// Description says what the fault does and which check it trips.
	Description() string
	inject(ctx context.Context, w *World) error
	clear(ctx context.Context, w *World) error
}

// Inject applies a fault; injecting one already active replaces it (the
// old one is cleared first).
func (w *World) Inject(ctx context.Context, f Fault) error {
	if w.activeFault(f.Name()) != nil {
		if err := w.Clear(ctx, f.Name()); err != nil {
			return err
		}
	}
	if r, ok := f.(resolver); ok {
		resolved, err := r.resolve(ctx, w)
		if err != nil {
			return fmt.Errorf("inject %s: %w", f.Name(), err)
		}
		f = resolved
	}
	// Active before inject runs, so that inject can wait for the holds
	// the loop applies.
	w.mu.Lock()
	w.faults = append(w.faults, f)
	w.mu.Unlock()
	if err := f.inject(ctx, w); err != nil {
		w.mu.Lock()
		w.faults = slices.DeleteFunc(w.faults, func(o Fault) bool { return o.Name() == f.Name() })
		w.mu.Unlock()
		return fmt.Errorf("inject %s: %w", f.Name(), err)
	}
	w.poke()
	w.log.Info("lab fault injected", "fault", f.Name())
	return nil
}

// resolver is a fault that fills in its defaults from the World before it
// is injected.
type resolver interface {
	resolve(ctx context.Context, w *World) (Fault, error)
}

// Clear takes back the named fault; clearing one that is not active does
// nothing.
func (w *World) Clear(ctx context.Context, name string) error {
	f := w.activeFault(name)
	if f == nil {
		return nil
	}
	if err := f.clear(ctx, w); err != nil {
		return fmt.Errorf("clear %s: %w", name, err)
	}
	w.mu.Lock()
	w.faults = slices.DeleteFunc(w.faults, func(o Fault) bool { return o.Name() == name })
	w.mu.Unlock()
	w.poke()
	w.log.Info("lab fault cleared", "fault", name)
	return nil
}

// ActiveFaults lists the faults injected and not cleared.
func (w *World) ActiveFaults() []Fault {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.faults)
}

func (w *World) activeFault(name string) Fault {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, f := range w.faults {
		if f.Name() == name {
			return f
		}
	}
	return nil
}

// FaultInfo names and describes a fault kind.
type FaultInfo struct {
	Name        string
	Description string
	// Arg says what FaultByName's argument means ("" when none).
	Arg string
}

var faultKinds = []struct {
	info FaultInfo
	make func(arg string) (Fault, error)
}{
	{FaultInfo{"pdb-blocks-drain", PDBBlocksDrain{}.Description(), "node"}, func(a string) (Fault, error) {
		if a == "" {
			return nil, fmt.Errorf("pdb-blocks-drain: name the node")
		}
		return PDBBlocksDrain{Node: a}, nil
	}},
	{FaultInfo{"etcd-member-lost", EtcdMemberLost{}.Description(), "control-plane host [the first]"}, func(a string) (Fault, error) { return EtcdMemberLost{Host: a}, nil }},
	{FaultInfo{"postgres-not-ready", PostgresNotReady{}.Description(), "instance pod [the first replica]"}, func(a string) (Fault, error) { return PostgresNotReady{Instance: a}, nil }},
	{FaultInfo{"webhook-short", WebhookShort{}.Description(), "replicas not ready [1]"}, func(a string) (Fault, error) {
		if a == "" {
			return WebhookShort{}, nil
		}
		n, err := strconv.Atoi(a)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("webhook-short: %q is not a replica count", a)
		}
		return WebhookShort{Replicas: n}, nil
	}},
	{FaultInfo{"new-failing-pod", NewFailingPod{}.Description(), "namespace [kube-system]"}, func(a string) (Fault, error) { return NewFailingPod{Namespace: a}, nil }},
	{FaultInfo{"model-errors", ModelErrors{}.Description(), "HTTP status [500]"}, func(a string) (Fault, error) {
		if a == "" {
			return ModelErrors{}, nil
		}
		n, err := strconv.Atoi(a)
		if err != nil || n < 400 || n > 599 {
			return nil, fmt.Errorf("model-errors: %q is not an HTTP error status", a)
		}
		return ModelErrors{Status: n}, nil
	}},
	{FaultInfo{"gpus-exhausted", GPUsExhausted{}.Description(), "GPU server [every one]"}, func(a string) (Fault, error) { return GPUsExhausted{Node: a}, nil }},
	{FaultInfo{"gpu-job-running", GPUJobRunning{}.Description(), "GPU server [the canary]"}, func(a string) (Fault, error) { return GPUJobRunning{Node: a}, nil }},
}

// Faults lists every fault kind.
func Faults() []FaultInfo {
	out := make([]FaultInfo, len(faultKinds))
	for i, k := range faultKinds {
		out[i] = k.info
	}
	return out
}

// FaultByName builds a fault from its CLI name and optional argument.
func FaultByName(name, arg string) (Fault, error) {
	for _, k := range faultKinds {
		if k.info.Name == name {
			return k.make(arg)
		}
	}
	names := make([]string, len(faultKinds))
	for i, k := range faultKinds {
		names[i] = k.info.Name
	}
	return nil, fmt.Errorf("unknown cluster fault %q (known: %s)", name, strings.Join(names, ", "))
}

// PDBBlocksDrain runs a one-replica app on Node behind a PDB with
// maxUnavailable 0: every eviction of its pod is refused, so draining the
// node cannot finish.
type PDBBlocksDrain struct {
	Node string
}

// Guarded app names, in Names.WorkloadNamespace.
const (
	GuardedAppName = "ledger-writer"
)

func (PDBBlocksDrain) Name() string { return "pdb-blocks-drain" }
func (PDBBlocksDrain) Description() string {
	return "a one-replica Deployment pinned to the node behind a PodDisruptionBudget with maxUnavailable 0: its eviction is refused, so the drain of that node blocks"
}

func (f PDBBlocksDrain) inject(ctx context.Context, w *World) error {
	if _, err := w.kc.CoreV1().Nodes().Get(ctx, f.Node, metav1.GetOptions{}); err != nil {
		return fmt.Errorf("node %s: %w", f.Node, err)
	}
	ns := w.opts.Names.WorkloadNamespace
	sel := map[string]string{labelApp: GuardedAppName}
	one := int32(1)
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: GuardedAppName, Namespace: ns, Labels: withWorld(sel)},
		Spec: appsv1.DeploymentSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: withWorld(sel)},
				Spec: corev1.PodSpec{
					Affinity: pinnedAffinity(f.Node),
					Tolerations: []corev1.Toleration{controlPlaneToleration,
						{Key: string(kube.ResourceGPU), Operator: corev1.TolerationOpExists}},
					Containers: []corev1.Container{{Name: "app", Image: "registry.example.com/finance/ledger-writer:3.2.0"}},
				},
			},
		},
	}
	zero := intstr.FromInt32(0)
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: GuardedAppName, Namespace: ns, Labels: worldLabels},
		Spec:       policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &zero, Selector: &metav1.LabelSelector{MatchLabels: sel}},
	}
	if _, err := w.kc.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{FieldManager: fieldManager}); err != nil {
		return fmt.Errorf("create PDB %s/%s: %w", ns, pdb.Name, err)
	}
	if _, err := w.kc.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{FieldManager: fieldManager}); err != nil {
		return fmt.Errorf("create deployment %s/%s: %w", ns, dep.Name, err)
	}
	// The drain must meet a running pod and a PDB that has counted it.
	return w.waitFor(ctx, "guarded app running on "+f.Node, func(ctx context.Context) (bool, string, error) {
		pods, err := w.kc.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(sel).String()})
		if err != nil {
			return false, err.Error(), nil
		}
		running := false
		for i := range pods.Items {
			running = running || (podReady(&pods.Items[i]) && pods.Items[i].Spec.NodeName == f.Node)
		}
		if !running {
			return false, "pod not running yet", nil
		}
		p, err := w.kc.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, pdb.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		return p.Status.ObservedGeneration == p.Generation && p.Status.CurrentHealthy == 1, "PDB status not counted yet", nil
	})
}

func (f PDBBlocksDrain) clear(ctx context.Context, w *World) error {
	ns := w.opts.Names.WorkloadNamespace
	if err := w.kc.PolicyV1().PodDisruptionBudgets(ns).Delete(ctx, GuardedAppName, metav1.DeleteOptions{}); err != nil && !isNotFound(err) {
		return fmt.Errorf("delete PDB %s/%s: %w", ns, GuardedAppName, err)
	}
	if err := w.kc.AppsV1().Deployments(ns).Delete(ctx, GuardedAppName, metav1.DeleteOptions{PropagationPolicy: new(metav1.DeletePropagationBackground)}); err != nil && !isNotFound(err) {
		return fmt.Errorf("delete deployment %s/%s: %w", ns, GuardedAppName, err)
	}
	return nil
}

// EtcdMemberLost stops the etcd member of a control-plane host and keeps it
// stopped (a reboot of the host does not bring it back) until cleared. With
// three members quorum holds, with a warning; the etcd mirror pod is not
// Ready, a new stack-health failure; a second member down loses quorum.
type EtcdMemberLost struct {
	// Host is the control-plane host; "" means the first.
	Host string
}

func (EtcdMemberLost) Name() string { return "etcd-member-lost" }
func (EtcdMemberLost) Description() string {
	return "stops the host's etcd member and keeps it stopped: quorum holds with a warning, its etcd pod is not Ready, and one more member down loses quorum"
}

func (f EtcdMemberLost) member(w *World) (int, string, error) {
	host := f.Host
	if host == "" {
		host = w.cps[0].Name
	}
	i, ok := w.etcdIndex[host]
	if !ok {
		return 0, host, fmt.Errorf("%s is not a control-plane host", host)
	}
	if w.opts.Etcd == nil {
		return 0, host, fmt.Errorf("the world was set up without an etcd cluster")
	}
	return i, host, nil
}

func (f EtcdMemberLost) inject(_ context.Context, w *World) error {
	i, host, err := f.member(w)
	if err != nil {
		return err
	}
	w.mu.Lock()
	w.etcdHeld[i] = true
	w.mu.Unlock()
	if err := w.opts.Etcd.StopMember(i); err != nil {
		return err
	}
	w.log.Info("lab etcd member lost", "member", i, "node", host)
	return nil
}

func (f EtcdMemberLost) clear(ctx context.Context, w *World) error {
	i, host, err := f.member(w)
	if err != nil {
		return err
	}
	w.mu.Lock()
	w.etcdHeld[i] = false
	w.mu.Unlock()
	if !w.hostUp(host) {
		return nil // it starts when the host is back
	}
	if err := w.opts.Etcd.StartMember(ctx, i); err != nil {
		return err
	}
	w.mu.Lock()
	w.etcdDown[i] = false
	w.mu.Unlock()
	return nil
}

// PostgresNotReady keeps one CNPG instance pod from being Ready: the
// Cluster reports readyInstances below instances and is not healthy.
type PostgresNotReady struct {
	// Instance is the pod name; "" means the first replica.
	Instance string
}

func (PostgresNotReady) Name() string { return "postgres-not-ready" }
func (PostgresNotReady) Description() string {
	return "keeps one Postgres instance pod not Ready: readyInstances drops below instances and the CNPG Cluster leaves the healthy phase"
}

// resolve names the first replica when no instance is given, so the hold
// stays on that pod when the primary moves.
func (f PostgresNotReady) resolve(ctx context.Context, w *World) (Fault, error) {
	if f.Instance == "" {
		st, err := w.PostgresStatus(ctx)
		if err != nil {
			return nil, err
		}
		for _, s := range w.instances {
			if s.name != st.CurrentPrimary {
				f.Instance = s.name
				break
			}
		}
	}
	for _, s := range w.instances {
		if s.name == f.Instance {
			return f, nil
		}
	}
	return nil, fmt.Errorf("%q is not an instance of %s", f.Instance, w.opts.Names.PostgresCluster)
}

func (PostgresNotReady) inject(context.Context, *World) error { return nil }
func (PostgresNotReady) clear(context.Context, *World) error  { return nil }

func (f PostgresNotReady) holds(w *World, _ []*corev1.Pod) map[string]podHold {
	return map[string]podHold{w.opts.Names.PostgresNamespace + "/" + f.Instance: {reason: "postgres is not accepting connections"}}
}

// WebhookShort keeps Replicas of the webhook Deployment's pods not Ready,
// so the Deployment is below its replicas.
type WebhookShort struct {
	// Replicas is how many pods are not Ready; zero means 1.
	Replicas int
}

func (WebhookShort) Name() string { return "webhook-short" }
func (WebhookShort) Description() string {
	return "keeps webhook pods not Ready: the admission webhook's Deployment is short of its replicas"
}
func (WebhookShort) inject(context.Context, *World) error { return nil }
func (WebhookShort) clear(context.Context, *World) error  { return nil }

func (f WebhookShort) holds(w *World, pods []*corev1.Pod) map[string]podHold {
	n := max(f.Replicas, 1)
	ns := w.opts.Names.WebhookNamespace
	var names []string
	for _, p := range pods {
		if p.Namespace == ns && p.Labels[labelApp] == w.opts.Names.WebhookDeployment && p.DeletionTimestamp == nil {
			names = append(names, p.Name)
		}
	}
	sort.Strings(names)
	out := map[string]podHold{}
	for _, name := range names[:min(n, len(names))] {
		out[ns+"/"+name] = podHold{reason: "readiness probe failed: webhook not serving"}
	}
	return out
}

// NewFailingPod runs a pod in a critical namespace that keeps crashing
// (CrashLoopBackOff, restarts): a new failure against any baseline taken
// before it.
type NewFailingPod struct {
	// Namespace is where the pod runs; "" means kube-system.
	Namespace string
}

// FailingPodName is the NewFailingPod fault's pod.
const FailingPodName = "metrics-agent-lab"

func (NewFailingPod) Name() string { return "new-failing-pod" }
func (NewFailingPod) Description() string {
	return "starts a pod in a critical namespace that keeps crashing (CrashLoopBackOff, restarting): a new stack-health failure against the baseline"
}

func (f NewFailingPod) ns() string {
	if f.Namespace == "" {
		return metav1.NamespaceSystem
	}
	return f.Namespace
}

func (f NewFailingPod) inject(ctx context.Context, w *World) error {
	node := ""
	for _, h := range w.opts.Hosts {
		if w.hostUp(h.Name) {
			node = h.Name
			break
		}
	}
	if node == "" {
		return fmt.Errorf("no host is up to run the pod")
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: FailingPodName, Namespace: f.ns(), Labels: withWorld(map[string]string{labelApp: FailingPodName})},
		Spec: corev1.PodSpec{
			NodeName:    node,
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers:  []corev1.Container{{Name: "agent", Image: "registry.example.com/observability/metrics-agent:0.9.1"}},
		},
	}
	if _, err := w.kc.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{FieldManager: fieldManager}); err != nil {
		return fmt.Errorf("create pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	// kwok starts it; the kubelet part then holds it crashing.
	return w.waitFor(ctx, "failing pod crashing", func(ctx context.Context) (bool, string, error) {
		p, err := w.kc.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		w.poke()
		return p.Status.Phase == corev1.PodRunning && podMatchesHold(p, f.hold()), "phase " + string(p.Status.Phase), nil
	})
}

func (f NewFailingPod) hold() podHold {
	return podHold{reason: "back-off restarting failed container", waiting: "CrashLoopBackOff", restarts: 3}
}

func (f NewFailingPod) holds(*World, []*corev1.Pod) map[string]podHold {
	return map[string]podHold{f.ns() + "/" + FailingPodName: f.hold()}
}

func (f NewFailingPod) clear(ctx context.Context, w *World) error {
	zero := int64(0)
	err := w.kc.CoreV1().Pods(f.ns()).Delete(ctx, FailingPodName, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("delete pod %s/%s: %w", f.ns(), FailingPodName, err)
	}
	return w.waitFor(ctx, "failing pod gone", func(ctx context.Context) (bool, string, error) {
		_, err := w.kc.CoreV1().Pods(f.ns()).Get(ctx, FailingPodName, metav1.GetOptions{})
		return isNotFound(err), "still there", nil
	})
}

// ModelErrors makes the completion endpoint answer every request with an
// HTTP error.
type ModelErrors struct {
	// Status is the HTTP status; zero means 500.
	Status int
}

func (ModelErrors) Name() string { return "model-errors" }
func (ModelErrors) Description() string {
	return "the model's completion endpoint answers every request with HTTP 500"
}
func (f ModelErrors) inject(_ context.Context, w *World) error {
	w.model.setFailing(true, f.Status)
	return nil
}
func (ModelErrors) clear(_ context.Context, w *World) error {
	w.model.setFailing(false, 0)
	return nil
}

// GPUsExhausted runs a workload on a GPU server (or every one) that takes
// all the GPUs the model leaves free: a GPU smoke pod finds no capacity.
type GPUsExhausted struct {
	// Node is the GPU server; "" means every GPU server.
	Node string
}

// GPUFillerPrefix names the GPUsExhausted Deployments ("training-<node>").
const GPUFillerPrefix = "training-"

func (GPUsExhausted) Name() string { return "gpus-exhausted" }
func (GPUsExhausted) Description() string {
	return "a training Deployment on the GPU server takes every GPU the model leaves free: the GPU smoke pod cannot schedule (no capacity)"
}

func (f GPUsExhausted) nodes(w *World) ([]string, error) {
	if f.Node != "" {
		for _, h := range w.opts.gpuServers() {
			if h.Name == f.Node {
				return []string{f.Node}, nil
			}
		}
		return nil, fmt.Errorf("%s is not a GPU server", f.Node)
	}
	var out []string
	for _, h := range w.opts.gpuServers() {
		out = append(out, h.Name)
	}
	return out, nil
}

func (f GPUsExhausted) inject(ctx context.Context, w *World) error {
	nodes, err := f.nodes(w)
	if err != nil {
		return err
	}
	ns := w.opts.Names.WorkloadNamespace
	free := w.opts.GPUsPerServer - w.opts.ModelGPUs
	if free == 0 {
		return nil
	}
	gpus := *resource.NewQuantity(int64(free), resource.DecimalSI)
	for _, node := range nodes {
		name := GPUFillerPrefix + node
		sel := map[string]string{labelApp: name}
		dep := trainerDeployment(ns, name, node, sel, sel, gpus)
		if _, err := w.kc.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{FieldManager: fieldManager}); err != nil {
			return fmt.Errorf("create deployment %s/%s: %w", ns, name, err)
		}
	}
	return w.waitFor(ctx, "GPU fillers running", func(ctx context.Context) (bool, string, error) {
		for _, node := range nodes {
			u, err := kube.GPUUsageOn(ctx, w.kc, node)
			if err != nil {
				return false, err.Error(), nil
			}
			if u.Requested < int64(w.opts.GPUsPerServer) {
				return false, fmt.Sprintf("node %s: %d of %d GPUs requested", node, u.Requested, w.opts.GPUsPerServer), nil
			}
		}
		return true, "", nil
	})
}

func (f GPUsExhausted) clear(ctx context.Context, w *World) error {
	nodes, err := f.nodes(w)
	if err != nil {
		return err
	}
	ns := w.opts.Names.WorkloadNamespace
	for _, node := range nodes {
		err := w.kc.AppsV1().Deployments(ns).Delete(ctx, GPUFillerPrefix+node, metav1.DeleteOptions{PropagationPolicy: new(metav1.DeletePropagationForeground)})
		if err != nil && !isNotFound(err) {
			return fmt.Errorf("delete deployment %s/%s: %w", ns, GPUFillerPrefix+node, err)
		}
	}
	// The GPUs are free once the pods are gone.
	return w.waitFor(ctx, "GPU fillers gone", func(ctx context.Context) (bool, string, error) {
		pods, err := w.kc.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		for _, p := range pods.Items {
			if strings.HasPrefix(p.Name, GPUFillerPrefix) {
				return false, "pod " + p.Name + " still there", nil
			}
		}
		return true, "", nil
	})
}

// Training job labels: the lab intent's drain.wait_for_jobs selector is
// JobLabel=JobLabelValue.
const (
	JobLabel      = "workload-class"
	JobLabelValue = "training"
	// TrainingJobPrefix names the job pods GPUJobRunning starts.
	TrainingJobPrefix = "llama-finetune-"
)

// GPUJobRunning starts a training job's pod on a GPU server (default: the
// canary), labelled as the intent's drain.wait_for_jobs selects: the
// server's drain cordons and waits for it. Clearing it is the job
// finishing (its pod goes away).
type GPUJobRunning struct {
	Node string
}

var _ Fault = GPUJobRunning{}

func (GPUJobRunning) Name() string { return "gpu-job-running" }
func (GPUJobRunning) Description() string {
	return "a training job (" + JobLabel + "=" + JobLabelValue + ", one GPU) runs on the GPU server: its drain cordons, then waits for it until the bound; clearing it finishes the job"
}

func (f GPUJobRunning) node(w *World) (string, error) {
	for _, h := range w.opts.gpuServers() {
		if (f.Node == "" && h.Canary) || h.Name == f.Node {
			return h.Name, nil
		}
	}
	if f.Node == "" {
		return "", fmt.Errorf("the lab has no canary GPU server: name one")
	}
	return "", fmt.Errorf("%s is not a GPU server", f.Node)
}

func (f GPUJobRunning) inject(ctx context.Context, w *World) error {
	node, err := f.node(w)
	if err != nil {
		return err
	}
	// A Deployment stands for the training operator that owns the job's
	// pod (kubectl's drain refuses pods nobody owns); kwok completes pods
	// of a batch Job at once, so it cannot be one.
	ns, name := w.opts.Names.WorkloadNamespace, TrainingJobPrefix+node
	sel := map[string]string{labelApp: name}
	podLabels := map[string]string{labelApp: name, JobLabel: JobLabelValue}
	gpu := *resource.NewQuantity(1, resource.DecimalSI)
	dep := trainerDeployment(ns, name, node, sel, podLabels, gpu)
	if _, err := w.kc.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{FieldManager: fieldManager}); err != nil {
		return fmt.Errorf("create deployment %s/%s: %w", ns, name, err)
	}
	return w.waitFor(ctx, "training job running on "+node, func(ctx context.Context) (bool, string, error) {
		pods, err := w.kc.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(sel).String()})
		if err != nil {
			return false, err.Error(), nil
		}
		for _, p := range pods.Items {
			if p.Spec.NodeName == node && p.Status.Phase == corev1.PodRunning {
				return true, "", nil
			}
		}
		return false, fmt.Sprintf("%d pods, none running on %s", len(pods.Items), node), nil
	})
}

func (f GPUJobRunning) clear(ctx context.Context, w *World) error {
	node, err := f.node(w)
	if err != nil {
		return err
	}
	ns, name := w.opts.Names.WorkloadNamespace, TrainingJobPrefix+node
	err = w.kc.AppsV1().Deployments(ns).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: new(metav1.DeletePropagationForeground)})
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("delete deployment %s/%s: %w", ns, name, err)
	}
	return w.waitFor(ctx, "training job gone from "+node, func(ctx context.Context) (bool, string, error) {
		pods, err := w.kc.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(map[string]string{labelApp: name}).String()})
		if err != nil {
			return false, err.Error(), nil
		}
		if len(pods.Items) > 0 {
			return false, "pod " + pods.Items[0].Name + " still there", nil
		}
		return true, "", nil
	})
}

// trainerDeployment is one replica of a GPU trainer pinned to node,
// requesting gpus GPUs: what the GPU fillers and the training job faults
// run.
func trainerDeployment(ns, name, node string, sel, podLabels map[string]string, gpus resource.Quantity) *appsv1.Deployment {
	one := int32(1)
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: withWorld(sel)},
		Spec: appsv1.DeploymentSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: withWorld(podLabels)},
				Spec: corev1.PodSpec{
					Affinity:    pinnedAffinity(node),
					Tolerations: []corev1.Toleration{{Key: string(kube.ResourceGPU), Operator: corev1.TolerationOpExists}},
					Containers: []corev1.Container{{
						Name: "trainer", Image: "nvcr.io/nvidia/pytorch:24.08-py3",
						Resources: corev1.ResourceRequirements{
							Requests: corev1.ResourceList{kube.ResourceGPU: gpus},
							Limits:   corev1.ResourceList{kube.ResourceGPU: gpus},
						},
					}},
				},
			},
		},
	}
}
