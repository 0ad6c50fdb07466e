package round

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// State is the round as the journal tells it. It is rebuilt by replaying
// the journal; the state snapshot (SnapshotPath) is this struct as of a
// prefix of the journal.
type State struct {
	RoundID string    `json:"round_id"`
	LastSeq uint64    `json:"last_seq"`
	Started time.Time `json:"started,omitzero"` // time of the first record
	Updated time.Time `json:"updated,omitzero"` // time of the last record
	// Sessions counts the processes that opened the journal for writing.
	Sessions int       `json:"sessions"`
	Plan     *Schedule `json:"plan,omitempty"`
	// Nodes are the round's nodes in order, with their windows.
	Nodes []*NodeState `json:"nodes,omitempty"`
	// RoundSteps are the round-level steps other than plan.
	RoundSteps map[Step]*StepRun `json:"round_steps"`
	// Current is the node whose window is open, "" when none.
	Current         string    `json:"current_window,omitempty"`
	BaselineTaken   bool      `json:"baseline_taken"`
	FleetCheckGreen bool      `json:"fleet_check_green"`
	SoakStarted     time.Time `json:"soak_started,omitzero"`
	// Stop is set when a step fails and cleared by a resume decision.
	Stop      *Stop      `json:"stop,omitempty"`
	Aborted   bool       `json:"aborted,omitempty"`
	Closed    bool       `json:"closed,omitempty"`
	Failures  []Failure  `json:"failures,omitempty"`
	Decisions []Decision `json:"decisions,omitempty"`
	Lessons   []Lesson   `json:"lessons,omitempty"`
	// FindingsCommitted says lessons and report were committed after the
	// last thing that happened; any later step, decision or lesson clears
	// it, so the committed report is never stale at close.
	FindingsCommitted bool   `json:"findings_committed"`
	FindingsCommit    string `json:"findings_commit,omitempty"`
	// Recoveries are torn journal tails found and truncated on open.
	Recoveries []Recovery `json:"recoveries,omitempty"`
	// Unproven are decision records that counted for nothing when the
	// state was rebuilt: their kept signature was missing or no longer
	// verified (WithDecisionCheck). Detail says why.
	Unproven []Recovery `json:"unproven,omitempty"`
	// Notifications are the delivery outcomes of notifications sent.
	Notifications []Notification `json:"notifications,omitempty"`
	// Rollbacks are the nodes brought back to their old kernel.
	Rollbacks []RollbackRun `json:"rollbacks,omitempty"`
	// Releases say what each ended window let go of (Lease, silence).
	Releases []Notification `json:"releases,omitempty"`
	// Waits are the drains that wait for another party now, one per node,
	// as the other_actors records tell them (begun, not yet ended).
	Waits []Wait `json:"waits,omitempty"`
	// KuredLock is kured's reboot lock as the round took it; nil: the
	// round never took it.
	KuredLock *KuredLockState `json:"kured_lock,omitempty"`
	// OtherActors are the other_actors records in words, in order, for
	// the report: each wait's start, change and end, kured's lock taken
	// and given back, a driver-upgrade skip set.
	OtherActors []Notification `json:"other_actors,omitempty"`
	// Promotions are the promotion gate's verdicts as the plan took them
	// (promotion records), in order; the last one of a kernel stands.
	Promotions []Promotion `json:"promotions,omitempty"`
}

// Wait is a node's drain waiting for another party.
type Wait struct {
	Node string `json:"node"`
	// Seq and Since are the record that began the wait and its time.
	Seq   uint64    `json:"seq"`
	Since time.Time `json:"since"`
	// Until is when the wait runs out and the round stops for a person.
	Until time.Time `json:"until,omitzero"`
	// Holders are who hold the node, as last recorded; Changed counts
	// the times the set changed since the wait began.
	Holders []Holder `json:"holders"`
	Changed int      `json:"changed,omitempty"`
}

