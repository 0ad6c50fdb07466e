package tools

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
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

// session is the open round: its journal and the intent's settings.
type session struct {
	j        *round.Journal
	id       string
	settings intent.Settings
	// events and now feed the recorder (nil: no events, time.Now).
	events func(window.Event)
	now    func() time.Time
}

// openSession returns the open round, or a refusal when there is none.
func (d *Deps) openSession() (*session, error) {
	if d.Book == nil {
		return nil, Refuse("Start the server with --intent-repo: rounds are kept in the intent repository.", "no intent repository is configured")
	}
	j, err := d.Book.Current()
	if err != nil {
		return nil, err
	}
	return d.sessionOf(j), nil
}

// readSession is openSession for a read-only tool: the open round read
// through a view (RoundBook.CurrentView), so that the call writes nothing
// and locks no writer out, even as the process's first call.
func (d *Deps) readSession() (*session, error) {
	if d.Book == nil {
		return nil, Refuse("Start the server with --intent-repo: rounds are kept in the intent repository.", "no intent repository is configured")
	}
	j, err := d.Book.CurrentView()
	if err != nil {
		return nil, err
	}
	return d.sessionOf(j), nil
}

// sessionOf is the session of round journal j with the intent's settings.
func (d *Deps) sessionOf(j *round.Journal) *session {
	s := &session{j: j, id: j.RoundID(), events: d.WindowEvents, now: d.now}
	if r, err := d.intentRepo(s.id); err == nil {
		if st, err := r.RoundSettings(); err == nil {
			s.settings = st
		} else {
			d.Log.Warn("intent settings unreadable", "err", err)
		}
	}
	return s
}

// maybeSession is the open round for checks that also work before a
// round is planned: nil when no round is open. A check that records
// (its recording twin) holds the journal for writing; the read-only check
// reads it through a view (readSession).
func (d *Deps) maybeSession(record bool) *session {
	if d.Book == nil || d.Book.CurrentID() == "" {
		return nil
	}
	open := d.readSession
	if record {
		open = d.openSession
	}
	s, err := open()
	if err != nil {
		return nil
	}
	return s
}

// checkSession is the open round for a check: held for writing by the
// recording twin, read through a view by the read-only tool.
func (d *Deps) checkSession(record bool) (*session, error) {
	if record {
		return d.openSession()
	}
	return d.readSession()
}

// ruleRefusal turns a standing rule's refusal into a tool refusal.
func ruleRefusal(err error) error {
	var re *round.RuleError
	if errors.As(err, &re) {
		next := "Call round_status: it says what the round needs next."
		switch re.Rule {
		case round.RuleRoundStopped:
			next = "A person must decide: ask them to sign a resume or abort (record_decision)."
		case round.RuleStepInFlight:
			next = "Call the same tool again: it re-checks the host and cluster and records the outcome."
		}
		return Refuse(next, fmt.Sprintf("refused by standing rule %s: %s", re.Rule, re.Reason), "nothing was executed")
	}
	return err
}

// admit checks the standing rules for a step without recording anything.
func (s *session) admit(d *Deps, step round.Step, node string) error {
	if s == nil {
		return nil
	}
	return ruleRefusal(s.j.Shared().Admit(step, node, d.now()))
}

// rec is the round's recorder. The records the tools write outside a
// window step's chokepoint go through it too: no journal error is dropped
// and every transition reaches the Events hook.
func (s *session) rec() *window.Recorder {
	return &window.Recorder{J: s.j, Events: s.events, Now: s.now}
}

// begin starts a step without an approval (admission included), or, when
// an earlier attempt is still in flight (the process running it stopped),
// carries on with that attempt: the callers are idempotent steps whose run
// is their own re-check. A read-only check always starts a new attempt.
func (s *session) begin(step round.Step, node string) error {
	return ruleRefusal(s.rec().Begin(step, node))
}

func (s *session) finish(step round.Step, node, kernel, detail string) error {
	return s.rec().Finish(step, node, kernel, detail)
}

func (s *session) fail(step round.Step, node, detail string) error {
	return s.rec().Fail(step, node, detail)
}

// check records a read-only check after it ran: green finishes it, red
// fails it (which stops the round). Without a round nothing is recorded.
func (s *session) check(step round.Step, node string, ok bool, kernel, detail string) error {
	return s.checkOn(step, node, ok, window.Boot{Kernel: kernel}, detail)
}

// checkOn is check for a check that ran on the node's boot b: the boot
// is recorded with it, green or red, and the steps that depend on the
// check hold the host to it (window.DecideOnTrialBoot).
func (s *session) checkOn(step round.Step, node string, ok bool, b window.Boot, detail string) error {
	if s == nil {
		return nil
	}
	if err := s.begin(step, node); err != nil {
		return err
	}
	if ok {
		return s.rec().FinishOn(step, node, b, detail)
	}
	return s.rec().FailOn(step, node, b, detail)
}

