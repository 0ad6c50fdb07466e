package intent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/index"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
)

// ErrDiverged: the working branch and the remote's each hold commits the
// other lacks; Fetch changed nothing, and a person decides which to keep.
var ErrDiverged = errors.New("the working branch and the remote's have diverged")

// FetchResult says what a fetch did.
type FetchResult struct {
	Remote string `json:"remote"`
	// URL is the remote's URL as configured.
	URL    string `json:"url"`
	Branch string `json:"branch"`
	// RemoteHash is the commit the remote's branch points at; empty when
	// the remote has no such branch.
	RemoteHash string `json:"remote_hash"`
	// From and To are the commit of the local working branch before and
	// after; empty while it does not exist.
	From string `json:"from"`
	To   string `json:"to"`
	// Moved is true when the working branch was fast-forwarded (or
	// created) to the remote's and the working copy brought to it.
	Moved bool `json:"moved"`
	// Superseded names the ref that keeps the commits only this working
	// copy held when TakeOver moved the branch to the remote's ("" when
	// none).
	Superseded string `json:"superseded,omitempty"`
	// SwitchedBranch is true when the working copy was moved onto the
	// working branch by this call (it was on another branch, or detached),
	// as a commit does.
	SwitchedBranch bool `json:"switched_branch"`
}

// Fetch brings the working branch up to the configured remote's, for a
// server taking the round over from another that pushed there. It fetches
// the branch (same transports, SSH authentication and time bound as Push;
// the remote-tracking branch refs/remotes/<remote>/<branch> is updated as
// git fetch does), then:
//
//   - the remote has no such branch: nothing moves;
//   - the local branch is absent or behind (an ancestor of the remote's):
//     it is fast-forwarded, and the working copy is checked out at the
//     remote's commit on the working branch, as after a commit: HEAD on
//     the branch, the files that differ between HEAD's commit and the
//     remote's written or removed, their index entries refreshed;
//   - the local branch is the remote's or ahead of it: nothing moves;
//   - they have diverged: ErrDiverged, nothing moves.
//
// It refuses with ErrDirty, changing nothing, when a file the fast-forward
// would write or remove has uncommitted changes (edited, deleted, staged,
// or untracked in the way) other than already holding the remote's bytes.
// On an error, nothing moved unless the error says so.
func (r *Repo) Fetch(ctx context.Context) (FetchResult, error) { return r.fetchBranch(ctx, false) }

// TakeOver is Fetch for a server that begins a term as leader: the remote's
// branch is the round's record, so where the two have diverged (this
// server committed after its term ended, and another server pushed since)
// the working branch is moved to the remote's all the same; the commits
// only this server held are kept under refs/mcp-patch/superseded/ for a
// person (FetchResult.Superseded), never pushed.
func (r *Repo) TakeOver(ctx context.Context) (FetchResult, error) { return r.fetchBranch(ctx, true) }

func (r *Repo) fetchBranch(ctx context.Context, remoteWins bool) (FetchResult, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	branch := r.opts.WorkingBranch
	if r.opts.Remote == "" || branch == "" {
		return FetchResult{}, fmt.Errorf("fetch: %w: no remote or no working branch configured", ErrInvalid)
	}
	res, err := r.fetch(ctx, branch, remoteWins)
	if err != nil {
		return res, fmt.Errorf("fetch %s from %s: %w", branch, r.opts.Remote, err)
	}
	r.log.InfoContext(ctx, "fetched", "remote", r.opts.Remote, "branch", branch, "remote_hash", res.RemoteHash,
		"from", res.From, "to", res.To, "moved", res.Moved, "switched_branch", res.SwitchedBranch)
	return res, nil
}

