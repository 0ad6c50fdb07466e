package world

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/mcp-patch/mcp-patch/kube"
	"github.com/mcp-patch/mcp-patch/kube/drain"
	"github.com/mcp-patch/mcp-patch/kube/gate"
	"github.com/mcp-patch/mcp-patch/kube/gpucheck"
	"github.com/mcp-patch/mcp-patch/lab/cluster"
)

// The critical namespaces of examples/intent/os-layer/settings.yaml.
var criticalNamespaces = []string{"kube-system", "cnpg-system", "databases", "platform-admission", "gpu-operator", "inference"}

var labHosts = []Host{
	{Name: "cp-1", Role: RoleControlPlane},
	{Name: "cp-2", Role: RoleControlPlane},
	{Name: "cp-3", Role: RoleControlPlane},
	{Name: "gpu-canary-1", Role: RoleGPU, Canary: true},
	{Name: "gpu-1", Role: RoleGPU},
	{Name: "gpu-2", Role: RoleGPU},
}

type testWorld struct {
	*World
	c    *cluster.Cluster
	etcd *cluster.EtcdCluster
}

func startWorld(t *testing.T, mutate func(*Options)) testWorld {
	t.Helper()
	log := slog.New(slog.NewTextHandler(testLog{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	c := cluster.StartT(t, cluster.Options{Logger: log})
	e := cluster.StartEtcdClusterT(t, cluster.EtcdOptions{Members: 3, Logger: log})
	opts := Options{
		Cluster:          c,
		Etcd:             e,
		Hosts:            labHosts,
		SwitchoverDelay:  time.Second,
		VIPLeaseDuration: 3 * time.Second,
		RestartsOnReboot: true,
		Logger:           log,
	}
	if mutate != nil {
		mutate(&opts)
	}
	w, err := Setup(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Error(err)
		}
	})
	t.Logf("world set up in %v", w.SetupDuration())
	return testWorld{World: w, c: c, etcd: e}
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Helper()
	l.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// gateConfig is the production gate's configuration for the lab.
func (tw testWorld) gateConfig(t *testing.T, base *gate.Baseline) gate.Config {
	t.Helper()
	tlsCfg, err := tw.etcd.ClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	return gate.Config{
		Etcd:     &gate.EtcdConfig{Endpoints: tw.etcd.Endpoints(), TLS: tlsCfg, DialTimeout: 2 * time.Second, RequestTimeout: 2 * time.Second},
		Postgres: gate.PostgresConfig{RequireClusters: true},
		Baseline: base,
		// The lab's pods are minutes old; the default grace would call a
		// pod the World holds not Ready "starting".
		Health: gate.HealthConfig{CriticalNamespaces: criticalNamespaces, StartupGrace: time.Millisecond},
		OIDC:   gate.OIDCConfig{CAPEM: tw.OIDCCAPEM(), Timeout: 5 * time.Second},
	}
}

func (tw testWorld) baseline(t *testing.T) *gate.Baseline {
	t.Helper()
	b, err := gate.TakeBaseline(t.Context(), tw.c.Client(), gate.HealthConfig{CriticalNamespaces: criticalNamespaces}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &b
}

// eventually polls check until it returns nil or the bound passes.
func eventually(t *testing.T, within time.Duration, what string, check func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), within)
	defer cancel()
	var last error
	for {
		if last = check(ctx); last == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not within %v: %v", what, within, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func checkByName(r gate.Report, name string) gate.Check {
	for _, c := range r.Checks {
		if c.Name == name {
			return c
		}
	}
	return gate.Check{}
}

func TestWorld(t *testing.T) {
	tw := startWorld(t, nil)
	ctx := t.Context()
	kc, dc := tw.c.Client(), tw.c.Dynamic()

	t.Run("production code reads the world", func(t *testing.T) {
		inv, err := kube.TakeInventory(ctx, kc, tw.InventoryOptions())
		if err != nil {
			t.Fatal(err)
		}
		type row struct {
			Name                           string
			CP, GPU, Canary, Ready         bool
			GPUs, Requested                int64
			Address, AddressSource, Kernel string
			Machine                        string
		}
		var got []row
		for _, n := range inv.Nodes {
			got = append(got, row{n.Name, n.ControlPlane, n.GPUServer, n.Canary, n.Ready, n.GPUs, n.GPUsRequested, n.Address, n.AddressSource, n.KernelVersion, n.Machine})
		}
		cp := func(name string) row {
			return row{name, true, false, false, true, 0, 0, "127.0.0.1", kube.AddressFromInternalIP, DefaultKernel, kube.MachineBareMetal}
		}
		gpu := func(name string, canary bool) row {
			return row{name, false, true, canary, true, 8, 4, "127.0.0.1", kube.AddressFromInternalIP, DefaultKernel, kube.MachineBareMetal}
		}
		want := []row{cp("cp-1"), cp("cp-2"), cp("cp-3"), gpu("gpu-1", false), gpu("gpu-2", false), gpu("gpu-canary-1", true)}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("inventory (-want +got):\n%s", d)
		}

		pl, err := kube.Locate(ctx, kc, dc, inv, kube.PlacementOptions{})
		if err != nil {
			t.Fatal(err)
		}
		wantPG := []kube.PostgresPrimary{{Namespace: "databases", Cluster: "platform-pg", Pod: "platform-pg-3", Node: "cp-3"}}
		if d := cmp.Diff(wantPG, pl.Postgres); d != "" {
			t.Errorf("postgres primary (-want +got):\n%s", d)
		}
		if pl.VIP.Node != "cp-3" || pl.VIP.Source != kube.SourceLease {
			t.Errorf("VIP = %+v, want cp-3 from the lease", pl.VIP)
		}
		if pl.Canary.Node != "gpu-canary-1" || pl.Canary.Source != kube.SourceLabel {
			t.Errorf("canary = %+v, want gpu-canary-1 by label", pl.Canary)
		}

		r := gate.Evaluate(ctx, kc, dc, tw.gateConfig(t, tw.baseline(t)))
		if !r.OK {
			t.Errorf("gate not green: %+v", r)
		}
		for _, c := range r.Checks {
			t.Logf("%s ok=%v evidence=%q warnings=%q", c.Name, c.OK, c.Evidence, c.Warnings)
		}
	})

	t.Run("completion endpoint", func(t *testing.T) {
		for _, tc := range []struct {
			name, url, api string
			viaService     bool
		}{
			{"loopback completions", tw.ModelEndpoint(), "", false},
			{"loopback chat", "http://" + tw.ModelAddr(), gpucheck.APIChat, false},
			// The intent's url names the route; gpucheck wants the base.
			{"service name from the intent", strings.TrimSuffix("http://"+tw.ModelServiceHost()+"/v1/completions", "/completions"), "", true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				req := gpucheck.CompletionRequest{Endpoint: tc.url, Model: "smoke", Prompt: "Reply with the single word: ready", MaxTokens: 8, API: tc.api, Timeout: 5 * time.Second}
				if tc.viaService {
					req.HTTPClient = tw.ModelHTTPClient()
				}
				res, err := gpucheck.Complete(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				if !res.OK || strings.TrimSpace(res.Answer) != ModelAnswer {
					t.Errorf("completion = %+v, want OK answering %q", res, ModelAnswer)
				}
			})
		}
	})

	t.Run("intent overrides name what answers in the lab", func(t *testing.T) {
		ov, err := tw.IntentOverrides()
		if err != nil {
			t.Fatal(err)
		}
		// What control-plane/verify.sh does with api_vip and api_port.
		out, err := tw.c.Kubectl(ctx, "--server", "https://"+ov[SettingAPIVIP]+":"+ov[SettingAPIPort], "get", "--raw=/readyz")
		if err != nil || strings.TrimSpace(string(out)) != "ok" {
			t.Errorf("readyz through the overridden VIP: %q, %v", out, err)
		}
		c := gate.CheckOIDC(ctx, nil, gate.OIDCConfig{
			Manifests: map[string][]byte{"cp-1": mustManifest(t, tw.World, "cp-1")},
			Files:     map[string][]byte{OIDCCAFile: tw.OIDCCAPEM()},
		})
		if !c.OK || !strings.Contains(strings.Join(c.Evidence, " "), ov[SettingOIDCIssuer]) {
			t.Errorf("OIDC from the manifest: %+v, want OK for %s", c, ov[SettingOIDCIssuer])
		}
		res, err := gpucheck.Complete(ctx, gpucheck.CompletionRequest{
			Endpoint: strings.TrimSuffix(ov[SettingModelURL], "/completions"), Model: "smoke", Prompt: "Reply with the single word: ready", API: gpucheck.APICompletions,
		})
		if err != nil || !res.OK {
			t.Errorf("completion at the overridden URL: %+v, %v", res, err)
		}
	})

	t.Run("smoke pod schedules on a GPU server", func(t *testing.T) {
		res, err := gpucheck.SmokePod(ctx, kc, "gpu-1", gpucheck.SmokeOptions{Image: "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04", Timeout: time.Minute, PollInterval: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != gpucheck.StatusOK || res.Free != 4 {
			t.Errorf("smoke = %+v, want ok with 4 GPUs free", res)
		}
	})

	t.Run("faults trip the matching check", func(t *testing.T) {
		testFaults(t, tw)
	})

	t.Run("draining the primary's node switches Postgres over", func(t *testing.T) {
		testSwitchoverOnDrain(t, tw)
	})

	t.Run("host down and up", func(t *testing.T) {
		testHostPower(t, tw)
	})
}

func testFaults(t *testing.T, tw testWorld) {
	ctx := t.Context()
	kc, dc := tw.c.Client(), tw.c.Dynamic()
	base := tw.baseline(t)
	cfg := tw.gateConfig(t, base)
	gateCheck := func(name string) func(ctx context.Context) (bool, string) {
		return func(ctx context.Context) (bool, string) {
			c := checkByName(gate.Evaluate(ctx, kc, dc, cfg), name)
			return c.OK, c.Reason
		}
	}
	dryDrain := func(node string) func(ctx context.Context) (bool, string) {
		return func(ctx context.Context) (bool, string) {
			res, err := drain.Drain(ctx, kc, node, drain.Options{Round: "lab", Identity: "world-test", DryRun: true,
				Timeout: 3 * time.Second, EvictRetryDelay: 500 * time.Millisecond}, nil)
			if err != nil {
				return false, fmt.Sprintf("%v (blocked: %+v)", err, res.Blocked)
			}
			return true, ""
		}
	}
	completion := func(ctx context.Context) (bool, string) {
		res, err := gpucheck.Completion(ctx, tw.ModelEndpoint(), "smoke", "Reply with the single word: ready", 5*time.Second, nil)
		if err != nil {
			return false, err.Error()
		}
		return res.OK, res.Reason
	}
	smoke := func(node string) func(ctx context.Context) (bool, string) {
		return func(ctx context.Context) (bool, string) {
			res, err := gpucheck.SmokePod(ctx, kc, node, gpucheck.SmokeOptions{Image: "cuda", Timeout: 20 * time.Second, PollInterval: 200 * time.Millisecond})
			if err != nil {
				return false, err.Error()
			}
			return res.Status == gpucheck.StatusOK, res.Status + ": " + res.Message
		}
	}
	tests := []struct {
		name  string
		fault Fault
		check func(ctx context.Context) (ok bool, reason string)
		// reason must appear in the failing check's reason.
		reason string
	}{
		{"pdb blocks drain", PDBBlocksDrain{Node: "gpu-1"}, dryDrain("gpu-1"), GuardedAppName},
		{"etcd member lost", EtcdMemberLost{Host: "cp-1"}, gateCheck(gate.NameBaseline), "kube-system/etcd-cp-1"},
		{"postgres not ready", PostgresNotReady{}, gateCheck(gate.NamePostgres), "2 of 3 instances ready"},
		{"webhook short", WebhookShort{}, gateCheck(gate.NameWebhooks), "has 1 of 2 replicas ready"},
		{"new failing pod", NewFailingPod{}, gateCheck(gate.NameBaseline), FailingPodName},
		{"model errors", ModelErrors{}, completion, "HTTP 500"},
		{"gpus exhausted", GPUsExhausted{Node: "gpu-2"}, smoke("gpu-2"), gpucheck.StatusNoCapacity},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if ok, why := tc.check(ctx); !ok {
				t.Fatalf("check fails before the fault: %s", why)
			}
			if err := tw.Inject(ctx, tc.fault); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := tw.Clear(context.Background(), tc.fault.Name()); err != nil {
					t.Error(err)
				}
			})
			eventually(t, 30*time.Second, "check fails with the fault", func(ctx context.Context) error {
				ok, why := tc.check(ctx)
				if ok {
					return errors.New("check still passes")
				}
				if !strings.Contains(why, tc.reason) {
					return fmt.Errorf("fails for another reason: %s", why)
				}
				t.Logf("fails as it should: %s", why)
				return nil
			})
			if err := tw.Clear(ctx, tc.fault.Name()); err != nil {
				t.Fatal(err)
			}
			eventually(t, 60*time.Second, "check passes once cleared", func(ctx context.Context) error {
				if ok, why := tc.check(ctx); !ok {
					return errors.New(why)
				}
				return nil
			})
		})
	}

	t.Run("etcd member lost, then another host down: quorum lost", func(t *testing.T) {
		etcdCheck := func(ctx context.Context) gate.Check { return gate.CheckEtcd(ctx, *cfg.Etcd) }
		if err := tw.Inject(ctx, EtcdMemberLost{Host: "cp-1"}); err != nil {
			t.Fatal(err)
		}
		c := etcdCheck(ctx)
		if !c.OK || len(c.Warnings) == 0 {
			t.Errorf("one member lost: etcd check = %+v, want OK with a warning", c)
		}
		if err := tw.SetHostUp("cp-2", false, ""); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, "quorum lost", func(ctx context.Context) error {
			if c := etcdCheck(ctx); c.OK || !strings.Contains(c.Reason, "quorum lost") {
				return fmt.Errorf("etcd check = ok %v, %s", c.OK, c.Reason)
			}
			return nil
		})
		if err := tw.SetHostUp("cp-2", true, ""); err != nil {
			t.Fatal(err)
		}
		if err := tw.Clear(ctx, "etcd-member-lost"); err != nil {
			t.Fatal(err)
		}
		// cp-2 rebooted: the pods that stayed on it (static-pod mirrors)
		// show one restart more than at the baseline, as on a real
		// cluster, and stack-health counts that as new.
		eventually(t, 60*time.Second, "gate green again but for the reboot's restarts", func(ctx context.Context) error {
			r := gate.Evaluate(ctx, kc, dc, cfg)
			if d := cmp.Diff([]string{gate.NameBaseline}, r.Failed); d != "" {
				var why []string
				for _, name := range r.Failed {
					why = append(why, name+": "+checkByName(r, name).Reason)
				}
				return fmt.Errorf("failed checks (-want +got):\n%s%s", d, strings.Join(why, "\n"))
			}
			onCP2, err := kc.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=cp-2"})
			if err != nil {
				return err
			}
			why := checkByName(r, gate.NameBaseline).Reason
			_, list, _ := strings.Cut(why, "since baseline: ")
			for _, part := range strings.Split(list, "; ") {
				ok := strings.HasSuffix(part, "restarted 1 times since baseline")
				found := false
				for _, p := range onCP2.Items {
					found = found || strings.HasPrefix(part, "pod "+p.Namespace+"/"+p.Name+" ")
				}
				if !ok || !found {
					return fmt.Errorf("stack-health fails for more than cp-2's restarts: %s", why)
				}
			}
			return nil
		})
	})
}

