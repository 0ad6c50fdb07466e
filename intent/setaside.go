package intent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// SetAside puts the files of folder dir of the working copy (a round's
// folder, rounds/<id>) back to what HEAD's commit holds, keeping first
// each file that differs in keepIn (same relative path) for a person: the
// records a server wrote after its term as leader ended, which it could no
// longer commit. A file HEAD does not hold is removed once kept. It
// answers the paths set aside. A staged change there is not the server's:
// ErrDirty, nothing changes.
func (r *Repo) SetAside(dir, keepIn string) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	dir = filepath.ToSlash(filepath.Clean(dir))
	if err := checkRepoPath(dir); err != nil {
		return nil, err
	}
	repo, _, err := r.openGit()
	if err != nil {
		return nil, err
	}
	wt, err := repo.Worktree()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotRepo, err)
	}
	st, err := wt.Status()
	if err != nil {
		return nil, fmt.Errorf("set aside %s: read the working copy's status: %w", dir, err)
	}
	var paths []string
	for p, fst := range st {
		if !strings.HasPrefix(p, dir+"/") || (fst.Worktree == git.Unmodified && fst.Staging == git.Unmodified) {
			continue
		}
		if fst.Staging != git.Unmodified && fst.Staging != git.Untracked {
			return nil, fmt.Errorf("%w in %s: it is staged; the server stages nothing, so the change is not its own", ErrDirty, p)
		}
		paths = append(paths, p)
	}
	slices.Sort(paths)
	if len(paths) == 0 {
		return nil, nil
	}
	tree, err := headTree(repo)
	if err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(r.root)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	for _, p := range paths {
		if err := keepCopy(root, p, keepIn); err != nil {
			return nil, err
		}
		if err := r.restoreFromTree(repo, root, tree, p); err != nil {
			return nil, err
		}
	}
	r.log.Info("set aside what the working copy held beyond its commit", "folder", dir, "files", len(paths), "kept_in", keepIn)
	return paths, nil
}

// keepCopy copies the working copy's file p (when there is one) to
// keepIn/p.
func keepCopy(root *os.Root, p, keepIn string) error {
	data, err := root.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("set aside %s: %w", p, err)
	}
	dst := filepath.Join(keepIn, filepath.FromSlash(p))
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return fmt.Errorf("set aside %s: %w", p, err)
	}
	if err := os.WriteFile(dst, data, 0o600); err != nil {
		return fmt.Errorf("set aside %s: %w", p, err)
	}
	return nil
}

// restoreFromTree writes p as tree holds it, or removes it when tree does
// not hold it.
func (r *Repo) restoreFromTree(repo *git.Repository, root *os.Root, tree *object.Tree, p string) error {
	var f *object.File
	if tree != nil {
		var err error
		f, err = tree.File(p)
		if err != nil && !errors.Is(err, object.ErrFileNotFound) {
			return fmt.Errorf("set aside %s: read it at HEAD: %w", p, err)
		}
	}
	if f == nil {
		if err := root.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("set aside %s: %w", p, err)
		}
		return nil
	}
	data, err := blobBytes(repo, f.Hash)
	if err != nil {
		return fmt.Errorf("set aside %s: %w", p, err)
	}
	mode := fs.FileMode(0o644)
	if f.Mode == 0o100755 {
		mode = 0o755
	}
	return atomicWrite(root, p, data, mode)
}

// headTree is the tree of HEAD's commit; nil while HEAD is unborn.
func headTree(repo *git.Repository) (*object.Tree, error) {
	head, err := repo.Head()
	switch {
	case errors.Is(err, plumbing.ErrReferenceNotFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read HEAD: %w", err)
	}
	c, err := repo.CommitObject(head.Hash())
	if err != nil {
		return nil, fmt.Errorf("read commit %s: %w", head.Hash(), err)
	}
	tree, err := c.Tree()
	if err != nil {
		return nil, fmt.Errorf("read tree of %s: %w", head.Hash(), err)
	}
	return tree, nil
}
