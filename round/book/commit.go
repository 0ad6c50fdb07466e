package book

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/mcp-patch/mcp-patch/intent"
	"github.com/mcp-patch/mcp-patch/round"
)

// Committer stores files of the working copy in a commit of the round's
// branch (intent.Repo).
type Committer interface {
	CommitFilesSealed(ctx context.Context, message string, paths, sealed []string) (intent.Commit, error)
}

var _ Committer = (*intent.Repo)(nil)

// Commit commits round id's record: what Files names, its reports
// guarded first (GuardedFiles, from planJSON and r), with the message
// "round <id>: <why>" and the reports' names. It runs under j's lock
// (round.Journal.Hold): the journal appends nothing meanwhile and a
// journal that is not the server's is never committed. It answers the
// commit's hash, "" when there was nothing to commit.
func (b *Book) Commit(ctx context.Context, j *round.Journal, id, why string, planJSON []byte, r Renders, repo Committer, log *slog.Logger) (string, ReportNames, error) {
	var names ReportNames
	var hash string
	err := j.Hold(func() error {
		files, n, err := b.GuardedFiles(id, planJSON, r, log)
		names = n
		if err != nil {
			return err
		}
		msg := fmt.Sprintf("round %s: %s", id, why)
		if body := n.Message(); body != "" {
			msg += "\n\n" + body
		}
		c, err := repo.CommitFilesSealed(ctx, msg, files.Files, files.Sealed)
		if err == nil || errors.Is(err, intent.ErrNoChange) {
			b.Committed(id, files)
		}
		hash = c.Hash
		return err
	})
	if errors.Is(err, intent.ErrNoChange) {
		return "", names, nil
	}
	return hash, names, err
}

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
