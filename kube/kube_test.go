package kube

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/yaml"
)

const fixtures = "../testdata/fixtures/k8s/"

func readFixture(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(fixtures, name))
	if err != nil {
		t.Fatalf("read fixture: %v", err)
	}
	return data
}

// writeKubeconfig writes a kubeconfig with one context per name, all
// pointing at server.
func writeKubeconfig(t *testing.T, server string, contexts ...string) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: Config\ncurrent-context: %s\nclusters:\n- name: c\n  cluster:\n    server: %s\n    insecure-skip-tls-verify: true\nusers:\n- name: u\n  user:\n    token: t\ncontexts:\n", contexts[0], server)
	for _, c := range contexts {
		fmt.Fprintf(&b, "- name: %s\n  context:\n    cluster: c\n    user: u\n", c)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestLoadErrors(t *testing.T) {
	down := "https://" + closedPort(t)
	kubeconfig := writeKubeconfig(t, down, "lab", "prod")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("HOME", t.TempDir())

	tests := []struct {
		name       string
		kubeconfig string // "" uses $KUBECONFIG
		env        string
		context    string
		wantIs     error
		wantIn     []string
	}{
		{name: "context that does not exist", kubeconfig: kubeconfig, context: "staging",
			wantIs: ErrContextNotFound, wantIn: []string{`"staging"`, "lab, prod", kubeconfig}},
		{name: "context that does not exist via KUBECONFIG", env: kubeconfig, context: "staging",
			wantIs: ErrContextNotFound, wantIn: []string{`"staging"`}},
		{name: "API server down", kubeconfig: kubeconfig, context: "prod",
			wantIs: ErrAPIUnreachable, wantIn: []string{down, `"prod"`}},
		{name: "API server down, current context", env: kubeconfig,
			wantIs: ErrAPIUnreachable, wantIn: []string{down, `"lab"`}},
		{name: "no kubeconfig anywhere", env: filepath.Join(t.TempDir(), "absent"),
			wantIs: ErrNoConfig, wantIn: []string{"absent"}},
		{name: "explicit kubeconfig missing", kubeconfig: "/nonexistent/kubeconfig",
			wantIn: []string{"/nonexistent/kubeconfig"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("KUBECONFIG", tt.env)
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			c, err := Load(ctx, LoadOptions{Kubeconfig: tt.kubeconfig, Context: tt.context, PingTimeout: 3 * time.Second})
			if err == nil {
				t.Fatalf("Load succeeded: %+v", c)
			}
			t.Logf("error: %v", err)
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("error %q is not %v", err, tt.wantIs)
			}
			for _, s := range tt.wantIn {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not name %s", err, s)
				}
			}
		})
	}
}

func gpuNode(name string, gpus string, labels map[string]string) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Status: corev1.NodeStatus{
			Capacity:    corev1.ResourceList{},
			Allocatable: corev1.ResourceList{},
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeHostName, Address: name},
				{Type: corev1.NodeInternalIP, Address: "10.0.0." + name[len(name)-1:]},
			},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}
	if gpus != "" {
		n.Status.Capacity[ResourceGPU] = resource.MustParse(gpus)
		n.Status.Allocatable[ResourceGPU] = resource.MustParse(gpus)
	}
	return n
}

func gpuPod(ns, name, node string, gpus int64, phase corev1.PodPhase) *corev1.Pod {
	q := *resource.NewQuantity(gpus, resource.DecimalSI)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{
			Name: "c", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{ResourceGPU: q}},
		}}},
		Status: corev1.PodStatus{Phase: phase},
	}
}

