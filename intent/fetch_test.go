package intent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const (
	fetchBranch  = "mcp-patch/round-2025-11"
	fetchJournal = "rounds/2025-11/journal.jsonl"
)

// sharedRemote is two servers' working copies of one intent repository,
// each cloned (on main) from the bare repository they share as origin.
type sharedRemote struct {
	bare, dirA, dirB string
	a, b             *Repo
}

// newSharedRemote seeds a bare repository with the example intent and
// clones it twice; url, when set, is the origin URL the copies use for it.
func newSharedRemote(t *testing.T, url func(bare string) string, mod func(*Options)) *sharedRemote {
	t.Helper()
	seed := newExampleRepo(t)
	s := &sharedRemote{bare: filepath.Join(t.TempDir(), "intent.git")}
	gitCLI(t, filepath.Dir(s.bare), "init", "-q", "--bare", s.bare)
	gitCLI(t, seed, "push", "-q", s.bare, "main")
	open := func(name string) (string, *Repo) {
		dir := filepath.Join(t.TempDir(), name)
		gitCLI(t, filepath.Dir(dir), "clone", "-q", "-b", "main", s.bare, dir)
		if url != nil {
			gitCLI(t, dir, "remote", "set-url", "origin", url(s.bare))
		}
		return dir, openRepo(t, dir, func(o *Options) {
			o.Remote = "origin"
			if mod != nil {
				mod(o)
			}
		})
	}
	s.dirA, s.a = open("server-a")
	s.dirB, s.b = open("server-b")
	return s
}

// commitJournal writes the round's journal in dir and commits it through
// r (which pushes when r has a remote).
func commitJournal(t *testing.T, r *Repo, dir, content string) Commit {
	t.Helper()
	writeFile(t, filepath.Join(dir, fetchJournal), content)
	c, err := r.CommitFiles(t.Context(), "round 2025-11: journal", []string{fetchJournal})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// fileOrAbsent is a file's content, or "<absent>".
func fileOrAbsent(t *testing.T, path string) string {
	t.Helper()
	if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
		return "<absent>"
	}
	return readFile(t, path)
}

// unpushed opens dir's working copy without a remote: its commits stay
// local.
func unpushed(t *testing.T, dir string) *Repo {
	return openRepo(t, dir, nil)
}