// KuredLockState is kured's reboot lock as the round holds it.
type KuredLockState struct {
	// Held: the round's holder is in the lock (as last recorded).
	Held     bool      `json:"held"`
	Taken    time.Time `json:"taken,omitzero"`
	Released time.Time `json:"released,omitzero"`
	// Failure says why the last release failed ("" when it did not):
	// kured stays held back until a person removes the round's holder.
	Failure string `json:"failure,omitempty"`
}

// Wait returns node's wait in progress, or nil.
func (s *State) Wait(node string) *Wait {
	for i := range s.Waits {
		if s.Waits[i].Node == node {
			return &s.Waits[i]
		}
	}
	return nil
}

// RollbackRun is one rollback_node of a node.
type RollbackRun struct {
	Node       string    `json:"node"`
	StartSeq   uint64    `json:"start_seq"`
	Started    time.Time `json:"started"`
	Ended      time.Time `json:"ended,omitzero"`
	State      StepState `json:"state"`
	Detail     string    `json:"detail,omitempty"`
	Kernel     string    `json:"kernel,omitempty"`
	ApprovalID string    `json:"approval_id,omitempty"`
}

// Rollback returns the node's latest rollback, or nil.
func (s *State) Rollback(node string) *RollbackRun {
	for i := len(s.Rollbacks) - 1; i >= 0; i-- {
		if s.Rollbacks[i].Node == node {
			return &s.Rollbacks[i]
		}
	}
	return nil
}

// Notification is one delivery outcome as the journal keeps it (and one
// release of what an ended window held).
type Notification struct {
	Seq    uint64    `json:"seq"`
	Time   time.Time `json:"time"`
	Node   string    `json:"node,omitempty"`
	Detail string    `json:"detail"`
}

// NodeState is one node's place in the order and its steps.
type NodeState struct {
	Position
	Index    int         `json:"index"`
	Window   WindowState `json:"window"`
	Opened   time.Time   `json:"opened,omitzero"`
	ClosedAt time.Time   `json:"closed_at,omitzero"`
	// ClosedSeq is the seq of the record that closed the window.
	ClosedSeq uint64            `json:"closed_seq,omitempty"`
	Steps     map[Step]*StepRun `json:"steps"`
	// KernelBefore is the last kernel seen before trial_boot started,
	// KernelAfter the last one seen after.
	KernelBefore       string `json:"kernel_before,omitempty"`
	KernelAfter        string `json:"kernel_after,omitempty"`
	HypervisorSnapshot bool   `json:"hypervisor_snapshot,omitempty"`
}

// StepRun is one step on one node (or of the round) and its attempts.
type StepRun struct {
	State StepState `json:"state"`
	// NeedsRecheck: the step was in flight when the process that started
	// it died. Re-check the host or cluster and record its outcome; never
	// repeat it blindly.
	NeedsRecheck bool `json:"needs_recheck,omitempty"`
	// RiskAccepted: the step failed and a person accepted the residual
	// risk; it counts as green.
	RiskAccepted bool      `json:"risk_accepted,omitempty"`
	Attempts     []Attempt `json:"attempts,omitempty"`
}

// Attempt is one start of a step and how it ended.
type Attempt struct {
	StartSeq   uint64    `json:"start_seq"`
	EndSeq     uint64    `json:"end_seq,omitempty"`
	Started    time.Time `json:"started"`
	Ended      time.Time `json:"ended,omitzero"`
	Outcome    Outcome   `json:"outcome,omitempty"` // "" while in flight
	Detail     string    `json:"detail,omitempty"`
	ApprovalID string    `json:"approval_id,omitempty"`
	// Kernel and BootID are the node's boot the attempt observed when it
	// ended (a trial boot's new boot, the boot a check ran on); "" when it
	// observed none.
	Kernel string `json:"kernel,omitempty"`
	BootID string `json:"boot_id,omitempty"`
	// PlanDigest and Plan are the approved plan the attempt acts on.
	PlanDigest string          `json:"plan_digest,omitempty"`
	Plan       json.RawMessage `json:"plan,omitempty"`
}

// Stop records the failure that stopped the round.
type Stop struct {
	Seq    uint64    `json:"seq"`
	Node   string    `json:"node,omitempty"`
	Step   Step      `json:"step"`
	Reason string    `json:"reason"`
	Time   time.Time `json:"time"`
}

