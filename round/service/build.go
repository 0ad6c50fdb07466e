package service

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/mcp-patch/mcp-patch/config"
	"github.com/mcp-patch/mcp-patch/host"
	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/intent"
	"github.com/mcp-patch/mcp-patch/kube"
	"github.com/mcp-patch/mcp-patch/kube/usednonces"
	"github.com/mcp-patch/mcp-patch/policy"
)

// Build makes the service from a configuration: the intent
// repository, the round book, approvals, and lazy access to the cluster and
// the hosts. now is the clock (nil: time.Now); getenv reads the
// environment. cleanup closes what Build opened.
func Build(ctx context.Context, c *config.Config, log *slog.Logger, getenv func(string) string, now func() time.Time) (*Service, func(), error) {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	d := &Service{Config: c, Log: log, Now: now, Mode: c.Mode, Getenv: getenv}
	cleanup, err := wire(ctx, d)
	if err != nil {
		return nil, nil, err
	}
	return d, cleanup, nil
}

// wire connects the service to the real packages named by the
// configuration. Connections to the cluster and the hosts are made lazily,
// on first use, so reading intent works without either.
func wire(ctx context.Context, d *Service) (cleanup func(), err error) {
	c := d.Config
	var closers []func()
	cleanup = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	d.Identity = c.Identity
	closers = append(closers, d.CloseLease, d.CloseLeader)
	d.Audit = d.RecordAudit
	if c.IntentRepo != "" {
		repoPath := c.IntentRepo
		hashes := &intent.HashCache{}
		d.Intent = func(round string) (*intent.Repo, error) {
			return intent.Open(repoPath, intent.Options{
				Hashes:     hashes,
				AuthorName: c.Git.AuthorName, AuthorEmail: c.Git.AuthorEmail,
				Protected: c.Git.Protected, RoundID: round, WorkingBranch: c.Git.Branch,
				Remote:        c.Git.Remote,
				SSH:           intent.SSHOptions{KnownHosts: c.SSH.KnownHosts, KeyFiles: c.SSH.KeyFiles, UseAgent: true},
				VerifyPassEnv: c.Verify.PassEnv, VerifyDisabled: VerifyDisabled(c),
				LookupEnv: func(k string) (string, bool) { v := d.Getenv(k); return v, v != "" },
				Now:       d.Now, Log: d.Log,
			})
		}
		anchors := ""
		if c.StateDir != "" {
			anchors = AnchorDir(c.StateDir)
		}
		d.Book = NewRoundBook(repoPath, anchors, d.Now)
		d.Book.CheckDecision = d.decisionProven
		d.Book.ReadOnly = c.Mode == config.ModeReadOnly
		if env := c.Environment; env != "" {
			// The other environments' rounds in the shared repository are
			// theirs; a file that cannot be read leaves every round listed.
			d.Book.Foreign = func(id string) bool {
				envs, err := intent.LoadEnvironments(repoPath)
				return err == nil && len(envs) > 0 && envs.Of(id) != env
			}
		}
		d.CurrentRound = d.Book.CurrentID
		closers = append(closers, func() { d.Book.Close() })
	}
	if c.Approvals.AllowedSigners != "" && c.Mode != "read-only" {
		signers, err := policy.LoadAllowedSigners(c.Approvals.AllowedSigners)
		if err != nil {
			cleanup()
			return nil, fmt.Errorf("approvals.allowed_signers: %w", err)
		}
		if lab := signers.LabOnly(); len(lab) > 0 && !c.Approvals.AllowLabOnly {
			d.Log.Warn("allowed_signers lists lab-only keys; approvals signed with them are refused", "count", len(lab))
		}
		files, err := policy.OpenNonceStore(filepath.Join(c.StateDir, "approvals"))
		if err != nil {
			cleanup()
			return nil, fmt.Errorf("open the approval nonce store: %w", err)
		}
		closers = append(closers, func() { files.Close() })
		// Used nonces go where every server of the cluster looks first, then
		// into the state directory: a second server refuses them too.
		shared := &usednonces.Store{Namespace: c.Kube.LeaseNamespace, Name: c.Approvals.NonceConfigMap,
			Clients: func(ctx context.Context) (*kube.Clients, error) { return d.Cluster(ctx) }}
		store := policy.Nonces(shared, files)
		d.Approvals = &PolicyApprovals{
			Verifier: &policy.Verifier{AllowedSigners: signers, NonceStore: store, Clock: d.Now, RefuseLabOnly: !c.Approvals.AllowLabOnly,
				MaxLifetime: c.Approvals.MaxLifetime.D()},
			TTL: c.Approvals.TTL.D(), Clock: d.Now,
		}
	}
	if err := wireWorld(ctx, d); err != nil {
		cleanup()
		return nil, err
	}
	stop, err := wireOps(ctx, d)
	if err != nil {
		cleanup()
		return nil, err
	}
	closers = append(closers, stop)
	return cleanup, nil
}

