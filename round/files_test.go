package round

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// repoWithRound is an intent repository with rounds/2026-11/ in it, and a
// file outside it that a link could point at.
func repoWithRound(t *testing.T) (root, dir, outside string) {
	t.Helper()
	base := t.TempDir()
	root = filepath.Join(base, "intent")
	dir = filepath.Join(root, "rounds", "2026-11")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	outside = filepath.Join(base, "elsewhere.jsonl")
	if err := os.WriteFile(outside, []byte("someone else's file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root, dir, outside
}

func TestOpenRefusesSymlinkedRecordFiles(t *testing.T) {
	for _, name := range []string{AuditFile, JournalFile, StateFile, "plan.json", "baseline.json"} {
		t.Run(name, func(t *testing.T) {
			root, dir, outside := repoWithRound(t)
			if err := os.Symlink(outside, filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
			j, err := Open(dir, WithRepoRoot(root))
			if err == nil {
				j.Close()
				t.Fatal("Open succeeded with a symlinked " + name)
			}
			if !errors.Is(err, ErrUnsafePath) || !strings.Contains(err.Error(), name+" is a symbolic link (to "+outside+")") {
				t.Errorf("Open = %v, want ErrUnsafePath naming the link and its target", err)
			}
			if b, _ := os.ReadFile(outside); string(b) != "someone else's file\n" {
				t.Errorf("the link's target was written: %q", b)
			}
			if name != JournalFile {
				if _, err := os.Lstat(filepath.Join(dir, JournalFile)); err == nil {
					t.Error("a journal was created although Open refused")
				}
			}
		})
	}
}

func TestOpenRefusesDirectoriesOutsideTheRepo(t *testing.T) {
	root, _, _ := repoWithRound(t)
	// rounds/ itself a link to a directory outside the repository.
	out := t.TempDir()
	linked := filepath.Join(t.TempDir(), "intent")
	if err := os.MkdirAll(linked, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(out, filepath.Join(linked, "rounds")); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(filepath.Join(linked, "rounds", "2026-11"), WithRepoRoot(linked)); !errors.Is(err, ErrUnsafePath) {
		t.Errorf("Open through a linked rounds/ = %v, want ErrUnsafePath", err)
	}
	if entries, _ := os.ReadDir(out); len(entries) != 0 {
		t.Errorf("Open created %v outside the repository", entries)
	}
	if _, err := Open(filepath.Join(t.TempDir(), "2026-11"), WithRepoRoot(root)); !errors.Is(err, ErrUnsafePath) {
		t.Errorf("Open of a directory outside the repository = %v, want ErrUnsafePath", err)
	}
	// A repository root that is itself a link is fine.
	alias := filepath.Join(t.TempDir(), "alias")
	if err := os.Symlink(root, alias); err != nil {
		t.Fatal(err)
	}
	j, err := Open(filepath.Join(alias, "rounds", "2026-11"), WithRepoRoot(alias))
	if err != nil {
		t.Fatalf("Open under a linked root: %v", err)
	}
	j.Close()
}

func TestReadWriteFileRefuseLinks(t *testing.T) {
	root, dir, outside := repoWithRound(t)
	if err := WriteFile(root, dir, "plan.json", []byte("{}\n")); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadFile(root, dir, "plan.json"); err != nil || string(b) != "{}\n" {
		t.Fatalf("ReadFile = %q, %v", b, err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "baseline.json")); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(root, dir, "baseline.json"); !errors.Is(err, ErrUnsafePath) {
		t.Errorf("ReadFile of a link = %v", err)
	}
	if err := WriteFile(root, dir, "baseline.json", []byte("x")); !errors.Is(err, ErrUnsafePath) {
		t.Errorf("WriteFile over a link = %v", err)
	}
	if b, _ := os.ReadFile(outside); string(b) != "someone else's file\n" {
		t.Errorf("the link's target changed: %q", b)
	}
	for _, bad := range []string{"", "../x", "a/b", ".."} {
		if err := WriteFile(root, dir, bad, nil); !errors.Is(err, ErrUnsafePath) {
			t.Errorf("WriteFile(%q) = %v", bad, err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(dir, JournalFile)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ReadState(dir); !errors.Is(err, ErrUnsafePath) {
		t.Errorf("ReadState of a linked journal = %v", err)
	}
}