// Binding names the failure record that stopped the round, the way a
// resume or abort statement must name it: "<seq> sha256:<hex>", the digest
// over the record's sequence number, time, node, step and reason. A later
// stop, even of the same step on the same node, has another binding.
func (s *Stop) Binding() string {
	return Failure{Seq: s.Seq, Time: s.Time, Node: s.Node, Step: s.Step, Reason: s.Reason}.Binding()
}

// Binding names the failure's journal record as a statement about it
// must: "<seq> sha256:<hex>", the digest over the record's sequence
// number, time, node, step and reason (the stop that a failure caused has
// the same binding).
func (f Failure) Binding() string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("mcp-patch stop v1\n%d\n%s\n%s\n%s\n%s\n",
		f.Seq, f.Time.UTC().Format(time.RFC3339Nano), f.Node, f.Step, f.Reason)))
	return fmt.Sprintf("%d sha256:%s", f.Seq, hex.EncodeToString(sum[:]))
}

// LastFailure is the latest failure of step on node ("" for a round
// step), or nil.
func (s *State) LastFailure(step Step, node string) *Failure {
	for i := len(s.Failures) - 1; i >= 0; i-- {
		if f := &s.Failures[i]; f.Step == step && f.Node == node {
			return f
		}
	}
	return nil
}

// Failure is a failed step, kept for the report.
type Failure struct {
	Seq    uint64    `json:"seq"`
	Time   time.Time `json:"time"`
	Node   string    `json:"node,omitempty"`
	Step   Step      `json:"step"`
	Reason string    `json:"reason"`
}

// Decision is a decision or attestation a person recorded.
type Decision struct {
	Seq        uint64       `json:"seq"`
	Time       time.Time    `json:"time"`
	Name       DecisionName `json:"name"`
	Node       string       `json:"node,omitempty"`
	Step       Step         `json:"step,omitempty"`
	Detail     string       `json:"detail,omitempty"`
	ApprovalID string       `json:"approval_id,omitempty"`
}

// Lesson is something learned during the round, for the intent repo.
type Lesson struct {
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"`
	Text string    `json:"text"`
}

// ApplyUnproven takes a decision record whose signature could not be
// proven as a record that changes nothing but its place in the journal:
// the decision does not count, and the state names it (Unproven).
func (s *State) ApplyUnproven(rec Record, why string) error {
	if rec.Seq != s.LastSeq+1 {
		return fmt.Errorf("journal record %d (%s): sequence %d after %d", rec.Seq, rec.Kind, rec.Seq, s.LastSeq)
	}
	s.Unproven = append(s.Unproven, Recovery{Seq: rec.Seq, Time: rec.Time,
		Detail: fmt.Sprintf("decision %s on %s (approval %s) counts for nothing: %s", rec.Decision, orFleet(rec.Node), orNone(rec.ApprovalID), why)})
	s.LastSeq, s.Updated = rec.Seq, rec.Time
	return nil
}

func orFleet(node string) string {
	if node == "" {
		return "the round"
	}
	return node
}

func orNone(id string) string {
	if id == "" {
		return "none"
	}
	return id
}

// where is the stopped step and its node, for a refusal.
func (s *Stop) where() string {
	if s.Node == "" {
		return string(s.Step)
	}
	return string(s.Step) + " on " + s.Node
}

// Recovery records a torn journal tail that was saved and truncated.
type Recovery struct {
	Seq    uint64    `json:"seq"`
	Time   time.Time `json:"time"`
	Detail string    `json:"detail"`
}

// NewState returns the empty state of a round.
func NewState(roundID string) *State {
	return &State{RoundID: roundID, RoundSteps: newRoundSteps()}
}

func newRoundSteps() map[Step]*StepRun {
	m := map[Step]*StepRun{}
	for _, s := range RoundSteps {
		if s != StepPlan {
			m[s] = &StepRun{State: Pending}
		}
	}
	return m
}

