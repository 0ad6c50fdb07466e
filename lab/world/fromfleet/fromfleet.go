// Package fromfleet ties the lab's emulated hosts (lab/fleet) to the
// cluster-side world (lab/world): the world's hosts and power probes from
// a fleet, and each control-plane host's etcd address forwarded to its lab
// etcd member, so that an SSH tunnel to "127.0.0.1:2379" on cp-i reaches
// member i.
//
// It only reads the fleet and sets port forwards on its hosts; it must not
// change a host's state. It is kept apart from lab/world so that the world
// builds and tests without the fleet.
package fromfleet

import (
	"net/url"

	"mcp-patch/lab/cluster"
	"mcp-patch/lab/fleet"
	"mcp-patch/lab/fleet/machine"
	"mcp-patch/lab/world"
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