func testSwitchoverOnDrain(t *testing.T, tw testWorld) {
	ctx := t.Context()
	kc, dc := tw.c.Client(), tw.c.Dynamic()
	res, err := drain.Drain(ctx, kc, "cp-3", drain.Options{Round: "lab", Identity: "world-test",
		Timeout: 90 * time.Second, EvictRetryDelay: 500 * time.Millisecond}, nil)
	if err != nil {
		t.Fatalf("drain cp-3: %v (blocked %+v)", err, res.Blocked)
	}
	st, err := tw.PostgresStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.CurrentPrimary == "platform-pg-3" || st.CurrentPrimary != st.TargetPrimary {
		t.Errorf("after the drain: status %+v, want the primary moved off platform-pg-3", st)
	}
	pg, err := kube.PostgresPrimaries(ctx, kc, dc, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(pg) != 1 || pg[0].Node == "" || pg[0].Node == "cp-3" {
		t.Errorf("primaries after the drain = %+v, want one off cp-3", pg)
	}
	if c := gate.CheckPostgres(ctx, dc, gate.PostgresConfig{}); c.OK {
		t.Errorf("postgres check passes while cp-3's instance waits for its node: %+v", c)
	}
	if _, err := drain.Uncordon(ctx, kc, "cp-3", "world-test"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "postgres healthy after uncordon", func(ctx context.Context) error {
		if c := gate.CheckPostgres(ctx, dc, gate.PostgresConfig{}); !c.OK {
			return errors.New(c.Reason)
		}
		return nil
	})
}

func testHostPower(t *testing.T, tw testWorld) {
	ctx := t.Context()
	kc := tw.c.Client()
	nodeReadyNow := func(name string) bool {
		n, err := kc.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		return err == nil && kube.NodeReady(n)
	}
	restartsOn := func(node, namespace string) map[string]int32 {
		pods, err := kc.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int32{}
		for _, p := range pods.Items {
			for _, cs := range p.Status.ContainerStatuses {
				out[p.Name] += cs.RestartCount
			}
		}
		return out
	}
	before := restartsOn("gpu-2", "gpu-operator")
	if len(before) != 1 {
		t.Fatalf("device plugin pods on gpu-2: %v, want one", before)
	}
	beforeCP := restartsOn("cp-1", "kube-system")
	if _, ok := beforeCP["etcd-cp-1"]; !ok {
		t.Fatalf("kube-system pods on cp-1: %v, want etcd-cp-1 among them", beforeCP)
	}
	down := time.Now()
	for _, h := range []string{"gpu-2", "cp-1"} {
		if err := tw.SetHostUp(h, false, ""); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 30*time.Second, "nodes NotReady, etcd member 0 stopped", func(context.Context) error {
		if nodeReadyNow("gpu-2") || nodeReadyNow("cp-1") || tw.etcd.Running(0) {
			return errors.New("still up")
		}
		return nil
	})
	// cp-1 holds a Postgres instance: it is not ready while its node is
	// down.
	eventually(t, 30*time.Second, "postgres short of cp-1's instance", func(ctx context.Context) error {
		st, err := tw.PostgresStatus(ctx)
		if err != nil {
			return err
		}
		if st.ReadyInstances != 2 || st.Phase != PhaseWaitingForInstances || !slices.Contains(st.Failed, "platform-pg-1") {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	// What kwok's delayed heartbeat would write is refused while the host
	// is down.
	readyPatch := []byte(`{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady"}]}}`)
	_, err := kc.CoreV1().Nodes().Patch(ctx, "gpu-2", types.StrategicMergePatchType, readyPatch, metav1.PatchOptions{}, "status")
	if err == nil || !strings.Contains(err.Error(), "host of this node is down") {
		t.Errorf("making a down host's node Ready: err = %v, want the node-power policy's refusal", err)
	}
	// kwok's heartbeat comes every 20-45s: the nodes must stay NotReady
	// past it.
	deadline := down.Add(50 * time.Second)
	for time.Now().Before(deadline) {
		if nodeReadyNow("gpu-2") || nodeReadyNow("cp-1") {
			t.Fatalf("a down host's node turned Ready %v after it went down", time.Since(down))
		}
		time.Sleep(500 * time.Millisecond)
	}
	const newKernel = "6.8.0-51-generic"
	for _, h := range []string{"gpu-2", "cp-1"} {
		if err := tw.SetHostUp(h, true, newKernel); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 60*time.Second, "nodes Ready with the new kernel, member started, pods Ready", func(ctx context.Context) error {
		for _, h := range []string{"gpu-2", "cp-1"} {
			n, err := kc.CoreV1().Nodes().Get(ctx, h, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !kube.NodeReady(n) || n.Status.NodeInfo.KernelVersion != newKernel {
				return fmt.Errorf("node %s ready %v kernel %s", h, kube.NodeReady(n), n.Status.NodeInfo.KernelVersion)
			}
			pods, err := kc.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + h})
			if err != nil {
				return err
			}
			for i := range pods.Items {
				if p := &pods.Items[i]; p.Status.Phase == corev1.PodRunning && !podReady(p) {
					return fmt.Errorf("pod %s/%s not Ready", p.Namespace, p.Name)
				}
			}
		}
		if !tw.etcd.Running(0) {
			return errors.New("etcd member 0 not running")
		}
		if st, err := tw.PostgresStatus(ctx); err != nil || st.ReadyInstances != 3 || st.Phase != PhaseHealthy {
			return fmt.Errorf("postgres %+v, %v", st, err)
		}
		return nil
	})
	// The pods that stayed through the reboot (the DaemonSet pod, the
	// static etcd pod) show one restart more, and already did when their
	// Node turned Ready: a gate that sees the node Ready must not see a
	// restart land afterwards (it would count it as a new failure).
	for _, c := range []struct {
		node, namespace string
		before          map[string]int32
	}{{"gpu-2", "gpu-operator", before}, {"cp-1", "kube-system", beforeCP}} {
		want := map[string]int32{}
		for name, n := range c.before {
			want[name] = n + 1
		}
		if d := cmp.Diff(want, restartsOn(c.node, c.namespace)); d != "" {
			t.Errorf("restarts on %s once it is Ready again (-want +got):\n%s", c.node, d)
		}
	}

	t.Run("VIP moves when its holder is down", func(t *testing.T) {
		holder, err := tw.VIPHolder(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := tw.SetHostUp(holder, false, ""); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, "VIP moved", func(ctx context.Context) error {
			inv, err := kube.TakeInventory(ctx, kc, tw.InventoryOptions())
			if err != nil {
				return err
			}
			vip, err := kube.LocateVIP(ctx, kc, inv, kube.PlacementOptions{})
			if err != nil {
				return err
			}
			if vip.Node == "" || vip.Node == holder || vip.Source != kube.SourceLease {
				return fmt.Errorf("VIP %+v, want held by another node than %s", vip, holder)
			}
			return nil
		})
		if err := tw.SetHostUp(holder, true, ""); err != nil {
			t.Fatal(err)
		}
	})
}

func mustManifest(t *testing.T, w *World, node string) []byte {
	t.Helper()
	m, err := w.APIServerManifest(node)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
