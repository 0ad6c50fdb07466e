package gate

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/mcp-patch/mcp-patch/internal/testsupport/labkube"
	"github.com/mcp-patch/mcp-patch/kube"
	"github.com/mcp-patch/mcp-patch/lab/cluster"
)

// These tests run against lab/cluster: a real kube-apiserver with the real
// CNPG CRD, controller manager, scheduler and kwok nodes, and a real
// three-member etcd with client certificates.

func TestMain(m *testing.M) { labkube.Main(m) }

var crdOnce sync.Once

func installCNPG(t testing.TB, c *cluster.Cluster) {
	t.Helper()
	var err error
	crdOnce.Do(func() {
		_, err = c.InstallCRDFile(context.Background(), filepath.Join(fixtures, "cnpg-crd-postgresql.cnpg.io_clusters.yaml"))
	})
	if err != nil {
		t.Fatalf("install the CNPG CRD: %v", err)
	}
}

// cnpgCluster creates a Cluster from the real object fixture in ns and
// writes the status through the status subresource, with mutate applied.
func cnpgCluster(t testing.TB, c *cluster.Cluster, ns, name string, mutate func(status map[string]any)) {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(readFixture(t, "cnpg-cluster-get-o-yaml_3-instances-healthy_cnpg-1.28_pg18.yaml"), &u.Object); err != nil {
		t.Fatal(err)
	}
	status := u.Object["status"].(map[string]any)
	delete(u.Object, "status")
	u.Object["metadata"] = map[string]any{"name": name, "namespace": ns}
	res := c.Dynamic().Resource(kube.CNPGClusters).Namespace(ns)
	created, err := res.Create(context.Background(), u, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mutate(status)
	created.Object["status"] = status
	if _, err := res.UpdateStatus(context.Background(), created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestPostgresGateOnRealCRD(t *testing.T) {
	c := labkube.Cluster(t)
	installCNPG(t, c)
	healthy := func(map[string]any) {}
	notReady := func(s map[string]any) {
		s["readyInstances"] = int64(2)
		s["phase"] = "Waiting for the instances to become active"
	}
	switchover := func(s map[string]any) {
		s["targetPrimary"] = "cluster-example-2"
		s["phase"] = "Switchover in progress"
	}
	tests := []struct {
		name     string
		clusters map[string]func(map[string]any)
		wantOK   bool
		reason   []string
	}{
		{"all healthy", map[string]func(map[string]any){"pg-a": healthy, "pg-b": healthy}, true, nil},
		{"one not ready", map[string]func(map[string]any){"pg-a": healthy, "pg-b": notReady}, false,
			[]string{"/pg-b: 2 of 3 instances ready", `phase "Waiting for the instances to become active"`}},
		{"switchover in progress", map[string]func(map[string]any){"pg-a": switchover}, false,
			[]string{"/pg-a: ", "switchover in progress (cluster-example-1 → cluster-example-2)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns := labkube.Namespace(t, c)
			for name, m := range tt.clusters {
				cnpgCluster(t, c, ns, name, m)
			}
			check := CheckPostgres(t.Context(), c.Dynamic(), PostgresConfig{Namespaces: []string{ns}})
			t.Logf("check: %+v", check)
			if check.OK != tt.wantOK || len(check.Evidence) != len(tt.clusters) {
				t.Fatalf("ok=%v evidence %q; want ok=%v and one line per cluster", check.OK, check.Evidence, tt.wantOK)
			}
			for _, r := range tt.reason {
				if !strings.Contains(check.Reason, r) {
					t.Errorf("reason %q lacks %q", check.Reason, r)
				}
			}
			if !strings.Contains(check.Evidence[0], `ready 3/3`) && tt.wantOK {
				t.Errorf("evidence %q", check.Evidence)
			}
		})
	}
	t.Run("primary placement from the real API", func(t *testing.T) {
		ns := labkube.Namespace(t, c)
		cnpgCluster(t, c, ns, "pg-a", healthy)
		labkube.Nodes(t, c, cluster.Node{Name: "pg-node-1", Labels: map[string]string{kube.LabelControlPlane: ""}})
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cluster-example-1"},
			Spec: corev1.PodSpec{NodeName: "pg-node-1", Containers: []corev1.Container{{Name: "postgres", Image: "ghcr.io/cloudnative-pg/postgresql:18.1"}}}}
		if _, err := c.Client().CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		got, err := kube.PostgresPrimaries(t.Context(), c.Client(), c.Dynamic(), []string{ns})
		if err != nil || len(got) != 1 || got[0].Node != "pg-node-1" {
			t.Errorf("PostgresPrimaries = %+v, %v", got, err)
		}
	})
	t.Run("no clusters required but none there", func(t *testing.T) {
		ns := labkube.Namespace(t, c)
		check := CheckPostgres(t.Context(), c.Dynamic(), PostgresConfig{Namespaces: []string{ns}, RequireClusters: true})
		if check.OK || !strings.Contains(check.Reason, "no CloudNativePG clusters, but Postgres clusters are required") {
			t.Errorf("check %+v", check)
		}
	})
}

func webhookDeployment(t testing.TB, kc kubernetes.Interface, ns, node string, replicas int32) {
	t.Helper()
	lbl := map[string]string{"app.kubernetes.io/name": "policy-webhook", "app.kubernetes.io/component": "server"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "policy-webhook"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: lbl},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: lbl},
				Spec: corev1.PodSpec{NodeSelector: map[string]string{"kubernetes.io/hostname": node},
					Containers: []corev1.Container{{Name: "webhook", Image: "registry.example/policy-webhook:1"}}},
			},
		},
	}
	if _, err := kc.AppsV1().Deployments(ns).Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "policy-webhook"},
		// The service selects on a subset of the pod template labels.
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app.kubernetes.io/name": "policy-webhook"},
			Ports: []corev1.ServicePort{{Port: 443}}},
	}
	if _, err := kc.CoreV1().Services(ns).Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// validatingWebhook registers a webhook on a resource nothing uses, so the
