package service

import (
	"context"
	"net"

	"github.com/mcp-patch/mcp-patch/answer"
	"github.com/mcp-patch/mcp-patch/host"
	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/kube"
	"github.com/mcp-patch/mcp-patch/round/plan/preflight"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// HostPool is what the tools need of the SSH pool beyond running scripts.
type HostPool interface {
	// Forget drops a node's pooled connection (after a reboot).
	Forget(node string)
	// Dial opens a connection through a node's SSH connection (a tunnel).
	Dial(ctx context.Context, node, network, addr string) (net.Conn, error)
}

// HostSteps is what the tools run on hosts: the window's host steps and
// the checks around them. *steps.Steps satisfies it.
type HostSteps interface {
	window.Host
	Kernel(ctx context.Context, node string) (steps.KernelInfo, error)
	preflight.Hosts
	Download(ctx context.Context, node string) (steps.DownloadResult, error)
	Snapshot(ctx context.Context, node, round, role, etcdEndpoint string) (steps.SnapshotResult, error)
	Verify(ctx context.Context, node string, in steps.VerifyInput) (steps.NodeVerification, error)
	GPUCheck(ctx context.Context, node string, in steps.GPUCheckInput) (steps.GPUCheck, error)
}

var _ HostSteps = (*steps.Steps)(nil)

// HostAccess is the host side: the steps and the pool they run over.
type HostAccess struct {
	Steps  HostSteps
	Pool   HostPool
	Runner host.Runner
	// Inventory is the SSH inventory the pool reaches nodes by (nil when
	// none is at hand: a tool that works over the whole inventory refuses).
	Inventory HostInventory
}

// HostInventory is what the fleet-wide host tools read of the SSH
// inventory. *host.MapInventory satisfies it.
type HostInventory interface {
	Nodes() []string
	Lookup(node string) (host.Target, error)
}

var _ HostInventory = (*host.MapInventory)(nil)

// InventoryNodes are the nodes of the SSH inventory that are patch
// targets: every node but those that other nodes reach through (jump
// hosts), which are named apart.
func InventoryNodes(inv HostInventory) (nodes, jumps []string) {
	all := inv.Nodes()
	isJump := map[string]bool{}
	for _, n := range all {
		if t, err := inv.Lookup(n); err == nil && t.Jump != "" {
			isJump[t.Jump] = true
		}
	}
	for _, n := range all {
		if isJump[n] {
			jumps = append(jumps, n)
		} else {
			nodes = append(nodes, n)
		}
	}
	return nodes, jumps
}

func (d *Service) KubeClients(ctx context.Context) (*kube.Clients, error) {
	if d.Cluster == nil {
		return nil, answer.Refuse("Start the server with --kubeconfig (or KUBECONFIG) pointing at the cluster.", "no Kubernetes cluster is configured")
	}
	c, err := d.Cluster(ctx)
	if err != nil {
		return nil, answer.Fail("Check the kubeconfig, the context name and that the API server is up; then call again.",
			"connect to the Kubernetes API: "+err.Error())
	}
	return c, nil
}

func (d *Service) OpenHosts(ctx context.Context) (*HostAccess, error) {
	if d.Hosts == nil {
		return nil, answer.Refuse("Configure ssh.known_hosts and a key (ssh-agent or ssh.key_files) and restart the server.", "no SSH access is configured")
	}
	h, err := d.Hosts(ctx)
	if err != nil {
		return nil, answer.Fail("Fix the SSH configuration (known_hosts, keys, inventory) and call again.", "set up SSH access: "+err.Error())
	}
	return h, nil
}
