package round

import (
	"fmt"
	"time"
)

// Rule names a standing rule. A refusal names the rule it enforces so the
// agent (and the audit log) can tell why.
type Rule string

// Standing rules, checked by Admit and AdmitDecision in this order.
const (
	// RuleUnknownStep: the step is not one this package knows.
	RuleUnknownStep Rule = "unknown_step"
	// RuleStepTarget: a node step names no node, or a round step names one.
	RuleStepTarget Rule = "step_target"
	// RuleNoPlan: node steps and the round's writes need a recorded order.
	RuleNoPlan Rule = "no_plan"
	// RuleUnknownNode: the node is not in the round's order.
	RuleUnknownNode Rule = "unknown_node"
	// RuleStepInFlight: the same step is already in flight there; record
	// its outcome first (after a crash: re-check, then record).
	RuleStepInFlight Rule = "step_in_flight"
	// RuleRoundClosed: a closed round admits nothing but read-only checks.
	RuleRoundClosed Rule = "round_closed"
	// RuleRoundAborted: an aborted round admits only uncordon of a node
	// whose window it opened (handing the node back) and close.
	RuleRoundAborted Rule = "round_aborted"
	// RuleRoundStopped: after a failed step no state-changing step runs on
	// any node until a person records resume or abort.
	RuleRoundStopped Rule = "round_stopped"
	// RuleOrderFixed: the order may be re-planned only before the first
	// window opens.
	RuleOrderFixed Rule = "order_fixed"
	// RuleBaselineBeforeDrain: the stack-health baseline the gates compare
	// against is taken before the first drain.
	RuleBaselineBeforeDrain Rule = "baseline_before_drain"
	// RuleWindowLease: the window Lease holds the window; a step of a
	// window whose Lease this server lost (expired and taken, or stolen)
	// stops the round. Enforced by round/window, which records the stop.
	RuleWindowLease Rule = "window_lease"
	// RuleOtherActor: a node another party maintains (the GPU Operator's
	// driver upgrade, another requestor's NodeMaintenance, kured, a person's
	// cordon or taint) is not cordoned: the round waits, bounded, for one
	// that lets go by itself and stops for a person otherwise. Enforced by
	// round/window before the cordon, which records the stop.
	RuleOtherActor Rule = "other_actor"
	// RuleStepOverdue: a step in flight longer than its bound counts as
	// failed (round/window records it).
	RuleStepOverdue Rule = "step_overdue"
	// RuleOneWindow: never two windows at once.
	RuleOneWindow Rule = "one_window_at_a_time"
	// RuleGateBeforeNextCordon: the previous node's gate is green before
	// the next node is cordoned (drained).
	RuleGateBeforeNextCordon Rule = "gate_before_next_cordon"
	// RuleOrder: no drain before every earlier node in the order has its
	// window closed with a green gate.
	RuleOrder Rule = "order"
	// RuleWindowClosed: the node's window is closed; it is done this round.
	RuleWindowClosed Rule = "window_closed"
	// RuleWindowNotOpen: window steps run only inside the node's open
	// window (after its drain started).
	RuleWindowNotOpen Rule = "window_not_open"
	// RuleDrainBeforeInstall: install only on a node drained green.
	RuleDrainBeforeInstall Rule = "drain_before_install"
	// RuleSnapshotBeforeInstall: install only after the node's snapshot.
	RuleSnapshotBeforeInstall Rule = "snapshot_before_install"
	// RuleHypervisorSnapshotBeforeInstall: install on a VM only after a
	// person attested the hypervisor snapshot.
	RuleHypervisorSnapshotBeforeInstall Rule = "hypervisor_snapshot_before_install"
	// RuleInstallBeforeTrialBoot: trial boot only after a green install.
	RuleInstallBeforeTrialBoot Rule = "install_before_trial_boot"
	// RuleVerifyBeforeUncordon: uncordon only after verify is green on the
	// kernel the trial boot brought up.
	RuleVerifyBeforeUncordon Rule = "verify_before_uncordon"
	// RuleNotAGPUNode: gpu_acceptance applies to GPU servers only.
	RuleNotAGPUNode Rule = "not_a_gpu_node"
	// RuleUncordonBeforeGPUAcceptance: the smoke pod cannot schedule on a
	// cordoned node.
	RuleUncordonBeforeGPUAcceptance Rule = "uncordon_before_gpu_acceptance"
	// RuleChecksBeforePromote: promote only after verify and, on GPU
	// servers, gpu_acceptance are green after the trial boot.
	RuleChecksBeforePromote Rule = "checks_before_promote"
	// RuleWindowsBeforeSoak: the soak starts when every window is closed.
	RuleWindowsBeforeSoak Rule = "windows_before_soak"
	// RuleFleetCheckBeforeSoak: the soak starts after a green fleet kernel
	// check taken after the last window closed.
	RuleFleetCheckBeforeSoak Rule = "fleet_check_before_soak"
	// RuleFleetCheckBeforeAutoremove: autoremove needs the fleet check green.
	RuleFleetCheckBeforeAutoremove Rule = "fleet_check_before_autoremove"
	// RuleSoakBeforeAutoremove: autoremove only once the soak has run its
	// full length.
	RuleSoakBeforeAutoremove Rule = "soak_before_autoremove"
	// RuleAutoremoveBeforeClose: a round that was not aborted closes only
	// after autoremove.
	RuleAutoremoveBeforeClose Rule = "autoremove_before_close"
	// RuleFindingsBeforeClose: a round closes only after its lessons and
	// report are committed, after the last thing that happened.
	RuleFindingsBeforeClose Rule = "findings_before_close"
	// RuleUnknownDecision: the decision is not one this package knows.
	RuleUnknownDecision Rule = "unknown_decision"
	// RuleNotStopped: resume answers a stop; the round is not stopped.
	RuleNotStopped Rule = "not_stopped"
	// RuleDecisionTarget: the decision does not fit its node or step (an
	// attestation for a node that is not a VM, accepting risk on a step
	// that did not fail).
	RuleDecisionTarget Rule = "decision_target"
)

