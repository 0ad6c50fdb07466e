package world

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/yaml"

	"github.com/mcp-patch/mcp-patch/kube"
)

//go:embed crd/postgresql.cnpg.io_clusters.yaml
var cnpgCRD []byte

// World is the lab's workloads on a running lab cluster, and the loop that
// keeps them behaving. Close stops the loop and the endpoints; the objects
// stay in the cluster (it is thrown away with it).
type World struct {
	opts Options
	kc   kubernetes.Interface
	dc   dynamic.Interface
	log  *slog.Logger

	model     *modelServer
	oidc      *oidcServer
	webhookCA []byte

	cps       []Host         // control-plane hosts, in order
	instances []instanceSlot // CNPG instances, in order
	etcdIndex map[string]int // control-plane host → etcd member
	hosts     map[string]*hostState

	nodes   listersv1.NodeLister
	pods    listersv1.PodLister
	trigger chan struct{}
	stop    context.CancelFunc
	loopCtx context.Context
	done    chan struct{}
	wg      sync.WaitGroup

	clusterUID types.UID
	setupTook  time.Duration

	mu           sync.Mutex
	faults       []Fault
	etcdHeld     map[int]bool // members kept stopped by a fault
	etcdDown     map[int]bool // members the World stopped
	etcdStarting map[int]bool
	restartBumps map[types.UID]*restartBump // pods to show one more restart
	switchStart  time.Time
	lastErr      map[string]string // per reconcile part, to log each error once
	closed       bool
}

// instanceSlot is one CNPG instance and the node its volume lives on.
type instanceSlot struct {
	name, node string
}

// hostState is what the World knows of one host's power.
type hostState struct {
	host    Host
	wantUp  bool   // from the probe or SetHostUp
	isUp    bool   // what the cluster has been made to show
	kernel  string // kernel to report once up
	podUIDs map[types.UID]bool
	boots   int // how many times the cluster has been shown it going down
}

// Setup creates the World's objects on the cluster, starts its loop and
// the model and OIDC endpoints, and returns once every workload runs and
// the CNPG Cluster is healthy. On error everything started is stopped.
func Setup(ctx context.Context, opts Options) (*World, error) {
	start := time.Now()
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	w := &World{
		opts:      opts,
		kc:        opts.Cluster.Client(),
		dc:        opts.Cluster.Dynamic(),
		log:       opts.Logger,
		etcdIndex: map[string]int{},
		hosts:     map[string]*hostState{},
		trigger:   make(chan struct{}, 1),
		done:      make(chan struct{}),
		etcdHeld:  map[int]bool{},
		etcdDown:  map[int]bool{},
		lastErr:   map[string]string{},
	}
	w.cps = opts.controlPlanes()
	for i, h := range w.cps {
		w.etcdIndex[h.Name] = i
		if i < opts.PostgresInstances {
			w.instances = append(w.instances, instanceSlot{name: instanceName(opts.Names.PostgresCluster, i+1), node: h.Name})
		}
	}
	for _, h := range opts.Hosts {
		k := h.Kernel
		if k == "" {
			k = DefaultKernel
		}
		w.hosts[h.Name] = &hostState{host: h, wantUp: true, isUp: true, kernel: k}
	}
	if err := w.setup(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("set up lab world: %w", err), w.Close())
	}
	w.setupTook = time.Since(start)
	w.log.Info("lab world ready", "after", w.setupTook.Round(time.Millisecond), "model", w.model.addr(), "oidc", w.oidc.issuer)
	return w, nil
}

