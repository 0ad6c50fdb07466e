package tools

import (
	"context"
	"fmt"
	"strings"

	"github.com/mcp-patch/mcp-patch/round/window"
)

// NodeIn is the input of tools that act on one node.
type NodeIn struct {
	Node string `json:"node"`
}

func clip(lines []string, max int) []string {
	if len(lines) <= max {
		return lines
	}
	return append(lines[:max:max], fmt.Sprintf("... and %d more", len(lines)-max))
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func deref(p *int) any {
	if p == nil {
		return "?"
	}
	return *p
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// recording is the round a check records into: the open round for the
// recording twin, none for the read-only tool (which writes nothing).
func recording(s *window.Round, record bool) *window.Round {
	if !record {
		return nil
	}
	return s
}

// checkSpec is a check's spec as the read-only tool or as its recording
// twin, which is a write and says so.
func checkSpec(record bool, recordName string, spec Spec) Spec {
	// The server's instructions say how the two forms differ; the twin
	// says what it adds, not the read-only tool's description again.
	if !record {
		spec.Kind = ReadOnly
		return spec
	}
	readName := spec.Name
	spec.Name, spec.Kind = recordName, Write
	spec.Title = "Record: " + strings.ToLower(spec.Title[:1]) + spec.Title[1:]
	spec.Description = "As " + readName + ", recorded in the round: green counts for its standing rules, red stops the round."
	return spec
}

// commitRoundLast commits the round's files as the call's last act, after
// its own audit record is written (the commit holds it, and the working
// copy is clean once the call answers). The outcome is added to the
// call's reasons: done(hash) when committed, failed + the error when not.
// Outside a tool's run it commits at once and adds to reasons.
func commitRoundLast(ctx context.Context, d *Deps, s *window.Round, why string, done func(hash string) string, failed string, reasons *[]string) {
	commit := func(ctx context.Context, res *Result) {
		c, names, err := d.CommitRoundNamed(ctx, s, why)
		res.Reasons = append(res.Reasons, names.Reasons(s.ID)...)
		if err == nil {
			res.Reasons = append(res.Reasons, done(short(c)))
		} else {
			res.Reasons = append(res.Reasons, failed+err.Error())
		}
		if why := d.UnpushedReason(); why != "" {
			res.Reasons = append(res.Reasons, why)
		}
	}
	if onceAudited(ctx, commit) {
		return
	}
	r := Result{Reasons: *reasons}
	commit(ctx, &r)
	*reasons = r.Reasons
}

// outcome words a window outcome as a result.
func outcome(o window.Outcome) Result {
	r := Result{Reasons: o.Reasons, NextAction: o.Next}
	if o.InProgress {
		r.Status = StatusInProgress
	}
	return r
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}
