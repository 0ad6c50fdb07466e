package intent

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const examplesDir = "../examples/intent"

// fixedNow is the injected clock of every test repo.
var fixedNow = time.Date(2025, 11, 29, 14, 30, 0, 0, time.UTC)

// gitEnv keeps the user's and the system's git configuration out of tests.
func gitEnv(t testing.TB) []string {
	home := t.TempDir()
	return append(os.Environ(),
		"HOME="+home, "XDG_CONFIG_HOME="+home, "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=A Person", "GIT_AUTHOR_EMAIL=person@example.com",
		"GIT_COMMITTER_NAME=A Person", "GIT_COMMITTER_EMAIL=person@example.com",
	)
}

// gitCLI runs the real git in dir and returns its trimmed stdout.
func gitCLI(t testing.TB, dir string, args ...string) string {
	t.Helper()
	out, err := gitTry(t, dir, args...)
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func gitTry(t testing.TB, dir string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = gitEnv(t)
	out, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out) + string(ee.Stderr), err
	}
	return strings.TrimSpace(string(out)), err
}

// newExampleRepo copies examples/intent into a temp dir, makes it a git
// repository on main with one commit, and returns its path.
func newExampleRepo(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "intent")
	if err := os.CopyFS(dir, os.DirFS(examplesDir)); err != nil {
		t.Fatal(err)
	}
	gitCLI(t, dir, "init", "-q", "-b", "main")
	gitCLI(t, dir, "add", "-A")
	gitCLI(t, dir, "commit", "-q", "-m", "Initial intent")
	return dir
}

func openRepo(t testing.TB, dir string, mod func(*Options)) *Repo {
	t.Helper()
	opts := Options{RoundID: "2025-11", AuthorName: "mcp-patch bot", AuthorEmail: "bot@example.com",
		Now: func() time.Time { return fixedNow }}
	if mod != nil {
		mod(&opts)
	}
	r, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// repoState is what a refused write must leave unchanged.
type repoState struct {
	Status, Head, Branch, Branches, Index string
}

func stateOf(t testing.TB, dir string) repoState {
	t.Helper()
	return repoState{
		Status:   gitCLI(t, dir, "status", "--porcelain=v1", "--untracked-files=all"),
		Head:     gitCLI(t, dir, "rev-parse", "HEAD"),
		Branch:   gitCLI(t, dir, "symbolic-ref", "-q", "HEAD"),
		Branches: gitCLI(t, dir, "for-each-ref", "--format=%(refname) %(objectname)", "refs/heads"),
		Index:    gitCLI(t, dir, "ls-files", "-s"),
	}
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
