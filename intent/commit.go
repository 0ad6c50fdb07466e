package intent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/index"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/filesystem"
)

// MaxCommitPaths bounds the files one CommitFiles names: a round's record
// is two files a node (its plan, its window's signature report) and the
// logs' segments, so a round of 10,000 nodes fits.
const MaxCommitPaths = 25000

// ErrNoChange: the files given to CommitFiles are the same as on the branch.
var ErrNoChange = errors.New("nothing to commit")

// LessonKind says where RecordLesson writes.
type LessonKind string

// Lesson kinds.
const (
	// KindLesson appends a dated entry to the component's lessons.md.
	KindLesson LessonKind = "lesson"
	// KindOpenQuestion appends a question naming a property under "Open
	// questions" in the component's intent.md: how a contradiction between
	// the live system and the intent is flagged.
	KindOpenQuestion LessonKind = "open_question"
)

// LessonInput is what RecordLesson records.
type LessonInput struct {
	Kind      LessonKind `json:"kind" jsonschema:"lesson (appended to lessons.md) or open_question (appended under Open questions in intent.md)"`
	Component string     `json:"component" jsonschema:"component folder name, a DNS-1123 label such as os-layer"`
	// Property is a property id of the component's intent.md; required for
	// an open question, optional for a lesson.
	Property string `json:"property,omitempty" jsonschema:"property id from the component intent.md such as P3; required for open_question"`
	// Text is the lesson or question: UTF-8, at most MaxTextBytes, no
	// control characters but newline and tab, no line starting with '#' or
	// a code fence (so it cannot break the document's structure).
	Text string `json:"text" jsonschema:"the lesson or question as plain text; no line may start with # or a code fence"`
	// RoundID is the round it comes from; default the Repo's RoundID. When
	// both are set they must be equal.
	RoundID string `json:"round_id,omitempty" jsonschema:"round id; defaults to the current round"`
}

// Commit is a commit made on the working branch.
type Commit struct {
	Hash    string `json:"hash" jsonschema:"commit id"`
	Branch  string `json:"branch" jsonschema:"working branch the commit is on (never a protected branch)"`
	Message string `json:"message"`
	// Author is "Name <email>".
	Author string `json:"author"`
	// When is the commit time, RFC 3339.
	When string `json:"when"`
	// Files are the repository paths the commit changed, and nothing else.
	Files []string `json:"files" jsonschema:"repository paths the commit changed and nothing else"`
	// Parent is the commit the branch pointed at before.
	Parent string `json:"parent"`
	// CreatedBranch is true when this commit's call created the branch.
	CreatedBranch bool `json:"created_branch"`
	// SwitchedBranch is true when the working copy was moved onto the
	// working branch by this call.
	SwitchedBranch bool `json:"switched_branch"`
	// OpenQuestionID is the id given to a recorded open question.
	OpenQuestionID string `json:"open_question_id,omitempty" jsonschema:"id given to a recorded open question such as Q2"`
	// Pushed is true when the branch was pushed to the configured remote;
	// PushError says why not when a push was attempted and failed (the
	// commit stands either way).
	Pushed    bool   `json:"pushed"`
	PushError string `json:"push_error,omitempty" jsonschema:"why the push failed; the commit stands"`
}

// RecordLesson appends a lesson to lessons.md, or an open question to
// intent.md, and commits that one file on the working branch. It refuses,
// changing nothing, on bad input, an unknown component or property, or when
// the file has uncommitted changes.
func (r *Repo) RecordLesson(ctx context.Context, in LessonInput) (Commit, error) {
	c, err := r.recordLesson(ctx, in)
	if err != nil {
		return Commit{}, fmt.Errorf("record %s for %s: %w", kindName(in.Kind), in.Component, err)
	}
	r.log.InfoContext(ctx, "recorded", "kind", in.Kind, "component", in.Component,
		"property", in.Property, "round", in.RoundID, "commit", c.Hash, "branch", c.Branch)
	return c, nil
}

func kindName(k LessonKind) string {
	if k == KindOpenQuestion {
		return "open question"
	}
	return "lesson"
}

