package lab

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestFreshRemovesOnlyALabDirectory(t *testing.T) {
	base := t.TempDir()
	write := func(p string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Someone's directory: refused, every file still there.
	mine := filepath.Join(base, "home")
	write(filepath.Join(mine, "notes.txt"))
	write(filepath.Join(mine, "src", "main.go"))
	if err := Fresh(mine); !errors.Is(err, ErrNotLabDir) {
		t.Fatalf("Fresh(non-lab dir) = %v, want ErrNotLabDir", err)
	}
	for _, f := range []string{"notes.txt", "src/main.go"} {
		if _, err := os.Stat(filepath.Join(mine, f)); err != nil {
			t.Errorf("%s went away: %v", f, err)
		}
	}
	// A file where the directory should be: refused, kept.
	file := filepath.Join(base, "file")
	write(file)
	if err := Fresh(file); !errors.Is(err, ErrNotLabDir) {
		t.Errorf("Fresh(file) = %v, want ErrNotLabDir", err)
	}
	// Missing and empty directories are fine and stay as they are.
	if err := Fresh(filepath.Join(base, "new")); err != nil {
		t.Errorf("Fresh(missing) = %v", err)
	}
	empty := filepath.Join(base, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Fresh(empty); err != nil {
		t.Errorf("Fresh(empty) = %v", err)
	}
	// An earlier lab (marker present) is removed whole.
	old := filepath.Join(base, "lab")
	write(filepath.Join(old, MarkerFile))
	write(filepath.Join(old, "etcd", "member", "wal"))
	if err := Fresh(old); err != nil {
		t.Fatalf("Fresh(lab dir) = %v", err)
	}
	if _, err := os.Stat(old); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the earlier lab is still there: %v", err)
	}
}
