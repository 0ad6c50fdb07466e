package intent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A round's commits on a large working copy write the index split, as
// git's core.splitIndex does: after each, real git reads the tree clean
// and the index as a whole index would say; git's own writes of the split
// index (an unrelated commit, a removal, a re-split) are read back; and a
// split file stays small while the index grows.
func TestCommitSplitIndex(t *testing.T) {
	ctx := context.Background()
	dir := newExampleRepo(t)
	for i := range 40 {
		writeFile(t, filepath.Join(dir, "rounds/2025-11/nodes", fmt.Sprintf("n%02d.json", i)), fmt.Sprintf("{\"n\":%d}\n", i))
	}
	gitCLI(t, dir, "add", "-A")
	gitCLI(t, dir, "commit", "-qm", "nodes")
	r := openRepo(t, dir, nil)
	r.splitMin = 16
	journal := "rounds/2025-11/journal.jsonl"
	gitDir := filepath.Join(dir, ".git")
	indexSize := func() int64 {
		fi, err := os.Stat(filepath.Join(gitDir, "index"))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	clean := func(when string) {
		t.Helper()
		if st := gitCLI(t, dir, "status", "--porcelain=v1", "--untracked-files=all"); st != "" {
			t.Fatalf("%s: git status:\n%s", when, st)
		}
		// The index says what HEAD says, path by path.
		tree := gitCLI(t, dir, "ls-tree", "-r", "--format=%(objectmode) %(objectname)\t%(path)", "HEAD")
		idx := gitCLI(t, dir, "ls-files", "--format=%(objectmode) %(objectname)\t%(path)")
		if diff := cmp.Diff(tree, idx); diff != "" {
			t.Fatalf("%s: index differs from HEAD (-tree +index):\n%s", when, diff)
		}
		repo, err := r.Git()
		if err != nil {
			t.Fatal(err)
		}
		wt, err := repo.Worktree()
		if err != nil {
			t.Fatal(err)
		}
		if st, err := wt.Status(); err != nil || !st.IsClean() {
			t.Fatalf("%s: go-git status through Repo.Git: %v, %v", when, st, err)
		}
	}
	var lines strings.Builder
	commit := func(paths ...string) {
		t.Helper()
		fmt.Fprintf(&lines, "{\"seq\":%d}\n", lines.Len())
		writeFile(t, filepath.Join(dir, journal), lines.String())
		if _, err := r.CommitFiles(ctx, "round 2025-11: call", append([]string{journal}, paths...)); err != nil {
			t.Fatal(err)
		}
	}

	commit()
	clean("first commit")
	shared, _ := filepath.Glob(filepath.Join(gitDir, "sharedindex.*"))
	if len(shared) != 1 {
		t.Fatalf("after the first commit: shared indexes %v, want one", shared)
	}
	small := indexSize()
	for i := range 20 {
		p := fmt.Sprintf("rounds/2025-11/nodes/n%02d.json", i)
		writeFile(t, filepath.Join(dir, p), fmt.Sprintf("{\"n\":%d,\"done\":true}\n", i))
		commit(p)
		clean("commit " + p)
	}
	// 21 entries replaced: the split file holds at most reshareAt of them
	// (the shared index is written again past that), never the others.
	n := strings.Count(gitCLI(t, dir, "ls-files"), "\n") + 1
	if got, most := indexSize(), small+int64(reshareAt(n)+1)*64; got > most {
		t.Errorf("split index of %d entries, 21 changed, is %d bytes, want at most %d (%d after one commit)", n, got, most, small)
	}

	// git commits something of its own: it writes the split index.
	writeFile(t, filepath.Join(dir, "notes.md"), "a person's note\n")
	gitCLI(t, dir, "add", "notes.md")
	gitCLI(t, dir, "commit", "-qm", "a note")
	commit()
	clean("after git's commit")
	// git removes files: the delete bitmap.
	gitCLI(t, dir, "rm", "-q", "rounds/2025-11/nodes/n30.json", "rounds/2025-11/nodes/n31.json")
	gitCLI(t, dir, "commit", "-qm", "two gone")
	commit()
	clean("after git's removal")
	// git splits afresh (its EWAH bitmaps, its shared index).
	gitCLI(t, dir, "update-index", "--split-index")
	commit("rounds/2025-11/nodes/n00.json")
	clean("after git's re-split")
	// Past reshareAt new entries, a new shared index; still clean.
	for i := range 40 {
		p := fmt.Sprintf("rounds/2025-11/window-signatures/n%02d.json", i)
		writeFile(t, filepath.Join(dir, p), "{}\n")
		commit(p)
	}
	clean("after 40 new files")
	if got := gitCLI(t, dir, "ls-files"); strings.Count(got, "window-signatures/") != 40 {
		t.Errorf("index lists %d window signatures, want 40", strings.Count(got, "window-signatures/"))
	}
	// git turns it off: the whole index git writes is read as before.
	gitCLI(t, dir, "update-index", "--no-split-index")
	commit()
	clean("after git's --no-split-index")
}

func TestEWAHRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		bits int
		set  []int
	}{
		{"empty", 0, nil},
		{"none set", 100, nil},
		{"first and last", 130, []int{0, 129}},
		{"a word", 64, []int{1, 5, 63}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := encodeEWAH(tc.bits, tc.set)
			got, n, err := decodeEWAH(append(b, 9, 9))
			if err != nil || n != len(b) {
				t.Fatalf("decode: %v, took %d of %d", err, n, len(b))
			}
			if diff := cmp.Diff(tc.set, got); diff != "" {
				t.Errorf("bits (-want +got):\n%s", diff)
			}
		})
	}
}