// RuleError is a refusal by a standing rule. Nothing was recorded.
type RuleError struct {
	Rule   Rule   `json:"rule"`
	Reason string `json:"reason"`
	Step   Step   `json:"step,omitempty"`
	Node   string `json:"node,omitempty"`
	// Decision is set when a decision was refused.
	Decision DecisionName `json:"decision,omitempty"`
}

func (e *RuleError) Error() string {
	what := string(e.Step)
	if e.Decision != "" {
		what = "decision " + string(e.Decision)
	}
	if e.Node != "" {
		what += " on " + e.Node
	}
	return fmt.Sprintf("%s refused by rule %s: %s", what, e.Rule, e.Reason)
}

// AdmitRestart decides whether a step in flight that never began on its
// host may start again under a fresh approval: only while the round runs.
// A stopped, aborted or closed round refuses it as it refuses a start (a
// person's signature on a step is not a resume).
func (s *State) AdmitRestart(step Step, node string) error {
	refuse := func(rule Rule, format string, args ...any) error {
		return &RuleError{Rule: rule, Reason: fmt.Sprintf(format, args...), Step: step, Node: node}
	}
	if r := s.run(step, node); r == nil || r.State != InFlight {
		return refuse(RuleStepInFlight, "%s is not in flight: start it instead", step)
	}
	switch {
	case s.Closed:
		return refuse(RuleRoundClosed, "round %s is closed", s.RoundID)
	case s.Aborted:
		return refuse(RuleRoundAborted, "round %s was aborted; only uncordon of a node whose window is open and close remain", s.RoundID)
	case s.Stop != nil:
		return refuse(RuleRoundStopped, "the round stopped at %s (%s): a person must record resume or abort first", s.Stop.where(), s.Stop.Reason)
	}
	return nil
}

