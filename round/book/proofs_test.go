package book

import (
	"os"
	"strings"
	"testing"
)

// The proof file is decoded once and then only what was appended since;
// a file that is not the one decoded (rewritten in place, replaced,
// shortened) is decoded again from the start, and damage is an error
// whichever way it is read.
func TestProofsDecodeOnlyWhatWasAppended(t *testing.T) {
	s := Proofs{Dir: ProofsDir(t.TempDir())}
	const round = "2026-12"
	path, err := s.File(round)
	if err != nil {
		t.Fatal(err)
	}
	ids := func() string {
		t.Helper()
		ps, err := s.All(round)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, p := range ps {
			out = append(out, p.ApprovalID)
		}
		return strings.Join(out, ",")
	}
	if got := ids(); got != "" {
		t.Fatalf("no file: %q", got)
	}
	keep := func(id string) {
		t.Helper()
		if err := s.Keep(round, Proof{Tool: "drain_node", Node: "gpu-1", ApprovalID: id, Approval: "text " + id}); err != nil {
			t.Fatal(err)
		}
	}
	keep("a1")
	keep("a2")
	if got := ids(); got != "a1,a2" {
		t.Fatalf("after two: %q", got)
	}
	keep("a3")
	if got := ids(); got != "a1,a2,a3" {
		t.Fatalf("after a third: %q", got)
	}
	if ix := proofIndexes[path]; ix == nil || len(ix.proofs) != 3 {
		t.Fatalf("the decoded entries are not kept: %+v", ix)
	}

	// A torn append is left out until it is whole.
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	whole := len(b)
	if err := os.WriteFile(path, append(b, `{"tool":"drain_node","node":"gpu-1","approval_id":"a4"`...), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := ids(); got != "a1,a2,a3" {
		t.Fatalf("torn last line: %q", got)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`,"approval":"text a4"}` + "\n"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if got := ids(); got != "a1,a2,a3,a4" {
		t.Fatalf("the torn line completed: %q", got)
	}

	// Rewritten in place, same size: decoded again.
	b, err = os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	same := strings.Replace(string(b), `"a3"`, `"b3"`, 1)
	if err := os.WriteFile(path, []byte(same), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := ids(); got != "a1,a2,b3,a4" {
		t.Fatalf("rewritten in place: %q", got)
	}

	// Replaced by another file (another inode), shorter: decoded again.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b[:whole], 0o600); err != nil {
		t.Fatal(err)
	}
	if got := ids(); got != "a1,a2,a3" {
		t.Fatalf("replaced: %q", got)
	}

	// Damage in an appended line is an error, and so is it on a fresh read.
	f, err = os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("not json\n"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := s.All(round); err == nil || !strings.Contains(err.Error(), "line 4") {
			t.Fatalf("damaged line 4: %v", err)
		}
	}
}
