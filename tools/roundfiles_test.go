package tools

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-patch/mcp-patch/config"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/service"
)

// TestSymlinkedAuditLogRefused: rounds/<id>/audit.jsonl replaced by a link
// to a file outside the repository. Every call on the round is refused
// with the reason, and the link's target is neither read into the record
// nor written (the journal used to take its content for a torn line and
// truncate it).
func TestSymlinkedAuditLogRefused(t *testing.T) {
	now := time.Date(2026, 11, 29, 15, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	repo := t.TempDir()
	anchors := filepath.Join(t.TempDir(), "journals")
	book := service.NewRoundBook(repo, anchors, clock)
	j, err := book.Journal("2026-11", true)
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
	book.Close()

	outside := filepath.Join(t.TempDir(), "secrets.txt")
	if err := os.WriteFile(outside, []byte("not an audit log\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	audit := filepath.Join(repo, "rounds", "2026-11", round.AuditFile)
	if err := os.Remove(audit); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, audit); err != nil {
		t.Fatal(err)
	}

	c := config.DefaultConfig()
	c.StateDir = t.TempDir()
	book = service.NewRoundBook(repo, anchors, clock)
	defer book.Close()
	d := &Deps{Config: &c, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Mode: ModeNormal, Now: clock, Book: book}
	d.Audit = d.RecordAudit
	reg := &Registry{}
	reg.Add(RecordDecision())
	cs := connect(t, reg, d, nil)
	res, m := call(t, cs, "record_decision", map[string]any{"decision": "abort", "reason": "testing"})
	if !res.IsError || m["status"] != string(StatusRefused) {
		t.Fatalf("call on a round with a linked audit log: %v", m)
	}
	if reasons := strings.Join(asStrings(m["reasons"]), " "); !strings.Contains(reasons, "audit.jsonl is a symbolic link") {
		t.Errorf("the refusal does not name the link: %s", reasons)
	}
	if b, _ := os.ReadFile(outside); string(b) != "not an audit log\n" {
		t.Errorf("the link's target changed: %q", b)
	}
	if fi, err := os.Lstat(audit); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link itself was replaced: %v", err)
	}
}
