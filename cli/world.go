package cli

import (
	"context"
	"fmt"
	"sync"

	"mcp-patch/host"
	"mcp-patch/host/steps"
	"mcp-patch/kube"
	"mcp-patch/tools"
)

// wireWorld sets up lazy access to the cluster and the hosts.
func wireWorld(ctx context.Context, d *tools.Deps) error {
	c := d.Config
	var (
		kmu     sync.Mutex
		clients *kube.Clients
	)
	d.Cluster = func(ctx context.Context) (*kube.Clients, error) {
		kmu.Lock()
		defer kmu.Unlock()
		if clients != nil {
			return clients, nil
		}
		cl, err := kube.Load(ctx, kube.LoadOptions{Kubeconfig: c.Kubeconfig, Context: c.Context})
		if err != nil {
			return nil, err
		}
		clients = cl
		return cl, nil
	}

	var (
		hmu    sync.Mutex
		access *tools.HostAccess
	)
	d.Hosts = func(ctx context.Context) (*tools.HostAccess, error) {
		hmu.Lock()
		defer hmu.Unlock()
		if access != nil {
			return access, nil
		}
		inv, err := hostInventory(ctx, d)
		if err != nil {
			return nil, err
		}
		pool, err := host.NewPool(inv, host.Config{
			KnownHostsFiles: c.SSH.KnownHosts,
			AgentSocket:     d.Getenv("SSH_AUTH_SOCK"),
			IdentityFiles:   c.SSH.KeyFiles,
			DialTimeout:     c.SSH.DialTimeout.D(),
			CommandTimeout:  c.SSH.CommandTimeout.D(),
			Logger:          d.Log,
		})
		if err != nil {
			return nil, err
		}
		access = &tools.HostAccess{Steps: steps.New(pool, d.Log), Pool: pool, Runner: pool}
		return access, nil
	}
	return nil
}

// hostInventory is the SSH inventory file when configured, completed with
// the InternalIP of every cluster node it does not name.
func hostInventory(ctx context.Context, d *tools.Deps) (*host.MapInventory, error) {
	c := d.Config
	defaults := host.Target{User: c.SSH.User, Port: c.SSH.Port, Jump: c.SSH.Jump}
	var inv *host.MapInventory
	if c.SSH.Inventory != "" {
		var err error
		if inv, err = host.LoadInventory(c.SSH.Inventory); err != nil {
			return nil, err
		}
	} else {
		var err error
		if inv, err = host.NewMapInventory(defaults); err != nil {
			return nil, fmt.Errorf("ssh defaults: %w", err)
		}
	}
	if d.Cluster == nil {
		return inv, nil
	}
	cl, err := d.Cluster(ctx)
	if err != nil {
		if c.SSH.Inventory != "" {
			d.Log.Warn("cluster unreachable; using the SSH inventory file alone", "err", err)
			return inv, nil
		}
		return nil, fmt.Errorf("no SSH inventory file and the cluster (for node addresses) is unreachable: %w", err)
	}
	nodes, err := kube.TakeInventory(ctx, cl.Kube, kube.InventoryOptions{})
	if err != nil {
		return nil, err
	}
	for _, n := range nodes.Nodes {
		if _, err := inv.Lookup(n.Name); err == nil || n.Address == "" {
			continue
		}
		if err := inv.SetAddress(n.Name, n.Address); err != nil {
			d.Log.Warn("node address not usable for SSH", "node", n.Name, "err", err)
		}
	}
	return inv, nil
}