func TestFetchTakesOverWhatTheOtherServerPushed(t *testing.T) {
	ctx := t.Context()
	s := newSharedRemote(t, nil, nil)

	// A leads: it commits the journal and a node's plan, and pushes.
	writeFile(t, filepath.Join(s.dirA, "rounds/2025-11/nodes/gpu-01.json"), `{"node":"gpu-01"}`+"\n")
	writeFile(t, filepath.Join(s.dirA, fetchJournal), `{"seq":1,"step":"open"}`+"\n")
	cA, err := s.a.CommitFiles(ctx, "round 2025-11: open", []string{fetchJournal, "rounds/2025-11/nodes/gpu-01.json"})
	if err != nil {
		t.Fatal(err)
	}
	if !cA.Pushed {
		t.Fatalf("A's commit not pushed: %+v", cA)
	}

	// B takes over: its working copy (on main, no working branch yet)
	// comes up to what A pushed.
	res, err := s.b.Fetch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := FetchResult{Remote: "origin", URL: s.bare, Branch: fetchBranch, RemoteHash: cA.Hash, From: "", To: cA.Hash, Moved: true, SwitchedBranch: true}
	if diff := cmp.Diff(want, res); diff != "" {
		t.Errorf("B's fetch (-want +got):\n%s", diff)
	}
	assertOnCommit(t, s.dirB, cA.Hash)
	if got, want := readFile(t, filepath.Join(s.dirB, fetchJournal)), readFile(t, filepath.Join(s.dirA, fetchJournal)); got != want {
		t.Errorf("B's journal = %q, want A's %q", got, want)
	}

	// B leads: it appends to the journal, commits on top and pushes.
	cB := commitJournal(t, s.b, s.dirB, readFile(t, filepath.Join(s.dirB, fetchJournal))+`{"seq":2,"step":"drain"}`+"\n")
	if !cB.Pushed || cB.Parent != cA.Hash || cB.SwitchedBranch {
		t.Fatalf("B's commit: %+v", cB)
	}

	// A takes back over.
	res, err = s.a.Fetch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want = FetchResult{Remote: "origin", URL: s.bare, Branch: fetchBranch, RemoteHash: cB.Hash, From: cA.Hash, To: cB.Hash, Moved: true}
	if diff := cmp.Diff(want, res); diff != "" {
		t.Errorf("A's fetch (-want +got):\n%s", diff)
	}
	assertOnCommit(t, s.dirA, cB.Hash)
	if got, want := readFile(t, filepath.Join(s.dirA, fetchJournal)), readFile(t, filepath.Join(s.dirB, fetchJournal)); got != want {
		t.Errorf("A's journal = %q, want B's %q", got, want)
	}

	// A person removes the node's plan on the remote: A's copy loses the
	// file and its emptied folder.
	gitCLI(t, s.dirB, "rm", "-q", "rounds/2025-11/nodes/gpu-01.json")
	gitCLI(t, s.dirB, "commit", "-q", "-m", "drop gpu-01's plan")
	gitCLI(t, s.dirB, "push", "-q", "origin", fetchBranch)
	cPerson := gitCLI(t, s.dirB, "rev-parse", "HEAD")
	if res, err = s.a.Fetch(ctx); err != nil || !res.Moved || res.To != cPerson {
		t.Fatalf("A's fetch of the removal: %+v, %v", res, err)
	}
	assertOnCommit(t, s.dirA, cPerson)
	if _, err := os.Lstat(filepath.Join(s.dirA, "rounds/2025-11/nodes")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the emptied folder is left: %v", err)
	}

	// Nothing new: nothing moves.
	res, err = s.a.Fetch(ctx)
	want = FetchResult{Remote: "origin", URL: s.bare, Branch: fetchBranch, RemoteHash: cPerson, From: cPerson, To: cPerson}
	if diff := cmp.Diff(want, res); err != nil || diff != "" {
		t.Errorf("A's second fetch: %v (-want +got):\n%s", err, diff)
	}
}

// assertOnCommit checks, with the real git, that dir's working copy is on
// the working branch at hash and clean: the work tree and the index are
// the commit's.
func assertOnCommit(t *testing.T, dir, hash string) {
	t.Helper()
	if got := gitCLI(t, dir, "symbolic-ref", "HEAD"); got != "refs/heads/"+fetchBranch {
		t.Errorf("HEAD is %s, want the working branch", got)
	}
	if got := gitCLI(t, dir, "rev-parse", "HEAD"); got != hash {
		t.Errorf("HEAD at %s, want %s", got, hash)
	}
	if got := gitCLI(t, dir, "status", "--porcelain=v1", "--untracked-files=all"); got != "" {
		t.Errorf("git status after the fetch:\n%s", got)
	}
	if got := gitCLI(t, dir, "diff", "--cached", "--name-only", "HEAD"); got != "" {
		t.Errorf("the index differs from HEAD in:\n%s", got)
	}
}