// hostFailure records a check that could not run on its host as failed
// (not sure means stop: a person decides), except for bad input, which
// changed nothing and is only refused.
func (s *session) hostFailure(step round.Step, node string, err error) error {
	var f *Failure
	if s == nil || !errors.As(err, &f) {
		return err
	}
	if rerr := s.check(step, node, false, "", strings.Join(f.Reasons, "; ")); rerr != nil {
		return rerr
	}
	f.NextAction = "Stop: the check could not run. " + f.NextAction + " A person signs resume (after fixing it) or abort."
	return f
}

// stepState is the state of a step on a node in the open round.
func (s *session) stepRun(step round.Step, node string) *round.StepRun {
	if s == nil {
		return nil
	}
	return s.j.StepRun(step, node)
}

func (s *session) inFlight(step round.Step, node string) bool {
	r := s.stepRun(step, node)
	return r != nil && r.State == round.InFlight
}

// hostError turns errors from the host steps into results: bad input is a
// refusal, anything else a failure naming the node, whose next step fits
// its cause (hostCauseOf, NextStepFor).
func hostError(node, action string, err error) error {
	switch {
	case errors.Is(err, steps.ErrBadInput):
		return Refuse("Fix the input.", fmt.Sprintf("%s on %s: %v", action, node, err), "nothing was executed")
	case errors.Is(err, host.ErrUnknownNode):
		return Refuse("Use a node from plan_round's order (or the SSH inventory).", fmt.Sprintf("%s: %v", action, err), "nothing was executed")
	}
	return Fail(NextStepFor(hostCauseOf(err), node), fmt.Sprintf("%s on %s: %v", action, node, err))
}

// NodePlan is what the round decided for one node, kept beside the
// journal in rounds/<id>/nodes.json (plan.json is the reviewed plan of the
// whole round, see round/plan): the package set simulate_upgrade found
// (its digest is what install_updates binds) and the GRUB entries of the
// trial boot.
type NodePlan struct {
	Node          string   `json:"node"`
	TargetKernel  string   `json:"target_kernel"`
	RunningKernel string   `json:"running_kernel"`
	PackageDigest string   `json:"package_digest"`
	PackageLines  []string `json:"package_lines"`
	Kernel        []string `json:"kernel_packages"`
	Nvidia        []string `json:"nvidia_packages"`
	OldEntry      string   `json:"old_entry,omitempty"`
	NewEntry      string   `json:"new_entry,omitempty"`
	// DrillStarted is when fallback_drill rebooted the canary; DrillPassed
	// says the fallback was proven this round.
	DrillStarted time.Time `json:"drill_started,omitzero"`
	DrillPassed  bool      `json:"drill_passed,omitempty"`
	// Drill is the approved drill in flight and DrillApproval its approval.
	Drill         *window.FallbackDrillPlan `json:"drill,omitempty"`
	DrillApproval string                    `json:"drill_approval,omitempty"`
	// GateRedSince is when check_gate first saw this node's gate red.
	GateRedSince time.Time `json:"gate_red_since,omitzero"`
}

// Each node's plan is a file of its own, rounds/<id>/nodes/<node>.json, so
// a step writes what it changes: one node's plan, not every node's (one
// nodes.json for the fleet grew with each window and was rewritten whole
// at each step). nodes.json, where a round written before still has it, is
// read under the per-node files.
const (
	nodePlansFile = "nodes.json"
	nodePlansDir  = "nodes"
)

// legacyNodePlans reads nodes.json, the whole fleet's plans in one file.
func (s *session) legacyNodePlans(d *Deps) map[string]NodePlan {
	plans := map[string]NodePlan{}
	if b, err := d.Book.ReadFile(s.id, nodePlansFile); err == nil {
		if err := json.Unmarshal(b, &plans); err != nil {
			d.Log.Warn("nodes.json unreadable", "round", s.id, "err", err)
		}
	}
	return plans
}

func (s *session) nodePlans(d *Deps) map[string]NodePlan {
	if s == nil {
		return map[string]NodePlan{}
	}
	plans := s.legacyNodePlans(d)
	names, err := d.Book.NodeFiles(s.id, nodePlansDir)
	if err != nil {
		d.Log.Warn("node plans unreadable", "round", s.id, "err", err)
	}
	for _, node := range names {
		if p, ok := s.readNodePlan(d, node); ok {
			plans[node] = p
		}
	}
	return plans
}

// readNodePlan reads nodes/<node>.json; false when there is none or it is
// unreadable (logged).
func (s *session) readNodePlan(d *Deps, node string) (NodePlan, bool) {
	b, err := d.Book.ReadNodeFile(s.id, nodePlansDir, node)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			d.Log.Warn("node plan unreadable", "round", s.id, "node", node, "err", err)
		}
		return NodePlan{}, false
	}
	var p NodePlan
	if err := json.Unmarshal(b, &p); err != nil {
		d.Log.Warn("node plan unreadable", "round", s.id, "node", node, "err", err)
		return NodePlan{}, false
	}
	return p, true
}

