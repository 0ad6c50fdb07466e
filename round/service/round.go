package service

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mcp-patch/mcp-patch/answer"
	"github.com/mcp-patch/mcp-patch/host"
	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/intent"
	"github.com/mcp-patch/mcp-patch/kube/drain"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// OpenRound opens the open round for writing, or answers a refusal when
// there is none: the one owner of the round for the call.
func (d *Service) OpenRound() (*window.Round, error) {
	if d.Book == nil {
		return nil, answer.Refuse("Start the server with --intent-repo: rounds are kept in the intent repository.", "no intent repository is configured")
	}
	j, err := d.Book.Current()
	if err != nil {
		return nil, err
	}
	return d.roundOf(j), nil
}

// ReadRound is openRound for a read-only tool: the open round read
// through a view (RoundBook.CurrentView), so that the call writes nothing
// and locks no writer out, even as the process's first call.
func (d *Service) ReadRound() (*window.Round, error) {
	if d.Book == nil {
		return nil, answer.Refuse("Start the server with --intent-repo: rounds are kept in the intent repository.", "no intent repository is configured")
	}
	j, err := d.Book.CurrentView()
	if err != nil {
		return nil, err
	}
	return d.roundOf(j), nil
}

// roundOf is the round of journal j with the intent's settings.
func (d *Service) roundOf(j *round.Journal) *window.Round {
	s := &window.Round{Journal: j, ID: j.RoundID(), Book: d.Book, Events: d.WindowEvents, Now: d.Clock, Log: d.Log}
	s.Durable = d.durableStart(s)
	if r, err := d.IntentRepo(s.ID); err == nil {
		if st, err := r.RoundSettings(); err == nil {
			s.Settings = st
		} else {
			d.Log.Warn("intent settings unreadable", "err", err)
		}
	}
	return s
}

// MaybeRound is the open round for checks that also work before a round
// is planned: nil when no round is open. A check that records (its
// recording twin) holds the journal for writing; the read-only check
// reads it through a view (readRound).
func (d *Service) MaybeRound(record bool) *window.Round {
	if d.Book == nil || d.Book.CurrentID() == "" {
		return nil
	}
	open := d.ReadRound
	if record {
		open = d.OpenRound
	}
	s, err := open()
	if err != nil {
		return nil
	}
	return s
}

// RuleRefusal turns a standing rule's refusal into a tool refusal
// (window.RuleRefusal words it).
func RuleRefusal(err error) error {
	var ref *window.Refusal
	if errors.As(window.RuleRefusal(err), &ref) {
		return answer.Refuse(ref.Next, ref.Reasons...)
	}
	return err
}

// HostFailure records a check that could not run on its host as failed
// (not sure means stop: a person decides), except for bad input, which
// changed nothing and is only refused.
func HostFailure(s *window.Round, step round.Step, node string, err error) error {
	var f *answer.Failure
	if s == nil || !errors.As(err, &f) {
		return err
	}
	if rerr := s.Check(step, node, false, "", strings.Join(f.Reasons, "; ")); rerr != nil {
		return rerr
	}
	f.NextAction = "Stop: the check could not run. " + f.NextAction + " A person signs resume (after fixing it) or abort."
	return f
}

// HostError turns errors from the host steps into results: bad input is a
// refusal, anything else a failure naming the node, whose next step fits
// its cause (steps.CauseOf, steps.NextStepFor).
func HostError(node, action string, err error) error {
	switch {
	case errors.Is(err, steps.ErrBadInput):
		return answer.Refuse("Fix the input.", fmt.Sprintf("%s on %s: %v", action, node, err), "nothing was executed")
	case errors.Is(err, host.ErrUnknownNode):
		return answer.Refuse("Use a node from plan_round's order (or the SSH inventory).", fmt.Sprintf("%s: %v", action, err), "nothing was executed")
	}
	return answer.Fail(steps.NextStepFor(steps.CauseOf(err), node), fmt.Sprintf("%s on %s: %v", action, node, err))
}

// nodePlansDir is the folder of the round's node plans; nodePlansFile is
// the one file that held every node's plan, which nothing reads or writes
// any more (the book still commits one a round has).
const (
	nodePlansDir  = window.NodePlansDir
	nodePlansFile = "nodes.json"
)

