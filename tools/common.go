package tools

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mcp-patch/mcp-patch/host"
	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/intent"
	"github.com/mcp-patch/mcp-patch/kube/drain"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// NodeIn is the input of tools that act on one node.
type NodeIn struct {
	Node string `json:"node"`
}

// openRound opens the open round for writing, or answers a refusal when
// there is none: the one owner of the round for the call.
func (d *Deps) openRound() (*window.Round, error) {
	if d.Book == nil {
		return nil, Refuse("Start the server with --intent-repo: rounds are kept in the intent repository.", "no intent repository is configured")
	}
	j, err := d.Book.Current()
	if err != nil {
		return nil, err
	}
	return d.roundOf(j), nil
}

// readRound is openRound for a read-only tool: the open round read
// through a view (RoundBook.CurrentView), so that the call writes nothing
// and locks no writer out, even as the process's first call.
func (d *Deps) readRound() (*window.Round, error) {
	if d.Book == nil {
		return nil, Refuse("Start the server with --intent-repo: rounds are kept in the intent repository.", "no intent repository is configured")
	}
	j, err := d.Book.CurrentView()
	if err != nil {
		return nil, err
	}
	return d.roundOf(j), nil
}

// roundOf is the round of journal j with the intent's settings.
func (d *Deps) roundOf(j *round.Journal) *window.Round {
	s := &window.Round{Journal: j, ID: j.RoundID(), Book: d.Book, Events: d.WindowEvents, Now: d.now, Log: d.Log}
	if r, err := d.intentRepo(s.ID); err == nil {
		if st, err := r.RoundSettings(); err == nil {
			s.Settings = st
		} else {
			d.Log.Warn("intent settings unreadable", "err", err)
		}
	}
	return s
}

// maybeRound is the open round for checks that also work before a round
// is planned: nil when no round is open. A check that records (its
// recording twin) holds the journal for writing; the read-only check
// reads it through a view (readRound).
func (d *Deps) maybeRound(record bool) *window.Round {
	if d.Book == nil || d.Book.CurrentID() == "" {
		return nil
	}
	open := d.readRound
	if record {
		open = d.openRound
	}
	s, err := open()
	if err != nil {
		return nil
	}
	return s
}

// checkRound is the open round for a check: held for writing by the
// recording twin, read through a view by the read-only tool.
func (d *Deps) checkRound(record bool) (*window.Round, error) {
	if record {
		return d.openRound()
	}
	return d.readRound()
}

// ruleRefusal turns a standing rule's refusal into a tool refusal
// (window.RuleRefusal words it).
func ruleRefusal(err error) error {
	var ref *window.Refusal
	if errors.As(window.RuleRefusal(err), &ref) {
		return Refuse(ref.Next, ref.Reasons...)
	}
	return err
}

// hostFailure records a check that could not run on its host as failed
// (not sure means stop: a person decides), except for bad input, which
// changed nothing and is only refused.
func hostFailure(s *window.Round, step round.Step, node string, err error) error {
	var f *Failure
	if s == nil || !errors.As(err, &f) {
		return err
	}
	if rerr := s.Check(step, node, false, "", strings.Join(f.Reasons, "; ")); rerr != nil {
		return rerr
	}
	f.NextAction = "Stop: the check could not run. " + f.NextAction + " A person signs resume (after fixing it) or abort."
	return f
}

// hostError turns errors from the host steps into results: bad input is a
// refusal, anything else a failure naming the node, whose next step fits
// its cause (steps.CauseOf, steps.NextStepFor).
func hostError(node, action string, err error) error {
	switch {
	case errors.Is(err, steps.ErrBadInput):
		return Refuse("Fix the input.", fmt.Sprintf("%s on %s: %v", action, node, err), "nothing was executed")
	case errors.Is(err, host.ErrUnknownNode):
		return Refuse("Use a node from plan_round's order (or the SSH inventory).", fmt.Sprintf("%s: %v", action, err), "nothing was executed")
	}
	return Fail(steps.NextStepFor(steps.CauseOf(err), node), fmt.Sprintf("%s on %s: %v", action, node, err))
}

// nodePlansDir is the folder of the round's node plans; nodePlansFile is
// the one file that held every node's plan, which nothing reads or writes
// any more (the book still commits one a round has).
const (
	nodePlansDir  = window.NodePlansDir
	nodePlansFile = "nodes.json"
)