func (w *World) setup(ctx context.Context) error {
	o := w.opts
	var err error
	if w.model, err = startModelServer(o.ModelAddr, o.Names.ModelID); err != nil {
		return err
	}
	if w.oidc, err = startOIDCServer(); err != nil {
		return err
	}
	w.oidc.srv.ErrorLog = slog.NewLogLogger(w.log.Handler(), slog.LevelDebug)
	w.model.srv.ErrorLog = slog.NewLogLogger(w.log.Handler(), slog.LevelDebug)

	namespaces := []string{o.Names.PostgresNamespace, o.Names.CNPGNamespace, o.Names.WebhookNamespace,
		o.Names.GPUOperatorNamespace, o.Names.ModelNamespace, o.Names.WorkloadNamespace}
	if o.Names.VIPLeaseNamespace != metav1.NamespaceSystem {
		namespaces = append(namespaces, o.Names.VIPLeaseNamespace)
	}
	for _, ns := range dedupe(namespaces) {
		if err := create("namespace "+ns, func() error {
			_, err := w.kc.CoreV1().Namespaces().Create(ctx, namespaceObject(ns), metav1.CreateOptions{FieldManager: fieldManager})
			return err
		}); err != nil {
			return err
		}
	}

	policy, binding := nodePowerPolicy()
	if err := create("admission policy "+policy.Name, func() error {
		_, err := w.kc.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{FieldManager: fieldManager})
		return err
	}); err != nil {
		return err
	}
	if err := create("admission policy binding "+binding.Name, func() error {
		_, err := w.kc.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{FieldManager: fieldManager})
		return err
	}); err != nil {
		return err
	}

	for _, h := range o.Hosts {
		if err := create("node "+h.Name, func() error {
			_, err := w.kc.CoreV1().Nodes().Create(ctx, nodeObject(h, o), metav1.CreateOptions{FieldManager: fieldManager})
			return err
		}); err != nil {
			return err
		}
	}

	// The CRD goes in while kwok brings the nodes up.
	if err := w.installCRD(ctx); err != nil {
		return err
	}
	if err := w.waitFor(ctx, "nodes Ready", func(ctx context.Context) (bool, string, error) {
		for _, h := range o.Hosts {
			n, err := w.kc.CoreV1().Nodes().Get(ctx, h.Name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error(), nil
			}
			if !kube.NodeReady(n) {
				return false, "node " + h.Name + " not Ready yet", nil
			}
		}
		return true, "", nil
	}); err != nil {
		return err
	}
	for _, ns := range dedupe(namespaces) {
		if err := w.waitServiceAccount(ctx, ns); err != nil {
			return err
		}
	}

	if err := w.createPostgres(ctx); err != nil {
		return err
	}
	if err := w.createMirrorPods(ctx); err != nil {
		return err
	}
	if err := w.createWebhook(ctx); err != nil {
		return err
	}
	if err := w.createWorkloads(ctx); err != nil {
		return err
	}
	if err := w.createVIPLease(ctx, o.PrimaryNode); err != nil {
		return err
	}

	if err := w.startLoop(ctx); err != nil {
		return err
	}
	return w.waitSettled(ctx)
}

// installCRD applies the embedded CNPG Cluster CRD and waits until it is
// served.
func (w *World) installCRD(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "mcp-patch-world-crd-")
	if err != nil {
		return fmt.Errorf("install CNPG CRD: %w", err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "postgresql.cnpg.io_clusters.yaml")
	if err := os.WriteFile(path, cnpgCRD, 0o600); err != nil {
		return fmt.Errorf("install CNPG CRD: %w", err)
	}
	if _, err := w.opts.Cluster.InstallCRDFile(ctx, path); err != nil {
		return fmt.Errorf("install CNPG CRD: %w", err)
	}
	return nil
}

func (w *World) waitServiceAccount(ctx context.Context, ns string) error {
	return w.waitFor(ctx, "default service account in "+ns, func(ctx context.Context) (bool, string, error) {
		_, err := w.kc.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		return true, "", nil
	})
}

// waitSettled waits until the workloads run and the CNPG Cluster is
// healthy: what the production gate needs to be green.
func (w *World) waitSettled(ctx context.Context) error {
	o := w.opts
	return w.waitFor(ctx, "workloads running", func(ctx context.Context) (bool, string, error) {
		for _, d := range []struct{ ns, name string }{
			{o.Names.WebhookNamespace, o.Names.WebhookDeployment},
			{o.Names.ModelNamespace, o.Names.ModelName},
			{o.Names.CNPGNamespace, cnpgOperator},
		} {
			dep, err := w.kc.AppsV1().Deployments(d.ns).Get(ctx, d.name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error(), nil
			}
			want := int32(1)
			if dep.Spec.Replicas != nil {
				want = *dep.Spec.Replicas
			}
			if dep.Status.ReadyReplicas != want {
				return false, fmt.Sprintf("deployment %s/%s ready %d/%d", d.ns, d.name, dep.Status.ReadyReplicas, want), nil
			}
		}
		if len(o.gpuServers()) > 0 {
			ds, err := w.kc.AppsV1().DaemonSets(o.Names.GPUOperatorNamespace).Get(ctx, deviceDaemonSet, metav1.GetOptions{})
			if err != nil {
				return false, err.Error(), nil
			}
			if ds.Status.DesiredNumberScheduled == 0 || ds.Status.NumberReady != ds.Status.DesiredNumberScheduled {
				return false, fmt.Sprintf("daemonset %s ready %d/%d", deviceDaemonSet, ds.Status.NumberReady, ds.Status.DesiredNumberScheduled), nil
			}
		}
		st, err := w.PostgresStatus(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		if st.Phase != PhaseHealthy || st.ReadyInstances != o.PostgresInstances {
			var each []string
			if views, err := w.instanceViews(ctx); err == nil {
				for _, v := range views {
					each = append(each, v.why())
				}
			}
			return false, fmt.Sprintf("postgres %d/%d ready, phase %q (%s)", st.ReadyInstances, o.PostgresInstances, st.Phase, strings.Join(each, "; ")), nil
		}
		pods, err := w.kc.CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: LabelWorld})
		if err != nil {
			return false, err.Error(), nil
		}
		for i := range pods.Items {
			if !podReady(&pods.Items[i]) {
				return false, "pod kube-system/" + pods.Items[i].Name + " not Ready", nil
			}
		}
		return true, "", nil
	})
}