// Node returns the state of a node in the order, or nil.
func (s *State) Node(name string) *NodeState {
	for _, n := range s.Nodes {
		if n.Node == name {
			return n
		}
	}
	return nil
}

// StepRun is the run of step on node (node "" for a round step), or nil.
func (s *State) StepRun(step Step, node string) *StepRun {
	if s == nil {
		return nil
	}
	if node == "" {
		return s.RoundSteps[step]
	}
	if n := s.Node(node); n != nil {
		return n.Steps[step]
	}
	return nil
}

// run returns the StepRun of step on node ("" for round-level), or nil.
func (s *State) run(step Step, node string) *StepRun {
	if step.NodeStep() {
		if n := s.Node(node); n != nil {
			return n.Steps[step]
		}
		return nil
	}
	return s.RoundSteps[step]
}

// Green reports whether the step counts as passed: done, or failed with the
// residual risk accepted by a person.
func (r *StepRun) Green() bool {
	return r != nil && (r.State == Done || (r.State == Failed && r.RiskAccepted))
}

// greenSeq is the seq at which the step's last attempt ended, when green.
func (r *StepRun) greenSeq() uint64 {
	if !r.Green() || len(r.Attempts) == 0 {
		return 0
	}
	return r.Attempts[len(r.Attempts)-1].EndSeq
}

// greenAfter reports whether r is green and its last attempt ended after
// the last attempt of prev ended green.
func (r *StepRun) greenAfter(prev *StepRun) bool {
	return r.Green() && prev.Green() && r.greenSeq() > prev.greenSeq()
}

// Last is the latest attempt, nil when there is none.
func (r *StepRun) Last() *Attempt { return r.last() }

func (r *StepRun) last() *Attempt {
	if r == nil || len(r.Attempts) == 0 {
		return nil
	}
	return &r.Attempts[len(r.Attempts)-1]
}

// Apply folds one journal record into the state. It checks that the record
// fits (sequence, known node and step, a finish only for a step in flight)
// and leaves the state unchanged when it does not. It does not apply the
// standing rules: those decide what may start (Admit), while a record says
// what happened.
func (s *State) Apply(rec Record) error {
	if err := s.apply(rec); err != nil {
		return fmt.Errorf("journal record %d (%s): %w", rec.Seq, rec.Kind, err)
	}
	s.LastSeq = rec.Seq
	if s.Started.IsZero() {
		s.Started = rec.Time
	}
	s.Updated = rec.Time
	return nil
}

// maxText bounds free text in a record.
const maxText = 8 << 10