// VerifyDisabled says why verify.sh may not run: in read-only mode unless
// the configuration allows it.
func VerifyDisabled(c *config.Config) string {
	if c.Mode == config.ModeReadOnly && !c.Verify.InReadOnly {
		return "the server runs read-only and verify.in_read_only is not set (verify.sh is code the read-only promise cannot vouch for)"
	}
	return ""
}

// wireWorld sets up lazy access to the cluster and the hosts.
func wireWorld(ctx context.Context, d *Service) error {
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
		access *HostAccess
	)
	d.Hosts = func(ctx context.Context) (*HostAccess, error) {
		hmu.Lock()
		defer hmu.Unlock()
		if access != nil {
			return access, nil
		}
		pool, inv, err := OpenHostPool(ctx, d)
		if err != nil {
			return nil, err
		}
		st := steps.New(pool, d.Log)
		st.LockTimeout = c.SSH.DpkgLockTimeout.D()
		access = &HostAccess{Steps: st, Pool: pool, Runner: pool, Inventory: inv}
		return access, nil
	}
	return nil
}

// OpenHostPool is the production SSH pool the tools use, over the configured
// inventory (completed from the cluster when d.Cluster reaches it), and that
// inventory. d needs Config, Log and Getenv; Cluster may
// be nil. The caller closes the pool.
//
// SSH works as ssh(1) would for the user whose HOME d.Getenv gives: the
// agent at SSH_AUTH_SOCK, the default identity files under ~/.ssh when no
// key file is configured, and ~/.ssh/config beneath the inventory.
func OpenHostPool(ctx context.Context, d *Service) (*host.Pool, *host.MapInventory, error) {
	c := d.Config
	inv, err := LoadHostInventory(ctx, d)
	if err != nil {
		return nil, nil, err
	}
	pool, err := host.NewPool(inv, host.Config{
		KnownHostsFiles:      c.SSH.KnownHosts,
		AgentSocket:          d.Getenv("SSH_AUTH_SOCK"),
		IdentityFiles:        c.SSH.KeyFiles,
		DefaultIdentityFiles: host.DefaultIdentityFiles(d.home()),
		DialTimeout:          c.SSH.DialTimeout.D(),
		CommandTimeout:       c.SSH.CommandTimeout.D(),
		Logger:               d.Log,
	})
	if err != nil {
		return nil, nil, err
	}
	return pool, inv, nil
}

// home is the user's home directory (HOME in d's environment; empty when
// unknown): where ssh(1) would find its identities and config.
func (d *Service) home() string {
	if d.Getenv == nil {
		return ""
	}
	return d.Getenv("HOME")
}

// LoadHostInventory is the SSH inventory file when configured, over what the
// user's ~/.ssh/config says for each node, completed with the InternalIP of
// every cluster node it does not name.
func LoadHostInventory(ctx context.Context, d *Service) (*host.MapInventory, error) {
	c := d.Config
	oc, err := host.LoadUserOpenSSHConfig(c.SSH.OpenSSHConfig, d.home())
	if err != nil {
		return nil, err
	}
	defaults := host.Target{User: c.SSH.User, Port: c.SSH.Port, Jump: c.SSH.Jump}
	var inv *host.MapInventory
	if c.SSH.Inventory != "" {
		// The config's ssh user, port and jump lie beneath ~/.ssh/config,
		// and that beneath the file's defaults; a node's own fields win
		// over all.
		if inv, err = host.LoadInventoryWith(c.SSH.Inventory, defaults, oc); err != nil {
			return nil, err
		}
	} else {
		if inv, err = host.NewInventoryFrom(defaults, oc); err != nil {
			return nil, fmt.Errorf("ssh defaults: %w", err)
		}
	}
	if d.Cluster == nil {
		return inv, nil
	}
	cl, err := d.Cluster(ctx)
	if err != nil {
		if c.SSH.Inventory != "" {
			// Host-only use (one host, or a fleet before its cluster is
			// reachable) is a normal way to run the host tools: nothing
			// for a person to act on.
			d.Log.Info("no cluster reached; the SSH inventory file alone names the nodes", "err", err)
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
