package window

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/intent"
	"github.com/mcp-patch/mcp-patch/kube/drain"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/plan/preflight"
)

// Round is the open round of one call: its journal, the intent's settings
// for it, the node plans kept beside the journal, and where its records
// go. A tool opens it once per call and every step of the call reads and
// records through it. A nil *Round is "no round open": its reads answer
// nothing and its checks record nothing.
type Round struct {
	// ID is the round's id (the journal's RoundID).
	ID string
	// Journal is the round's journal, held for writing or read through a
	// view (a read-only call).
	Journal *round.Journal
	// Settings are the intent's settings for the round (zero when the
	// intent's settings could not be read: every setting at its default).
	Settings intent.Settings
	// Book holds the round's files beside its journal: the node plans
	// (rounds/<id>/nodes/<node>.json) and the health baseline.
	Book Book
	// Events, when set, receives each transition once it is journaled.
	Events func(Event)
	// Durable, when set, makes an approved step's start record durable
	// where another server finds it before the step acts (Recorder.Durable).
	Durable func(round.Record) error
	// Now stamps events and admissions; nil: time.Now.
	Now func() time.Time
	// Log receives what the round cannot answer (an unreadable node plan);
	// nil: slog.Default.
	Log *slog.Logger
}

// Book is the part of the round's book the open round reads and writes
// beside its journal: files of the round, and one file per node in a
// folder of the round.
type Book interface {
	ReadFile(round, name string) ([]byte, error)
	WriteFile(round, name string, data []byte) error
	ReadNodeFile(round, folder, node string) ([]byte, error)
	WriteNodeFile(round, folder, node string, data []byte) error
	// NodeFiles names the nodes with a file in folder.
	NodeFiles(round, folder string) ([]string, error)
}

// NodePlansDir is the folder of the round's node plans: one file per node,
// so a step writes the one node plan it changes.
const NodePlansDir = "nodes"

// NodePlan is what the round decided for one node, kept beside the
// journal in rounds/<id>/nodes/<node>.json (plan.json is the reviewed
// plan of the whole round, see round/plan): the package set
// simulate_upgrade found (its digest is what install_updates binds) and
// the GRUB entries of the trial boot.
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
	Drill         *FallbackDrillPlan `json:"drill,omitempty"`
	DrillApproval string             `json:"drill_approval,omitempty"`
	// GateRedSince is when check_gate first saw this node's gate red.
	GateRedSince time.Time `json:"gate_red_since,omitzero"`
}

func (r *Round) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *Round) log() *slog.Logger {
	if r.Log != nil {
		return r.Log
	}
	return slog.Default()
}

// Rec is the round's recorder: every record written outside a window
// step's chokepoint goes through it too, so no journal error is dropped
// and every transition reaches Events.
func (r *Round) Rec() *Recorder {
	return &Recorder{J: r.Journal, Events: r.Events, Durable: r.Durable, Now: r.Now}
}

// Admit checks the standing rules for step on node without recording
// anything: a refusal is a *Refusal (RuleRefusal). No round admits
// everything.
func (r *Round) Admit(step round.Step, node string) error {
	if r == nil {
		return nil
	}
	return RuleRefusal(r.Journal.Shared().Admit(step, node, r.now()))
}

// RuleRefusal words a standing rule's refusal (*round.RuleError) as a
// Refusal whose next step fits the rule; any other error is returned as
// it is.
func RuleRefusal(err error) error {
	var re *round.RuleError
	if !errors.As(err, &re) {
		return err
	}
	next := "Call round_status: it says what the round needs next."
	switch re.Rule {
	case round.RuleRoundStopped:
		next = "A person must decide: ask them to sign a resume or abort (record_decision)."
	case round.RuleStepInFlight:
		next = "Call the same tool again: it re-checks the host and cluster and records the outcome."
	}
	return &Refusal{Next: next, Reasons: []string{fmt.Sprintf("refused by standing rule %s: %s", re.Rule, re.Reason), "nothing was executed"}}
}

// Begin starts a step without an approval (admission included), or, when
// an earlier attempt is still in flight (the process running it stopped),
// carries on with that attempt: the callers are idempotent steps whose run
// is their own re-check. A read-only check always starts a new attempt.
func (r *Round) Begin(step round.Step, node string) error {
	return RuleRefusal(r.Rec().Begin(step, node))
}

// Finish records step on node green.
func (r *Round) Finish(step round.Step, node, kernel, detail string) error {
	return r.Rec().Finish(step, node, kernel, detail)
}

// Fail records step on node red, which stops the round.
func (r *Round) Fail(step round.Step, node, detail string) error {
	return r.Rec().Fail(step, node, detail)
}

// Check records a read-only check after it ran: green finishes it, red
// fails it (which stops the round). Without a round nothing is recorded.
func (r *Round) Check(step round.Step, node string, ok bool, kernel, detail string) error {
	return r.CheckOn(step, node, ok, Boot{Kernel: kernel}, detail)
}

// CheckOn is Check for a check that ran on the node's boot b: the boot is
// recorded with it, green or red, and the steps that depend on the check
// hold the host to it (DecideOnTrialBoot).
func (r *Round) CheckOn(step round.Step, node string, ok bool, b Boot, detail string) error {
	if r == nil {
		return nil
	}
	if err := r.Begin(step, node); err != nil {
		return err
	}
	if ok {
		return r.Rec().FinishOn(step, node, b, detail)
	}
	return r.Rec().FailOn(step, node, b, detail)
}