func (r *Repo) recordLesson(ctx context.Context, in LessonInput) (Commit, error) {
	if in.Kind != KindLesson && in.Kind != KindOpenQuestion {
		return Commit{}, fmt.Errorf("%w: kind %q, want %q or %q", ErrInvalid, in.Kind, KindLesson, KindOpenQuestion)
	}
	if err := r.checkComponent(in.Component); err != nil {
		return Commit{}, err
	}
	round := in.RoundID
	switch {
	case round == "":
		round = r.opts.RoundID
	case r.opts.RoundID != "" && round != r.opts.RoundID:
		return Commit{}, fmt.Errorf("%w: round %q, but this repository handle writes for round %q", ErrInvalid, round, r.opts.RoundID)
	}
	if round == "" {
		return Commit{}, fmt.Errorf("%w: no round id", ErrInvalid)
	}
	if !roundIDPattern().MatchString(round) {
		return Commit{}, fmt.Errorf("%w: round id %q: want letters, digits, '.', '_', '-' (at most 63)", ErrInvalid, round)
	}
	if in.Kind == KindOpenQuestion && in.Property == "" {
		return Commit{}, fmt.Errorf("%w: an open question must name the property it is about", ErrInvalid)
	}
	if in.Property != "" && !idPattern().MatchString(in.Property) {
		return Commit{}, fmt.Errorf("%w: property id %q", ErrInvalid, in.Property)
	}
	text, err := checkText(in.Text, r.opts.MaxTextBytes)
	if err != nil {
		return Commit{}, err
	}
	now := r.opts.Now().UTC()
	date := now.Format(time.DateOnly)

	var questionID string
	file := in.Component + "/" + DocLessons
	if in.Kind == KindOpenQuestion {
		file = in.Component + "/" + DocIntent
	}
	edit := func(base *object.Tree) (map[string][]byte, error) {
		intentSrc, _, err := blobText(base, in.Component+"/"+DocIntent)
		if errors.Is(err, object.ErrFileNotFound) {
			return nil, fmt.Errorf("%w %q: %s/%s is not committed on the branch", ErrUnknownComponent, in.Component, in.Component, DocIntent)
		}
		if err != nil {
			return nil, err
		}
		parsed, perr := ParseIntent(intentSrc)
		if in.Property != "" && !parsed.HasProperty(in.Property) {
			return nil, fmt.Errorf("%w %q: %s/%s has %s", ErrUnknownProperty, in.Property, in.Component, DocIntent,
				strings.Join(parsed.PropertyIDs(), ", "))
		}
		if in.Kind == KindLesson {
			old, _, err := blobText(base, file)
			if err != nil && !errors.Is(err, object.ErrFileNotFound) {
				return nil, err
			}
			return map[string][]byte{file: []byte(appendLesson(old, in.Component, date, round, in.Property, text))}, nil
		}
		if perr != nil {
			return nil, fmt.Errorf("%s/%s must be well formed to take an open question: %w", in.Component, DocIntent, perr)
		}
		questionID = nextQuestionID(parsed.OpenQuestions)
		updated, err := appendOpenQuestion(intentSrc, questionID, in.Property, date, round, text)
		if err != nil {
			return nil, err
		}
		// Decide, then do: the edited document must parse to the same
		// properties plus exactly this question.
		again, err := ParseIntent(updated)
		n := len(again.OpenQuestions)
		if err != nil || !slices.Equal(again.PropertyIDs(), parsed.PropertyIDs()) || n != len(parsed.OpenQuestions)+1 ||
			again.OpenQuestions[n-1].ID != questionID || again.OpenQuestions[n-1].Property != in.Property {
			return nil, fmt.Errorf("%w: the edited %s would not read back as the same intent plus question %s (err: %v)", ErrInvalid, DocIntent, questionID, err)
		}
		return map[string][]byte{file: []byte(updated)}, nil
	}

	var subject string
	if in.Kind == KindOpenQuestion {
		subject = fmt.Sprintf("intent(%s): open question %%s against %s", in.Component, in.Property)
	} else if in.Property != "" {
		subject = fmt.Sprintf("intent(%s): lesson on %s", in.Component, in.Property)
	} else {
		subject = fmt.Sprintf("intent(%s): lesson", in.Component)
	}
	message := func() string {
		s := subject
		if in.Kind == KindOpenQuestion {
			s = fmt.Sprintf(subject, questionID)
		}
		body := firstLine(text, 72)
		trailers := fmt.Sprintf("Round: %s\nComponent: %s\nKind: %s\n", round, in.Component, in.Kind)
		if in.Property != "" {
			trailers += "Property: " + in.Property + "\n"
		}
		return s + " (round " + round + ")\n\n" + body + "\n\n" + trailers
	}
	c, err := r.commit(ctx, commitPlan{edit: edit, message: message, touched: []string{file}})
	c.OpenQuestionID = questionID
	return c, err
}

// CommitFiles commits the named files, as they are in the working copy, on
// the working branch: only those files, nothing else that is staged. Paths
// are relative, slash-separated, inside the repository and outside .git;
// each must be a regular file of at most MaxCommitFileBytes. It refuses when
// a path has staged changes of its own (someone else's) or the message is
// empty, and returns ErrNoChange when every file equals the branch's copy.
func (r *Repo) CommitFiles(ctx context.Context, message string, paths []string) (Commit, error) {
	return r.CommitFilesSealed(ctx, message, paths, nil)
}

