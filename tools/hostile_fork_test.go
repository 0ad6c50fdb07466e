package tools

import (
	"context"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/mcp-patch/mcp-patch/internal/testsupport/apifake"
	"github.com/mcp-patch/mcp-patch/internal/testsupport/fakes"
	"github.com/mcp-patch/mcp-patch/kube"
	"github.com/mcp-patch/mcp-patch/kube/actors"
	"github.com/mcp-patch/mcp-patch/round/service"
)

// signInProcess makes the rig's person sign in this process (policy.Sign,
// the SSHSIG ssh-keygen -Y sign makes) with the key ssh-keygen made: a
// long random test signs thousands of times.
func (f *fleet) signInProcess() {
	f.t.Helper()
	b, err := os.ReadFile(f.person.key)
	if err != nil {
		f.t.Fatal(err)
	}
	k, err := ssh.ParsePrivateKey(b)
	if err != nil {
		f.t.Fatalf("parse the person's key: %v", err)
	}
	f.person.mem = k
}

// fork is a fresh rig in the state f is in now, for a new sequence: a copy
// of the intent repository (.git included) and of the state directory, a
// server built anew on them, the API server stand-in holding copies of
// f's Nodes, Pods, ConfigMaps and Leases, and hosts in the state f's are
// in. The person, the model endpoint and the webhook receiver are f's.
// It costs a directory copy, not a plan and a preflight.
func (f *fleet) fork(t testing.TB) *fleet {
	t.Helper()
	g := &fleet{t: t, now: f.now, model: f.model, hooks: f.hooks, person: f.person}
	g.repo = filepath.Join(t.TempDir(), "intent")
	if err := os.CopyFS(g.repo, os.DirFS(f.repo)); err != nil {
		t.Fatalf("copy the intent repository: %v", err)
	}
	c := *f.d.Config
	c.IntentRepo, c.StateDir = g.repo, filepath.Join(t.TempDir(), "state")
	if err := os.CopyFS(c.StateDir, os.DirFS(f.d.Config.StateDir)); err != nil {
		t.Fatalf("copy the state directory: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	clock := g.clock
	d, cleanup, err := Build(ctx, &c, slog.New(slog.NewTextHandler(io.Discard, nil)), func(string) string { return "" }, clock)
	if err != nil {
		cancel()
		t.Fatalf("Build: %v", err)
	}
	var once sync.Once
	g.stop = func() { once.Do(func() { cancel(); cleanup() }) }
	t.Cleanup(g.stop)
	g.cfg, g.d = c, d

	bg := context.Background()
	var objs []runtime.Object
	nodes, err1 := f.kube.CoreV1().Nodes().List(bg, metav1.ListOptions{})
	pods, err2 := f.kube.CoreV1().Pods("").List(bg, metav1.ListOptions{})
	cms, err3 := f.kube.CoreV1().ConfigMaps("").List(bg, metav1.ListOptions{})
	leases, err4 := f.kube.CoordinationV1().Leases("").List(bg, metav1.ListOptions{})
	for _, err := range []error{err1, err2, err3, err4} {
		if err != nil {
			t.Fatalf("list the template's objects: %v", err)
		}
	}
	for _, o := range nodes.Items {
		objs = append(objs, o.DeepCopy())
	}
	for _, o := range pods.Items {
		objs = append(objs, o.DeepCopy())
	}
	for _, o := range cms.Items {
		objs = append(objs, o.DeepCopy())
	}
	for _, o := range leases.Items {
		objs = append(objs, o.DeepCopy())
	}
	g.kube = fake.NewClientset(objs...)
	apifake.Behave(g.kube)
	g.dyn = dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{kube.CNPGClusters: "ClusterList", actors.NodeMaintenances: "NodeMaintenanceList"})
	clients := &kube.Clients{Kube: g.kube, Dynamic: g.dyn, Host: "https://api.test:6443"}
	d.Cluster = func(context.Context) (*kube.Clients, error) { return clients, nil }
	g.hosts = &fleetHosts{nodes: map[string]*fakes.Host{}}
	for n, h := range f.hosts.nodes {
		g.hosts.nodes[n] = cloneHost(h)
	}
	d.Hosts = func(context.Context) (*service.HostAccess, error) {
		return &service.HostAccess{Steps: g.hosts, Pool: nopPool{}}, nil
	}
	return g
}

func (f *fleet) clock() (now time.Time) { f.mu.Lock(); defer f.mu.Unlock(); return f.now }

// cloneHost is a fake host in the state h is in.
func cloneHost(h *fakes.Host) *fakes.Host {
	return &fakes.Host{Running: h.Running, Target: h.Target, Digest: h.Digest, InstallState: h.InstallState, ExitCode: h.ExitCode,
		Prepared: h.Prepared, RebootRequested: h.RebootRequested, Rebooted: h.Rebooted, Outcome: h.Outcome,
		PreparedNew: h.PreparedNew, PreparedOld: h.PreparedOld, FailStart: h.FailStart, AnyDigest: h.AnyDigest,
		Unreachable: h.Unreachable, Actions: slices.Clone(h.Actions), Autoremoved: maps.Clone(h.Autoremoved),
		Drill: h.Drill, BootFreeKB: h.BootFreeKB}
}