func TestTakeInventory(t *testing.T) {
	cp := map[string]string{LabelControlPlane: ""}
	objs := []runtime.Object{
		gpuNode("cp-1", "", cp),
		gpuNode("cp-2", "", map[string]string{LabelControlPlaneLegacy: "", DefaultMachineLabel: "vm"}),
		gpuNode("gpu-1", "8", map[string]string{DefaultMachineLabel: "bare-metal"}),
		// Device plugin down after a driver change: only the GPU operator's labels say it.
		gpuNode("gpu-2", "", map[string]string{LabelGPUPresent: "true", LabelGPUCount: "4", "mcp-patch.io/canary": "true"}),
		gpuPod("ml", "train-a", "gpu-1", 4, corev1.PodRunning),
		gpuPod("ml", "train-b", "gpu-1", 2, corev1.PodPending),
		gpuPod("ml", "done", "gpu-1", 8, corev1.PodSucceeded),
	}
	kc := fake.NewClientset(objs...)
	inv, err := TakeInventory(t.Context(), kc, InventoryOptions{
		AddressOverrides: map[string]string{"gpu-1": "gpu-1.mgmt.example", "gpu-9": "10.9.9.9"},
	})
	if err != nil {
		t.Fatal(err)
	}
	ready := func(n Node) Node { n.Ready = true; return n }
	want := Inventory{
		Nodes: []Node{
			ready(Node{Name: "cp-1", ControlPlane: true, Address: "10.0.0.1", AddressSource: AddressFromInternalIP, Machine: MachineUnknown}),
			ready(Node{Name: "cp-2", ControlPlane: true, Address: "10.0.0.2", AddressSource: AddressFromInternalIP, Machine: MachineVM}),
			ready(Node{Name: "gpu-1", GPUServer: true, GPUs: 8, GPUsAllocatable: 8, GPUsRequested: 6, RunningGPUPods: 1,
				Address: "gpu-1.mgmt.example", AddressSource: AddressFromOverride, Machine: MachineBareMetal}),
			ready(Node{Name: "gpu-2", GPUServer: true, GPUs: 4, Address: "10.0.0.2", AddressSource: AddressFromInternalIP,
				Machine: MachineUnknown, Canary: true}),
		},
		Warnings: []string{`address override for "gpu-9" names no node in the cluster`},
	}
	if d := cmp.Diff(want, inv); d != "" {
		t.Errorf("inventory (-want +got):\n%s", d)
	}
	if n, ok := inv.Node("gpu-2"); !ok || n.Name != "gpu-2" {
		t.Errorf("Node(gpu-2) = %v, %v", n, ok)
	}
	if _, ok := inv.Node("gpu-3"); ok {
		t.Error("Node(gpu-3) found")
	}
}

func TestPodRequest(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	c := func(n int64) corev1.Container {
		return corev1.Container{Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{ResourceGPU: *resource.NewQuantity(n, resource.DecimalSI)}}}
	}
	sidecar := func(n int64) corev1.Container { x := c(n); x.RestartPolicy = &always; return x }
	tests := []struct {
		name string
		spec corev1.PodSpec
		want int64
	}{
		{"none", corev1.PodSpec{Containers: []corev1.Container{{}}}, 0},
		{"two app containers add up", corev1.PodSpec{Containers: []corev1.Container{c(2), c(3)}}, 5},
		{"big init container wins", corev1.PodSpec{InitContainers: []corev1.Container{c(8)}, Containers: []corev1.Container{c(2)}}, 8},
		{"sidecar adds to apps", corev1.PodSpec{InitContainers: []corev1.Container{sidecar(1)}, Containers: []corev1.Container{c(2)}}, 3},
		{"init after sidecar counts both", corev1.PodSpec{InitContainers: []corev1.Container{sidecar(1), c(4)}, Containers: []corev1.Container{c(2)}}, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := PodRequest(&corev1.Pod{Spec: tt.spec}, ResourceGPU); got != tt.want {
				t.Errorf("PodRequest = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestPickCanary(t *testing.T) {
	n := func(name string, pods int, mod func(*Node)) Node {
		x := Node{Name: name, GPUServer: true, Ready: true, RunningGPUPods: pods}
		if mod != nil {
			mod(&x)
		}
		return x
	}
	tests := []struct {
		name  string
		nodes []Node
		want  Canary
	}{
		{"label wins over fewest pods",
			[]Node{n("gpu-1", 0, nil), n("gpu-2", 5, func(x *Node) { x.Canary = true })},
			Canary{Node: "gpu-2", Source: SourceLabel, Reason: "carries the canary label"}},
		{"two labelled: first by name, both named",
			[]Node{n("gpu-3", 0, func(x *Node) { x.Canary = true }), n("gpu-4", 0, func(x *Node) { x.Canary = true })},
			Canary{Node: "gpu-3", Source: SourceLabel, Reason: "carries the canary label; also labelled: gpu-4 (first by name taken)"}},
		{"fewest running GPU pods",
			[]Node{n("gpu-1", 3, nil), n("gpu-2", 1, nil), n("gpu-3", 2, nil)},
			Canary{Node: "gpu-2", Source: SourceFewest, Reason: "no canary label; fewest running GPU pods (1) among 3 Ready GPU servers"}},
		{"not Ready and control plane passed over",
			[]Node{n("gpu-1", 0, func(x *Node) { x.Ready = false }), n("gpu-2", 0, func(x *Node) { x.ControlPlane = true }), n("gpu-3", 4, nil)},
			Canary{Node: "gpu-3", Source: SourceFewest, Reason: "no canary label; fewest running GPU pods (4) among 1 Ready GPU servers"}},
		{"only a control-plane GPU server",
			[]Node{n("cp-1", 2, func(x *Node) { x.ControlPlane = true }), {Name: "cpu-1", Ready: true}},
			Canary{Node: "cp-1", Source: SourceFewest, Reason: "no canary label; fewest running GPU pods (2) among 1 Ready GPU servers"}},
		{"no GPU server",
			[]Node{{Name: "cpu-1", Ready: true}},
			Canary{Source: SourceNoCanary, Reason: "no Ready GPU server"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if d := cmp.Diff(tt.want, PickCanary(tt.nodes)); d != "" {
				t.Errorf("canary (-want +got):\n%s", d)
			}
		})
	}
}

// cnpgFixture is the real Cluster object with a populated status.
func cnpgFixture(t *testing.T) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(readFixture(t, "cnpg-cluster-get-o-yaml_3-instances-healthy_cnpg-1.28_pg18.yaml"), &u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}

func newDynamic(objs ...runtime.Object) *dynamicfake.FakeDynamicClient {
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{CNPGClusters: "ClusterList"}, objs...)
}

func kubeVIPLease(holder string, renewed time.Time) *coordinationv1.Lease {
	d := int32(5)
	rt := metav1.NewMicroTime(renewed)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: DefaultVIPLeaseNamespace, Name: DefaultVIPLeaseName},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &d, RenewTime: &rt},
	}
}

