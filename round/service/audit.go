package service

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/mcp-patch/mcp-patch/config"
	"github.com/mcp-patch/mcp-patch/round"
)

var spillMu sync.Mutex

// RecordAudit writes a tool call's audit record into the open round's
// audit log (rounds/<id>/audit.jsonl, committed with the round), or, when
// no round is open, into audit.jsonl in the server's state directory. A
// read-only call's record always goes to the state directory: a read-only
// tool changes nothing in the intent repository, not even its audit log.
// A --read-only process writes nothing anywhere: its calls (all reads)
// are audited on the structured log instead.
func (d *Service) RecordAudit(ctx context.Context, rec AuditRecord) {
	decision := round.Allowed
	if rec.Status == "refused" || rec.Status == "approval_required" {
		decision = round.Refused
	}
	if d.Mode == config.ModeReadOnly {
		if d.Log == nil {
			return
		}
		d.Log.LogAttrs(ctx, slog.LevelInfo, "audit", slog.String("tool", rec.Tool), slog.String("kind", rec.Kind),
			slog.String("node", round.AuditText(rec.Node, nil, 253)), slog.String("args_digest", rec.ArgsDigest),
			slog.String("status", string(rec.Status)), slog.String("decision", string(decision)))
		return
	}
	if d.Book != nil && !d.Book.ReadOnly && rec.Kind != "read-only" && !rec.Follower {
		if id := d.Book.CurrentID(); id != "" {
			if j, err := d.Book.Journal(id, false); err == nil {
				if _, err := j.Audit(round.AuditEntry{Tool: rec.Tool, Node: rec.Node, Digest: rec.ArgsDigest, Args: rec.Args,
					ApprovalID: rec.ApprovalID, Decision: decision, Outcome: string(rec.Status),
					Reason: strings.Join(rec.Reasons, "; ")}); err == nil {
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
	// The spill keeps what the round's log keeps: no argument text beyond a
	// prefix, escaped, bounded; never written through a symbolic link.
	reasons := make([]string, len(rec.Reasons))
	for i, r := range rec.Reasons {
		reasons[i] = round.AuditText(r, rec.Args, round.MaxAuditText)
	}
	rec.Reasons = reasons
	rec.Node = round.AuditText(rec.Node, nil, 253)
	f, err := os.OpenFile(filepath.Join(d.Config.StateDir, "audit.jsonl"), os.O_APPEND|os.O_CREATE|os.O_WRONLY|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		d.Log.Warn("audit record lost", "err", err)
		return
	}
	defer f.Close()
	b, err := json.Marshal(rec)
	if err == nil {
		_, err = f.Write(append(b, '\n'))
	}
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		d.Log.Warn("audit record lost", "err", err)
	}
}
