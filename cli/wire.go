package cli

import (
	"context"
	"fmt"
	"path/filepath"

	"mcp-patch/intent"
	"mcp-patch/policy"
	"mcp-patch/tools"
)

// wire connects the tool dependencies to the real packages named by the
// configuration. Connections to the cluster and the hosts are made lazily,
// on first use, so reading intent works without either.
func wire(ctx context.Context, d *tools.Deps) (cleanup func(), err error) {
	c := d.Config
	var closers []func()
	cleanup = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	d.Identity = c.Identity
	d.Background = ctx
	d.Audit = d.RecordAudit
	if c.IntentRepo != "" {
		repoPath := c.IntentRepo
		d.Intent = func(round string) (*intent.Repo, error) {
			return intent.Open(repoPath, intent.Options{
				AuthorName: c.Git.AuthorName, AuthorEmail: c.Git.AuthorEmail,
				Protected: c.Git.Protected, RoundID: round, WorkingBranch: c.Git.Branch,
				Remote: c.Git.Remote,
				SSH:    intent.SSHOptions{KnownHosts: c.SSH.KnownHosts, KeyFiles: c.SSH.KeyFiles, UseAgent: true},
				Now:    d.Now, Log: d.Log,
			})
		}
		d.Resources = tools.IntentResources(d)
		d.Book = tools.NewRoundBook(repoPath, d.Now)
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
		store, err := policy.OpenNonceStore(filepath.Join(c.StateDir, "approvals"))
		if err != nil {
			cleanup()
			return nil, fmt.Errorf("open the approval nonce store: %w", err)
		}
		closers = append(closers, func() { store.Close() })
		d.Approvals = &tools.PolicyApprovals{
			Verifier: &policy.Verifier{AllowedSigners: signers, NonceStore: store, Clock: d.Now, RefuseLabOnly: !c.Approvals.AllowLabOnly},
			TTL:      c.Approvals.TTL.D(), Clock: d.Now,
		}
	}
	if err := wireWorld(ctx, d); err != nil {
		cleanup()
		return nil, err
	}
	return cleanup, nil
}
