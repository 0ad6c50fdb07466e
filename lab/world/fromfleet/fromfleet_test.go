package fromfleet

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcp-patch/mcp-patch/kube/gate"
	"github.com/mcp-patch/mcp-patch/lab/cluster"
	"github.com/mcp-patch/mcp-patch/lab/fleet"
	"github.com/mcp-patch/mcp-patch/lab/world"
)

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// TestFleetRebootDrivesNode reboots a real lab host and watches its Node go
// NotReady and come back, and reaches the host's etcd through an SSH tunnel
// the way the gate does.
func TestFleetRebootDrivesNode(t *testing.T) {
	ctx := t.Context()
	log := slog.New(slog.NewTextHandler(testLog{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	f, err := fleet.New(ctx, fleet.Options{Dir: t.TempDir(), ControlPlanes: 1, GPUServers: 1,
		RebootDowntime: 3 * time.Second, ShutdownDelay: 100 * time.Millisecond, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	c := cluster.StartT(t, cluster.Options{Logger: log})
	e := cluster.StartEtcdClusterT(t, cluster.EtcdOptions{Members: 1, Logger: log})
	ForwardEtcd(f, e)
	w, err := world.Setup(ctx, world.Options{Cluster: c, Etcd: e, Hosts: Hosts(f), Probes: Probes(f), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })

	node := func() *corev1.Node {
		n, err := c.Client().CoreV1().Nodes().Get(ctx, "gpu-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	ready := func(n *corev1.Node) bool {
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue
			}
		}
		return false
	}
	before := node()
	if before.Status.NodeInfo.KernelVersion != fleet.OldKernel {
		t.Errorf("node kernel %q, want the host's %q", before.Status.NodeInfo.KernelVersion, fleet.OldKernel)
	}

	f.Host("gpu-1").Reboot()
	waitUntil(t, 20*time.Second, "node NotReady while the host reboots", func() bool { return !ready(node()) })
	if err := f.Host("gpu-1").WaitPower(ctx, fleet.PowerUp); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 30*time.Second, "node Ready after the reboot", func() bool { return ready(node()) })
	if after := node(); after.Status.NodeInfo.BootID == before.Status.NodeInfo.BootID {
		t.Errorf("boot id unchanged after the reboot: %q", after.Status.NodeInfo.BootID)
	}

	// The gate reaches cp-1's etcd at 127.0.0.1:2379 through SSH.
	kh, err := knownhosts.New(f.KnownHostsFile())
	if err != nil {
		t.Fatal(err)
	}
	sc, err := ssh.Dial("tcp", f.Host("cp-1").Addr(), &ssh.ClientConfig{
		User: "root", Auth: []ssh.AuthMethod{ssh.PublicKeys(f.OperatorSigner())}, HostKeyCallback: kh, Timeout: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	tlsCfg, err := e.ClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	check := gate.CheckEtcd(ctx, gate.EtcdConfig{
		Endpoints: []string{"https://" + EtcdClientAddr}, TLS: tlsCfg,
		Dial: func(ctx context.Context, addr string) (net.Conn, error) { return sc.DialContext(ctx, "tcp", addr) },
	})
	if !check.OK {
		t.Errorf("etcd through cp-1's tunnel: %+v", check)
	}

	// The round reads the control-plane host's files over SSH: with them,
	// and nothing else, the OIDC check and an etcd client from the host's
	// own certificates pass.
	if err := InstallControlPlaneFiles(f, e, w); err != nil {
		t.Fatal(err)
	}
	cat := func(path string) []byte {
		s, err := sc.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		// Lab hosts keep their files under $LAB_ROOT.
		out, err := s.Output(`cat "$LAB_ROOT"` + path)
		if err != nil {
			t.Fatalf("cat %s on cp-1: %v", path, err)
		}
		return out
	}
	oidc := gate.CheckOIDC(ctx, nil, gate.OIDCConfig{
		Manifests: map[string][]byte{"cp-1:" + APIServerManifest: cat(APIServerManifest)},
		Files:     map[string][]byte{OIDCCAFile: cat(OIDCCAFile)},
	})
	if !oidc.OK {
		t.Errorf("OIDC from cp-1's files: %+v", oidc)
	}
	dir := t.TempDir()
	for name, path := range map[string]string{"ca.crt": EtcdCAFile, "hc.crt": EtcdHealthCertFile, "hc.key": EtcdHealthKeyFile} {
		if err := os.WriteFile(filepath.Join(dir, name), cat(path), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	check = gate.CheckEtcd(ctx, gate.EtcdConfig{
		Endpoints: []string{"https://" + EtcdClientAddr},
		CAFile:    filepath.Join(dir, "ca.crt"), CertFile: filepath.Join(dir, "hc.crt"), KeyFile: filepath.Join(dir, "hc.key"),
		Dial: func(ctx context.Context, addr string) (net.Conn, error) { return sc.DialContext(ctx, "tcp", addr) },
	})
	if !check.OK {
		t.Errorf("etcd with cp-1's own certificates: %+v", check)
	}
}

func waitUntil(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