// Admit decides whether step may start on node ("" for round-level steps)
// at now. It returns nil or a *RuleError; it changes nothing.
//
// Read-only steps (Step.ReadOnly) are admitted whenever their target is
// known and they are not already in flight: they change nothing, and a
// person re-checking a stopped round needs them.
func (s *State) Admit(step Step, node string, now time.Time) error {
	refuse := func(rule Rule, format string, args ...any) error {
		return &RuleError{Rule: rule, Reason: fmt.Sprintf(format, args...), Step: step, Node: node}
	}
	if !step.Valid() {
		return refuse(RuleUnknownStep, "unknown step %q", step)
	}
	if step.NodeStep() && node == "" {
		return refuse(RuleStepTarget, "%s is a node step: name the node", step)
	}
	if !step.NodeStep() && node != "" {
		return refuse(RuleStepTarget, "%s is a round-level step: it names no node", step)
	}
	var n *NodeState
	if step.NodeStep() {
		if s.Plan == nil {
			return refuse(RuleNoPlan, "no order is recorded yet: plan the round first")
		}
		if n = s.Node(node); n == nil {
			return refuse(RuleUnknownNode, "%s is not in this round's order", node)
		}
		if step == StepGPUAcceptance && !n.GPU {
			return refuse(RuleNotAGPUNode, "%s is not a GPU server", node)
		}
	}
	if r := s.run(step, node); r != nil && r.State == InFlight {
		switch {
		case r.NeedsRecheck && step.ReadOnly():
			// A read-only check left in flight by a dead process is simply
			// run again; its old attempt is marked abandoned.
		case r.NeedsRecheck:
			return refuse(RuleStepInFlight, "%s was in flight when the process that started it stopped (since %s): re-check the host and cluster, then record whether it finished or failed; do not repeat it blindly",
				step, r.last().Started.UTC().Format(time.RFC3339))
		default:
			return refuse(RuleStepInFlight, "%s is already in flight (since %s)", step, r.last().Started.UTC().Format(time.RFC3339))
		}
	}
	if step.ReadOnly() {
		return nil
	}
	if s.Closed {
		return refuse(RuleRoundClosed, "round %s is closed", s.RoundID)
	}
	if s.Aborted {
		switch {
		case step == StepUncordon && n != nil && n.Window == WindowOpen:
			return nil // hand back a node this round cordoned
		case step == StepClose:
			if !s.FindingsCommitted {
				return refuse(RuleFindingsBeforeClose, "commit the lessons and the round report (after the last record) before closing the aborted round")
			}
			return nil
		}
		return refuse(RuleRoundAborted, "round %s was aborted; only uncordon of a node whose window is open and close remain", s.RoundID)
	}
	if step != StepPlan && s.Plan == nil {
		return refuse(RuleNoPlan, "no order is recorded yet: plan the round first")
	}
	if s.Stop != nil {
		return refuse(RuleRoundStopped, "the round stopped at %s (%s): a person must record resume or abort first", s.Stop.where(), s.Stop.Reason)
	}

	switch step {
	case StepPlan:
		if s.anyWindowOpened() {
			return refuse(RuleOrderFixed, "windows have started; the order can no longer change")
		}
	case StepDownload, StepSnapshot:
		// Preflight writes: allowed on any node of the order, also while
		// another node's window is open.
	case StepDrain:
		return s.admitDrain(n, refuse)
	case StepInstall, StepTrialBoot, StepUncordon, StepGPUAcceptance, StepPromote:
		return s.admitWindowStep(step, n, refuse)
	case StepSoak:
		for _, m := range s.Nodes {
			if m.Window != WindowClosed {
				return refuse(RuleWindowsBeforeSoak, "the window of %s is %s; the soak starts after every window closed", m.Node, m.Window)
			}
		}
		if !s.FleetCheckGreen || s.RoundSteps[StepFleetCheck].greenSeq() < s.lastClosedSeq() {
			return refuse(RuleFleetCheckBeforeSoak, "no green fleet kernel check since the last window closed")
		}
	case StepAutoremove:
		if !s.FleetCheckGreen {
			return refuse(RuleFleetCheckBeforeAutoremove, "the fleet kernel check is not green")
		}
		if s.SoakStarted.IsZero() {
			return refuse(RuleSoakBeforeAutoremove, "the soak has not started")
		}
		if end := s.SoakStarted.Add(time.Duration(s.Plan.Soak)); now.Before(end) {
			return refuse(RuleSoakBeforeAutoremove, "the soak of %s runs until %s (%s left)",
				time.Duration(s.Plan.Soak), end.UTC().Format(time.RFC3339), end.Sub(now).Round(time.Second))
		}
	case StepClose:
		if !s.RoundSteps[StepAutoremove].Green() {
			return refuse(RuleAutoremoveBeforeClose, "autoremove has not run green; the round closes after the soak and autoremove")
		}
		if !s.FindingsCommitted {
			return refuse(RuleFindingsBeforeClose, "commit the lessons and the round report (after the last record) before closing")
		}
	}
	return nil
}

func (s *State) lastClosedSeq() uint64 {
	var m uint64
	for _, n := range s.Nodes {
		m = max(m, n.ClosedSeq)
	}
	return m
}

type refuseFunc func(rule Rule, format string, args ...any) error

func (s *State) admitDrain(n *NodeState, refuse refuseFunc) error {
	if !s.BaselineTaken {
		return refuse(RuleBaselineBeforeDrain, "no stack-health baseline yet: take it before the first drain so gates can tell new failures from old")
	}
	switch n.Window {
	case WindowClosed:
		return refuse(RuleWindowClosed, "the window of %s closed at %s; it is done this round", n.Node, n.ClosedAt.UTC().Format(time.RFC3339))
	case WindowOpen:
		return nil // drain re-entered inside its own window
	}
	if s.Current != "" {
		cur := s.Node(s.Current)
		if cur.Steps[StepPromote].Green() {
			return refuse(RuleGateBeforeNextCordon, "the gate of %s is not green yet (%s); the next cordon waits for it",
				cur.Node, cur.Steps[StepGate].State)
		}
		return refuse(RuleOneWindow, "the window of %s is open; never two windows at once", cur.Node)
	}
	for _, m := range s.Nodes[:n.Index] {
		if m.Window != WindowClosed {
			return refuse(RuleOrder, "%s comes before %s in the order and its window is %s", m.Node, n.Node, m.Window)
		}
	}
	return nil
}

