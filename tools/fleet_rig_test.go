package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/mcp-patch/mcp-patch/config"
	"github.com/mcp-patch/mcp-patch/examples"
	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/internal/testsupport/apifake"
	"github.com/mcp-patch/mcp-patch/internal/testsupport/fakes"
	"github.com/mcp-patch/mcp-patch/kube"
	"github.com/mcp-patch/mcp-patch/kube/actors"
	"github.com/mcp-patch/mcp-patch/kube/windowlock"
	"github.com/mcp-patch/mcp-patch/policy"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/service"
)

// The fleet rig is the server as Build wires it — the intent repository
// (examples/intent, committed with the real git in a temporary
// directory), the round book, approvals checked against an
// allowed_signers file and signed by the real ssh-keygen, the operations
// worker — over an API server stand-in (client-go's fake clientset, with
// the few behaviours of the real one the tools rely on) and a fake host
// per node. Nothing here needs a control plane. The stand-in's behaviours
// (kube/apifake) are kept honest against the real API server by
// kube/drain's TestFakeAPIServerDrainContract.

const (
	fRound   = "2026-11"
	fRunning = "6.8.0-48-generic"
	fTarget  = "6.8.0-51-generic"
)

// fleetHosts is one fake host per node behind the tools' HostSteps.
type fleetHosts struct {
	mu    sync.Mutex
	nodes map[string]*fakes.Host
}

func (f *fleetHosts) of(node string) *fakes.Host {
	f.mu.Lock()
	defer f.mu.Unlock()
	h, ok := f.nodes[node]
	if !ok {
		// A node the rig does not know is down, as SSH to it would be.
		h = &fakes.Host{Unreachable: true}
		f.nodes[node] = h
	}
	return h
}

func (f *fleetHosts) Inspect(ctx context.Context, node string, in steps.InspectInput) (steps.Inspection, error) {
	return f.of(node).Inspect(ctx, node, in)
}
func (f *fleetHosts) Simulate(ctx context.Context, node string) (steps.Simulation, error) {
	return f.of(node).Simulate(ctx, node)
}
func (f *fleetHosts) Install(ctx context.Context, node, action, round, digest string) (steps.InstallState, error) {
	return f.of(node).Install(ctx, node, action, round, digest)
}
func (f *fleetHosts) TrialBootPrepare(ctx context.Context, node string, in steps.TrialBootInput) (steps.TrialBoot, error) {
	return f.of(node).TrialBootPrepare(ctx, node, in)
}
func (f *fleetHosts) TrialBootReboot(ctx context.Context, node, round string) (steps.TrialBoot, error) {
	return f.of(node).TrialBootReboot(ctx, node, round)
}
func (f *fleetHosts) TrialBootStatus(ctx context.Context, node, round string) (steps.TrialBoot, error) {
	return f.of(node).TrialBootStatus(ctx, node, round)
}
func (f *fleetHosts) Promote(ctx context.Context, node string, in steps.PromoteInput) (steps.PromoteResult, error) {
	return f.of(node).Promote(ctx, node, in)
}
func (f *fleetHosts) FallbackDrill(ctx context.Context, node, action, round, kernel string) (steps.DrillState, error) {
	return f.of(node).FallbackDrill(ctx, node, action, round, kernel)
}
func (f *fleetHosts) Autoremove(ctx context.Context, node string, in steps.AutoremoveInput) (steps.AutoremoveResult, error) {
	return f.of(node).Autoremove(ctx, node, in)
}
func (f *fleetHosts) Kernel(ctx context.Context, node string) (steps.KernelInfo, error) {
	return f.of(node).Kernel(ctx, node)
}
func (f *fleetHosts) Preflight(ctx context.Context, node string) (steps.Simulation, steps.Inspection, error) {
	return f.of(node).Preflight(ctx, node)
}
func (f *fleetHosts) Download(ctx context.Context, node string) (steps.DownloadResult, error) {
	return f.of(node).Download(ctx, node)
}
func (f *fleetHosts) Snapshot(ctx context.Context, node, round, role, etcd string) (steps.SnapshotResult, error) {
	return f.of(node).Snapshot(ctx, node, round, role, etcd)
}
func (f *fleetHosts) Verify(ctx context.Context, node string, in steps.VerifyInput) (steps.NodeVerification, error) {
	return f.of(node).Verify(ctx, node, in)
}
func (f *fleetHosts) GPUCheck(ctx context.Context, node string, in steps.GPUCheckInput) (steps.GPUCheck, error) {
	return f.of(node).GPUCheck(ctx, node, in)
}