// startLoop starts the informers and the loop.
func (w *World) startLoop(ctx context.Context) error {
	loopCtx, cancel := context.WithCancel(context.Background())
	w.stop, w.loopCtx = cancel, loopCtx
	factory := informers.NewSharedInformerFactory(w.kc, 0)
	nodeInf := factory.Core().V1().Nodes()
	podInf := factory.Core().V1().Pods()
	w.nodes = nodeInf.Lister()
	w.pods = podInf.Lister()
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { w.poke() },
		UpdateFunc: func(any, any) { w.poke() },
		DeleteFunc: func(any) { w.poke() },
	}
	if _, err := nodeInf.Informer().AddEventHandler(handler); err != nil {
		return fmt.Errorf("watch nodes: %w", err)
	}
	if _, err := podInf.Informer().AddEventHandler(handler); err != nil {
		return fmt.Errorf("watch pods: %w", err)
	}
	factory.Start(loopCtx.Done())
	synced := factory.WaitForCacheSync(ctx.Done())
	for typ, ok := range synced {
		if !ok {
			cancel()
			factory.Shutdown()
			return fmt.Errorf("sync %v informer: %w", typ, context.Cause(ctx))
		}
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer close(w.done)
		defer factory.Shutdown()
		w.loop(loopCtx)
	}()
	return nil
}

// poke asks the loop for a reconcile; pokes while one is pending merge.
func (w *World) poke() {
	select {
	case w.trigger <- struct{}{}:
	default:
	}
}

func (w *World) loop(ctx context.Context) {
	tick := time.NewTicker(w.opts.TickInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.trigger:
		case <-tick.C:
		}
		w.reconcile(ctx)
	}
}

// reconcile plays every controller once. Each part's error is logged when
// it changes and retried on the next round.
func (w *World) reconcile(ctx context.Context) {
	w.pollProbes()
	parts := []struct {
		name string
		run  func(context.Context) error
	}{
		{"hosts", w.reconcileHosts},
		{"postgres", w.reconcilePostgres},
		{"vip", w.reconcileVIP},
		{"kubelet", w.reconcilePods},
	}
	for _, p := range parts {
		if ctx.Err() != nil {
			return
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := p.run(rctx)
		cancel()
		if ctx.Err() != nil {
			return // closing: what failed does not matter any more
		}
		w.noteError(p.name, err)
	}
}

func (w *World) noteError(part string, err error) {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	w.mu.Lock()
	prev := w.lastErr[part]
	w.lastErr[part] = msg
	w.mu.Unlock()
	switch {
	case msg != "" && msg != prev:
		w.log.Warn("lab world reconcile failed; retrying", "part", part, "err", err)
	case msg == "" && prev != "":
		w.log.Info("lab world reconcile recovered", "part", part)
	}
}

// Close stops the loop and the endpoints. It is safe to call more than
// once.
func (w *World) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	w.mu.Unlock()
	if w.stop != nil {
		w.stop()
	}
	w.wg.Wait()
	var errs []error
	if w.model != nil {
		errs = append(errs, w.model.close())
	}
	if w.oidc != nil {
		errs = append(errs, w.oidc.close())
	}
	return errors.Join(errs...)
}

// SetupDuration is how long Setup took.
func (w *World) SetupDuration() time.Duration { return w.setupTook }

// ModelAddr is the loopback address ("127.0.0.1:port") of the completion
// endpoint.
func (w *World) ModelAddr() string { return w.model.addr() }

// ModelEndpoint is the model server's base URL on loopback,
// http://127.0.0.1:<port>/v1: what gpucheck.CompletionRequest.Endpoint
// takes.
func (w *World) ModelEndpoint() string { return "http://" + w.model.addr() + "/v1" }

// ModelCompletionsURL is the completions route on loopback,
// http://127.0.0.1:<port>/v1/completions: the shape of the intent's
// gpu.model_endpoint.url.
func (w *World) ModelCompletionsURL() string { return w.ModelEndpoint() + "/completions" }

// ModelServiceHost is the in-cluster host:port of the model Service, as the
// intent names it: llm-smoke.inference.svc.cluster.local:8000.
func (w *World) ModelServiceHost() string {
	n := w.opts.Names
	return fmt.Sprintf("%s.%s.svc.cluster.local:%d", n.ModelName, n.ModelNamespace, n.ModelPort)
}