func (r *Repo) fetch(ctx context.Context, branch string, remoteWins bool) (FetchResult, error) {
	repo, gitDir, err := r.openGit()
	if err != nil {
		return FetchResult{}, err
	}
	acc, err := r.remoteAccess(repo)
	if err != nil {
		return FetchResult{}, err
	}
	defer acc.close()
	res := FetchResult{Remote: r.opts.Remote, URL: acc.url, Branch: branch}
	branchRef := plumbing.NewBranchReferenceName(branch)
	tracking := plumbing.NewRemoteReferenceName(r.opts.Remote, branch)

	// The network first, without the index lock: a slow remote never
	// blocks a person's git commands.
	fetchCtx, cancel := context.WithTimeout(ctx, r.opts.SSH.PushTimeout)
	err = repo.FetchContext(fetchCtx, &git.FetchOptions{
		RemoteName: r.opts.Remote,
		RefSpecs:   []config.RefSpec{config.RefSpec("+" + branchRef.String() + ":" + tracking.String())},
		Auth:       acc.auth,
		Tags:       git.NoTags,
	})
	cancel()
	absent := errors.Is(err, git.NoMatchingRefSpecError{}) || errors.Is(err, transport.ErrEmptyRemoteRepository)
	if err != nil && !absent && !errors.Is(err, git.NoErrAlreadyUpToDate) {
		return res, err
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}

	// Read before the index lock: the branch moves only by
	// compare-and-swap from what is read here.
	local, err := repo.Storer.Reference(branchRef)
	switch {
	case errors.Is(err, plumbing.ErrReferenceNotFound):
		local = nil
	case err != nil:
		return res, fmt.Errorf("read branch %s: %w", branch, err)
	default:
		res.From = local.Hash().String()
	}
	res.To = res.From
	if absent {
		return res, nil
	}
	lock, err := lockIndex(gitDir)
	if err != nil {
		return res, err
	}
	defer lock.release()
	remoteRef, err := repo.Storer.Reference(tracking)
	if err != nil {
		return res, fmt.Errorf("read %s after the fetch: %w", tracking, err)
	}
	res.RemoteHash = remoteRef.Hash().String()

	ff, err := r.planFastForward(ctx, repo, gitDir, branchRef, local, remoteRef.Hash(), remoteWins)
	if err != nil || ff == nil {
		return res, err
	}
	if ff.superseded {
		// Kept before the branch moves: a person finds what only this
		// server held.
		keep := plumbing.ReferenceName(fmt.Sprintf("refs/mcp-patch/superseded/%s-%d", branch, time.Now().UnixNano()))
		if err := repo.Storer.SetReference(plumbing.NewHashReference(keep, ff.from)); err != nil {
			return res, fmt.Errorf("keep %s before moving it: %w", branch, err)
		}
		res.Superseded = keep.String()
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	if err := r.fastForward(ctx, repo, lock, ff); err != nil {
		if ff.moved {
			res.To, res.Moved, res.SwitchedBranch = ff.to.String(), true, ff.switchHead
		}
		return res, err
	}
	res.To, res.Moved, res.SwitchedBranch = ff.to.String(), true, ff.switchHead
	return res, nil
}

// fastForwardPlan is what bringing the working copy to the remote's
// commit does, decided (and checked against uncommitted changes) before
// anything is touched.
type fastForwardPlan struct {
	branch     plumbing.ReferenceName
	from, to   plumbing.Hash // the branch before (zero: absent) and after
	switchHead bool          // HEAD is not yet the working branch
	// files are the paths that differ between HEAD's commit and to, by
	// path; removes before writes.
	files []fileUpdate
	ix    *indexFile
	// moved is set once the branch points at to.
	moved bool
	// superseded: the branch held commits the remote's does not (TakeOver).
	superseded bool
}

// fileUpdate is one path of a fast-forward: its entry at the target
// commit (nil: removed) and what the working copy held before.
type fileUpdate struct {
	path string
	to   *object.TreeEntry
	had  bool          // a file was there
	prev plumbing.Hash // its blob hash (HEAD's or the target's)
	perm fs.FileMode
}

// planFastForward decides what Fetch does with the remote's commit: nil
// when nothing moves (the branch is the remote's, or ahead), ErrDiverged,
// ErrDirty, or the files to write.
func (r *Repo) planFastForward(ctx context.Context, repo *git.Repository, gitDir string, branchRef plumbing.ReferenceName, local *plumbing.Reference, remote plumbing.Hash, remoteWins bool) (*fastForwardPlan, error) {
	remoteCommit, err := repo.CommitObject(remote)
	if err != nil {
		return nil, fmt.Errorf("read commit %s: %w", remote, err)
	}
	ff := &fastForwardPlan{branch: branchRef, to: remote}
	if local != nil {
		ff.from = local.Hash()
		if ff.from == remote {
			return nil, nil
		}
		localCommit, err := repo.CommitObject(ff.from)
		if err != nil {
			return nil, fmt.Errorf("read commit %s: %w", ff.from, err)
		}
		behind, err := localCommit.IsAncestor(remoteCommit)
		if err != nil {
			return nil, fmt.Errorf("compare %s with %s: %w", ff.from, remote, err)
		}
		if !behind {
			ahead, err := remoteCommit.IsAncestor(localCommit)
			if err != nil {
				return nil, fmt.Errorf("compare %s with %s: %w", remote, ff.from, err)
			}
			switch {
			case ahead && !remoteWins:
				return nil, nil
			case remoteWins:
				ff.superseded = true
			default:
				return nil, fmt.Errorf("%w: %s is at %s, %s at %s, and neither contains the other; merge or rebase them yourself, then push",
					ErrDiverged, branchRef.Short(), ff.from, r.opts.Remote, remote)
			}
		}
	}

	// The working copy holds HEAD's commit (none while HEAD is unborn),
	// which need not be the working branch's: the files that differ
	// between it and the remote's are those to write.
	headSym, err := repo.Storer.Reference(plumbing.HEAD)
	if err != nil {
		return nil, fmt.Errorf("read HEAD: %w", err)
	}
	ff.switchHead = headSym.Type() != plumbing.SymbolicReference || headSym.Target() != branchRef
	headTree, err := headTree(repo)
	if err != nil {
		return nil, err
	}
	remoteTree, err := remoteCommit.Tree()
	if err != nil {
		return nil, fmt.Errorf("read tree of %s: %w", remote, err)
	}
	changes, err := object.DiffTreeContext(ctx, headTree, remoteTree)
	if err != nil {
		return nil, fmt.Errorf("compare the working copy's commit with %s: %w", remote, err)
	}

	if ff.ix, err = r.readIndex(gitDir); err != nil {
		return nil, err
	}
	entries := make(map[string][]*index.Entry, len(ff.ix.idx.Entries))
	for _, e := range ff.ix.idx.Entries {
		entries[e.Name] = append(entries[e.Name], e)
	}
	root, err := os.OpenRoot(r.root)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	for _, ch := range changes {
		// Without rename detection a change is one path: From, To or both.
		var from, to *object.TreeEntry
		p := ch.To.Name
		if ch.From.Name != "" {
			p, from = ch.From.Name, &ch.From.TreeEntry
		}
		if ch.To.Name != "" {
			to = &ch.To.TreeEntry
		}
		u, err := r.checkFastForwardPath(root, entries[p], p, from, to)
		if err != nil {
			return nil, err
		}
		ff.files = append(ff.files, u)
	}
	sort.Slice(ff.files, func(i, j int) bool {
		a, b := ff.files[i], ff.files[j]
		if (a.to == nil) != (b.to == nil) {
			return a.to == nil
		}
		return a.path < b.path
	})
	return ff, nil
}

// checkFastForwardPath refuses when writing (or removing) p would lose
// something the commits do not hold: staged changes, edits, a deletion, an
// untracked file. A file that already holds the target's bytes loses
// nothing.
func (r *Repo) checkFastForwardPath(root *os.Root, entries []*index.Entry, p string, from, to *object.TreeEntry) (fileUpdate, error) {
	u := fileUpdate{path: p, to: to}
	if err := checkRepoPath(p); err != nil {
		return u, err
	}
	for _, te := range []*object.TreeEntry{from, to} {
		if te != nil && te.Mode != filemode.Regular && te.Mode != filemode.Executable && te.Mode != filemode.Deprecated {
			return u, fmt.Errorf("%w: %s is a %s in one of the commits; only regular files are brought up here (git merge --ff-only yourself)", ErrInvalid, p, te.Mode)
		}
	}
	var staged *index.Entry
	for _, e := range entries {
		// Stage 0 is a merged entry (go-git's index.Merged says 1).
		if e.Stage != 0 {
			return u, fmt.Errorf("%w in %s: it is unmerged; resolve it first", ErrDirty, p)
		}
		staged = e
	}
	same := func(e *index.Entry, te *object.TreeEntry) bool {
		return te != nil && e.Hash == te.Hash && e.Mode == te.Mode
	}
	switch {
	case staged != nil && !same(staged, from) && !same(staged, to):
		return u, fmt.Errorf("%w in %s: it is staged with changes that are not ours; commit or unstage them first", ErrDirty, p)
	case staged == nil && from != nil && to != nil:
		return u, fmt.Errorf("%w in %s: it is removed from the index; restore it first", ErrDirty, p)
	}

	fi, err := root.Lstat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist) && from != nil && to != nil:
		return u, fmt.Errorf("%w in %s: it is deleted in the working copy; restore it first", ErrDirty, p)
	case errors.Is(err, fs.ErrNotExist):
		return u, nil
	case err != nil:
		return u, fmt.Errorf("read %s: %w", p, err)
	case !fi.Mode().IsRegular():
		return u, fmt.Errorf("%w in %s: it is not a regular file in the working copy; move it first", ErrDirty, p)
	}
	h, err := r.fileHash(root, p, fi)
	if err != nil {
		return u, err
	}
	switch {
	case to != nil && h == to.Hash, from != nil && h == from.Hash:
		u.had, u.prev, u.perm = true, h, fi.Mode().Perm()
		return u, nil
	case from == nil:
		return u, fmt.Errorf("%w in %s: an untracked file is in the way; commit or move it first", ErrDirty, p)
	default:
		return u, fmt.Errorf("%w in %s: it has uncommitted edits that are not ours; commit or discard them first", ErrDirty, p)
	}
}