// CommitFilesSealed is CommitFiles where the paths in sealed (a subset of
// paths) are files written once and never changed (a round log's sealed
// segments): one the branch already holds is neither read nor hashed
// again, so a commit's cost does not grow with the segments before it.
func (r *Repo) CommitFilesSealed(ctx context.Context, message string, paths, sealed []string) (Commit, error) {
	c, err := r.commitFiles(ctx, message, paths, sealed)
	if err != nil {
		return Commit{}, fmt.Errorf("commit %s: %w", clip(strings.Join(paths, ", "), 600), err)
	}
	r.log.InfoContext(ctx, "committed files", "files", c.Files, "commit", c.Hash, "branch", c.Branch)
	return c, nil
}

func (r *Repo) commitFiles(ctx context.Context, message string, paths, sealed []string) (Commit, error) {
	message = strings.TrimSpace(strings.ReplaceAll(message, "\r\n", "\n"))
	switch {
	case message == "":
		return Commit{}, fmt.Errorf("%w: empty commit message", ErrInvalid)
	case len(message) > 8<<10 || !utf8.ValidString(message) || strings.ContainsRune(message, 0):
		return Commit{}, fmt.Errorf("%w: commit message must be UTF-8 without NUL, at most 8 KiB", ErrInvalid)
	case len(paths) == 0 || len(paths) > MaxCommitPaths:
		return Commit{}, fmt.Errorf("%w: want 1 to %d paths, got %d", ErrInvalid, MaxCommitPaths, len(paths))
	}
	seen := map[string]bool{}
	for _, p := range paths {
		if err := checkRepoPath(p); err != nil {
			return Commit{}, err
		}
		if seen[p] {
			return Commit{}, fmt.Errorf("%w: path %q given twice", ErrInvalid, p)
		}
		seen[p] = true
	}
	once := map[string]bool{}
	for _, p := range sealed {
		if !seen[p] {
			return Commit{}, fmt.Errorf("%w: sealed path %q is not among the paths", ErrInvalid, p)
		}
		once[p] = true
	}
	edit := func(base *object.Tree) (map[string][]byte, error) {
		root, err := os.OpenRoot(r.root)
		if err != nil {
			return nil, err
		}
		defer root.Close()
		out := map[string][]byte{}
		same := 0
		for _, p := range paths {
			if once[p] {
				if _, mode, err := blobEntry(base, p); err == nil && mode.IsFile() {
					same++
					continue
				}
			}
			fi, err := root.Lstat(p)
			if err != nil {
				return nil, fmt.Errorf("%w: %s: %w", ErrInvalid, p, err)
			}
			if !fi.Mode().IsRegular() {
				return nil, fmt.Errorf("%w: %s is not a regular file", ErrInvalid, p)
			}
			if fi.Size() > int64(r.opts.MaxCommitFileBytes) {
				return nil, fmt.Errorf("%w: %s is %d bytes, more than %d", ErrInvalid, p, fi.Size(), r.opts.MaxCommitFileBytes)
			}
			old, _, oldErr := blobEntry(base, p)
			key, keyed := statKeyOf(fi)
			if keyed && oldErr == nil {
				if h, ok := r.opts.Hashes.lookup(r.root, p, key); ok && h == old {
					// Unchanged since it was last hashed: the branch's
					// entry stays, the file is not read.
					same++
					continue
				}
			}
			data, err := root.ReadFile(p)
			if err != nil {
				return nil, err
			}
			h := plumbing.ComputeHash(plumbing.BlobObject, data)
			if keyed {
				r.opts.Hashes.store(r.root, p, key, h)
			}
			if oldErr == nil && h == old {
				same++
			}
			out[p] = data
		}
		if same == len(paths) {
			return nil, ErrNoChange
		}
		return out, nil
	}
	return r.commit(ctx, commitPlan{edit: edit, message: func() string { return message + "\n" }, touched: paths, fromDisk: true})
}

// commitPlan is one write: the files it touches, how their new content is
// computed from the branch's tree, and the message.
type commitPlan struct {
	touched []string
	// edit returns the new content of every touched path, computed from
	// the base tree; an error refuses the write.
	edit    func(base *object.Tree) (map[string][]byte, error)
	message func() string
	// fromDisk: the new content is what the caller already wrote to the
	// working copy; we neither check it against the branch nor rewrite it.
	fromDisk bool
}

// branchMove is how the working copy gets onto the working branch.
type branchMove int

const (
	moveNone     branchMove = iota // HEAD is already the working branch
	moveCreate                     // create the branch at HEAD, point HEAD at it
	moveSwitch                     // the branch is at HEAD's commit: point HEAD at it
	moveCheckout                   // the branch is elsewhere: check it out (clean tree only)
)

