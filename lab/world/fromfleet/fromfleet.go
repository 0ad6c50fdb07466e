// Package fromfleet ties the lab's emulated hosts (lab/fleet) to the
// cluster-side world (lab/world): the world's hosts and power probes from
// a fleet, each control-plane host's etcd address forwarded to its lab
// etcd member (an SSH tunnel to "127.0.0.1:2379" on cp-i reaches member i),
// and the control-plane host files that must match the cluster side.
//
// It reads the fleet, sets port forwards on its hosts and writes the
// control-plane files the two halves must agree on (InstallControlPlaneFiles);
// it must not change any other host state. It is kept apart from lab/world so that the world
// builds and tests without the fleet.
package fromfleet

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"

	"github.com/mcp-patch/mcp-patch/lab/cluster"
	"github.com/mcp-patch/mcp-patch/lab/fleet"
	"github.com/mcp-patch/mcp-patch/lab/fleet/machine"
	"github.com/mcp-patch/mcp-patch/lab/world"
)

// EtcdClientAddr is where a kubeadm control-plane host's etcd listens, as
// the host sees it.
const EtcdClientAddr = "127.0.0.1:2379"

// Hosts returns the world's hosts for the fleet's hosts, in fleet order
// (control planes, canaries, GPU servers), with the kernel each booted.
func Hosts(f *fleet.Fleet) []world.Host {
	var out []world.Host
	for _, h := range f.Hosts() {
		role := world.RoleGPU
		if h.Role == machine.RoleControlPlane {
			role = world.RoleControlPlane
		}
		_, kernel := probe(h)()
		out = append(out, world.Host{Name: h.Name, Role: role, Canary: h.Canary, Kernel: kernel})
	}
	return out
}

// Probes returns a power probe per fleet host: up while the host is up or
// still shutting down (SSH answers, the kubelet has not stopped yet), down
// while it boots, has panicked, hangs or is off.
func Probes(f *fleet.Fleet) map[string]world.HostProbe {
	out := map[string]world.HostProbe{}
	for _, h := range f.Hosts() {
		out[h.Name] = probe(h)
	}
	return out
}

func probe(h *fleet.Host) world.HostProbe {
	return func() (bool, string) {
		p := h.Power()
		up := p == fleet.PowerUp || p == fleet.PowerShuttingDown
		kernel := ""
		hist := h.BootHistory()
		for i := len(hist) - 1; i >= 0; i-- {
			if hist[i].Result == machine.BootUp {
				kernel = hist[i].Kernel
				break
			}
		}
		return up, kernel
	}
}

// ForwardEtcd makes each control-plane host's 127.0.0.1:2379 reach its
// lab etcd member (member i for the i-th control-plane host).
func ForwardEtcd(f *fleet.Fleet, e *cluster.EtcdCluster) {
	i := 0
	for _, h := range f.Hosts() {
		if h.Role != machine.RoleControlPlane || i >= len(e.Members) {
			continue
		}
		if u, err := url.Parse(e.Members[i].ClientURL); err == nil {
			h.SetForward(EtcdClientAddr, u.Host)
		}
		i++
	}
}

// Control-plane host files InstallControlPlaneFiles writes (kubeadm's
// layout).
const (
	EtcdCAFile          = "/etc/kubernetes/pki/etcd/ca.crt"
	EtcdHealthCertFile  = "/etc/kubernetes/pki/etcd/healthcheck-client.crt"
	EtcdHealthKeyFile   = "/etc/kubernetes/pki/etcd/healthcheck-client.key"
	APIServerManifest   = "/etc/kubernetes/manifests/kube-apiserver.yaml"
	OIDCCAFile          = world.OIDCCAFile
	controlPlaneFileDir = 0o755
)

// InstallControlPlaneFiles writes onto each control-plane host what its
// real counterpart holds and the round reads over SSH: the etcd CA and
// health-check client certificate of the lab etcd, the OIDC issuer's CA,
// and a kube-apiserver manifest that agrees with the World's mirror pod.
func InstallControlPlaneFiles(f *fleet.Fleet, e *cluster.EtcdCluster, w *world.World) error {
	read := func(path string) ([]byte, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("install control-plane files: %w", err)
		}
		return b, nil
	}
	ca, err := read(e.CAFile)
	if err != nil {
		return err
	}
	cert, err := read(e.ClientCertFile)
	if err != nil {
		return err
	}
	key, err := read(e.ClientKeyFile)
	if err != nil {
		return err
	}
	for _, h := range f.Hosts() {
		if h.Role != machine.RoleControlPlane {
			continue
		}
		manifest, err := w.APIServerManifest(h.Name)
		if err != nil {
			return err
		}
		files := []struct {
			path string
			data []byte
			mode os.FileMode
		}{
			{EtcdCAFile, ca, 0o644},
			{EtcdHealthCertFile, cert, 0o644},
			{EtcdHealthKeyFile, key, 0o600},
			{OIDCCAFile, w.OIDCCAPEM(), 0o644},
			{APIServerManifest, manifest, 0o600},
		}
		for _, fl := range files {
			p := h.Path(fl.path)
			if err := os.MkdirAll(filepath.Dir(p), controlPlaneFileDir); err != nil {
				return fmt.Errorf("install %s on %s: %w", fl.path, h.Name, err)
			}
			if err := os.WriteFile(p, fl.data, fl.mode); err != nil {
				return fmt.Errorf("install %s on %s: %w", fl.path, h.Name, err)
			}
		}
	}
	return nil
}
