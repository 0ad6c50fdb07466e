package service

import (
	"context"
	"sync"
	"time"

	"github.com/mcp-patch/mcp-patch/answer"
	"github.com/mcp-patch/mcp-patch/intent"
	"github.com/mcp-patch/mcp-patch/round/book"
)

// pushKeeping remembers the last push of the round's record that failed,
// for the answers to say so.
type pushKeeping struct {
	mu         sync.Mutex
	hash, fail string
	// published is the last commit whose journal head this server
	// published on the window Lease (takeover.go); unpublished says why
	// the last one could not be.
	published, unpublished string
}

// pushWatch is the Committer the round's commits go through: it notes
// whether each commit reached git.remote.
type pushWatch struct {
	d    *Service
	repo book.Committer
}

func (w pushWatch) CommitFilesSealed(ctx context.Context, message string, paths, sealed []string) (intent.Commit, error) {
	c, err := w.repo.CommitFilesSealed(ctx, message, paths, sealed)
	if err == nil {
		w.d.notePush(c)
	}
	return c, err
}

func (d *Service) notePush(c intent.Commit) {
	if d.Config == nil || d.Config.Git.Remote == "" || c.Hash == "" {
		return
	}
	d.pushes.mu.Lock()
	defer d.pushes.mu.Unlock()
	switch {
	case c.PushError != "":
		d.pushes.hash, d.pushes.fail = c.Hash, c.PushError
	case c.Pushed:
		d.pushes.hash, d.pushes.fail = "", ""
	}
}

// UnpushedReason says, when the last commit of the round's record did not
// reach git.remote, what that holds back ("" when it did, or there is no
// remote).
func (d *Service) UnpushedReason() string {
	d.pushes.mu.Lock()
	defer d.pushes.mu.Unlock()
	if d.pushes.fail == "" {
		return d.pushes.unpublished
	}
	words := "the round's record (commit " + short(d.pushes.hash) + ") is not on the intent remote " + d.Config.Git.Remote + ": " + d.pushes.fail
	if d.Config.PushRequired() {
		return words + "; no destructive step runs until it is (each one pushes first)"
	}
	return words
}

// RequirePushed refuses a destructive step while the round's record is
// not on git.remote, when the config requires it (git.push_required, or
// leader election): the working branch is pushed first (a no-op when the
// remote has it), and a push that fails refuses the step with nothing
// done. Another server resumes the round from what the remote holds, so
// nothing destructive runs past a record it could not see.
func (d *Service) RequirePushed(ctx context.Context, roundID string) error {
	if d.Config == nil || !d.Config.PushRequired() {
		return nil
	}
	repo, err := d.IntentRepo(roundID)
	if err != nil {
		return err
	}
	start := time.Now()
	res, err := repo.Push(ctx)
	if err != nil {
		d.pushes.mu.Lock()
		d.pushes.fail = err.Error()
		d.pushes.mu.Unlock()
		// Another server may have written there: the next term begins
		// from what the remote holds.
		d.retakeNextTerm()
		d.Log.Warn("destructive step refused: the round's record is not on the remote", "round", roundID, "remote", d.Config.Git.Remote, "err", err)
		return answer.Refuse("Ask the operator to fix the intent remote "+d.Config.Git.Remote+" (reachable, the branch fast-forwards), then call again: the server pushes first.",
			"the round's record is not on the intent remote "+d.Config.Git.Remote+": "+err.Error(),
			"no destructive step runs past a record the remote does not hold (git.push_required)", "nothing was executed")
	}
	d.pushes.mu.Lock()
	d.pushes.hash, d.pushes.fail = "", ""
	d.pushes.mu.Unlock()
	d.Log.Debug("round's record on the remote", "round", roundID, "hash", res.Hash, "up_to_date", res.UpToDate, "took", time.Since(start))
	return nil
}
