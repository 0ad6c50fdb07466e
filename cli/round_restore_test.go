package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/service"
)

// mcp-patch round restore writes a tampered journal back from the
// server's anchor, so that the round opens again as the server wrote it;
// a journal that already is what the server wrote is left as it is, and a
// round id that is not one is a usage error that touches nothing.
func TestRoundRestoreWritesTheJournalBackFromTheAnchor(t *testing.T) {
	repo, state := t.TempDir(), t.TempDir()
	dir := filepath.Join(repo, "rounds", "2026-11")
	j, err := round.Open(dir, round.WithAnchor(service.AnchorDir(state)))
	if err != nil {
		t.Fatal(err)
	}
	order, err := round.PlanOrder([]round.NodeInfo{{Name: "cp-1", ControlPlane: true}}, round.Placement{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Plan(order, time.Hour, round.Meta{}); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	live := filepath.Join(dir, round.JournalFile)
	written, err := os.ReadFile(live)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(live, []byte(strings.Replace(string(written), `"cp-1"`, `"cp-9"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	base := []string{"--intent-repo", repo, "--state-dir", state}

	if code, _, stderr := run(t, "", nil, append([]string{"round", "restore", "--round", "../x"}, base...)...); code != ExitUsage {
		t.Fatalf("restore of a round id that is not one: exit %d (%s)", code, stderr)
	}
	code, stdout, stderr := run(t, "", nil, append([]string{"round", "restore", "--round", "2026-11"}, base...)...)
	if code != ExitOK || !strings.Contains(stdout, "wrote back journal.jsonl from the anchor") {
		t.Fatalf("restore: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if now, err := os.ReadFile(live); err != nil || string(now) != string(written) {
		t.Fatalf("the journal after the restore is not what the server wrote (%v)", err)
	}
	code, stdout, _ = run(t, "", nil, append([]string{"round", "restore", "--round", "2026-11"}, base...)...)
	if code != ExitOK || !strings.Contains(stdout, "already is what the server wrote") {
		t.Fatalf("restore again: exit %d, %q", code, stdout)
	}
	j, err = round.Open(dir, round.WithAnchor(service.AnchorDir(state)))
	if err != nil {
		t.Fatalf("open after the restore: %v", err)
	}
	j.Close()
}