// fileHash is the blob hash of a working-copy file, from the hash cache
// when stat says it has not changed.
func (r *Repo) fileHash(root *os.Root, p string, fi fs.FileInfo) (plumbing.Hash, error) {
	key, keyed := statKeyOf(fi)
	if keyed {
		if h, ok := r.opts.Hashes.lookup(r.root, p, key); ok {
			return h, nil
		}
	}
	data, err := root.ReadFile(p)
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("read %s: %w", p, err)
	}
	h := plumbing.ComputeHash(plumbing.BlobObject, data)
	if keyed {
		r.opts.Hashes.store(r.root, p, key, h)
	}
	return h, nil
}

// fastForward carries out a plan, in the order a commit does: the files
// (put back on failure), the branch with compare-and-swap, HEAD onto it,
// then the index entries of the paths written or removed.
func (r *Repo) fastForward(ctx context.Context, repo *git.Repository, lock *indexLock, ff *fastForwardPlan) error {
	restore, err := r.checkoutFiles(repo, ff.files)
	if err != nil {
		return err
	}
	var old *plumbing.Reference
	if !ff.from.IsZero() {
		old = plumbing.NewHashReference(ff.branch, ff.from)
	} else if _, err := repo.Storer.Reference(ff.branch); !errors.Is(err, plumbing.ErrReferenceNotFound) {
		restore()
		return fmt.Errorf("%w: %s appeared while we fetched", ErrBusy, ff.branch.Short())
	}
	if err := repo.Storer.CheckAndSetReference(plumbing.NewHashReference(ff.branch, ff.to), old); err != nil {
		restore()
		return fmt.Errorf("%w: advance %s from %s: %w", ErrBusy, ff.branch.Short(), ff.from, err)
	}
	if ff.switchHead {
		if err := repo.Storer.SetReference(plumbing.NewSymbolicReference(plumbing.HEAD, ff.branch)); err != nil {
			restore()
			if old != nil {
				err = errors.Join(err, repo.Storer.SetReference(old))
			} else {
				err = errors.Join(err, repo.Storer.RemoveReference(ff.branch))
			}
			return fmt.Errorf("switch to branch %s: %w", ff.branch.Short(), err)
		}
	}
	ff.moved = true
	r.log.InfoContext(ctx, "fast-forwarded", "branch", ff.branch.Short(), "from", ff.from.String(), "to", ff.to.String(),
		"files", len(ff.files), "switched_branch", ff.switchHead)

	changes := map[string]object.TreeEntry{}
	for _, u := range ff.files {
		if u.to == nil {
			if _, err := ff.ix.idx.Remove(u.path); err != nil && !errors.Is(err, index.ErrEntryNotFound) {
				return fmt.Errorf("%s is at %s, but the index was not refreshed: %w", ff.branch.Short(), ff.to, err)
			}
			continue
		}
		changes[u.path] = *u.to
	}
	if err := r.refreshIndex(ff.ix, changes, lock); err != nil {
		return fmt.Errorf("%s is at %s and the files are written, but the index was not refreshed (git status will show them as changed until `git reset -q`): %w",
			ff.branch.Short(), ff.to, err)
	}
	return nil
}