func (s *State) apply(rec Record) error {
	if rec.Seq != s.LastSeq+1 {
		return fmt.Errorf("sequence %d after %d", rec.Seq, s.LastSeq)
	}
	if rec.Time.IsZero() {
		return errors.New("record has no time")
	}
	for _, t := range []string{rec.Detail, rec.Kernel, rec.ApprovalID, rec.ArgsDigest, rec.Node} {
		if len(t) > maxText || !utf8.ValidString(t) {
			return errors.New("record text too long or not UTF-8")
		}
	}
	if s.RoundSteps == nil {
		s.RoundSteps = newRoundSteps()
	}
	switch rec.Kind {
	case KindSessionOpened:
		if !ValidRoundID(rec.Round) {
			return fmt.Errorf("bad round id %q", rec.Round)
		}
		if s.RoundID != "" && s.RoundID != rec.Round {
			return fmt.Errorf("journal of round %s opened as round %s", s.RoundID, rec.Round)
		}
		s.RoundID = rec.Round
		s.Sessions++
		s.forEachRun(func(step Step, r *StepRun) {
			if r.State == InFlight && step != StepSoak {
				r.NeedsRecheck = true
			}
		})
		return nil
	case KindPlan:
		return s.applyPlan(rec)
	case KindStepStarted, KindStepFinished, KindStepFailed:
		return s.applyStep(rec)
	case KindDecision:
		if err := s.AdmitDecision(rec.Decision, rec.Node, rec.Step); err != nil {
			return err
		}
		s.applyDecision(rec)
		s.FindingsCommitted = false
		return nil
	case KindLesson:
		if strings.TrimSpace(rec.Detail) == "" {
			return errors.New("empty lesson")
		}
		s.Lessons = append(s.Lessons, Lesson{Seq: rec.Seq, Time: rec.Time, Text: rec.Detail})
		s.FindingsCommitted = false
		return nil
	case KindFindings:
		s.FindingsCommitted = true
		s.FindingsCommit = rec.Detail
		return nil
	case KindTornTail:
		s.Recoveries = append(s.Recoveries, Recovery{Seq: rec.Seq, Time: rec.Time, Detail: rec.Detail})
		return nil
	case KindRollback:
		if s.Node(rec.Node) == nil {
			return fmt.Errorf("rollback of %q, which is not in the round's order", rec.Node)
		}
		last := s.Rollback(rec.Node)
		switch rec.Outcome {
		case "":
			if last != nil && last.State == InFlight {
				return fmt.Errorf("a rollback of %s is already in flight", rec.Node)
			}
			s.Rollbacks = append(s.Rollbacks, RollbackRun{Node: rec.Node, StartSeq: rec.Seq, Started: rec.Time, State: InFlight,
				Detail: rec.Detail, ApprovalID: rec.ApprovalID})
		case OutcomeDone, OutcomeFailed:
			if last == nil || last.State != InFlight {
				return fmt.Errorf("no rollback of %s in flight to end", rec.Node)
			}
			last.Ended, last.Detail, last.Kernel = rec.Time, rec.Detail, rec.Kernel
			last.State = Done
			if rec.Outcome == OutcomeFailed {
				last.State = Failed
			}
		default:
			return fmt.Errorf("rollback outcome %q", rec.Outcome)
		}
		s.FindingsCommitted = false
		return nil
	case KindNotification:
		if strings.TrimSpace(rec.Detail) == "" {
			return errors.New("empty notification record")
		}
		s.Notifications = append(s.Notifications, Notification{Seq: rec.Seq, Time: rec.Time, Node: rec.Node, Detail: rec.Detail})
		return nil
	case KindReleased:
		if strings.TrimSpace(rec.Detail) == "" {
			return errors.New("empty release record")
		}
		if rec.Node != "" && s.Node(rec.Node) == nil {
			return fmt.Errorf("release of %q, which is not in the round's order", rec.Node)
		}
		s.Releases = append(s.Releases, Notification{Seq: rec.Seq, Time: rec.Time, Node: rec.Node, Detail: rec.Detail})
		return nil
	case KindOtherActors:
		return s.applyOtherActors(rec)
	case KindPromotion:
		if rec.Kernel == "" || strings.TrimSpace(rec.Detail) == "" {
			return errors.New("promotion record without kernel or detail")
		}
		s.Promotions = append(s.Promotions, Promotion{Seq: rec.Seq, Time: rec.Time, Kernel: rec.Kernel, Detail: rec.Detail, ApprovalID: rec.ApprovalID})
		return nil
	}
	return fmt.Errorf("unknown record kind %q", rec.Kind)
}