// commit is the one chokepoint every write goes through. Order: validate
// and compute everything (refusals change nothing), then write objects,
// move onto the branch, write the files, advance the branch with
// compare-and-swap, and refresh the index entries of the touched paths.
// The push, when a remote is configured, runs after the index lock is
// released, so a slow remote never blocks a person's git commands.
func (r *Repo) commit(ctx context.Context, plan commitPlan) (Commit, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out, repo, err := r.commitLocked(ctx, plan)
	if err != nil || r.opts.Remote == "" {
		return out, err
	}
	if _, err := r.push(ctx, repo); err != nil {
		out.PushError = err.Error()
		r.log.WarnContext(ctx, "push failed; the commit stands", "remote", r.opts.Remote, "err", err)
	} else {
		out.Pushed = true
	}
	return out, nil
}

func (r *Repo) commitLocked(ctx context.Context, plan commitPlan) (Commit, *git.Repository, error) {
	if err := ctx.Err(); err != nil {
		return Commit{}, nil, err
	}
	branch := r.opts.WorkingBranch
	if branch == "" {
		return Commit{}, nil, fmt.Errorf("%w: no working branch (open the repository with a round id or a working branch)", ErrInvalid)
	}
	if slices.Contains(r.opts.Protected, branch) {
		return Commit{}, nil, fmt.Errorf("working branch %q: %w", branch, ErrProtectedBranch)
	}
	branchRef := plumbing.NewBranchReferenceName(branch)

	repo, gitDir, err := r.openGit()
	if err != nil {
		return Commit{}, nil, err
	}
	lock, err := lockIndex(gitDir)
	if err != nil {
		return Commit{}, nil, err
	}
	defer lock.release()

	headSym, err := repo.Storer.Reference(plumbing.HEAD)
	if err != nil {
		return Commit{}, nil, fmt.Errorf("read HEAD: %w", err)
	}
	head, err := repo.Head()
	if err != nil {
		return Commit{}, nil, fmt.Errorf("%w: the repository has no commit to branch from (%w)", ErrInvalid, err)
	}
	move := moveNone
	baseHash := head.Hash()
	if headSym.Type() != plumbing.SymbolicReference || headSym.Target() != branchRef {
		existing, err := repo.Storer.Reference(branchRef)
		switch {
		case errors.Is(err, plumbing.ErrReferenceNotFound):
			move = moveCreate
		case err != nil:
			return Commit{}, nil, fmt.Errorf("read branch %s: %w", branch, err)
		case existing.Hash() == head.Hash():
			move = moveSwitch
		default:
			move = moveCheckout
			baseHash = existing.Hash()
		}
	}
	baseCommit, err := repo.CommitObject(baseHash)
	if err != nil {
		return Commit{}, nil, fmt.Errorf("read commit %s: %w", baseHash, err)
	}
	baseTree, err := baseCommit.Tree()
	if err != nil {
		return Commit{}, nil, fmt.Errorf("read tree of %s: %w", baseHash, err)
	}

	ix, err := r.readIndex(gitDir)
	if err != nil {
		return Commit{}, nil, err
	}
	idx := ix.idx
	wt, err := repo.Worktree()
	if err != nil {
		return Commit{}, nil, fmt.Errorf("%w: %w", ErrNotRepo, err)
	}
	if move == moveCheckout {
		st, err := wt.Status()
		if err != nil {
			return Commit{}, nil, fmt.Errorf("read status: %w", err)
		}
		if !st.IsClean() {
			return Commit{}, nil, fmt.Errorf("%w: the working copy is on %s, the working branch %s is at another commit, and the working copy is not clean enough to switch (%s); commit or stash, or check out %s yourself",
				ErrDirty, headSym.Target().Short(), branch, clip(strings.TrimSpace(st.String()), 300), branch)
		}
	} else if err := r.checkTouchedClean(baseTree, idx, plan); err != nil {
		return Commit{}, nil, err
	}

	contents, err := plan.edit(baseTree)
	if err != nil {
		return Commit{}, nil, err
	}
	if err := ctx.Err(); err != nil {
		return Commit{}, nil, err
	}

	// Objects first: unreachable objects are harmless if anything below fails.
	changes := map[string]object.TreeEntry{}
	files := make([]string, 0, len(contents))
	for p, data := range contents {
		// A file the branch already holds as it is (a round's plan.json
		// between re-plans) keeps its blob: it is not compressed and
		// written again.
		h := plumbing.ComputeHash(plumbing.BlobObject, data)
		if old, _, err := blobEntry(baseTree, p); err != nil || old != h {
			if h, err = writeBlob(repo.Storer, data); err != nil {
				return Commit{}, nil, fmt.Errorf("write blob %s: %w", p, err)
			}
		}
		changes[p] = object.TreeEntry{Name: path.Base(p), Mode: r.fileMode(baseTree, p), Hash: h}
		files = append(files, p)
	}
	sort.Strings(files)
	treeHash, err := writeTree(repo.Storer, baseTree, changes)
	if err != nil {
		return Commit{}, nil, fmt.Errorf("write tree: %w", err)
	}
	when := r.opts.Now()
	sig := object.Signature{Name: r.opts.AuthorName, Email: r.opts.AuthorEmail, When: when}
	msg := plan.message()
	commitObj := &object.Commit{Author: sig, Committer: sig, Message: msg, TreeHash: treeHash, ParentHashes: []plumbing.Hash{baseHash}}
	enc := repo.Storer.NewEncodedObject()
	if err := commitObj.Encode(enc); err != nil {
		return Commit{}, nil, fmt.Errorf("encode commit: %w", err)
	}
	newHash, err := repo.Storer.SetEncodedObject(enc)
	if err != nil {
		return Commit{}, nil, fmt.Errorf("write commit: %w", err)
	}

	// Onto the working branch.
	switch move {
	case moveCreate:
		if err := repo.Storer.CheckAndSetReference(plumbing.NewHashReference(branchRef, baseHash), nil); err != nil {
			return Commit{}, nil, fmt.Errorf("create branch %s: %w", branch, err)
		}
		if err := repo.Storer.SetReference(plumbing.NewSymbolicReference(plumbing.HEAD, branchRef)); err != nil {
			return Commit{}, nil, fmt.Errorf("switch to branch %s: %w", branch, err)
		}
	case moveSwitch:
		if err := repo.Storer.SetReference(plumbing.NewSymbolicReference(plumbing.HEAD, branchRef)); err != nil {
			return Commit{}, nil, fmt.Errorf("switch to branch %s: %w", branch, err)
		}
	case moveCheckout:
		if err := wt.Checkout(&git.CheckoutOptions{Branch: branchRef}); err != nil {
			return Commit{}, nil, fmt.Errorf("check out %s: %w", branch, err)
		}
		if ix, err = r.readIndex(gitDir); err != nil {
			return Commit{}, nil, fmt.Errorf("after checkout: %w", err)
		}
		idx = ix.idx
	}
	r.log.InfoContext(ctx, "on working branch", "branch", branch, "move", int(move))

	// The files, then the branch. A failure to advance the branch puts the
	// files back as they were.
	var restore func()
	if !plan.fromDisk {
		restore, err = r.writeFiles(contents)
		if err != nil {
			return Commit{}, nil, err
		}
	}
	newRef := plumbing.NewHashReference(branchRef, newHash)
	if err := repo.Storer.CheckAndSetReference(newRef, plumbing.NewHashReference(branchRef, baseHash)); err != nil {
		if restore != nil {
			restore()
		}
		return Commit{}, nil, fmt.Errorf("%w: advance %s from %s: %w", ErrBusy, branch, baseHash, err)
	}
	out := Commit{Hash: newHash.String(), Branch: branch, Message: msg,
		Author: r.opts.AuthorName + " <" + r.opts.AuthorEmail + ">", When: when.Format(time.RFC3339),
		Files: files, Parent: baseHash.String(), CreatedBranch: move == moveCreate, SwitchedBranch: move != moveNone}

	if err := r.refreshIndex(ix, changes, lock); err != nil {
		return out, nil, fmt.Errorf("commit %s is made on %s, but the index was not refreshed (git status will show the touched files as changed until `git reset -q -- %s`): %w",
			newHash, branch, strings.Join(files, " "), err)
	}
	return out, repo, nil
}

