package tools

import (
	"os"
	"strings"
	"testing"

	"github.com/mcp-patch/mcp-patch/config"
)

// The proof file is decoded once and then only what was appended since;
// a file that is not the one decoded (rewritten in place, replaced,
// shortened) is decoded again from the start, and damage is an error
// whichever way it is read.
func TestProofsDecodeOnlyWhatWasAppended(t *testing.T) {
	d := &Deps{Config: &config.Config{StateDir: t.TempDir()}}
	const round = "2026-12"
	path, err := d.proofFile(round)
	if err != nil {
		t.Fatal(err)
	}
	ids := func() string {
		t.Helper()
		ps, err := d.proofs(round)
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
		if err := d.keepProof(round, proof{Tool: "drain_node", Node: "gpu-1", ApprovalID: id, Approval: "text " + id}); err != nil {
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
		if _, err := d.proofs(round); err == nil || !strings.Contains(err.Error(), "line 4") {
			t.Fatalf("damaged line 4: %v", err)
		}
	}
}

// The signed plan is decoded once per content of plan.json: the same bytes
// give the kept plan again, other bytes are decoded (and their digests
// checked) anew, and a plan edited by hand is refused whichever way it is
// read.
func TestSignedPlanDecodedOncePerContent(t *testing.T) {
	f := newFleet(t)
	f.signInProcess()
	f.planned()
	ctx := t.Context()
	first, _, err := f.d.signedPlan(ctx, fRound)
	if err != nil {
		t.Fatalf("signedPlan: %v", err)
	}
	again, _, err := f.d.signedPlan(ctx, fRound)
	if err != nil {
		t.Fatal(err)
	}
	if &first.Nodes[0] != &again.Nodes[0] {
		t.Error("the same plan.json bytes were decoded again")
	}
	b, err := f.d.Book.ReadFile(fRound, fleetPlanFile)
	if err != nil {
		t.Fatal(err)
	}
	// The same plan, other bytes (a trailing newline): decoded anew.
	if err := f.d.Book.WriteFile(fRound, fleetPlanFile, append(b, '\n')); err != nil {
		t.Fatal(err)
	}
	other, _, err := f.d.signedPlan(ctx, fRound)
	if err != nil {
		t.Fatal(err)
	}
	if &other.Nodes[0] == &first.Nodes[0] || other.Digest != first.Digest {
		t.Errorf("other bytes: shared %v, digest %s want %s", &other.Nodes[0] == &first.Nodes[0], other.Digest, first.Digest)
	}
	// Edited by hand: refused, the kept plan notwithstanding.
	edited := strings.Replace(string(b), first.Nodes[0].Node, first.Nodes[0].Node+"x", 1)
	if err := f.d.Book.WriteFile(fRound, fleetPlanFile, []byte(edited)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.d.signedPlan(ctx, fRound); err == nil {
		t.Error("a plan.json edited by hand was taken as the signed plan")
	}
}
