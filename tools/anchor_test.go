package tools

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-patch/mcp-patch/round"
)

// A journal rewritten while the server was down is acted on by no tool:
// round_status names the record that differs instead of showing the
// forged state, a write tool and a destructive tool refuse, and the round
// still counts as open (a forged close does not hide it).
func TestForgedJournalIsNoRound(t *testing.T) {
	f := newFleet(t)
	f.signInProcess()
	f.planned()
	f.preflight("cp-1")
	cluster, hosts := f.d.Cluster, f.d.Hosts
	f.stop()
	// The agent marks the last record another kind, keeping its number.
	live := filepath.Join(f.repo, "rounds", fRound, round.JournalFile)
	b, err := os.ReadFile(live)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(strings.TrimSuffix(string(b), "\n"), "\n")
	last := lines[len(lines)-1]
	lines[len(lines)-1] = strings.Replace(last, `"kind":"`+kindOf(t, last)+`"`, `"kind":"lesson"`, 1) + "\n"
	if err := os.WriteFile(live, []byte(strings.Join(lines, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	d := f.build()
	d.Cluster, d.Hosts = cluster, hosts
	_, res := f.call("round_status", map[string]any{"round": fRound})
	if res.Status != StatusRefused || !strings.Contains(strings.Join(res.Reasons, " "), "what the server wrote") {
		t.Fatalf("round_status of a forged journal: %s %v", res.Status, res.Reasons)
	}
	ids, err := f.d.Book.OpenRounds()
	if err != nil || len(ids) != 1 || ids[0] != fRound {
		t.Fatalf("open rounds with a forged journal: %v %v, want %s listed", ids, err, fRound)
	}
	for _, tool := range []string{"drain_node", "record_verification"} {
		_, res := f.call(tool, map[string]any{"node": "cp-1"})
		if res.Status != StatusRefused || !strings.Contains(strings.Join(res.Reasons, " "), "does not reproduce its anchor") {
			t.Errorf("%s on a forged journal: %s %v", tool, res.Status, res.Reasons)
		}
	}
	if f.node("cp-1").Spec.Unschedulable {
		t.Fatal("cp-1 was cordoned under a forged journal")
	}
}

func kindOf(t *testing.T, line string) string {
	t.Helper()
	_, rest, ok := strings.Cut(line, `"kind":"`)
	if !ok {
		t.Fatalf("no kind in %s", line)
	}
	k, _, _ := strings.Cut(rest, `"`)
	return k
}
