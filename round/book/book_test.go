package book

import (
	"os"
	"path/filepath"
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
