package book

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestRoundFilesNameWhatChangedSinceTheLastCommit: a book's first commit
// of a round names every record file; after it only the round's top-level
// files, the node files written since and the segments sealed since; a
// node file written again between Files and Committed stays to be named;
// a book opened again (a server started again) names everything once more.
func TestRoundFilesNameWhatChangedSinceTheLastCommit(t *testing.T) {
	root := t.TempDir()
	const id = "2026-01"
	dir := filepath.Join(root, "rounds", id)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	write := func(name string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte("{}\n"), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	write("journal.jsonl")
	write("journal-000001.jsonl")
	clock := func() time.Time { return time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC) }
	anchors := filepath.Join(t.TempDir(), "journals")
	b := New(root, anchors, clock)
	for _, n := range []string{"a", "b", "c"} {
		if err := b.WriteNodeFile(id, NodePlansDir, n, []byte("{}\n")); err != nil {
			t.Fatal(err)
		}
	}
	p := func(f string) string { return "rounds/" + id + "/" + f }
	top := []string{p("journal.jsonl")}
	all := append(append([]string{}, top...), p("nodes/a.json"), p("nodes/b.json"), p("nodes/c.json"), p("journal-000001.jsonl"))
	check := func(what string, f RoundFiles, files, sealed []string) {
		t.Helper()
		if diff := cmp.Diff(files, f.Files); diff != "" {
			t.Errorf("%s: files (-want +got):\n%s", what, diff)
		}
		if diff := cmp.Diff(sealed, f.Sealed); diff != "" {
			t.Errorf("%s: sealed (-want +got):\n%s", what, diff)
		}
	}
	files := func() RoundFiles {
		t.Helper()
		f, err := b.Files(id)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}

	first := files()
	check("before any commit", first, all, []string{p("journal-000001.jsonl")})
	// Not committed (the commit failed): the next call names them all again.
	check("after a failed commit", files(), all, []string{p("journal-000001.jsonl")})
	b.Committed(id, first)
	check("after the commit", files(), top, nil)

	if err := b.WriteNodeFile(id, WindowSignaturesDir, "b", []byte("{}\n")); err != nil {
		t.Fatal(err)
	}
	if err := b.WriteNodeFile(id, NodePlansDir, "b", []byte(`{"b":1}`+"\n")); err != nil {
		t.Fatal(err)
	}
	write("journal-000002.jsonl")
	write("audit-000001.jsonl")
	second := files()
	check("a window later", second, append(append([]string{}, top...), p("nodes/b.json"), p("window-signatures/b.json"), p("journal-000002.jsonl"), p("audit-000001.jsonl")),
		[]string{p("journal-000002.jsonl"), p("audit-000001.jsonl")})
	// b's plan is written again while the commit of second runs.
	if err := b.WriteNodeFile(id, NodePlansDir, "b", []byte(`{"b":2}`+"\n")); err != nil {
		t.Fatal(err)
	}
	b.Committed(id, second)
	check("b written during the commit", files(), append(append([]string{}, top...), p("nodes/b.json")), nil)

	again := New(root, anchors, clock)
	f, err := again.Files(id)
	if err != nil {
		t.Fatal(err)
	}
	check("a book opened again", f, append(append([]string{}, top...), p("nodes/a.json"), p("nodes/b.json"), p("nodes/c.json"), p("window-signatures/b.json"),
		p("journal-000001.jsonl"), p("journal-000002.jsonl"), p("audit-000001.jsonl")),
		[]string{p("journal-000001.jsonl"), p("journal-000002.jsonl"), p("audit-000001.jsonl")})
}

// TestOpenRoundsLeavesOutForeignRounds: staging's open round, merged into
// production's working copy, is not anchored in production's state
// directory, so without Foreign it is listed as open (and production could
// plan nothing); with Foreign saying it is another environment's, it is
// left out and production's own round is the current one.
func TestOpenRoundsLeavesOutForeignRounds(t *testing.T) {
	root := t.TempDir()
	clock := func() time.Time { return time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC) }
	staging := New(root, filepath.Join(t.TempDir(), "journals"), clock)
	t.Cleanup(func() {
		if err := staging.Close(); err != nil {
			t.Error(err)
		}
	})
	if _, err := staging.Journal("staging-2026-01", true); err != nil {
		t.Fatal(err)
	}
	production := New(root, filepath.Join(t.TempDir(), "journals"), clock)
	t.Cleanup(func() {
		if err := production.Close(); err != nil {
			t.Error(err)
		}
	})
	if _, err := production.Journal("production-2026-01", true); err != nil {
		t.Fatal(err)
	}
	ids, err := production.OpenRounds()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"production-2026-01", "staging-2026-01"}, ids); diff != "" {
		t.Errorf("without Foreign (-want +got):\n%s", diff)
	}
	production.Foreign = func(id string) bool { return !strings.HasPrefix(id, "production-") }
	if ids, err = production.OpenRounds(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"production-2026-01"}, ids); diff != "" {
		t.Errorf("with Foreign (-want +got):\n%s", diff)
	}
	if got := production.CurrentID(); got != "production-2026-01" {
		t.Errorf("current round %q, want production-2026-01", got)
	}
}