// applyOtherActors applies an other_actors record: a wait begins, changes
// or ends (one per node at a time); kured's lock is taken, let go, or
// could not be let go; a node's driver-upgrade skip is set (kept in the
// journal and on the node, nothing in the state).
func (s *State) applyOtherActors(rec Record) error {
	for _, h := range rec.Holders {
		for _, t := range []string{h.Actor, h.Who, h.What, h.Verdict} {
			if len(t) > maxText || !utf8.ValidString(t) {
				return errors.New("record text too long or not UTF-8")
			}
		}
	}
	switch rec.Event {
	case EventWaitBegan, EventWaitChanged, EventWaitEnded, EventDriverUpgradeSkipSet:
		if s.Node(rec.Node) == nil {
			return fmt.Errorf("%s of %q, which is not in the round's order", rec.Event, rec.Node)
		}
	}
	w := s.Wait(rec.Node)
	switch rec.Event {
	case EventWaitBegan:
		if w != nil {
			return fmt.Errorf("the wait of %s for another party began already (record %d)", rec.Node, w.Seq)
		}
		if len(rec.Holders) == 0 {
			return fmt.Errorf("a wait of %s that names no holder", rec.Node)
		}
		s.Waits = append(slices.Clip(s.Waits), Wait{Node: rec.Node, Seq: rec.Seq, Since: rec.Time, Until: rec.Until,
			Holders: slices.Clone(rec.Holders)})
	case EventWaitChanged:
		if w == nil {
			return fmt.Errorf("no wait of %s to change", rec.Node)
		}
		if len(rec.Holders) == 0 {
			return fmt.Errorf("a wait of %s that names no holder", rec.Node)
		}
		s.Waits = slices.Clone(s.Waits)
		w = s.Wait(rec.Node)
		w.Holders, w.Until = slices.Clone(rec.Holders), rec.Until
		w.Changed++
	case EventWaitEnded:
		if w == nil {
			return fmt.Errorf("no wait of %s to end", rec.Node)
		}
		s.Waits = slices.DeleteFunc(slices.Clone(s.Waits), func(w Wait) bool { return w.Node == rec.Node })
	case EventKuredLockTaken:
		s.KuredLock = &KuredLockState{Held: true, Taken: rec.Time}
	case EventKuredLockReleased, EventKuredLockReleaseFailed:
		k := KuredLockState{}
		if s.KuredLock != nil {
			k = *s.KuredLock
		}
		if rec.Event == EventKuredLockReleased {
			k.Held, k.Released, k.Failure = false, rec.Time, ""
		} else {
			if strings.TrimSpace(rec.Detail) == "" {
				return errors.New("a failed release of kured's lock that says no why")
			}
			k.Held, k.Failure = true, rec.Detail
		}
		s.KuredLock = &k
	case EventDriverUpgradeSkipSet:
	default:
		return fmt.Errorf("other_actors event %q", rec.Event)
	}
	s.OtherActors = append(s.OtherActors, Notification{Seq: rec.Seq, Time: rec.Time, Node: rec.Node, Detail: actorWords(rec)})
	return nil
}

// actorWords says an other_actors record in words.
func actorWords(rec Record) string {
	who := make([]string, 0, len(rec.Holders))
	for _, h := range rec.Holders {
		who = append(who, h.Actor+" ("+h.Who+")")
	}
	until := ""
	if !rec.Until.IsZero() {
		until = ", at most until " + rec.Until.UTC().Format(time.RFC3339)
	}
	switch rec.Event {
	case EventWaitBegan:
		return "the drain of " + rec.Node + " waits for another party" + until + ": " + strings.Join(who, ", ")
	case EventWaitChanged:
		return "the drain of " + rec.Node + " waits for another set of holders" + until + ": " + strings.Join(who, ", ")
	case EventWaitEnded:
		return "the wait of " + rec.Node + " for another party ended: " + rec.Detail
	}
	return rec.Detail
}

func (s *State) forEachRun(f func(Step, *StepRun)) {
	for _, n := range s.Nodes {
		for _, st := range NodeSteps {
			if r := n.Steps[st]; r != nil {
				f(st, r)
			}
		}
	}
	for _, st := range RoundSteps {
		if r := s.RoundSteps[st]; r != nil {
			f(st, r)
		}
	}
}

func (s *State) applyPlan(rec Record) error {
	if rec.Plan == nil || len(rec.Plan.Order.Positions) == 0 {
		return errors.New("plan without an order")
	}
	if rec.Plan.Soak < 0 {
		return errors.New("negative soak")
	}
	if s.Closed || s.Aborted || s.anyWindowOpened() {
		return errors.New("plan after the round started its windows")
	}
	seen := map[string]bool{}
	nodes := make([]*NodeState, 0, len(rec.Plan.Order.Positions))
	for i, p := range rec.Plan.Order.Positions {
		if p.Node == "" || p.Node == FleetWide || len(p.Node) > 253 || seen[p.Node] {
			return fmt.Errorf("plan: bad or repeated node %q", p.Node)
		}
		switch p.Role {
		case RoleControlPlane, RoleGPU, RoleOther:
		default:
			return fmt.Errorf("plan: node %s has unknown role %q", p.Node, p.Role)
		}
		seen[p.Node] = true
		n := s.Node(p.Node)
		if n == nil {
			n = &NodeState{Window: WindowPending, Steps: map[Step]*StepRun{}}
		}
		n.Position, n.Index = p, i
		for _, st := range NodeSteps {
			if st == StepGPUAcceptance && !p.GPU {
				delete(n.Steps, st)
				continue
			}
			if n.Steps[st] == nil {
				n.Steps[st] = &StepRun{State: Pending}
			}
		}
		nodes = append(nodes, n)
	}
	plan := *rec.Plan
	plan.Order.Positions = slices.Clone(plan.Order.Positions)
	plan.Order.Notes = slices.Clone(plan.Order.Notes)
	s.Plan = &plan
	s.Nodes = nodes
	s.FindingsCommitted = false
	return nil
}