// checkTouchedClean refuses when a touched path differs between the branch
// tree, the index and (unless the caller wrote it) the working copy.
func (r *Repo) checkTouchedClean(base *object.Tree, idx *index.Index, plan commitPlan) error {
	root, err := os.OpenRoot(r.root)
	if err != nil {
		return err
	}
	defer root.Close()
	// The index's entries by name, once: index.Entry searches them all for
	// each path, and a round's commit names thousands of files.
	entries := make(map[string]*index.Entry, len(idx.Entries))
	for _, e := range idx.Entries {
		entries[e.Name] = e
	}
	for _, p := range plan.touched {
		treeHash, _, treeErr := blobEntry(base, p)
		inTree := treeErr == nil
		if treeErr != nil && !errors.Is(treeErr, object.ErrFileNotFound) {
			return treeErr
		}
		entry, inIndex := entries[p]
		switch {
		case inIndex && (!inTree || entry.Hash != treeHash):
			return fmt.Errorf("%w in %s: it is staged with changes that are not ours; commit or unstage them first", ErrDirty, p)
		case !inIndex && inTree:
			return fmt.Errorf("%w in %s: it is removed from the index; restore it first", ErrDirty, p)
		}
		if plan.fromDisk {
			continue
		}
		data, err := root.ReadFile(p)
		switch {
		case errors.Is(err, fs.ErrNotExist) && !inTree:
		case errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("%w in %s: it is deleted in the working copy; restore it first", ErrDirty, p)
		case err != nil:
			return fmt.Errorf("read %s: %w", p, err)
		case !inTree:
			return fmt.Errorf("%w in %s: an untracked file is in the way; commit or move it first", ErrDirty, p)
		case plumbing.ComputeHash(plumbing.BlobObject, data) != treeHash:
			return fmt.Errorf("%w in %s: it has uncommitted edits that are not ours; commit or discard them first", ErrDirty, p)
		}
	}
	return nil
}