func TestLocate(t *testing.T) {
	cluster := cnpgFixture(t)
	ns := cluster.GetNamespace()
	primary := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cluster-example-1"}, Spec: corev1.PodSpec{NodeName: "cp-2"}}
	inv := Inventory{Nodes: []Node{
		{Name: "cp-1", ControlPlane: true, Ready: true}, {Name: "cp-2", ControlPlane: true, Ready: true},
		{Name: "cp-3", ControlPlane: true, Ready: true}, {Name: "gpu-1", GPUServer: true, Ready: true},
	}}
	probe := func(node string) VIPProbe {
		return func(_ context.Context, cp []Node) (string, string, error) {
			if len(cp) != 3 {
				return "", "", fmt.Errorf("probe got %d control-plane nodes", len(cp))
			}
			return node, "192.168.0.40 on " + node + " ens192", nil
		}
	}
	now := time.Now()
	tests := []struct {
		name string
		objs []runtime.Object
		opts PlacementOptions
		want Placement
	}{
		{
			name: "primary pod, lease holder by FQDN",
			objs: []runtime.Object{primary, kubeVIPLease("cp-3.lab.example", now)},
			want: Placement{
				Postgres: []PostgresPrimary{{Namespace: ns, Cluster: "cluster-example", Pod: "cluster-example-1", Node: "cp-2"}},
				VIP:      VIPHolder{Node: "cp-3", Source: SourceLease, Evidence: `Lease kube-system/plndr-cp-lock holderIdentity="cp-3.lab.example"`},
			},
		},
		{
			name: "primary pod missing, no lease",
			want: Placement{
				Postgres: []PostgresPrimary{{Namespace: ns, Cluster: "cluster-example", Pod: "cluster-example-1",
					Reason: "primary pod " + ns + "/cluster-example-1 not found"}},
				VIP: VIPHolder{Source: SourceUnknown,
					Reason: "no Lease kube-system/plndr-cp-lock (kube-vip not in use, or another lease name)"},
			},
		},
		{
			name: "expired lease, probe finds the holder",
			objs: []runtime.Object{primary, kubeVIPLease("cp-1", now.Add(-time.Minute))},
			opts: PlacementOptions{VIPProbe: probe("cp-2")},
			want: Placement{
				Postgres: []PostgresPrimary{{Namespace: ns, Cluster: "cluster-example", Pod: "cluster-example-1", Node: "cp-2"}},
				VIP: VIPHolder{Node: "cp-2", Source: SourceProbe, Evidence: "192.168.0.40 on cp-2 ens192",
					Reason: fmt.Sprintf(`Lease kube-system/plndr-cp-lock held by "cp-1" expired at %s`,
						now.Add(-time.Minute).Add(5*time.Second).UTC().Format(time.RFC3339))},
			},
		},
		{
			name: "holder is not a node, other lease name",
			objs: []runtime.Object{primary, func() runtime.Object {
				l := kubeVIPLease("lb-7", now)
				l.Namespace, l.Name = "vip", "cp-lock"
				return l
			}()},
			opts: PlacementOptions{VIPLeaseNamespace: "vip", VIPLeaseName: "cp-lock"},
			want: Placement{
				Postgres: []PostgresPrimary{{Namespace: ns, Cluster: "cluster-example", Pod: "cluster-example-1", Node: "cp-2"}},
				VIP:      VIPHolder{Source: SourceUnknown, Reason: `Lease vip/cp-lock holder "lb-7" is not a node in the cluster`},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kc := fake.NewClientset(tt.objs...)
			dc := newDynamic(cluster.DeepCopy())
			got, err := Locate(t.Context(), kc, dc, inv, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			tt.want.Canary = Canary{Node: "gpu-1", Source: SourceFewest, Reason: "no canary label; fewest running GPU pods (0) among 1 Ready GPU servers"}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("placement (-want +got):\n%s", d)
			}
		})
	}
}
