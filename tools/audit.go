package tools

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/mcp-patch/mcp-patch/round"
)

var spillMu sync.Mutex

// RecordAudit writes a tool call's audit record into the open round's
// audit log (rounds/<id>/audit.jsonl, committed with the round), or, when
// no round is open, into audit.jsonl in the server's state directory.
func (d *Deps) RecordAudit(ctx context.Context, rec AuditRecord) {
	decision := round.Allowed
	if rec.Status == StatusRefused || rec.Status == StatusApprovalRequired {
		decision = round.Refused
	}
	if d.Book != nil {
		if id := d.Book.CurrentID(); id != "" {
			if j, err := d.Book.Journal(id, false); err == nil {
				if _, err := j.Audit(round.AuditEntry{Tool: rec.Tool, Node: rec.Node, Digest: rec.ArgsDigest,
					ApprovalID: rec.ApprovalID, Decision: decision, Outcome: string(rec.Status),
					Reason: clipText(strings.Join(rec.Reasons, "; "), 2000)}); err == nil {
					return
				} else {
					d.Log.Warn("audit record not written to the round", "err", err)
				}
			}
		}
	}
	if d.Config == nil || d.Config.StateDir == "" {
		return
	}
	spillMu.Lock()
	defer spillMu.Unlock()
	if err := os.MkdirAll(d.Config.StateDir, 0o700); err != nil {
		d.Log.Warn("audit record lost", "err", err)
		return
	}
	f, err := os.OpenFile(filepath.Join(d.Config.StateDir, "audit.jsonl"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		d.Log.Warn("audit record lost", "err", err)
		return
	}
	defer f.Close()
	b, _ := json.Marshal(rec)
	if _, err := f.Write(append(b, '\n')); err == nil {
		_ = f.Sync()
	}
}