func (s *State) anyWindowOpened() bool {
	for _, n := range s.Nodes {
		if n.Window != WindowPending {
			return true
		}
	}
	return false
}

func (s *State) applyStep(rec Record) (err error) {
	defer func() {
		if err == nil && rec.Step != StepClose {
			s.FindingsCommitted = false
		}
	}()
	if !rec.Step.Valid() || rec.Step == StepPlan {
		return fmt.Errorf("unknown step %q", rec.Step)
	}
	var n *NodeState
	if rec.Step.NodeStep() {
		if n = s.Node(rec.Node); n == nil {
			return fmt.Errorf("step %s on node %q, which is not in the order", rec.Step, rec.Node)
		}
	} else if rec.Node != "" {
		return fmt.Errorf("round step %s names node %s", rec.Step, rec.Node)
	}
	r := s.run(rec.Step, rec.Node)
	if r == nil {
		return fmt.Errorf("step %s does not apply to node %s", rec.Step, rec.Node)
	}
	if rec.Kind == KindStepStarted {
		if r.State == InFlight {
			if !rec.Step.ReadOnly() && (rec.ApprovalID == "" || rec.PlanDigest == "") {
				return fmt.Errorf("%s started again while in flight without a fresh approval", rec.Step)
			}
			a := r.last()
			a.Outcome, a.EndSeq, a.Ended = OutcomeAbandoned, rec.Seq, rec.Time
		}
		if rec.Step == StepDrain {
			switch {
			case n.Window == WindowClosed:
				return fmt.Errorf("drain of %s after its window closed", n.Node)
			case s.Current != "" && s.Current != n.Node:
				return fmt.Errorf("drain of %s while the window of %s is open", n.Node, s.Current)
			case n.Window == WindowPending:
				n.Window, n.Opened = WindowOpen, rec.Time
				s.Current = n.Node
			}
		}
		if rec.Step == StepSoak {
			s.SoakStarted = rec.Time
		}
		if soak := s.RoundSteps[StepSoak]; rec.Step == StepAutoremove && soak.State == InFlight {
			// The soak ends when autoremove starts.
			a := soak.last()
			a.Outcome, a.EndSeq, a.Ended = OutcomeDone, rec.Seq, rec.Time
			soak.State = Done
		}
		r.State, r.NeedsRecheck, r.RiskAccepted = InFlight, false, false
		r.Attempts = append(r.Attempts, Attempt{StartSeq: rec.Seq, Started: rec.Time,
			ApprovalID: rec.ApprovalID, Detail: rec.Detail, PlanDigest: rec.PlanDigest, Plan: rec.StepPlan})
		return nil
	}

	if r.State != InFlight {
		return fmt.Errorf("%s of %s, which is not in flight", rec.Kind, rec.Step)
	}
	if rec.Kind == KindStepFailed && rec.Outcome == OutcomeInterrupted {
		// The round stops; the step stays in flight, its attempt open, and
		// is re-checked on the host (never repeated) after a resume.
		r.NeedsRecheck = true
		s.Failures = append(s.Failures, Failure{Seq: rec.Seq, Time: rec.Time, Node: rec.Node, Step: rec.Step, Reason: rec.Detail})
		if s.Stop == nil && !s.Aborted && !s.Closed {
			s.Stop = &Stop{Seq: rec.Seq, Node: rec.Node, Step: rec.Step, Reason: rec.Detail, Time: rec.Time}
		}
		return nil
	}
	a := r.last()
	a.EndSeq, a.Ended, a.Kernel, a.BootID = rec.Seq, rec.Time, rec.Kernel, rec.BootID
	if rec.Detail != "" {
		a.Detail = rec.Detail
	}
	r.NeedsRecheck = false
	if n != nil && rec.Kernel != "" {
		if tb := n.Steps[StepTrialBoot]; len(tb.Attempts) > 0 && tb.Attempts[0].StartSeq < rec.Seq {
			n.KernelAfter = rec.Kernel
		} else {
			n.KernelBefore = rec.Kernel
		}
	}
	if rec.Kind == KindStepFailed {
		a.Outcome, r.State = OutcomeFailed, Failed
		s.Failures = append(s.Failures, Failure{Seq: rec.Seq, Time: rec.Time, Node: rec.Node, Step: rec.Step, Reason: rec.Detail})
		if rec.Step == StepFleetCheck {
			s.FleetCheckGreen = false
		}
		if s.Stop == nil && !s.Aborted && !s.Closed {
			s.Stop = &Stop{Seq: rec.Seq, Node: rec.Node, Step: rec.Step, Reason: rec.Detail, Time: rec.Time}
		}
		return nil
	}
	a.Outcome, r.State = OutcomeDone, Done
	switch rec.Step {
	case StepBaseline:
		s.BaselineTaken = true
	case StepFleetCheck:
		s.FleetCheckGreen = true
	case StepClose:
		s.Closed = true
	case StepGate:
		s.maybeCloseWindow(n, rec)
	}
	return nil
}