// API server never calls it while other tests run.
func validatingWebhook(t testing.TB, kc kubernetes.Interface, name, ns string) {
	t.Helper()
	none := admissionregistrationv1.SideEffectClassNone
	ignore := admissionregistrationv1.Ignore
	path := "/validate"
	url := "https://policy.example/validate"
	rules := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{"never.example"}, APIVersions: []string{"v1"}, Resources: []string{"widgets"}},
	}}
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{
			{Name: "validate.policy.example", SideEffects: &none, AdmissionReviewVersions: []string{"v1"}, Rules: rules, FailurePolicy: &ignore,
				ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: ns, Name: "policy-webhook", Path: &path}}},
			{Name: "external.policy.example", SideEffects: &none, AdmissionReviewVersions: []string{"v1"}, Rules: rules, FailurePolicy: &ignore,
				ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url}},
		},
	}
	if _, err := kc.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(context.Background(), cfg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kc.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

func TestWebhookGate(t *testing.T) {
	c := labkube.Cluster(t)
	kc := c.Client()
	ns := labkube.Namespace(t, c)
	node := "webhook-node-1"
	labkube.Nodes(t, c, cluster.Node{Name: node})
	webhookDeployment(t, kc, ns, node, 2)
	validatingWebhook(t, kc, "policy-"+ns, ns)

	readyReplicas := func(want int32) {
		labkube.Eventually(t, 2*time.Minute, fmt.Sprintf("webhook deployment ready %d", want), func(ctx context.Context) (bool, error) {
			d, err := kc.AppsV1().Deployments(ns).Get(ctx, "policy-webhook", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			return d.Status.ReadyReplicas == want && d.Status.Replicas >= want, nil
		})
	}
	readyReplicas(2)
	full := CheckWebhooks(t.Context(), kc, WebhookConfig{})
	t.Logf("full: %+v", full)
	if !full.OK || !strings.Contains(strings.Join(full.Evidence, "\n"), "deployment "+ns+"/policy-webhook ready 2/2") {
		t.Errorf("full replicas: %+v", full)
	}
	if w := strings.Join(full.Warnings, "\n"); !strings.Contains(w, "external.policy.example calls URL https://policy.example/validate") {
		t.Errorf("warnings %q lack the URL webhook", w)
	}

	// Short: one more replica wanted, but the node it is pinned to is
	// cordoned, so it stays Pending.
	if out, err := c.Kubectl(t.Context(), "cordon", node); err != nil {
		t.Fatalf("kubectl cordon: %v %s", err, out)
	}
	if out, err := c.Kubectl(t.Context(), "-n", ns, "scale", "deployment/policy-webhook", "--replicas=3"); err != nil {
		t.Fatalf("kubectl scale: %v %s", err, out)
	}
	labkube.Eventually(t, time.Minute, "deployment sees 3 wanted", func(ctx context.Context) (bool, error) {
		d, err := kc.AppsV1().Deployments(ns).Get(ctx, "policy-webhook", metav1.GetOptions{})
		return err == nil && d.Status.ObservedGeneration == d.Generation && d.Status.Replicas == 3, err
	})
	short := CheckWebhooks(t.Context(), kc, WebhookConfig{})
	t.Logf("short: %+v", short)
	if short.OK || !strings.Contains(short.Reason, "deployment "+ns+"/policy-webhook behind webhook service "+ns+"/policy-webhook has 2 of 3 replicas ready") {
		t.Errorf("short replicas: %+v", short)
	}
	if ignored := CheckWebhooks(t.Context(), kc, WebhookConfig{Ignore: []string{"policy-" + ns}}); !ignored.OK {
		t.Errorf("ignored configuration still checked: %+v", ignored)
	}

	// The service gone: the webhook has nothing behind it.
	if err := kc.CoreV1().Services(ns).Delete(t.Context(), "policy-webhook", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	gone := CheckWebhooks(t.Context(), kc, WebhookConfig{})
	if gone.OK || !strings.Contains(gone.Reason, "service "+ns+"/policy-webhook missing (used by validating/policy-"+ns+"/validate.policy.example; failurePolicy Ignore)") {
		t.Errorf("service missing: %+v", gone)
	}
}

func TestBaselineOnlyNewFailuresBlock(t *testing.T) {
	c := labkube.Cluster(t)
	kc := c.Client()
	ns := labkube.Namespace(t, c)
	labkube.Nodes(t, c, cluster.Node{Name: "health-node-1"})
	deployment := func(name, node string, replicas int32) {
		lbl := map[string]string{"app": name}
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: lbl},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: lbl}, Spec: corev1.PodSpec{
					NodeSelector: map[string]string{"kubernetes.io/hostname": node},
					Containers:   []corev1.Container{{Name: "c", Image: "registry.example/" + name + ":1"}}}}},
		}
		if _, err := kc.AppsV1().Deployments(ns).Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pods := func(app string, n int, phase corev1.PodPhase) []corev1.Pod {
		var out []corev1.Pod
		labkube.Eventually(t, 2*time.Minute, fmt.Sprintf("%d %s pods %s", n, app, phase), func(ctx context.Context) (bool, error) {
			l, err := kc.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
			if err != nil {
				return false, err
			}
			out = out[:0]
			for _, p := range l.Items {
				if p.Status.Phase == phase {
					out = append(out, p)
				}
			}
			return len(out) == n, nil
		})
		return out
	}
	// A node the kwok controller does not manage never becomes Ready.
	notReadyNode := func(name string) {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if _, err := kc.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = kc.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}

	deployment("web", "health-node-1", 2)
	deployment("old-broken", "nowhere", 1) // Pending forever: failing at baseline
	webPods := pods("web", 2, corev1.PodRunning)
	pods("old-broken", 1, corev1.PodPending)
	notReadyNode("health-old-notready")

	cfg := HealthConfig{CriticalNamespaces: []string{ns}, StartupGrace: time.Millisecond}
	base, err := TakeBaseline(t.Context(), kc, cfg, []string{"dns-resolves", "ntp-synced"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(base.UnhealthyWorkloads, ","), ns+"/Deployment/old-broken") || len(base.Pods) != 3 {
		t.Fatalf("baseline %+v", base)
	}

	same := CompareBaseline(t.Context(), kc, base, cfg, []string{"ntp-synced"})
	t.Logf("unchanged: %+v", same)
	if !same.OK {
		t.Fatalf("old failures blocked the gate: %s", same.Reason)
	}
	ev := strings.Join(same.Evidence, "\n")
	for _, want := range []string{"already failing at baseline, ignored: pod " + ns + "/old-broken-", "NotReady at baseline, ignored: health-old-notready"} {
		if !strings.Contains(ev, want) {
			t.Errorf("evidence lacks %q:\n%s", want, ev)
		}
	}

	// New failures: a web pod restarts, a new workload cannot start, a node
	// drops out, a verify check starts failing.
	p := webPods[0]
	p.Status.ContainerStatuses[0].RestartCount = 2
	if _, err := kc.CoreV1().Pods(ns).UpdateStatus(t.Context(), &p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	deployment("new-broken", "nowhere", 1)
	pods("new-broken", 1, corev1.PodPending)
	time.Sleep(2 * time.Millisecond) // past the startup grace
	notReadyNode("health-new-notready")

	after := CompareBaseline(t.Context(), kc, base, cfg, []string{"ntp-synced", "dns-resolves", "bond0-up"})
	t.Logf("after: %+v", after)
	if after.OK {
		t.Fatal("new failures did not block the gate")
	}
	for _, want := range []string{
		"4 new failure(s) since baseline",
		"node health-new-notready NotReady",
		"pod " + ns + "/" + p.Name + " (" + ns + "/Deployment/web): restarted 2 times since baseline",
		"pod " + ns + "/new-broken-",
		"verify check bond0-up failing",
	} {
		if !strings.Contains(after.Reason, want) {
			t.Errorf("reason lacks %q:\n%s", want, after.Reason)
		}
	}
	if strings.Contains(after.Reason, "dns-resolves") || strings.Contains(after.Reason, "old-broken") || strings.Contains(after.Reason, "health-old-notready") {
		t.Errorf("old failures reported as new: %s", after.Reason)
	}

	// With the default startup grace the freshly created workload is a
	// warning, not a failure.
	lenient := CompareBaseline(t.Context(), kc, base, HealthConfig{CriticalNamespaces: []string{ns}}, []string{"ntp-synced", "dns-resolves"})
	if strings.Contains(lenient.Reason, "new-broken") || !strings.Contains(strings.Join(lenient.Warnings, "\n"), "new-broken") {
		t.Errorf("young pending pod: reason %q warnings %q", lenient.Reason, lenient.Warnings)
	}
}

func TestOIDCFromAPIServerPods(t *testing.T) {
	c := labkube.Cluster(t)
	kc := c.Client()
	labkube.Nodes(t, c, cluster.Node{Name: "oidc-cp-1", Labels: map[string]string{kube.LabelControlPlane: ""}})
	var p corev1.Pod
	if err := yaml.Unmarshal(readFixture(t, manifestWithOIDC), &p); err != nil {
		t.Fatal(err)
	}
	p.Name = "kube-apiserver-oidc-cp-1"
	p.Spec.NodeName = "oidc-cp-1"
	if _, err := kc.CoreV1().Pods("kube-system").Create(t.Context(), &p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		zero := int64(0)
		_ = kc.CoreV1().Pods("kube-system").Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
	ca := newTestCA(t)
	srv := issuerServer(t, ca.serverCert(t, []string{"zwerk.org"}, nil), "/auth/realms/k8s/.well-known/openid-configuration", fixtureIssuer, 0)
	check := CheckOIDC(t.Context(), kc, OIDCConfig{HTTPClient: pinnedClient(ca, srv.Listener.Addr().String())})
	t.Logf("check: %+v", check)
	if !check.OK || !strings.Contains(strings.Join(check.Evidence, "\n"), "pod kube-system/kube-apiserver-oidc-cp-1 --oidc-issuer-url") {
		t.Errorf("check %+v", check)
	}
}

// dialRecorder carries connections like an SSH tunnel would and remembers
// where they went; refuse makes chosen addresses unreachable.
type dialRecorder struct {
	mu     sync.Mutex
	seen   map[string]int
	refuse map[string]bool
}

func (d *dialRecorder) dial(ctx context.Context, addr string) (net.Conn, error) {
	d.mu.Lock()
	d.seen[addr]++
	refused := d.refuse[addr]
	d.mu.Unlock()
	if refused {
		return nil, fmt.Errorf("ssh tunnel to %s: administratively prohibited", addr)
	}
	var nd net.Dialer
	return nd.DialContext(ctx, "tcp", addr)
}

func TestEtcdGateOnRealCluster(t *testing.T) {
	e := cluster.StartEtcdClusterT(t, cluster.EtcdOptions{Members: 3})
	if len(e.Members) != 3 {
		t.Fatalf("etcd cluster has %d members", len(e.Members))
	}
	cfg := EtcdConfig{Endpoints: e.Endpoints(), CAFile: e.CAFile, CertFile: e.ClientCertFile, KeyFile: e.ClientKeyFile,
		DialTimeout: 2 * time.Second, RequestTimeout: 2 * time.Second}
	hostPort := func(i int) string { return strings.TrimPrefix(e.Members[i].ClientURL, "https://") }

	t.Run("all members up", func(t *testing.T) {
		check := CheckEtcd(t.Context(), cfg)
		t.Logf("check: %+v", check)
		if !check.OK || len(check.Warnings) != 0 || !strings.Contains(strings.Join(check.Evidence, "\n"), "quorum: 3 of 3 voting members answer, 2 needed") {
			t.Errorf("check %+v", check)
		}
	})
	t.Run("through a dialer", func(t *testing.T) {
		d := &dialRecorder{seen: map[string]int{}, refuse: map[string]bool{hostPort(2): true}}
		c := cfg
		c.Dial = d.dial
		check := CheckEtcd(t.Context(), c)
		t.Logf("check: %+v", check)
		for i := range 3 {
			if d.seen[hostPort(i)] == 0 {
				t.Errorf("member %d (%s) not dialled through the dialer: %v", i, hostPort(i), d.seen)
			}
		}
		if !check.OK || !strings.Contains(strings.Join(check.Warnings, "\n"), "1 member(s) down ("+e.Members[2].ClientURL+")") ||
			!strings.Contains(strings.Join(check.Evidence, "\n"), "administratively prohibited") {
			t.Errorf("a member the tunnel cannot reach: %+v", check)
		}
	})
	t.Run("client certificate missing", func(t *testing.T) {
		c := cfg
		c.CertFile, c.KeyFile = "", ""
		check := CheckEtcd(t.Context(), c)
		t.Logf("check: %+v", check)
		if check.OK || !strings.Contains(check.Reason, "quorum lost: 0 of 3") ||
			!strings.Contains(strings.Join(check.Evidence, "\n"), "tls: certificate required") {
			t.Errorf("without a client certificate: %+v", check)
		}
	})

	if err := e.StopMember(0); err != nil {
		t.Fatal(err)
	}
	t.Run("one member stopped: quorum kept, warned", func(t *testing.T) {
		check := CheckEtcd(t.Context(), cfg)
		t.Logf("check: %+v", check)
		if !check.OK || !strings.Contains(strings.Join(check.Warnings, "\n"), "1 member(s) down ("+e.Members[0].ClientURL+"); quorum kept with 2 of 3") ||
			!strings.Contains(strings.Join(check.Evidence, "\n"), "connection refused") {
			t.Errorf("check %+v", check)
		}
	})
	if err := e.StopMember(1); err != nil {
		t.Fatal(err)
	}
	t.Run("two members stopped: red", func(t *testing.T) {
		check := CheckEtcd(t.Context(), cfg)
		t.Logf("check: %+v", check)
		if check.OK || !strings.Contains(check.Reason, "quorum lost: 1 of 3 voting members answer, 2 needed") {
			t.Errorf("check %+v", check)
		}
	})
	for _, i := range []int{0, 1} {
		if err := e.StartMember(t.Context(), i); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("members back", func(t *testing.T) {
		labkube.Eventually(t, time.Minute, "etcd gate green again", func(ctx context.Context) (bool, error) {
			check := CheckEtcd(ctx, cfg)
			return check.OK && len(check.Warnings) == 0, fmt.Errorf("%s %q", check.Reason, check.Warnings)
		})
	})
}

// BenchmarkEvaluate500Nodes times the whole gate on a 500-node kwok
// cluster: etcd (the lab's own), 20 CNPG clusters, a webhook, the baseline
// comparison over kube-system and a namespace of 200 pods, OIDC from a
// manifest.
func BenchmarkEvaluate500Nodes(b *testing.B) {
	c := labkube.Cluster(b)
	kc := c.Client()
	installCNPG(b, c)
	ctx := context.Background()
	start := time.Now()
	var nodes []cluster.Node
	for i := range 500 {
		nodes = append(nodes, cluster.Node{Name: fmt.Sprintf("bench-gpu-%03d", i), Capacity: map[corev1.ResourceName]string{kube.ResourceGPU: "8"}})
	}
	labkube.Nodes(b, c, nodes...)
	b.Logf("500 kwok nodes Ready in %v", time.Since(start).Round(time.Second))

	ns := labkube.Namespace(b, c)
	for i := range 20 {
		cnpgCluster(b, c, ns, fmt.Sprintf("pg-%02d", i), func(map[string]any) {})
	}
	webhookDeployment(b, kc, ns, "bench-gpu-000", 2)
	validatingWebhook(b, kc, "bench-policy", ns)
	replicas := int32(200)
	lbl := map[string]string{"app": "fleet"}
	fleet := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fleet"},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: lbl},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: lbl},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example/fleet:1"}}}}}}
	if _, err := kc.AppsV1().Deployments(ns).Create(ctx, fleet, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	labkube.Eventually(b, 3*time.Minute, "fleet and webhook ready", func(ctx context.Context) (bool, error) {
		f, err1 := kc.AppsV1().Deployments(ns).Get(ctx, "fleet", metav1.GetOptions{})
		w, err2 := kc.AppsV1().Deployments(ns).Get(ctx, "policy-webhook", metav1.GetOptions{})
		return err1 == nil && err2 == nil && f.Status.ReadyReplicas == 200 && w.Status.ReadyReplicas == 2, nil
	})
	hcfg := HealthConfig{CriticalNamespaces: []string{"kube-system", ns}}
	base, err := TakeBaseline(ctx, kc, hcfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	ca := newTestCA(b)
	srv := issuerServer(b, ca.serverCert(b, []string{"zwerk.org"}, nil), "/auth/realms/k8s/.well-known/openid-configuration", fixtureIssuer, 0)
	cfg := Config{
		Etcd:     &EtcdConfig{Endpoints: []string{c.EtcdEndpoint}},
		Postgres: PostgresConfig{Namespaces: []string{ns}},
		Baseline: &base,
		Health:   hcfg,
		OIDC: OIDCConfig{Manifests: map[string][]byte{"cp-1": readFixture(b, manifestWithOIDC)},
			HTTPClient: pinnedClient(ca, srv.Listener.Addr().String())},
	}
	var last Report
	for b.Loop() {
		last = Evaluate(ctx, kc, c.Dynamic(), cfg)
	}
	if !last.OK {
		b.Fatalf("gate not green: %+v", last)
	}
	for _, ch := range last.Checks {
		b.ReportMetric(float64(ch.Duration.Microseconds())/1000, ch.Name+"-ms")
	}
	// What plan_round reads from the same cluster, once.
	t0 := time.Now()
	inv, err := kube.TakeInventory(ctx, kc, kube.InventoryOptions{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := kube.Locate(ctx, kc, c.Dynamic(), inv, kube.PlacementOptions{}); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(time.Since(t0).Microseconds())/1000, "inventory+placement-ms")
	b.Logf("inventory: %d nodes", len(inv.Nodes))
}
