package intent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// A server killed in the middle of a commit or a fetch (a leader taken
// down with SIGKILL) leaves git's index.lock behind, and every later write
// would refuse it for good. A person's git command leaves one too while it
// runs, and that one must never be removed. So while this process holds
// index.lock it also holds an exclusive flock on a file of its own beside
// it, naming the lock's inode: the kernel lets the flock go when the
// process dies, however it dies. An index.lock whose owner file is there,
// unlocked, and names that very inode is one a dead server left, and is
// cleared; any other is somebody's and refused.

// lockOwnerFile is the owner file in the git directory.
const lockOwnerFile = "mcp-patch-index.owner"

// lockOwner is this process's mark on the index.lock it holds.
type lockOwner struct {
	path string
	f    *os.File
}

// ownLock marks lock (index.lock, just created) as this process's.
func ownLock(gitDir string, lock *os.File) (*lockOwner, error) {
	st, err := lock.Stat()
	if err != nil {
		return nil, err
	}
	ino := st.Sys().(*syscall.Stat_t).Ino
	p := filepath.Join(gitDir, lockOwnerFile)
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return nil, errors.Join(fmt.Errorf("mark index.lock as ours: %w", err), f.Close())
	}
	if err := f.Truncate(0); err != nil {
		return nil, errors.Join(err, f.Close())
	}
	if _, err := f.WriteAt([]byte(strconv.FormatUint(ino, 10)+"\n"), 0); err != nil {
		return nil, errors.Join(err, f.Close())
	}
	return &lockOwner{path: p, f: f}, nil
}

// release removes the mark (the lock became the index or was removed);
// closing the file lets the flock go.
func (o *lockOwner) release() error {
	if o == nil || o.f == nil {
		return nil
	}
	err := os.Remove(o.path)
	if errors.Is(err, fs.ErrNotExist) {
		err = nil
	}
	err = errors.Join(err, o.f.Close())
	o.f = nil
	return err
}

// clearStaleLock removes lockPath when a server that held it died
// holding it (see above) and answers whether it did; a lock that is not
// provably a dead server's is left alone (false).
func clearStaleLock(gitDir, lockPath string) (bool, error) {
	p := filepath.Join(gitDir, lockOwnerFile)
	f, err := os.OpenFile(p, os.O_RDWR|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return false, nil // a live process of ours holds it
		}
		return false, err
	}
	raw, err := os.ReadFile(p)
	if err != nil {
		return false, err
	}
	want, err := strconv.ParseUint(strings.TrimSpace(string(raw)), 10, 64)
	if err != nil {
		return false, nil // not a mark this code wrote
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(lockPath, &st); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return true, nil // gone meanwhile: try again
		}
		return false, err
	}
	if st.Ino != want {
		return false, nil // another index.lock than the one marked: somebody's
	}
	if err := os.Remove(lockPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	return true, nil
}
