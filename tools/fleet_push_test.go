package tools

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-patch/mcp-patch/config"
)

// git.push_required: each call's record of the round is on the intent
// remote when it answers; with the remote gone, the call's answer says
// its record is not pushed, and the next destructive step is refused
// with nothing done on the host; once the remote is back, the step pushes
// first and runs.
func TestNothingDestructiveRunsPastAnUnpushedRecord(t *testing.T) {
	f := newFleet(t, func(c *config.Config) { c.Git.Remote, c.Git.PushRequired = "origin", true })
	bare := filepath.Join(t.TempDir(), "intent.git")
	gitRun(t, filepath.Dir(bare), "init", "-q", "--bare", bare)
	gitRun(t, f.repo, "remote", "add", "origin", bare)
	f.planned()
	f.preflight("cp-1")
	if _, res := f.approve("drain_node", map[string]any{"node": "cp-1"}); res.Status != StatusOK {
		t.Fatalf("drain: %s %v", res.Status, res.Reasons)
	}
	branch := strings.TrimSpace(gitRun(t, f.repo, "rev-parse", "--abbrev-ref", "HEAD"))
	local := strings.TrimSpace(gitRun(t, f.repo, "rev-parse", branch))
	if remote := strings.TrimSpace(gitRun(t, bare, "rev-parse", branch)); remote != local {
		t.Fatalf("after the drain answered the remote has %s, the working copy %s", remote, local)
	}

	// The remote goes away.
	gone := bare + ".gone"
	if err := os.Rename(bare, gone); err != nil {
		t.Fatal(err)
	}
	_, res := f.call("install_updates", map[string]any{"node": "cp-1"})
	if res.Status != StatusRefused || !strings.Contains(reasons(res), "is not on the intent remote origin") || !strings.Contains(reasons(res), "nothing was executed") {
		t.Fatalf("install with the remote gone: %s %v", res.Status, res.Reasons)
	}
	for _, a := range f.host("cp-1").Actions {
		if strings.Contains(a.What, "install") {
			t.Fatalf("the host saw %v with the record unpushed", f.host("cp-1").Actions)
		}
	}
	// A call that records something says its record is not pushed.
	_, res = f.call("record_lesson", map[string]any{"component": "os-layer", "kind": "lesson", "text": "install waited for the intent remote"})
	if !strings.Contains(reasons(res), "is not on the intent remote origin") || !strings.Contains(reasons(res), "no destructive step runs until it is") {
		t.Errorf("a commit that could not be pushed does not say so: %s %v", res.Status, res.Reasons)
	}

	// Back: the step pushes first, then runs under its signature.
	if err := os.Rename(gone, bare); err != nil {
		t.Fatal(err)
	}
	if _, res := f.approve("install_updates", map[string]any{"node": "cp-1"}); res.Status != StatusInProgress {
		t.Fatalf("install with the remote back: %s %v", res.Status, res.Reasons)
	}
	local = strings.TrimSpace(gitRun(t, f.repo, "rev-parse", branch))
	if remote := strings.TrimSpace(gitRun(t, bare, "rev-parse", branch)); remote != local {
		t.Fatalf("after install answered the remote has %s, the working copy %s", remote, local)
	}
}