// maybeCloseWindow closes n's window when its gate is green after a green
// promote.
func (s *State) maybeCloseWindow(n *NodeState, rec Record) {
	if n.Window != WindowOpen || !n.Steps[StepGate].greenAfter(n.Steps[StepPromote]) {
		return
	}
	n.Window, n.ClosedAt, n.ClosedSeq = WindowClosed, rec.Time, rec.Seq
	if s.Current == n.Node {
		s.Current = ""
	}
}

func (s *State) applyDecision(rec Record) {
	s.Decisions = append(s.Decisions, Decision{Seq: rec.Seq, Time: rec.Time, Name: rec.Decision,
		Node: rec.Node, Step: rec.Step, Detail: rec.Detail, ApprovalID: rec.ApprovalID})
	switch rec.Decision {
	case DecisionResume:
		if r := s.run(s.Stop.Step, s.Stop.Node); r != nil && r.State == Failed && !r.RiskAccepted {
			r.State = Pending
		}
		s.Stop = nil
	case DecisionAbort:
		s.Aborted = true
	case DecisionHypervisorSnapshotTaken:
		s.Node(rec.Node).HypervisorSnapshot = true
	case DecisionResidualRiskAccepted:
		if rec.Step == "" {
			return
		}
		node := rec.Node
		if !rec.Step.NodeStep() {
			node = ""
		}
		s.run(rec.Step, node).RiskAccepted = true
		switch rec.Step {
		case StepFleetCheck:
			s.FleetCheckGreen = true
		case StepGate:
			s.maybeCloseWindow(s.Node(rec.Node), rec)
		}
	}
}

// Promotion is a promotion record: the gate's verdict on one target kernel.
type Promotion struct {
	Seq        uint64    `json:"seq"`
	Time       time.Time `json:"time"`
	Kernel     string    `json:"kernel"`
	Detail     string    `json:"detail"`
	ApprovalID string    `json:"approval_id,omitempty"`
}

// LastPromotion is the last promotion record of kernel, if any.
func (s *State) LastPromotion(kernel string) (Promotion, bool) {
	for i := len(s.Promotions) - 1; i >= 0; i-- {
		if s.Promotions[i].Kernel == kernel {
			return s.Promotions[i], true
		}
	}
	return Promotion{}, false
}