// StepRun is step's last run on node in the round (nil: none, or no round).
func (r *Round) StepRun(step round.Step, node string) *round.StepRun {
	if r == nil {
		return nil
	}
	return r.Journal.StepRun(step, node)
}

// InFlightRun is step's run on node when it is in flight, else nil.
func (r *Round) InFlightRun(step round.Step, node string) *round.StepRun {
	run := r.StepRun(step, node)
	if run == nil || run.State != round.InFlight {
		return nil
	}
	return run
}

// InFlight says step is in flight on node.
func (r *Round) InFlight(step round.Step, node string) bool {
	return r.InFlightRun(step, node) != nil
}

// VerifyInput is what verify expects of node on kernel: the intent's
// sysctls and bonds, and on GPU servers its RDMA ports.
func (r *Round) VerifyInput(node, kernel string) steps.VerifyInput {
	vin := steps.VerifyInput{TargetKernel: kernel}
	if ns := r.Settings.Node; ns != nil {
		vin.ExpectedSysctls = ns.Sysctls
		for b := range ns.Bonds {
			vin.ExpectedBonds = append(vin.ExpectedBonds, b)
		}
		sort.Strings(vin.ExpectedBonds)
	}
	if n := r.Journal.Shared().Node(node); n != nil && n.GPU {
		if g := r.Settings.GPU; g != nil {
			vin.ExpectedRDMAPorts = g.RDMADevices
		}
	}
	return vin
}

// NodePlans are the round's node plans by node; an unreadable one is
// logged and left out. No round has none.
func (r *Round) NodePlans() map[string]NodePlan {
	plans := map[string]NodePlan{}
	if r == nil {
		return plans
	}
	names, err := r.Book.NodeFiles(r.ID, NodePlansDir)
	if err != nil {
		r.log().Warn("node plans unreadable", "round", r.ID, "err", err)
	}
	for _, node := range names {
		if p, ok := r.NodePlan(node); ok {
			plans[node] = p
		}
	}
	return plans
}

// NodePlan is node's plan; false when there is none or it is unreadable
// (logged).
func (r *Round) NodePlan(node string) (NodePlan, bool) {
	if r == nil {
		return NodePlan{}, false
	}
	b, err := r.Book.ReadNodeFile(r.ID, NodePlansDir, node)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			r.log().Warn("node plan unreadable", "round", r.ID, "node", node, "err", err)
		}
		return NodePlan{}, false
	}
	var p NodePlan
	if err := json.Unmarshal(b, &p); err != nil {
		r.log().Warn("node plan unreadable", "round", r.ID, "node", node, "err", err)
		return NodePlan{}, false
	}
	return p, true
}

// SaveNodePlan writes p as its node's plan.
func (r *Round) SaveNodePlan(p NodePlan) error {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return fmt.Errorf("encode the node plan of %s: %w", p.Node, err)
	}
	return r.Book.WriteNodeFile(r.ID, NodePlansDir, p.Node, append(b, '\n'))
}

// JobWait is the intent's drain.wait_for_jobs: the pods (batch training
// jobs) a drain waits for after it cordons, and the wait's bound. A nil
// selector: the drain waits for nothing. A selector that does not parse is
// a refusal.
func JobWait(st intent.Settings) (labels.Selector, time.Duration, error) {
	ds := st.Drain
	if ds == nil || ds.WaitForJobs == nil {
		return nil, 0, nil
	}
	sel, err := labels.Parse(ds.WaitForJobs.Selector)
	if err != nil {
		return nil, 0, &Refusal{Next: "Fix drain.wait_for_jobs.selector in os-layer/settings.yaml.",
			Reasons: []string{"drain.wait_for_jobs.selector: " + err.Error(), "nothing was cordoned"}}
	}
	return sel, time.Duration(ds.WaitForJobs.MaxWaitMinutes) * time.Minute, nil
}

// DrainPolicy is the intent's drain policy for the round, as the plan
// previewed it (preflight.DrainPolicy).
func (r *Round) DrainPolicy() drain.Policy { return preflight.DrainPolicy(r.Settings) }

// DrainTimeout is the intent's drain timeout for the round, the server's
// (def) when the intent sets none.
func (r *Round) DrainTimeout(def time.Duration) time.Duration {
	if ds := r.Settings.Drain; ds != nil && ds.TimeoutMinutes > 0 {
		return time.Duration(ds.TimeoutMinutes) * time.Minute
	}
	return def
}

// DrainDefaults are the server's drain settings the intent's refine.
type DrainDefaults struct {
	// Identity is the server's, recorded as the cordon's owner.
	Identity string
	// Timeout bounds a drain when the intent sets none.
	Timeout time.Duration
	// EvictRetry is the wait between evictions a PDB refused.
	EvictRetry time.Duration
	Log        *slog.Logger
}

// DrainOptions are the drain's options for the round: the intent's policy,
// timeout and the jobs it waits for, over the server's defaults.
func (r *Round) DrainOptions(def DrainDefaults) DrainOptions {
	o := DrainOptions{Policy: r.DrainPolicy(), Identity: def.Identity,
		Options: drain.Options{Timeout: r.DrainTimeout(def.Timeout), EvictRetryDelay: def.EvictRetry, Logger: def.Log}}
	// A selector that does not parse was refused by the drain's Plan.
	if sel, wait, err := JobWait(r.Settings); err == nil {
		o.JobSelector, o.JobWait = sel, wait
	}
	return o
}
