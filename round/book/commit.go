package book

import (
	"context"
	"slices"

	"github.com/mcp-patch/mcp-patch/intent"
)

// Committer stores files of the working copy in a commit of the round's
// branch (intent.Repo).
type Committer interface {
	CommitFilesSealed(ctx context.Context, message string, paths, sealed []string) (intent.Commit, error)
}

var _ Committer = (*intent.Repo)(nil)

// Held names the rounds whose journals this book holds for writing,
// sorted.
func (b *Book) Held() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	ids := make([]string, 0, len(b.open))
	for id := range b.open {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