// checkoutFiles brings the working copy's files to the plan's (removals
// first, each write atomic) and returns a function that puts back what
// was there, from the objects it was verified to hold.
func (r *Repo) checkoutFiles(repo *git.Repository, files []fileUpdate) (func(), error) {
	root, err := os.OpenRoot(r.root)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	var done []fileUpdate
	restore := func() {
		rt, err := os.OpenRoot(r.root)
		if err != nil {
			return
		}
		defer rt.Close()
		for i := len(done) - 1; i >= 0; i-- {
			u := done[i]
			if !u.had {
				_ = rt.Remove(u.path)
				continue
			}
			if data, err := blobBytes(repo, u.prev); err == nil {
				_ = rt.MkdirAll(path.Dir(u.path), 0o755)
				_ = atomicWrite(rt, u.path, data, u.perm)
			}
		}
	}
	for _, u := range files {
		if u.to == nil {
			if u.had {
				if err := root.Remove(u.path); err != nil {
					restore()
					return nil, fmt.Errorf("remove %s: %w", u.path, err)
				}
				removeEmptyFolders(root, path.Dir(u.path))
			}
			done = append(done, u)
			continue
		}
		data, err := blobBytes(repo, u.to.Hash)
		if err != nil {
			restore()
			return nil, fmt.Errorf("read %s at the fetched commit: %w", u.path, err)
		}
		perm := fs.FileMode(0o644)
		if u.to.Mode == filemode.Executable {
			perm = 0o755
		}
		if dir := path.Dir(u.path); dir != "." {
			if err := root.MkdirAll(dir, 0o755); err != nil {
				restore()
				return nil, fmt.Errorf("write %s: %w", u.path, err)
			}
		}
		if err := atomicWrite(root, u.path, data, perm); err != nil {
			restore()
			return nil, fmt.Errorf("write %s: %w", u.path, err)
		}
		done = append(done, u)
	}
	return restore, nil
}

// removeEmptyFolders removes dir and the folders above it while they are
// empty, as git does when it removes a folder's last file.
func removeEmptyFolders(root *os.Root, dir string) {
	for ; dir != "." && dir != "/"; dir = path.Dir(dir) {
		if root.Remove(dir) != nil {
			return
		}
	}
}

func blobBytes(repo *git.Repository, h plumbing.Hash) ([]byte, error) {
	b, err := repo.BlobObject(h)
	if err != nil {
		return nil, err
	}
	rd, err := b.Reader()
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	return io.ReadAll(rd)
}