func (s *session) nodePlan(d *Deps, node string) (NodePlan, bool) {
	if s == nil {
		return NodePlan{}, false
	}
	if p, ok := s.readNodePlan(d, node); ok {
		return p, true
	}
	p, ok := s.legacyNodePlans(d)[node]
	return p, ok
}

func (s *session) saveNodePlan(d *Deps, p NodePlan) error {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	return d.Book.WriteNodeFile(s.id, nodePlansDir, p.Node, append(b, '\n'))
}

// windowLocks holds the window Leases this process keeps renewed.
type windowLocks struct {
	mu   sync.Mutex
	held map[string]context.CancelFunc // round/node → stops Keep
}

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
func recording(s *session, record bool) *session {
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
func (d *Deps) commitRound(ctx context.Context, s *session, why string) (string, error) {
	c, _, err := d.commitRoundNamed(ctx, s, why)
	return c, err
}

// commitRoundNamed is commitRound that also answers the reports it wrote
// again or left out (tools/reports.go).
func (d *Deps) commitRoundNamed(ctx context.Context, s *session, why string) (string, reportNames, error) {
	var names reportNames
	r, err := d.intentRepo(s.id)
	if err != nil {
		return "", names, err
	}
	// The notices and Events the call's records started land in the
	// journal first (bounded: a receiver that is down does not hold the
	// commit; its outcome goes into the next one).
	sctx, cancel := context.WithTimeout(ctx, commitSettle)
	defer cancel()
	if err := d.Ops.Settle(sctx); err != nil {
		d.Log.Warn("committing the round before its notifications settled; their outcomes go into the next commit", "round", s.id, "err", err)
	}
	var c intent.Commit
	err = s.j.Hold(func() error {
		// The reports the server owns are its own renders, never an
		// edit behind its back (tools/reports.go).
		files, n, err := d.guardedFiles(s.id)
		names = n
		if err != nil {
			return err
		}
		msg := fmt.Sprintf("round %s: %s", s.id, why)
		if body := names.message(); body != "" {
			msg += "\n\n" + body
		}
		c, err = r.CommitFilesSealed(ctx, msg, files.Files, files.Sealed)
		if err == nil || errors.Is(err, intent.ErrNoChange) {
			d.Book.Committed(s.id, files)
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
func (d *Deps) commitRoundLast(ctx context.Context, s *session, why string, done func(hash string) string, failed string, reasons *[]string) {
	commit := func(ctx context.Context, res *Result) {
		c, names, err := d.commitRoundNamed(ctx, s, why)
		res.Reasons = append(res.Reasons, names.reasons(s.id)...)
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

// verifyInput is what verify expects of node on kernel: the intent's
// sysctls and bonds, and on GPU servers its RDMA ports.
func (s *session) verifyInput(node, kernel string) steps.VerifyInput {
	vin := steps.VerifyInput{TargetKernel: kernel}
	if ns := s.settings.Node; ns != nil {
		vin.ExpectedSysctls = ns.Sysctls
		for b := range ns.Bonds {
			vin.ExpectedBonds = append(vin.ExpectedBonds, b)
		}
		sort.Strings(vin.ExpectedBonds)
	}
	if n := s.j.Shared().Node(node); n != nil && n.GPU {
		if g := s.settings.GPU; g != nil {
			vin.ExpectedRDMAPorts = g.RDMADevices
		}
	}
	return vin
}

// uncordonIfOurs uncordons a node only when this server cordoned it in
// this round; it says what it did in words.
func (d *Deps) uncordonIfOurs(ctx context.Context, roundID, node string) (bool, string) {
	kc, err := d.cluster(ctx)
	if err != nil {
		return false, "left cordoned: " + err.Error()
	}
	st, err := drain.ReadState(ctx, kc.Kube, node)
	if err != nil {
		return false, "left cordoned: read its cordon: " + err.Error()
	}
	if !st.Unschedulable {
		return false, "it was not cordoned"
	}
	if st.Owner == nil || st.Owner.Identity != d.Identity || st.Owner.Round != roundID {
		return false, "left cordoned: this round did not cordon it (" + st.Describe() + ")"
	}
	if _, err := drain.Uncordon(ctx, kc.Kube, node, d.Identity); err != nil {
		return false, "left cordoned: " + err.Error()
	}
	return true, "uncordoned (this round had cordoned it)"
}

// outcome words a window outcome as a result.
func outcome(o window.Outcome) Result {
	r := Result{Reasons: o.Reasons, NextAction: o.Next}
	if o.InProgress {
		r.Status = StatusInProgress
	}
	return r
}

// then makes c the next call of an ok result (one in progress calls the
// same tool again).
func (r Result) then(c *Call) Result {
	if r.Status == "" || r.Status == StatusOK {
		r.NextCall = c
	}
	return r
}