func digestOf(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
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

// commitSettle bounds how long a commit waits for the notifications its
// call's records started.
const commitSettle = 10 * time.Second

// commitRound commits the round's record files to the intent repository's
// working branch and returns the commit hash.
func (d *Deps) commitRound(ctx context.Context, s *window.Round, why string) (string, error) {
	c, _, err := d.commitRoundNamed(ctx, s, why)
	return c, err
}

// commitRoundNamed is commitRound that also answers the reports it wrote
// again or left out (tools/reports.go).
func (d *Deps) commitRoundNamed(ctx context.Context, s *window.Round, why string) (string, reportNames, error) {
	var names reportNames
	r, err := d.intentRepo(s.ID)
	if err != nil {
		return "", names, err
	}
	// The notices and Events the call's records started land in the
	// journal first (bounded: a receiver that is down does not hold the
	// commit; its outcome goes into the next one).
	sctx, cancel := context.WithTimeout(ctx, commitSettle)
	defer cancel()
	if err := d.Ops.Settle(sctx); err != nil {
		d.Log.Warn("committing the round before its notifications settled; their outcomes go into the next commit", "round", s.ID, "err", err)
	}
	var c intent.Commit
	err = s.Journal.Hold(func() error {
		// The reports the server owns are its own renders, never an
		// edit behind its back (tools/reports.go).
		files, n, err := d.guardedFiles(s.ID)
		names = n
		if err != nil {
			return err
		}
		msg := fmt.Sprintf("round %s: %s", s.ID, why)
		if body := names.message(); body != "" {
			msg += "\n\n" + body
		}
		c, err = r.CommitFilesSealed(ctx, msg, files.Files, files.Sealed)
		if err == nil || errors.Is(err, intent.ErrNoChange) {
			d.Book.Committed(s.ID, files)
		}
		return err
	})
	if errors.Is(err, intent.ErrNoChange) {
		return "(no change)", names, nil
	}
	if err != nil {
		return "", names, err
	}
	return c.Hash, names, nil
}

// commitRoundLast commits the round's files as the call's last act, after
// its own audit record is written (the commit holds it, and the working
// copy is clean once the call answers). The outcome is added to the
// call's reasons: done(hash) when committed, failed + the error when not.
// Outside a tool's run it commits at once and adds to reasons.
func (d *Deps) commitRoundLast(ctx context.Context, s *window.Round, why string, done func(hash string) string, failed string, reasons *[]string) {
	commit := func(ctx context.Context, res *Result) {
		c, names, err := d.commitRoundNamed(ctx, s, why)
		res.Reasons = append(res.Reasons, names.reasons(s.ID)...)
		if err == nil {
			res.Reasons = append(res.Reasons, done(short(c)))
		} else {
			res.Reasons = append(res.Reasons, failed+err.Error())
		}
	}
	if onceAudited(ctx, commit) {
		return
	}
	r := Result{Reasons: *reasons}
	commit(ctx, &r)
	*reasons = r.Reasons
}

// where names a step and, for a node step, its node.
func where(step round.Step, node string) string {
	if node == "" {
		return string(step)
	}
	return string(step) + " on " + node
}

// intentError turns the intent package's errors into refusals (bad input,
// nothing changed) or failures.
func intentError(action string, err error) error {
	switch {
	case errors.Is(err, intent.ErrInvalid), errors.Is(err, intent.ErrUnknownComponent),
		errors.Is(err, intent.ErrUnknownDocument), errors.Is(err, intent.ErrUnknownProperty), errors.Is(err, intent.ErrMalformed):
		return Refuse("Fix the input: read_intent lists the components, their documents and property ids.",
			action+": "+err.Error(), "nothing was changed")
	case errors.Is(err, intent.ErrDirty):
		return Refuse("Ask a person to commit or discard their edits to those files in the intent repository, then call again.",
			action+": "+err.Error(), "nothing was changed")
	case errors.Is(err, intent.ErrProtectedBranch):
		return Refuse("Configure a working branch that is not protected (git.branch).", action+": "+err.Error(), "nothing was changed")
	case errors.Is(err, intent.ErrVerifyDisabled):
		return Refuse("Run verify.sh on a server that is not read-only, or have the operator set verify.in_read_only.", action+": "+err.Error(), "nothing was run")
	case errors.Is(err, intent.ErrBusy):
		return Refuse("Call again in a few seconds.", action+": "+err.Error(), "nothing was changed")
	case errors.Is(err, intent.ErrNotRepo):
		return Refuse("Point --intent-repo (MCP_PATCH_INTENT_REPO) at the intent repository's working copy.", action+": "+err.Error())
	}
	return fmt.Errorf("%s: %w", action, err)
}

func (d *Deps) intentRepo(round string) (*intent.Repo, error) {
	if d.Intent == nil {
		return nil, Refuse("Start the server with --intent-repo PATH (or MCP_PATCH_INTENT_REPO).", "no intent repository is configured")
	}
	r, err := d.Intent(round)
	if err != nil {
		return nil, intentError("open the intent repository", err)
	}
	return r, nil
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// uncordonIfOurs uncordons a node only when this server cordoned it in
// this round (drain.UncordonIfOurs); it says what it did in words.
func (d *Deps) uncordonIfOurs(ctx context.Context, roundID, node string) (bool, string) {
	kc, err := d.cluster(ctx)
	if err != nil {
		return false, "left cordoned: " + err.Error()
	}
	return drain.UncordonIfOurs(ctx, kc.Kube, node, d.Identity, roundID)
}

// outcome words a window outcome as a result.
func outcome(o window.Outcome) Result {
	r := Result{Reasons: o.Reasons, NextAction: o.Next}
	if o.InProgress {
		r.Status = StatusInProgress
	}
	return r
}