// fileMode keeps a tracked file's mode; a new file is executable when it is
// on disk.
func (r *Repo) fileMode(base *object.Tree, p string) filemode.FileMode {
	if _, mode, err := blobEntry(base, p); err == nil {
		return mode
	}
	if fi, err := os.Lstat(filepath.Join(r.root, filepath.FromSlash(p))); err == nil && fi.Mode().Perm()&0o111 != 0 {
		return filemode.Executable
	}
	return filemode.Regular
}

// writeFiles replaces files atomically (temporary file and rename in the
// same folder) and returns a function that puts the old contents back.
func (r *Repo) writeFiles(contents map[string][]byte) (func(), error) {
	root, err := os.OpenRoot(r.root)
	if err != nil {
		return nil, err
	}
	type saved struct {
		path string
		data []byte
		mode fs.FileMode
		had  bool
	}
	var done []saved
	restore := func() {
		rt, err := os.OpenRoot(r.root)
		if err != nil {
			return
		}
		defer rt.Close()
		for _, s := range done {
			if s.had {
				_ = atomicWrite(rt, s.path, s.data, s.mode)
			} else {
				_ = rt.Remove(s.path)
			}
		}
	}
	defer root.Close()
	paths := make([]string, 0, len(contents))
	for p := range contents {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		s := saved{path: p, mode: 0o644}
		if fi, err := root.Lstat(p); err == nil {
			if !fi.Mode().IsRegular() {
				restore()
				return nil, fmt.Errorf("%w: %s is not a regular file", ErrInvalid, p)
			}
			s.had, s.mode = true, fi.Mode().Perm()
			if s.data, err = root.ReadFile(p); err != nil {
				restore()
				return nil, fmt.Errorf("read %s: %w", p, err)
			}
		}
		if err := atomicWrite(root, p, contents[p], s.mode); err != nil {
			restore()
			return nil, fmt.Errorf("write %s: %w", p, err)
		}
		done = append(done, s)
	}
	return restore, nil
}

func atomicWrite(root *os.Root, p string, data []byte, mode fs.FileMode) error {
	tmp := path.Join(path.Dir(p), fmt.Sprintf(".%s.mcp-patch-%d.tmp", path.Base(p), os.Getpid()))
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		_ = root.Remove(tmp)
		return err
	}
	if err := root.Chmod(tmp, mode); err != nil {
		_ = root.Remove(tmp)
		return err
	}
	if err := root.Rename(tmp, p); err != nil {
		_ = root.Remove(tmp)
		return err
	}
	return nil
}

// refreshIndex points the touched paths' index entries at the new blobs,
// leaving every other entry as it was, and writes the index the way git
// does: into index.lock (which we hold), then renamed over index; a large
// one split (splitindex.go), so that a commit writes what it changed.
func (r *Repo) refreshIndex(ix *indexFile, changes map[string]object.TreeEntry, lock *indexLock) error {
	idx := ix.idx
	for p, te := range changes {
		e, err := idx.Entry(p)
		if errors.Is(err, index.ErrEntryNotFound) {
			e = idx.Add(p)
		} else if err != nil {
			return err
		}
		e.Hash, e.Mode = te.Hash, te.Mode
		fi, err := os.Lstat(filepath.Join(r.root, filepath.FromSlash(p)))
		if err != nil {
			return err
		}
		e.Size = uint32(fi.Size())
		e.ModifiedAt = fi.ModTime()
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			e.CreatedAt = time.Unix(int64(st.Ctim.Sec), int64(st.Ctim.Nsec))
			e.Dev, e.Inode = uint32(st.Dev), uint32(st.Ino)
			e.UID, e.GID = st.Uid, st.Gid
		}
	}
	// The cached-tree extension would be stale for the touched folders;
	// git rebuilds it on the next commit.
	idx.Cache = nil
	if err := lock.commit(ix); err != nil {
		return err
	}
	if ix.written != nil {
		r.shared = *ix.written
	}
	return nil
}

// openGit opens the working copy's repository, its index read as git
// reads it (gitStorage), and answers its git folder.
func (r *Repo) openGit() (*git.Repository, string, error) {
	plain, err := git.PlainOpenWithOptions(r.root, &git.PlainOpenOptions{EnableDotGitCommonDir: true})
	if err != nil {
		return nil, "", fmt.Errorf("%w: %w", ErrNotRepo, err)
	}
	fsStorage, ok := plain.Storer.(*filesystem.Storage)
	if !ok {
		return nil, "", fmt.Errorf("%w: unexpected storage", ErrNotRepo)
	}
	wt, err := plain.Worktree()
	if err != nil {
		return nil, "", fmt.Errorf("%w: %w", ErrNotRepo, err)
	}
	repo, err := git.Open(gitStorage{fsStorage}, wt.Filesystem)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %w", ErrNotRepo, err)
	}
	return repo, fsStorage.Filesystem().Root(), nil
}