// ModelHTTPClient returns an HTTP client that reaches the model Service's
// in-cluster name (ModelServiceHost) at the lab's endpoint, the way a client
// inside the cluster would; every other address is dialled as usual.
func (w *World) ModelHTTPClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = w.DialContext
	return &http.Client{Transport: tr}
}

// DialContext dials addr, sending the model Service's in-cluster name to
// the lab's model endpoint.
func (w *World) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	if addr == w.ModelServiceHost() {
		w.mu.Lock()
		closed := w.closed
		w.mu.Unlock()
		if closed {
			return nil, errModelClosed
		}
		addr = w.model.addr()
	}
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

// OIDCIssuer is the issuer URL the lab's kube-apiserver mirror pods name
// (https://127.0.0.1:<port>/realms/platform).
func (w *World) OIDCIssuer() string { return w.oidc.issuer }

// OIDCCAPEM is the CA of the OIDC issuer's serving certificate (what
// OIDCCAFile holds on the control-plane hosts).
func (w *World) OIDCCAPEM() []byte { return w.oidc.caPEM }

// WebhookCAPEM is the CA bundle of the admission webhook.
func (w *World) WebhookCAPEM() []byte { return w.webhookCA }

// InventoryOptions returns the production inventory options that fit the
// World (its canary label).
func (w *World) InventoryOptions() kube.InventoryOptions {
	return kube.InventoryOptions{CanaryLabel: w.opts.Names.CanaryLabel}
}

// Names returns the names the World uses.
func (w *World) Names() Names { return w.opts.Names }

// PrimaryNode is the control-plane host that held the Postgres primary and
// the VIP at Setup.
func (w *World) PrimaryNode() string { return w.opts.PrimaryNode }

// waitFor polls check every 200ms within the ready timeout.
func (w *World) waitFor(ctx context.Context, what string, check func(context.Context) (bool, string, error)) error {
	ctx, cancel := context.WithTimeout(ctx, w.opts.ReadyTimeout)
	defer cancel()
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	last := ""
	for {
		ok, why, err := check(ctx)
		if err != nil {
			return fmt.Errorf("wait for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		// A check cut short by the deadline says only that; the reason
		// before it is the one worth keeping.
		if ctx.Err() == nil || last == "" {
			last = why
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s: %w (last: %s)", what, context.Cause(ctx), last)
		case <-t.C:
		}
	}
}

// create runs a create call; an object that already exists is an error
// (the World needs a fresh cluster).
func create(what string, do func() error) error {
	if err := do(); err != nil {
		return fmt.Errorf("create %s: %w", what, err)
	}
	return nil
}

func podReady(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	sort.Strings(out)
	return out
}

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }

func isAlreadyExists(err error) bool { return apierrors.IsAlreadyExists(err) }

// APIServerManifest is the kube-apiserver static pod manifest of a
// control-plane host (/etc/kubernetes/manifests/kube-apiserver.yaml), the
// file its mirror pod stands for: same command, OIDC flags included.
func (w *World) APIServerManifest(node string) ([]byte, error) {
	if !w.isCP(node) {
		return nil, fmt.Errorf("kube-apiserver manifest: %s is not a control-plane host", node)
	}
	pod := mirrorPod(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, "kube-apiserver", apiserverCommand(w.oidc.issuer))
	pod.Name, pod.OwnerReferences, pod.Annotations, pod.Spec.NodeName = "kube-apiserver", nil, nil, ""
	pod.Labels = map[string]string{"component": "kube-apiserver", "tier": "control-plane"}
	pod.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
	out, err := yaml.Marshal(pod)
	if err != nil {
		return nil, fmt.Errorf("kube-apiserver manifest for %s: %w", node, err)
	}
	return out, nil
}

// Intent settings the lab cannot keep as examples/intent has them: a lab
// copy of the intent repository should carry these values instead.
const (
	SettingModelURL   = "gpu.model_endpoint.url"
	SettingOIDCIssuer = "control_plane.oidc.issuer_url"
	SettingAPIVIP     = "control_plane.api_vip"
	SettingAPIPort    = "control_plane.api_port"
)

// IntentOverrides returns, by setting path, the values a lab copy of the
// intent needs: the model's completions URL on loopback, the lab's OIDC
// issuer, and the lab API server's address in place of the VIP (no VIP
// exists on loopback).
func (w *World) IntentOverrides() (map[string]string, error) {
	u, err := url.Parse(w.opts.Cluster.Server)
	if err != nil {
		return nil, fmt.Errorf("intent overrides: API server URL %q: %w", w.opts.Cluster.Server, err)
	}
	return map[string]string{
		SettingModelURL:   w.ModelCompletionsURL(),
		SettingOIDCIssuer: w.oidc.issuer,
		SettingAPIVIP:     u.Hostname(),
		SettingAPIPort:    u.Port(),
	}, nil
}