func (s *State) admitWindowStep(step Step, n *NodeState, refuse refuseFunc) error {
	switch {
	case n.Window == WindowClosed:
		return refuse(RuleWindowClosed, "the window of %s is closed; it is done this round", n.Node)
	case n.Window == WindowPending && s.Current != "":
		return refuse(RuleOneWindow, "the window of %s is open, not the window of %s", s.Current, n.Node)
	case n.Window == WindowPending && step == StepInstall:
		return refuse(RuleDrainBeforeInstall, "%s has not been drained; drain happens before install", n.Node)
	case n.Window == WindowPending:
		return refuse(RuleWindowNotOpen, "the window of %s is not open; it opens with its drain", n.Node)
	}
	st := n.Steps
	switch step {
	case StepInstall:
		if !st[StepDrain].Green() {
			return refuse(RuleDrainBeforeInstall, "the drain of %s is %s, not done", n.Node, st[StepDrain].State)
		}
		if !st[StepSnapshot].Green() {
			return refuse(RuleSnapshotBeforeInstall, "no snapshot of %s this round (etcd, /etc/kubernetes, host config)", n.Node)
		}
		if n.VM && !n.HypervisorSnapshot {
			return refuse(RuleHypervisorSnapshotBeforeInstall, "%s is a VM: a person must attest hypervisor_snapshot_taken first", n.Node)
		}
	case StepTrialBoot:
		if !st[StepInstall].Green() {
			return refuse(RuleInstallBeforeTrialBoot, "the install on %s is %s, not done", n.Node, st[StepInstall].State)
		}
	case StepUncordon:
		if !st[StepTrialBoot].Green() || !st[StepVerify].greenAfter(st[StepTrialBoot]) {
			return refuse(RuleVerifyBeforeUncordon, "verify of %s is not green since its trial boot", n.Node)
		}
	case StepGPUAcceptance:
		if !st[StepUncordon].Green() {
			return refuse(RuleUncordonBeforeGPUAcceptance, "%s is still cordoned; the GPU smoke pod could not schedule", n.Node)
		}
	case StepPromote:
		if !st[StepTrialBoot].Green() || !st[StepVerify].greenAfter(st[StepTrialBoot]) {
			return refuse(RuleChecksBeforePromote, "verify of %s is not green since its trial boot", n.Node)
		}
		if n.GPU && !st[StepGPUAcceptance].greenAfter(st[StepUncordon]) {
			return refuse(RuleChecksBeforePromote, "GPU acceptance of %s is not green since it was uncordoned", n.Node)
		}
	}
	return nil
}

// AdmitDecision decides whether a decision may be recorded: resume only on
// a stopped round, the hypervisor attestation only for a VM node, residual
// risk only on a failed check (or, with no step, as a note). It returns nil
// or a *RuleError.
func (s *State) AdmitDecision(d DecisionName, node string, step Step) error {
	refuse := func(rule Rule, format string, args ...any) error {
		return &RuleError{Rule: rule, Reason: fmt.Sprintf(format, args...), Decision: d, Node: node, Step: step}
	}
	if !d.Valid() {
		return refuse(RuleUnknownDecision, "unknown decision %q", d)
	}
	if s.Closed {
		return refuse(RuleRoundClosed, "round %s is closed", s.RoundID)
	}
	switch d {
	case DecisionResume, DecisionAbort:
		if s.Aborted {
			return refuse(RuleRoundAborted, "round %s was already aborted", s.RoundID)
		}
		if d == DecisionResume && s.Stop == nil {
			return refuse(RuleNotStopped, "the round is not stopped")
		}
	case DecisionHypervisorSnapshotTaken:
		n := s.Node(node)
		if n == nil || !n.VM {
			return refuse(RuleDecisionTarget, "%q is not a VM node of this round", node)
		}
	case DecisionResidualRiskAccepted:
		if step == "" {
			if node == "" {
				return refuse(RuleDecisionTarget, "name the node (or %q for the fleet)", FleetWide)
			}
			return nil
		}
		if !step.Check() {
			return refuse(RuleDecisionTarget, "%s is not a check; residual risk is accepted only for a failed verify, gpu_acceptance, gate or fleet_check", step)
		}
		lookup := node
		if !step.NodeStep() {
			if node != "" && node != FleetWide {
				return refuse(RuleDecisionTarget, "%s is fleet-wide: name node %q", step, FleetWide)
			}
			lookup = ""
		} else if s.Node(node) == nil {
			return refuse(RuleDecisionTarget, "%q is not in this round's order", node)
		}
		if r := s.run(step, lookup); r == nil || r.State != Failed {
			return refuse(RuleDecisionTarget, "%s has not failed; there is no residual risk to accept", step)
		}
	}
	return nil
}
