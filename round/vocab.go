package round

import (
	"encoding/json"
	"fmt"
	"regexp"
	"time"
)

// Step names one step of the round. Node steps name a node; round-level
// steps do not.
type Step string

// Steps of a node: preflight first, then the window in this order.
const (
	StepInspect       Step = "inspect"
	StepSimulate      Step = "simulate"
	StepDownload      Step = "download"
	StepSnapshot      Step = "snapshot"
	StepDrain         Step = "drain"
	StepInstall       Step = "install"
	StepTrialBoot     Step = "trial_boot"
	StepVerify        Step = "verify"
	StepUncordon      Step = "uncordon"
	StepGPUAcceptance Step = "gpu_acceptance"
	StepPromote       Step = "promote"
	StepGate          Step = "gate"
)

// Round-level steps.
const (
	StepPlan       Step = "plan"
	StepBaseline   Step = "baseline"
	StepFleetCheck Step = "fleet_check"
	StepSoak       Step = "soak"
	StepAutoremove Step = "autoremove"
	StepClose      Step = "close"
)

// PreflightSteps run before a node's window; they may run on the next node
// while another window is open.
var PreflightSteps = []Step{StepInspect, StepSimulate, StepDownload, StepSnapshot}

// WindowSteps are a node's window, in order. gpu_acceptance applies to GPU
// servers only.
var WindowSteps = []Step{StepDrain, StepInstall, StepTrialBoot, StepVerify, StepUncordon,
	StepGPUAcceptance, StepPromote, StepGate}

// NodeSteps is every node step, preflight then window.
var NodeSteps = append(append([]Step{}, PreflightSteps...), WindowSteps...)

// RoundSteps are the round-level steps, in order.
var RoundSteps = []Step{StepPlan, StepBaseline, StepFleetCheck, StepSoak, StepAutoremove, StepClose}

var stepInfo = map[Step]struct {
	node     bool   // names a node
	readOnly bool   // changes nothing on hosts or cluster
	window   bool   // only inside the node's open window
	check    bool   // a check whose failure a person may accept as residual risk
	tool     string // the MCP tool that runs it (DESIGN §4), "" where none is fixed
}{
	StepInspect:       {node: true, readOnly: true, tool: "record_inspection"},
	StepSimulate:      {node: true, readOnly: true, tool: "record_simulation"},
	StepDownload:      {node: true, tool: "download_updates"},
	StepSnapshot:      {node: true, tool: "snapshot_node"},
	StepDrain:         {node: true, window: true, tool: "drain_node"},
	StepInstall:       {node: true, window: true, tool: "install_updates"},
	StepTrialBoot:     {node: true, window: true, tool: "trial_boot"},
	StepVerify:        {node: true, readOnly: true, check: true, tool: "record_verification"},
	StepUncordon:      {node: true, window: true, tool: "uncordon_node"},
	StepGPUAcceptance: {node: true, window: true, check: true, tool: "gpu_acceptance"},
	StepPromote:       {node: true, window: true, tool: "promote_kernel"},
	StepGate:          {node: true, readOnly: true, check: true, tool: "close_window"},
	StepPlan:          {tool: "plan_round"},
	StepBaseline:      {readOnly: true, tool: "plan_round"},
	StepFleetCheck:    {readOnly: true, check: true, tool: "record_fleet_check"},
	StepSoak:          {},
	StepAutoremove:    {tool: "autoremove"},
	StepClose:         {},
}

// Valid reports whether s is a known step.
func (s Step) Valid() bool { _, ok := stepInfo[s]; return ok }

// NodeStep reports whether s names a node (preflight and window steps).
func (s Step) NodeStep() bool { return stepInfo[s].node }

// ReadOnly reports whether s changes nothing on hosts or cluster. Read-only
// steps are always admitted.
func (s Step) ReadOnly() bool { return stepInfo[s].readOnly }

// InWindow reports whether s may only run inside its node's open window.
// The gate is read-only and so not ruled, though it closes the window.
func (s Step) InWindow() bool { return stepInfo[s].window }

// Check reports whether s is a check whose failure a person may accept as
// residual risk (residual_risk_accepted).
func (s Step) Check() bool { return stepInfo[s].check }

// Tool is the MCP tool that runs s, "" where the design names none.
func (s Step) Tool() string { return stepInfo[s].tool }

// StepState is where a step stands.
type StepState string

// Step states.
const (
	Pending  StepState = "pending"
	InFlight StepState = "in_flight"
	Done     StepState = "done"
	Failed   StepState = "failed"
)

// Outcome of one attempt of a step.
type Outcome string

// Outcomes. Abandoned is an attempt of a read-only check that was in flight
// when its process died and was superseded by a new attempt. Interrupted
// marks a step_failed record that stops the round while the step's work
// on the host runs on (a detached install, a reboot) because this server
// may no longer follow it (its window Lease was lost): the attempt stays
// open and the step in flight, to be observed, never repeated, once a
// person has resumed the round.
const (
	OutcomeDone        Outcome = "done"
	OutcomeFailed      Outcome = "failed"
	OutcomeAbandoned   Outcome = "abandoned"
	OutcomeInterrupted Outcome = "interrupted"
)

// WindowState is where a node's window stands.
type WindowState string

// Window states.
const (
	WindowPending WindowState = "pending"
	WindowOpen    WindowState = "open"
	WindowClosed  WindowState = "closed"
)

// Role of a node in the round.
type Role string

// Roles. A control-plane node with GPUs is patched as control plane (and
// still gets gpu_acceptance).
const (
	RoleControlPlane Role = "control-plane"
	RoleGPU          Role = "gpu"
	RoleOther        Role = "other"
)

// DecisionName names a decision or attestation a person recorded.
type DecisionName string

// Decisions. Resume and abort answer a stopped round; the attestations are
// statements only a person can make (the policy layer checks the signature;
// this package records them and lets them count).
const (
	// DecisionResume clears the stop and re-allows the failed step.
	DecisionResume DecisionName = "resume"
	// DecisionAbort ends the round: afterwards only handing cordoned nodes
	// back (uncordon) and close are admitted.
	DecisionAbort DecisionName = "abort"
	// DecisionHypervisorSnapshotTaken attests that a VM node's hypervisor
	// snapshot exists; install on a VM node needs it.
	DecisionHypervisorSnapshotTaken DecisionName = "hypervisor_snapshot_taken"
	// DecisionResidualRiskAccepted accepts a failed check (verify,
	// gpu_acceptance, gate, fleet_check) as good enough; the check then
	// counts as green. Without a step it is recorded for the report only.
	DecisionResidualRiskAccepted DecisionName = "residual_risk_accepted"
)

// Valid reports whether d is a known decision.
func (d DecisionName) Valid() bool {
	switch d {
	case DecisionResume, DecisionAbort, DecisionHypervisorSnapshotTaken, DecisionResidualRiskAccepted:
		return true
	}
	return false
}

// FleetWide is the node name a decision uses for the whole fleet.
const FleetWide = "*"

var roundIDRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// ValidRoundID reports whether id can name a round (and its directory).
func ValidRoundID(id string) bool { return roundIDRE.MatchString(id) }

// Duration is a time.Duration written as text ("48h0m0s") in JSON, so the
// journal and state file read well.
type Duration time.Duration

// MarshalJSON writes the duration as Go duration text.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads Go duration text.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration: %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration: %w", err)
	}
	*d = Duration(v)
	return nil
}
