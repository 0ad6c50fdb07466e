package cli

import (
	"context"

	"mcp-patch/intent"
	"mcp-patch/tools"
)

// wire connects the tool dependencies to the real packages named by the
// configuration. Connections are made lazily by their owners.
func wire(ctx context.Context, d *tools.Deps) (cleanup func(), err error) {
	c := d.Config
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
	}
	return func() {}, nil
}