var _ service.HostSteps = (*fleetHosts)(nil)

// signer is a person's SSH key, made and used by the real ssh-keygen.
type signer struct {
	key, principal string
	// mem, when set, is the key in this process: sign signs with it
	// (policy.Sign, the same SSHSIG as ssh-keygen -Y sign).
	mem ssh.Signer
}

func newSigner(t testing.TB, dir, principal string) signer {
	t.Helper()
	if _, err := exec.LookPath("ssh-keygen"); err != nil {
		t.Fatalf("the fleet rig signs with the real ssh-keygen (openssh-client): %v", err)
	}
	key := filepath.Join(dir, principal+".key")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", principal, "-f", key).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v: %s", err, out)
	}
	return signer{key: key, principal: principal}
}

func (s signer) allowedLine(t testing.TB) string {
	t.Helper()
	pub, err := os.ReadFile(s.key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	return s.principal + ` namespaces="mcp-patch" ` + strings.TrimSpace(string(pub)) + "\n"
}

// sign signs a request or statement as a person would by hand
// (ssh-keygen -Y sign -n mcp-patch, then the text and its signature).
func (s signer) sign(t testing.TB, text string) string {
	t.Helper()
	if s.mem != nil {
		res, err := policy.Sign(s.mem, []byte(text))
		if err != nil {
			t.Fatalf("sign: %v", err)
		}
		return text + string(res.Signature)
	}
	f := filepath.Join(t.TempDir(), "request.txt")
	if err := os.WriteFile(f, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("ssh-keygen", "-Y", "sign", "-n", "mcp-patch", "-f", s.key, f).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen -Y sign: %v: %s", err, out)
	}
	sig, err := os.ReadFile(f + ".sig")
	if err != nil {
		t.Fatal(err)
	}
	return text + string(sig)
}

// fleet is the rig.
type fleet struct {
	t      testing.TB
	d      *Deps
	repo   string
	kube   *fake.Clientset
	dyn    *dynamicfake.FakeDynamicClient
	hosts  *fleetHosts
	person signer
	model  *modelEndpoint
	hooks  *webhookSink
	mu     sync.Mutex
	now    time.Time
	// cfg is the configuration the server was built with, stop ends the
	// server (restart builds it again from the same disk).
	cfg  config.Config
	stop func()
	// between, when set, is called after each call of a scale window.
	between func(node, tool string)
}

// modelEndpoint is an OpenAI-style completions endpoint (a real HTTP
// server) that answers or fails as the test says.
type modelEndpoint struct {
	srv   *httptest.Server
	fail  atomic.Bool
	calls atomic.Int64
}

func newModelEndpoint(t testing.TB) *modelEndpoint {
	m := &modelEndpoint{}
	m.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.calls.Add(1)
		if m.fail.Load() {
			http.Error(w, "CUDA error: no kernel image is available", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"cmpl-1","object":"text_completion","model":"smoke","choices":[{"index":0,"text":" ready","finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":1,"total_tokens":10}}`)
	}))
	t.Cleanup(m.srv.Close)
	return m
}

// webhookSink receives the server's notifications (a real HTTP server).
type webhookSink struct {
	srv *httptest.Server
	// delay holds each request this long before answering (a slow
	// receiver).
	delay atomic.Int64
	mu    sync.Mutex
	got   []map[string]any
	seen  chan struct{}
}

func newWebhookSink(t testing.TB) *webhookSink {
	s := &webhookSink{seen: make(chan struct{}, 256)}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(time.Duration(s.delay.Load()))
		var m map[string]any
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &m)
		if m == nil {
			m = map[string]any{"raw": string(b)}
		}
		s.mu.Lock()
		s.got = append(s.got, m)
		s.mu.Unlock()
		select {
		case s.seen <- struct{}{}:
		default:
		}
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// waitFor waits (bounded, generously) until a received notification's
// JSON contains every one of the words.
func (s *webhookSink) waitFor(t *testing.T, words ...string) string {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		s.mu.Lock()
		for _, m := range s.got {
			b, _ := json.Marshal(m)
			ok := true
			for _, w := range words {
				ok = ok && strings.Contains(string(b), w)
			}
			if ok {
				s.mu.Unlock()
				return string(b)
			}
		}
		s.mu.Unlock()
		select {
		case <-s.seen:
		case <-deadline:
			s.mu.Lock()
			defer s.mu.Unlock()
			t.Fatalf("no notification with %q among %d received: %v", words, len(s.got), s.got)
			return ""
		}
	}
}

var modelURLRE = regexp.MustCompile(`(?m)^(\s*url:\s*).*$`)

// intentRepo copies examples/intent into dir, points the model endpoint at
// url and commits it on main with the real git.
func intentRepo(t testing.TB, dir, url string) {
	t.Helper()
	sub, err := fs.Sub(examples.Intent, "intent")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(dir, sub); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "gpu-fleet", "settings.yaml")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, modelURLRE.ReplaceAll(b, []byte("${1}"+url+"/v1/completions")), 0o644); err != nil {
		t.Fatal(err)
	}
	gitRun(t, dir, "init", "-q", "-b", "main")
	gitRun(t, dir, "add", "-A")
	gitRun(t, dir, "commit", "-qm", "intent")
}

func readyNode(name string, labels map[string]string, gpus int64) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Status: corev1.NodeStatus{
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Addresses:   []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0." + fmt.Sprint(len(name))}},
			NodeInfo:    corev1.NodeSystemInfo{KernelVersion: fRunning},
			Capacity:    corev1.ResourceList{},
			Allocatable: corev1.ResourceList{},
		}}
	if gpus > 0 {
		q := *resource.NewQuantity(gpus, resource.DecimalSI)
		n.Status.Capacity[kube.ResourceGPU], n.Status.Allocatable[kube.ResourceGPU] = q, q
	}
	return n
}

func workloadPod(ns, name, node, rs string) *corev1.Pod {
	yes := true
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs, UID: types.UID("uid-" + rs), Controller: &yes}}},
		Spec:   corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
}

// newFleet is a cluster of cp-1 (control plane), gpu-1 (GPU canary) and
// gpu-2 (GPU), each running fRunning with fTarget to install, one
// inference pod on each GPU server.
func newFleet(t testing.TB, configure ...func(*config.Config)) *fleet {
	t.Helper()
	f := &fleet{t: t, now: time.Date(2026, 11, 3, 8, 0, 0, 0, time.UTC), model: newModelEndpoint(t), hooks: newWebhookSink(t)}
	f.repo = filepath.Join(t.TempDir(), "intent")
	intentRepo(t, f.repo, f.model.srv.URL)
	keys := t.TempDir()
	f.person = newSigner(t, keys, "alice@example.org")
	signers := filepath.Join(keys, "allowed_signers")
	if err := os.WriteFile(signers, []byte(f.person.allowedLine(t)), 0o600); err != nil {
		t.Fatal(err)
	}
	c := config.DefaultConfig()
	c.IntentRepo, c.StateDir, c.Identity = f.repo, t.TempDir(), "server-a"
	c.Approvals.AllowedSigners = signers
	c.Notify.Webhooks = []config.Webhook{{Name: "ops", URL: f.hooks.srv.URL}}
	for _, fn := range configure {
		fn(&c)
	}
	f.cfg = c
	d := f.build()
	t.Cleanup(func() { f.stop() })

	f.kube = fake.NewClientset(
		readyNode("cp-1", map[string]string{kube.LabelControlPlane: ""}, 0),
		readyNode("gpu-1", map[string]string{kube.LabelGPUPresent: "true", "platform.example.com/patch-canary": "true"}, 8),
		readyNode("gpu-2", map[string]string{kube.LabelGPUPresent: "true"}, 8),
		workloadPod("inference", "model-5c-a", "gpu-1", "model-5c"),
		workloadPod("inference", "model-5c-b", "gpu-2", "model-5c"),
	)
	apifake.Behave(f.kube)
	f.dyn = dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{kube.CNPGClusters: "ClusterList", actors.NodeMaintenances: "NodeMaintenanceList"})
	clients := &kube.Clients{Kube: f.kube, Dynamic: f.dyn, Host: "https://api.test:6443"}
	d.Cluster = func(context.Context) (*kube.Clients, error) { return clients, nil }
	f.hosts = &fleetHosts{nodes: map[string]*fakes.Host{}}
	for _, n := range []string{"cp-1", "gpu-1", "gpu-2"} {
		f.hosts.nodes[n] = &fakes.Host{Running: fRunning, Target: fTarget, Digest: "sha256:" + strings.Repeat("c", 63) + fmt.Sprint(len(n))}
	}
	d.Hosts = func(context.Context) (*service.HostAccess, error) {
		return &service.HostAccess{Steps: f.hosts, Pool: nopPool{}}, nil
	}
	return f
}

// build builds the server from f.cfg, as a process start does.
func (f *fleet) build() *Deps {
	f.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	clock := func() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.now }
	d, cleanup, err := Build(ctx, &f.cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), func(string) string { return "" }, clock)
	if err != nil {
		cancel()
		f.t.Fatalf("Build: %v", err)
	}
	var once sync.Once
	f.stop = func() { once.Do(func() { cancel(); cleanup() }) }
	f.d = d
	return d
}

// restart ends the server and builds a new one from the same intent
// repository and state directory (journal, nonces, signatures on disk),
// as a process restart does; the cluster and the hosts stay as they are.
func (f *fleet) restart() {
	f.t.Helper()
	cluster, hosts := f.d.Cluster, f.d.Hosts
	f.stop()
	d := f.build()
	d.Cluster, d.Hosts = cluster, hosts
}

func (f *fleet) advance(d time.Duration) { f.mu.Lock(); f.now = f.now.Add(d); f.mu.Unlock() }

func (f *fleet) host(node string) *fakes.Host { return f.hosts.of(node) }

// call calls a tool as the MCP surface does and answers its output and
// result.
func (f *fleet) call(tool string, args map[string]any) (map[string]any, *Result) {
	f.t.Helper()
	tl := testTools().Get(tool)
	if tl == nil {
		f.t.Fatalf("no tool %s", tool)
	}
	if args == nil {
		args = map[string]any{}
	}
	b, _ := json.Marshal(args)
	out, res := tl.CallJSON(context.Background(), f.d, b, func(float64, float64, string) {})
	if err := statusRuleHolds(res); err != nil {
		f.t.Errorf("%s %v: %v", tool, args, err)
	}
	ob, _ := json.Marshal(out)
	var m map[string]any
	_ = json.Unmarshal(ob, &m)
	return m, res
}

// must calls a tool and wants status.
func (f *fleet) must(want Status, tool string, args map[string]any) map[string]any {
	f.t.Helper()
	m, res := f.call(tool, args)
	if res.Status != want {
		f.t.Fatalf("%s %v: %s, want %s: %v (next: %s)", tool, args, res.Status, want, res.Reasons, res.NextAction)
	}
	return m
}

// approve calls tool, has the person sign the request it answers with the
// real ssh-keygen, and calls again with the approval.
func (f *fleet) approve(tool string, args map[string]any) (map[string]any, *Result) {
	f.t.Helper()
	_, res := f.call(tool, args)
	if res.Status != StatusApprovalRequired || res.Approval == nil {
		f.t.Fatalf("%s without approval: %s %v", tool, res.Status, res.Reasons)
	}
	with := map[string]any{"approval": f.person.sign(f.t, res.Approval.Request)}
	for k, v := range args {
		with[k] = v
	}
	return f.call(tool, with)
}

// decide records a person's decision with a statement they signed.
func (f *fleet) decide(args map[string]any) *Result {
	f.t.Helper()
	_, res := f.call("record_decision", args)
	if res.Status != StatusApprovalRequired || res.Approval == nil {
		f.t.Fatalf("record_decision %v without a statement: %s %v", args, res.Status, res.Reasons)
	}
	with := map[string]any{"attestation": f.person.sign(f.t, res.Approval.Request)}
	for k, v := range args {
		with[k] = v
	}
	_, res = f.call("record_decision", with)
	return res
}

// leaseHolder is who holds the window Lease on the cluster now ("" when
// it is free or absent).
func (f *fleet) leaseHolder() string {
	f.t.Helper()
	l, err := f.kube.CoordinationV1().Leases(f.d.Config.Kube.LeaseNamespace).Get(context.Background(), windowlock.DefaultName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return ""
	}
	if err != nil {
		f.t.Fatalf("read the window Lease: %v", err)
	}
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// state is the open round's state (fRound before any is planned).
func (f *fleet) state() *round.State {
	f.t.Helper()
	id := f.d.Book.CurrentID()
	if id == "" {
		id = fRound
	}
	j, err := f.d.Book.Journal(id, false)
	if err != nil {
		f.t.Fatal(err)
	}
	return j.State()
}

func (f *fleet) node(name string) *corev1.Node {
	f.t.Helper()
	n, err := f.kube.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return n
}

// planned runs plan_round and has the person sign the plan.
func (f *fleet) planned() {
	f.t.Helper()
	f.must(StatusOK, "plan_round", map[string]any{"round": fRound})
	if _, res := f.approve("sign_plan", nil); res.Status != StatusOK {
		f.t.Fatalf("sign_plan: %s %v", res.Status, res.Reasons)
	}
}

var _ = policy.KindRoundResume