// Git opens the working copy's repository with go-git, its index read as
// git reads it (a large round's index is split, which go-git alone does
// not read): for a status, never for a write.
func (r *Repo) Git() (*git.Repository, error) {
	repo, _, err := r.openGit()
	return repo, err
}

// readIndex reads the index, split from r's size on.
func (r *Repo) readIndex(gitDir string) (*indexFile, error) {
	f, err := readIndex(gitDir, &r.shared)
	if err != nil {
		return nil, err
	}
	if r.splitMin != 0 {
		f.splitMin = r.splitMin
	}
	return f, nil
}

// indexLock is git's index.lock, held for the whole write so that a git
// command running at the same time fails instead of racing us. While it
// is held, owner (indexlock.go) marks the lock as this process's, so that
// a lock left by a server killed in the middle of a write is told from a
// person's git command and cleared.
type indexLock struct {
	path, index string
	f           *os.File
	owner       *lockOwner
	done        bool
}

func lockIndex(gitDir string) (*indexLock, error) {
	p := filepath.Join(gitDir, "index.lock")
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		cleared, cerr := clearStaleLock(gitDir, p)
		if cerr != nil {
			return nil, fmt.Errorf("lock index: %w", cerr)
		}
		if cleared {
			f, err = os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		}
	}
	if errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("%w: %s exists: another git process is working in this repository (remove it only if no git process is running)", ErrBusy, p)
	}
	if err != nil {
		return nil, fmt.Errorf("lock index: %w", err)
	}
	owner, err := ownLock(gitDir, f)
	if err != nil {
		err = errors.Join(err, f.Close(), os.Remove(p))
		return nil, fmt.Errorf("lock index: %w", err)
	}
	return &indexLock{path: p, index: filepath.Join(gitDir, "index"), f: f, owner: owner}, nil
}

func (l *indexLock) commit(ix *indexFile) error {
	data, shared, sharedHash, err := ix.encode()
	if err != nil {
		return fmt.Errorf("encode index: %w", err)
	}
	if shared != nil {
		if err := writeShared(filepath.Dir(l.index), shared, sharedHash); err != nil {
			return fmt.Errorf("write shared index: %w", err)
		}
	}
	if _, err := l.f.Write(data); err != nil {
		return err
	}
	if err := l.f.Sync(); err != nil {
		return err
	}
	if err := l.f.Close(); err != nil {
		return err
	}
	l.f = nil
	if err := os.Rename(l.path, l.index); err != nil {
		return err
	}
	l.done = true
	return l.owner.release()
}

// release removes the lock file we created, unless it became the index.
func (l *indexLock) release() {
	if l.f != nil {
		_ = l.f.Close()
	}
	if !l.done {
		_ = os.Remove(l.path)
		_ = l.owner.release()
	}
}

func writeBlob(s storer.EncodedObjectStorer, data []byte) (plumbing.Hash, error) {
	obj := s.NewEncodedObject()
	obj.SetType(plumbing.BlobObject)
	obj.SetSize(int64(len(data)))
	w, err := obj.Writer()
	if err != nil {
		return plumbing.ZeroHash, err
	}
	if _, err := w.Write(data); err != nil {
		return plumbing.ZeroHash, err
	}
	if err := w.Close(); err != nil {
		return plumbing.ZeroHash, err
	}
	return s.SetEncodedObject(obj)
}

// writeTree writes base with the given paths (relative to base) replaced
// or added, and returns the new tree's hash.
func writeTree(s storer.EncodedObjectStorer, base *object.Tree, changes map[string]object.TreeEntry) (plumbing.Hash, error) {
	entries := map[string]object.TreeEntry{}
	if base != nil {
		for _, e := range base.Entries {
			entries[e.Name] = e
		}
	}
	sub := map[string]map[string]object.TreeEntry{}
	for p, te := range changes {
		first, rest, nested := strings.Cut(p, "/")
		if !nested {
			if e, ok := entries[first]; ok && (e.Mode == filemode.Dir || e.Mode == filemode.Submodule) {
				return plumbing.ZeroHash, fmt.Errorf("%w: %s is a folder in the repository", ErrInvalid, first)
			}
			entries[first] = te
			continue
		}
		if sub[first] == nil {
			sub[first] = map[string]object.TreeEntry{}
		}
		sub[first][rest] = te
	}
	for dir, ch := range sub {
		var subtree *object.Tree
		if e, ok := entries[dir]; ok {
			if e.Mode != filemode.Dir {
				return plumbing.ZeroHash, fmt.Errorf("%w: %s is not a folder in the repository", ErrInvalid, dir)
			}
			t, err := object.GetTree(s, e.Hash)
			if err != nil {
				return plumbing.ZeroHash, err
			}
			subtree = t
		}
		h, err := writeTree(s, subtree, ch)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		entries[dir] = object.TreeEntry{Name: dir, Mode: filemode.Dir, Hash: h}
	}
	list := make([]object.TreeEntry, 0, len(entries))
	for _, e := range entries {
		list = append(list, e)
	}
	// Git orders tree entries by name, a folder's name compared as "name/".
	key := func(e object.TreeEntry) string {
		if e.Mode == filemode.Dir {
			return e.Name + "/"
		}
		return e.Name
	}
	sort.Slice(list, func(i, j int) bool { return key(list[i]) < key(list[j]) })
	obj := s.NewEncodedObject()
	if err := (&object.Tree{Entries: list}).Encode(obj); err != nil {
		return plumbing.ZeroHash, err
	}
	// A folder whose files are named but unchanged keeps its tree: go-git
	// would compress and write the object again (a round's folder of a
	// file a node, every commit).
	if s.HasEncodedObject(obj.Hash()) == nil {
		return obj.Hash(), nil
	}
	return s.SetEncodedObject(obj)
}