func DigestOf(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// commitSettle bounds how long a commit waits for the notifications its
// call's records started.
const commitSettle = 10 * time.Second

// CommitRound commits the round's record files to the intent repository's
// working branch and returns the commit hash.
func (d *Service) CommitRound(ctx context.Context, s *window.Round, why string) (string, error) {
	c, _, err := d.CommitRoundNamed(ctx, s, why)
	return c, err
}

// CommitRoundNamed is commitRound that also answers the reports it wrote
// again or left out (reports.go).
func (d *Service) CommitRoundNamed(ctx context.Context, s *window.Round, why string) (string, reportNames, error) {
	// The notices and Events the call's records started land in the
	// journal first (bounded: a receiver that is down does not hold the
	// commit; its outcome goes into the next one).
	sctx, cancel := context.WithTimeout(ctx, commitSettle)
	defer cancel()
	if err := d.Ops.Settle(sctx); err != nil {
		d.Log.Warn("committing the round before its notifications settled; their outcomes go into the next commit", "round", s.ID, "err", err)
	}
	c, names, err := d.commitRoundFiles(ctx, s.ID, s.Journal, why)
	if errors.Is(err, intent.ErrNoChange) {
		d.leaveStatus(s)
		return "(no change)", names, nil
	}
	if err != nil {
		return "", names, err
	}
	d.leaveStatus(s)
	return c.Hash, names, nil
}

// commitRoundFiles commits round id's record files (its journal j held
// by this server) under the journal's lock, and, where another server may
// take the round over, publishes the journal's head at that commit once
// the commit is on the remote (published).
func (d *Service) commitRoundFiles(ctx context.Context, id string, j *round.Journal, why string) (intent.Commit, reportNames, error) {
	var names reportNames
	if d.handsOver() && d.Following() {
		// The round's record is the leader's now: this server neither
		// commits nor pushes what it wrote after its term ended.
		return intent.Commit{}, names, errors.New("this server no longer leads: the round's record is the leader's")
	}
	r, err := d.IntentRepo(id)
	if err != nil {
		return intent.Commit{}, names, err
	}
	var c intent.Commit
	var head round.Head
	err = j.HoldHead(func(h round.Head) error {
		head = h
		if err := d.mirrorProofs(id); err != nil {
			return err
		}
		// The reports the server owns are its own renders, never an
		// edit behind its back (reports.go).
		files, n, err := d.guardedFiles(id)
		names = n
		if err != nil {
			return err
		}
		msg := fmt.Sprintf("round %s: %s", id, why)
		if body := names.message(); body != "" {
			msg += "\n\n" + body
		}
		c, err = pushWatch{d, r}.CommitFilesSealed(ctx, msg, files.Files, files.Sealed)
		if err == nil || errors.Is(err, intent.ErrNoChange) {
			d.Book.Committed(id, files)
		}
		return err
	})
	if err == nil && c.Pushed {
		d.publishHead(ctx, id, head, c.Hash)
	}
	return c, names, err
}

// where names a step and, for a node step, its node.
func where(step round.Step, node string) string {
	if node == "" {
		return string(step)
	}
	return string(step) + " on " + node
}

// IntentError turns the intent package's errors into refusals (bad input,
// nothing changed) or failures.
func IntentError(action string, err error) error {
	switch {
	case errors.Is(err, intent.ErrInvalid), errors.Is(err, intent.ErrUnknownComponent),
		errors.Is(err, intent.ErrUnknownDocument), errors.Is(err, intent.ErrUnknownProperty), errors.Is(err, intent.ErrMalformed):
		return answer.Refuse("Fix the input: read_intent lists the components, their documents and property ids.",
			action+": "+err.Error(), "nothing was changed")
	case errors.Is(err, intent.ErrDirty):
		return answer.Refuse("Ask a person to commit or discard their edits to those files in the intent repository, then call again.",
			action+": "+err.Error(), "nothing was changed")
	case errors.Is(err, intent.ErrProtectedBranch):
		return answer.Refuse("Configure a working branch that is not protected (git.branch).", action+": "+err.Error(), "nothing was changed")
	case errors.Is(err, intent.ErrVerifyDisabled):
		return answer.Refuse("Run verify.sh on a server that is not read-only, or have the operator set verify.in_read_only.", action+": "+err.Error(), "nothing was run")
	case errors.Is(err, intent.ErrBusy):
		return answer.Refuse("Call again in a few seconds.", action+": "+err.Error(), "nothing was changed")
	case errors.Is(err, intent.ErrNotRepo):
		return answer.Refuse("Point --intent-repo (MCP_PATCH_INTENT_REPO) at the intent repository's working copy.", action+": "+err.Error())
	}
	return fmt.Errorf("%s: %w", action, err)
}

func (d *Service) IntentRepo(round string) (*intent.Repo, error) {
	if d.Intent == nil {
		return nil, answer.Refuse("Start the server with --intent-repo PATH (or MCP_PATCH_INTENT_REPO).", "no intent repository is configured")
	}
	r, err := d.Intent(round)
	if err != nil {
		return nil, IntentError("open the intent repository", err)
	}
	return r, nil
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// UncordonIfOurs uncordons a node only when this server cordoned it in
// this round (drain.UncordonIfOurs); it says what it did in words.
func (d *Service) UncordonIfOurs(ctx context.Context, roundID, node string) (bool, string) {
	kc, err := d.KubeClients(ctx)
	if err != nil {
		return false, "left cordoned: " + err.Error()
	}
	return drain.UncordonIfOurs(ctx, kc.Kube, node, d.ActorIdentity(), roundID)
}

// CurrentRoundID is the open round, else this month.
func (d *Service) CurrentRoundID() string {
	if d.CurrentRound != nil {
		if id := d.CurrentRound(); id != "" {
			return id
		}
	}
	month := d.Clock().UTC().Format("2006-01")
	if d.Config != nil && d.Config.Environment != "" {
		return d.Config.Environment + "-" + month
	}
	return month
}

// RoundState is the state of round id, or of the open round when id is
// "" (then sess is the open round, read through a view): this process's
// own record of a round it holds, else the files, checked against their
// anchors.
func (d *Service) RoundState(id string) (st *round.State, sess *window.Round, err error) {
	if id != "" {
		if !round.ValidRoundID(id) {
			return nil, nil, answer.Refuse("Use a round id such as 2026-11.", fmt.Sprintf("round id %q is not valid", id))
		}
		if d.Book.Holds(id) {
			// This process's own record, not the file beside it.
			j, err := d.Book.Journal(id, false)
			if err != nil {
				return nil, nil, err
			}
			st = j.State()
		} else {
			s, _, err := round.ReadState(d.Book.Dir(id))
			if err != nil {
				return nil, nil, answer.Refuse("Name a round that exists under rounds/ in the intent repository.", "round "+id+": "+err.Error())
			}
			if d.Book.AnchorDir != "" {
				if err := round.CheckAnchored(d.Book.Dir(id), d.Book.AnchorDir); err != nil {
					return nil, nil, TamperRefusal(id, err)
				}
			}
			st = s
		}
	} else {
		s, err := d.ReadRound()
		if err != nil {
			return nil, nil, err
		}
		st, sess = s.Journal.State(), s
	}
	return st, sess, nil
}
