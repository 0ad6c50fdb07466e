package kube_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/mcp-patch/mcp-patch/internal/testsupport/labkube"
	"github.com/mcp-patch/mcp-patch/kube"
	"github.com/mcp-patch/mcp-patch/lab/cluster"
)

func TestMain(m *testing.M) { labkube.Main(m) }

// TestLoadRealKubeconfig loads the lab's kubeconfig the ways kubectl
// would: explicit path, $KUBECONFIG merging two files, a named context.
func TestLoadRealKubeconfig(t *testing.T) {
	c := labkube.Cluster(t)
	cfg, err := clientcmd.LoadFromFile(c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	// A second file with a context whose API server is down, and one whose
	// token the server rejects.
	other := cfg.DeepCopy()
	other.CurrentContext = "down"
	down := *cfg.Clusters["lab"]
	down.Server = "https://127.0.0.1:1"
	other.Clusters = map[string]*clientcmdapi.Cluster{"down": &down, "lab": cfg.Clusters["lab"]}
	badUser := *cfg.AuthInfos[cluster.AdminUser]
	badUser.Token = "not-a-token"
	other.AuthInfos = map[string]*clientcmdapi.AuthInfo{"bad": &badUser}
	other.Contexts = map[string]*clientcmdapi.Context{
		"down":      {Cluster: "down", AuthInfo: "bad"},
		"bad-token": {Cluster: "lab", AuthInfo: "bad"},
	}
	otherPath := filepath.Join(t.TempDir(), "other.kubeconfig")
	if err := clientcmd.WriteToFile(*other, otherPath); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOME", t.TempDir())

	tests := []struct {
		name       string
		kubeconfig string
		env        string
		context    string
		wantErr    error // nil: success
		wantIn     string
	}{
		{name: "explicit path", kubeconfig: c.Kubeconfig},
		{name: "explicit path and context", kubeconfig: c.Kubeconfig, context: "lab"},
		// With a path list the first file's current-context wins: "down".
		{name: "KUBECONFIG list, first file's current context", env: otherPath + ":" + c.Kubeconfig, wantErr: kube.ErrAPIUnreachable, wantIn: "https://127.0.0.1:1"},
		{name: "KUBECONFIG list, context from the second file", env: otherPath + ":" + c.Kubeconfig, context: "lab"},
		{name: "rejected token is not called unreachable", env: otherPath + ":" + c.Kubeconfig, context: "bad-token", wantIn: "credentials rejected (HTTP 401)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("KUBECONFIG", tt.env)
			got, err := kube.Load(t.Context(), kube.LoadOptions{Kubeconfig: tt.kubeconfig, Context: tt.context, PingTimeout: 5 * time.Second})
			if tt.wantErr == nil && tt.wantIn == "" {
				if err != nil {
					t.Fatal(err)
				}
				if got.Context != "lab" || got.Host != c.Server || !strings.HasPrefix(got.ServerVersion, "v1.") {
					t.Errorf("clients %+v", got)
				}
				if _, err := got.Kube.CoreV1().Namespaces().Get(t.Context(), "default", metav1.GetOptions{}); err != nil {
					t.Errorf("using the clients: %v", err)
				}
				return
			}
			t.Logf("error: %v", err)
			if err == nil {
				t.Fatal("Load succeeded")
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("error is not %v", tt.wantErr)
			}
			if tt.wantErr == nil && errors.Is(err, kube.ErrAPIUnreachable) {
				t.Errorf("error wrongly says unreachable")
			}
			if !strings.Contains(err.Error(), tt.wantIn) {
				t.Errorf("error lacks %q", tt.wantIn)
			}
		})
	}
}

func TestInventoryAndPlacementOnLab(t *testing.T) {
	c := labkube.Cluster(t)
	kc := c.Client()
	cp := map[string]string{kube.LabelControlPlane: ""}
	labkube.Nodes(t, c,
		cluster.Node{Name: "inv-cp-1", Labels: cp},
		cluster.Node{Name: "inv-cp-2", Labels: cp},
		cluster.Node{Name: "inv-gpu-1", Labels: map[string]string{kube.DefaultMachineLabel: "bare-metal"}, Capacity: map[corev1.ResourceName]string{kube.ResourceGPU: "8"}},
		cluster.Node{Name: "inv-gpu-2", Labels: map[string]string{kube.DefaultMachineLabel: "bare-metal"}, Capacity: map[corev1.ResourceName]string{kube.ResourceGPU: "8"}},
	)
	ns := labkube.Namespace(t, c)
	q := *resource.NewQuantity(2, resource.DecimalSI)
	for _, name := range []string{"a", "b"} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "train-" + name},
			Spec: corev1.PodSpec{NodeName: "inv-gpu-1", Containers: []corev1.Container{{Name: "c", Image: "registry.example/train:1",
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{kube.ResourceGPU: q}}}}}}
		if _, err := kc.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	labkube.Eventually(t, time.Minute, "GPU pods running", func(ctx context.Context) (bool, error) {
		u, err := kube.GPUUsageOn(ctx, kc, "inv-gpu-1")
		return err == nil && u.RunningPods == 2, err
	})
	// kube-vip's leader Lease, as kube-vip writes it.
	holder, d := "inv-cp-2", int32(5)
	now := metav1.NewMicroTime(time.Now())
	_, err := kc.CoordinationV1().Leases("kube-system").Create(t.Context(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: kube.DefaultVIPLeaseName},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &d, RenewTime: &now},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kc.CoordinationV1().Leases("kube-system").Delete(context.Background(), kube.DefaultVIPLeaseName, metav1.DeleteOptions{})
	})

	inv, err := kube.TakeInventory(t.Context(), kc, kube.InventoryOptions{AddressOverrides: map[string]string{"inv-gpu-2": "gpu-2.mgmt"}})
	if err != nil {
		t.Fatal(err)
	}
	g1, _ := inv.Node("inv-gpu-1")
	g2, _ := inv.Node("inv-gpu-2")
	c1, _ := inv.Node("inv-cp-1")
	if !g1.GPUServer || g1.GPUs != 8 || g1.GPUsRequested != 4 || g1.RunningGPUPods != 2 || g1.Machine != kube.MachineBareMetal || !g1.Ready {
		t.Errorf("inv-gpu-1 %+v", g1)
	}
	if g2.Address != "gpu-2.mgmt" || g2.AddressSource != kube.AddressFromOverride {
		t.Errorf("inv-gpu-2 address %q from %q", g2.Address, g2.AddressSource)
	}
	if !c1.ControlPlane || c1.GPUServer || c1.Address != "10.0.0.1" || c1.AddressSource != kube.AddressFromInternalIP {
		t.Errorf("inv-cp-1 %+v", c1)
	}

	// No CNPG CRD in this cluster: no primaries, no error.
	pl, err := kube.Locate(t.Context(), kc, c.Dynamic(), inv, kube.PlacementOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pl.Postgres) != 0 || pl.VIP.Node != "inv-cp-2" || pl.VIP.Source != kube.SourceLease || pl.Canary.Node != "inv-gpu-2" {
		t.Errorf("placement %+v", pl)
	}
}