// blobEntry is a file's blob hash and mode in the tree, from the tree
// alone (the blob is not read: a round's journal is megabytes); a file the
// tree lacks (or holds as a folder) is object.ErrFileNotFound.
func blobEntry(t *object.Tree, p string) (plumbing.Hash, filemode.FileMode, error) {
	e, err := t.FindEntry(p)
	if err != nil || !e.Mode.IsFile() {
		// A folder (or a submodule) is no file of the tree, as Tree.File
		// has it.
		return plumbing.ZeroHash, 0, object.ErrFileNotFound
	}
	return e.Hash, e.Mode, nil
}

// blobText returns a file of the tree and its blob hash; a file the tree
// lacks is ("", zero, object.ErrFileNotFound).
func blobText(t *object.Tree, p string) (string, plumbing.Hash, error) {
	f, err := t.File(p)
	if errors.Is(err, object.ErrFileNotFound) || errors.Is(err, object.ErrDirectoryNotFound) {
		return "", plumbing.ZeroHash, object.ErrFileNotFound
	}
	if err != nil {
		return "", plumbing.ZeroHash, fmt.Errorf("read %s from the branch: %w", p, err)
	}
	rd, err := f.Reader()
	if err != nil {
		return "", plumbing.ZeroHash, fmt.Errorf("read %s from the branch: %w", p, err)
	}
	defer rd.Close()
	data, err := io.ReadAll(rd)
	if err != nil {
		return "", plumbing.ZeroHash, fmt.Errorf("read %s from the branch: %w", p, err)
	}
	return string(data), f.Hash, nil
}

// checkText normalises line endings, trims, and refuses what could break a
// document's structure or is not plain text.
func checkText(text string, max int) (string, error) {
	text = strings.TrimSpace(strings.ReplaceAll(text, "\r\n", "\n"))
	switch {
	case text == "":
		return "", fmt.Errorf("%w: empty text", ErrInvalid)
	case len(text) > max:
		return "", fmt.Errorf("%w: text is %d bytes, more than %d", ErrInvalid, len(text), max)
	case !utf8.ValidString(text):
		return "", fmt.Errorf("%w: text is not UTF-8", ErrInvalid)
	}
	for _, c := range text {
		if c != '\n' && c != '\t' && (unicode.IsControl(c) || c == '\u2028' || c == '\u2029') {
			return "", fmt.Errorf("%w: text holds control character %U", ErrInvalid, c)
		}
	}
	for _, l := range strings.Split(text, "\n") {
		t := strings.TrimLeft(l, " \t")
		if strings.HasPrefix(t, "#") || strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
			return "", fmt.Errorf("%w: a line starts with %q, which would change the document's structure", ErrInvalid, t[:1])
		}
	}
	return text, nil
}

// checkRepoPath accepts a clean, relative, slash-separated path inside the
// repository and outside .git.
func checkRepoPath(p string) error {
	bad := p == "" || len(p) > 1024 || strings.ContainsAny(p, "\\\x00\n\r") || path.Clean(p) != p ||
		!filepath.IsLocal(filepath.FromSlash(p)) || strings.HasPrefix(p, "/")
	if !bad {
		for _, seg := range strings.Split(p, "/") {
			if strings.EqualFold(seg, ".git") || seg == "." || seg == ".." {
				bad = true
			}
		}
	}
	if bad {
		return fmt.Errorf("%w: path %q: want a clean relative path inside the repository, outside .git", ErrInvalid, p)
	}
	return nil
}

func firstLine(text string, n int) string {
	l, _, _ := strings.Cut(text, "\n")
	if utf8.RuneCountInString(l) <= n {
		return l
	}
	r := []rune(l)
	return string(r[:n-1]) + "…"
}