func TestFetchMovesNothing(t *testing.T) {
	tests := []struct {
		name string
		// setup prepares the copies and answers the remote branch's
		// commit ("" when it has none).
		setup func(t *testing.T, s *sharedRemote) string
	}{
		{"the remote has no working branch", func(t *testing.T, s *sharedRemote) string {
			return ""
		}},
		{"the working branch is the remote's", func(t *testing.T, s *sharedRemote) string {
			c := commitJournal(t, s.a, s.dirA, "a\n")
			if _, err := s.b.Fetch(t.Context()); err != nil {
				t.Fatal(err)
			}
			return c.Hash
		}},
		{"the working branch is ahead of the remote's", func(t *testing.T, s *sharedRemote) string {
			c := commitJournal(t, s.a, s.dirA, "a\n")
			if _, err := s.b.Fetch(t.Context()); err != nil {
				t.Fatal(err)
			}
			commitJournal(t, unpushed(t, s.dirB), s.dirB, "a\nb\n")
			return c.Hash
		}},
		{"the working branch is ahead and not checked out", func(t *testing.T, s *sharedRemote) string {
			c := commitJournal(t, s.a, s.dirA, "a\n")
			if _, err := s.b.Fetch(t.Context()); err != nil {
				t.Fatal(err)
			}
			commitJournal(t, unpushed(t, s.dirB), s.dirB, "a\nb\n")
			gitCLI(t, s.dirB, "checkout", "-q", "main")
			return c.Hash
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSharedRemote(t, nil, nil)
			remote := tt.setup(t, s)
			before, journal := stateOf(t, s.dirB), fileOrAbsent(t, filepath.Join(s.dirB, fetchJournal))
			local, _ := gitTry(t, s.dirB, "rev-parse", "--verify", "-q", "refs/heads/"+fetchBranch)

			res, err := s.b.Fetch(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			want := FetchResult{Remote: "origin", URL: s.bare, Branch: fetchBranch, RemoteHash: remote, From: local, To: local}
			if diff := cmp.Diff(want, res); diff != "" {
				t.Errorf("fetch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, stateOf(t, s.dirB)); diff != "" {
				t.Errorf("the working copy changed (-before +after):\n%s", diff)
			}
			if got := fileOrAbsent(t, filepath.Join(s.dirB, fetchJournal)); got != journal {
				t.Errorf("journal = %q, want %q", got, journal)
			}
		})
	}
}

func TestFetchRefusesDivergedBranches(t *testing.T) {
	s := newSharedRemote(t, nil, nil)
	commitJournal(t, s.a, s.dirA, "a1\n")
	if _, err := s.b.Fetch(t.Context()); err != nil {
		t.Fatal(err)
	}
	theirs := commitJournal(t, s.a, s.dirA, "a1\na2\n")
	ours := commitJournal(t, unpushed(t, s.dirB), s.dirB, "a1\nb2\n")
	beforeA, beforeB := stateOf(t, s.dirA), stateOf(t, s.dirB)

	res, err := s.b.Fetch(t.Context())
	if !errors.Is(err, ErrDiverged) {
		t.Fatalf("fetch: %+v, %v; want ErrDiverged", res, err)
	}
	for _, h := range []string{ours.Hash, theirs.Hash} {
		if !strings.Contains(err.Error(), h) {
			t.Errorf("the error does not name %s: %v", h, err)
		}
	}
	if res.Moved || res.To != ours.Hash {
		t.Errorf("result: %+v", res)
	}
	if diff := cmp.Diff(beforeB, stateOf(t, s.dirB)); diff != "" {
		t.Errorf("B changed (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(beforeA, stateOf(t, s.dirA)); diff != "" {
		t.Errorf("A changed (-before +after):\n%s", diff)
	}
	if got := readFile(t, filepath.Join(s.dirB, fetchJournal)); got != "a1\nb2\n" {
		t.Errorf("B's journal = %q", got)
	}
	if got := gitCLI(t, s.bare, "rev-parse", "refs/heads/"+fetchBranch); got != theirs.Hash {
		t.Errorf("the remote moved to %s", got)
	}
}

// A server that begins a term as leader takes the remote's branch even
// where its own has diverged (or is ahead): its own commits are kept
// under refs/mcp-patch/superseded/ and never pushed.
func TestTakeOverLetsTheRemoteWin(t *testing.T) {
	for _, diverged := range []bool{true, false} {
		s := newSharedRemote(t, nil, nil)
		commitJournal(t, s.a, s.dirA, "a1\n")
		if _, err := s.b.Fetch(t.Context()); err != nil {
			t.Fatal(err)
		}
		theirs := commitJournal(t, s.a, s.dirA, "a1\na2\n")
		if !diverged {
			// B's branch is A's, plus its own commit.
			if _, err := s.b.Fetch(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		ours := commitJournal(t, unpushed(t, s.dirB), s.dirB, "a1\nb2\n")
		res, err := s.b.TakeOver(t.Context())
		if err != nil {
			t.Fatalf("diverged %v: %v", diverged, err)
		}
		if !res.Moved || res.To != theirs.Hash || res.From != ours.Hash || res.Superseded == "" {
			t.Errorf("diverged %v: result %+v", diverged, res)
		}
		if got := readFile(t, filepath.Join(s.dirB, fetchJournal)); got != readFile(t, filepath.Join(s.dirA, fetchJournal)) {
			t.Errorf("diverged %v: B's journal = %q", diverged, got)
		}
		if got := gitCLI(t, s.dirB, "rev-parse", res.Superseded); got != ours.Hash {
			t.Errorf("diverged %v: %s keeps %s, want %s", diverged, res.Superseded, got, ours.Hash)
		}
		if got := gitCLI(t, s.dirB, "status", "--porcelain"); got != "" {
			t.Errorf("diverged %v: B's working copy is not clean: %q", diverged, got)
		}
	}
}

func TestFetchRefusesToOverwriteUncommittedChanges(t *testing.T) {
	journal := func(s *sharedRemote) string { return filepath.Join(s.dirB, fetchJournal) }
	tests := []struct {
		name string
		// behind: B fetched A's first commit before A's second.
		behind bool
		dirty  func(t *testing.T, s *sharedRemote)
		want   string
	}{
		{"edited tracked file", true, func(t *testing.T, s *sharedRemote) {
			writeFile(t, journal(s), "a1\nnot committed\n")
		}, "uncommitted edits"},
		{"staged tracked file", true, func(t *testing.T, s *sharedRemote) {
			writeFile(t, journal(s), "a1\nstaged\n")
			gitCLI(t, s.dirB, "add", fetchJournal)
		}, "staged"},
		{"deleted tracked file", true, func(t *testing.T, s *sharedRemote) {
			if err := os.Remove(journal(s)); err != nil {
				t.Fatal(err)
			}
		}, "deleted"},
		{"untracked file in the way", false, func(t *testing.T, s *sharedRemote) {
			writeFile(t, journal(s), "b's own journal\n")
		}, "untracked"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSharedRemote(t, nil, nil)
			if tt.behind {
				commitJournal(t, s.a, s.dirA, "a1\n")
				if _, err := s.b.Fetch(t.Context()); err != nil {
					t.Fatal(err)
				}
			}
			commitJournal(t, s.a, s.dirA, "a1\na2\n")
			tt.dirty(t, s)
			before, bytes := stateOf(t, s.dirB), fileOrAbsent(t, journal(s))

			res, err := s.b.Fetch(t.Context())
			if !errors.Is(err, ErrDirty) || !strings.Contains(err.Error(), fetchJournal) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("fetch: %+v, %v; want ErrDirty naming %s (%s)", res, err, fetchJournal, tt.want)
			}
			if res.Moved {
				t.Errorf("result: %+v", res)
			}
			if diff := cmp.Diff(before, stateOf(t, s.dirB)); diff != "" {
				t.Errorf("the working copy changed (-before +after):\n%s", diff)
			}
			if got := fileOrAbsent(t, journal(s)); got != bytes {
				t.Errorf("journal = %q, want %q", got, bytes)
			}
		})
	}
}

func TestFetchKeepsChangesItDoesNotOverwrite(t *testing.T) {
	s := newSharedRemote(t, nil, nil)
	c := commitJournal(t, s.a, s.dirA, "a1\n")
	// An edit to a file the fast-forward does not touch, and an untracked
	// file already holding the remote's bytes: neither is lost.
	lessons := filepath.Join(s.dirB, "os-layer", DocLessons)
	edited := readFile(t, lessons) + "\nA person's note, not committed yet.\n"
	writeFile(t, lessons, edited)
	writeFile(t, filepath.Join(s.dirB, fetchJournal), "a1\n")

	res, err := s.b.Fetch(t.Context())
	if err != nil || !res.Moved || res.To != c.Hash {
		t.Fatalf("fetch: %+v, %v", res, err)
	}
	if got := gitCLI(t, s.dirB, "status", "--porcelain=v1", "--untracked-files=all"); got != "M os-layer/lessons.md" {
		t.Errorf("git status:\n%s", got)
	}
	if got := readFile(t, lessons); got != edited {
		t.Errorf("the person's edit is lost: %q", got)
	}
}

func TestFetchOverSSH(t *testing.T) {
	srv := startSSHD(t)
	knownDir := t.TempDir()
	good := filepath.Join(knownDir, "known_hosts")
	writeFile(t, good, fmt.Sprintf("[127.0.0.1]:%d %s\n", srv.port, srv.hostPublicKey))
	wrong := filepath.Join(knownDir, "known_hosts_wrong")
	writeFile(t, wrong, fmt.Sprintf("[127.0.0.1]:%d %s\n", srv.port, keygen(t, filepath.Join(knownDir, "impostor"))))

	tests := []struct {
		name       string
		knownHosts string
		wantErr    string
	}{
		{"host key matches known_hosts", good, ""},
		{"host key differs from known_hosts", wrong, "key mismatch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url := func(bare string) string { return fmt.Sprintf("ssh://%s@127.0.0.1:%d%s", srv.user, srv.port, bare) }
			s := newSharedRemote(t, url, func(o *Options) {
				o.SSH = SSHOptions{KnownHosts: []string{good}, KeyFiles: []string{srv.clientKey}, DialTimeout: 5 * time.Second, PushTimeout: 30 * time.Second}
			})
			c := commitJournal(t, s.a, s.dirA, `{"seq":1,"step":"open"}`+"\n")
			if !c.Pushed {
				t.Fatalf("A's commit not pushed over ssh: %+v", c)
			}
			b := openRepo(t, s.dirB, func(o *Options) {
				o.Remote = "origin"
				o.SSH = SSHOptions{KnownHosts: []string{tt.knownHosts}, KeyFiles: []string{srv.clientKey}, DialTimeout: 5 * time.Second, PushTimeout: 30 * time.Second}
			})
			before := stateOf(t, s.dirB)

			res, err := b.Fetch(t.Context())
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || res.Moved {
					t.Fatalf("fetch: %+v, %v; want an error containing %q", res, err, tt.wantErr)
				}
				if diff := cmp.Diff(before, stateOf(t, s.dirB)); diff != "" {
					t.Errorf("the working copy changed (-before +after):\n%s", diff)
				}
				return
			}
			if err != nil || !res.Moved || res.To != c.Hash || res.URL != url(s.bare) {
				t.Fatalf("fetch: %+v, %v", res, err)
			}
			assertOnCommit(t, s.dirB, c.Hash)
			if got := readFile(t, filepath.Join(s.dirB, fetchJournal)); got != `{"seq":1,"step":"open"}`+"\n" {
				t.Errorf("B's journal = %q", got)
			}
		})
	}
	if !strings.Contains(srv.log.String(), "Accepted publickey for "+srv.user) {
		t.Errorf("sshd log shows no public-key login:\n%s", srv.log)
	}
}

// What a server wrote into the round's folder after its last commit is
// kept aside and the folder put back to its commit, so that TakeOver
// brings the remote's record; files outside the folder are left alone.
func TestSetAsideKeepsWhatWasNotCommitted(t *testing.T) {
	s := newSharedRemote(t, nil, nil)
	commitJournal(t, s.a, s.dirA, "a1\n")
	writeFile(t, filepath.Join(s.dirA, fetchJournal), "a1\na2-unpublished\n")
	writeFile(t, filepath.Join(s.dirA, "rounds/2025-11/nodes/n-1.json"), "{}\n")
	writeFile(t, filepath.Join(s.dirA, "README.md"), "a person's edit\n")
	keep := filepath.Join(t.TempDir(), "kept")
	got, err := s.a.SetAside("rounds/2025-11", keep)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{fetchJournal, "rounds/2025-11/nodes/n-1.json"}; !slices.Equal(got, want) {
		t.Errorf("set aside %v, want %v", got, want)
	}
	if b := readFile(t, filepath.Join(s.dirA, fetchJournal)); b != "a1\n" {
		t.Errorf("the journal is %q after SetAside", b)
	}
	if b := readFile(t, filepath.Join(keep, fetchJournal)); b != "a1\na2-unpublished\n" {
		t.Errorf("kept journal %q", b)
	}
	if _, err := os.Stat(filepath.Join(s.dirA, "rounds/2025-11/nodes/n-1.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the uncommitted node file is still there: %v", err)
	}
	if b := readFile(t, filepath.Join(s.dirA, "README.md")); b != "a person's edit\n" {
		t.Errorf("a file outside the folder changed: %q", b)
	}
	// A staged change is not the server's: refused.
	writeFile(t, filepath.Join(s.dirA, fetchJournal), "staged\n")
	gitCLI(t, s.dirA, "add", fetchJournal)
	if _, err := s.a.SetAside("rounds/2025-11", keep); !errors.Is(err, ErrDirty) {
		t.Errorf("staged: %v, want ErrDirty", err)
	}
}
