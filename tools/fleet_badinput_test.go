package tools

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/mcp-patch/mcp-patch/round"
)

// Every tool that names a node refuses a name that is not one, and
// changes nothing: the journal, the hosts and the cluster stay as they
// were.
func TestFleetBadNodeNameRefusedEverywhere(t *testing.T) {
	f := newFleet(t)
	f.planned()
	journal := filepath.Join(f.repo, "rounds", fRound, round.JournalFile)
	before, _ := os.ReadFile(journal)
	n := 0
	for _, tl := range Builtin().All() {
		if _, ok := tl.InputSchema().Properties["node"]; !ok {
			continue
		}
		n++
		_, res := f.call(tl.Spec().Name, map[string]any{"node": "../etc/passwd"})
		if res.Status != StatusRefused {
			t.Errorf("%s with a bad node name: %s %v", tl.Spec().Name, res.Status, res.Reasons)
		}
	}
	if n < 10 {
		t.Fatalf("only %d tools take a node", n)
	}
	if after, _ := os.ReadFile(journal); !bytes.Equal(before, after) {
		t.Fatal("a refused call wrote the journal")
	}
	for _, h := range []string{"cp-1", "gpu-1", "gpu-2"} {
		if len(f.host(h).Actions) != 0 {
			t.Fatalf("%s acted on: %v", h, f.host(h).Actions)
		}
	}
}
