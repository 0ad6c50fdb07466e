package intent

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// An index.lock a killed server left is cleared by the next write; one a
// person's git command holds (no mark, or a mark of another lock) is
// refused, and stays.
func TestAStaleIndexLockOfADeadServerIsCleared(t *testing.T) {
	tests := []struct {
		name    string
		mark    func(t *testing.T, gitDir string, lockIno uint64)
		cleared bool
	}{
		{"left by a server killed mid-commit", func(t *testing.T, gitDir string, ino uint64) {
			writeFile(t, filepath.Join(gitDir, lockOwnerFile), strconv.FormatUint(ino, 10)+"\n")
		}, true},
		{"a person's git, no mark", func(*testing.T, string, uint64) {}, false},
		{"a person's git, a mark of an earlier lock", func(t *testing.T, gitDir string, ino uint64) {
			writeFile(t, filepath.Join(gitDir, lockOwnerFile), strconv.FormatUint(ino+1, 10)+"\n")
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSharedRemote(t, nil, nil)
			gitDir := filepath.Join(s.dirA, ".git")
			lock := filepath.Join(gitDir, "index.lock")
			writeFile(t, lock, "half an index")
			var st syscall.Stat_t
			if err := syscall.Stat(lock, &st); err != nil {
				t.Fatal(err)
			}
			tt.mark(t, gitDir, st.Ino)
			writeFile(t, filepath.Join(s.dirA, fetchJournal), "a1\n")
			_, err := s.a.CommitFiles(t.Context(), "round 2025-11: journal", []string{fetchJournal})
			if tt.cleared {
				if err != nil {
					t.Fatalf("commit after a dead server's lock: %v", err)
				}
				for _, p := range []string{lock, filepath.Join(gitDir, lockOwnerFile)} {
					if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
						t.Errorf("%s is still there after the commit: %v", filepath.Base(p), err)
					}
				}
				return
			}
			if !errors.Is(err, ErrBusy) {
				t.Fatalf("commit beside a person's lock: %v, want ErrBusy", err)
			}
			if b := readFile(t, lock); b != "half an index" {
				t.Errorf("the person's lock changed: %q", b)
			}
		})
	}
}

// A live writer's mark is held: another handle of the same repository
// waits its turn (ErrBusy), it does not clear a lock in use.
func TestALiveIndexLockIsNotCleared(t *testing.T) {
	s := newSharedRemote(t, nil, nil)
	gitDir := filepath.Join(s.dirA, ".git")
	held, err := lockIndex(gitDir)
	if err != nil {
		t.Fatal(err)
	}
	defer held.release()
	if _, err := lockIndex(gitDir); !errors.Is(err, ErrBusy) {
		t.Fatalf("a second lock while the first is held: %v, want ErrBusy", err)
	}
	if _, err := os.Stat(held.path); err != nil {
		t.Fatalf("the held lock was removed: %v", err)
	}
}
