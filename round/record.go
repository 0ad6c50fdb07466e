package round

import (
	"encoding/json"
	"time"
)

// Kind says what a journal record is.
type Kind string

// Record kinds.
const (
	// KindSessionOpened is written each time a process opens the journal
	// for writing. A step still in flight at that point was left by a
	// process that died: it replays with NeedsRecheck.
	KindSessionOpened Kind = "session_opened"
	// KindPlan fixes the order and the soak length.
	KindPlan         Kind = "plan"
	KindStepStarted  Kind = "step_started"
	KindStepFinished Kind = "step_finished"
	KindStepFailed   Kind = "step_failed"
	KindDecision     Kind = "decision"
	KindLesson       Kind = "lesson"
	KindFindings     Kind = "findings_committed"
	KindTornTail     Kind = "torn_tail"
	// KindNotification records one notification's delivery outcome (sent
	// or failed, to which hook). It changes nothing else in the state.
	KindNotification Kind = "notification"
	// KindRollback records a rollback_node of a node to its old kernel:
	// Outcome "" starts it, done or failed ends it. It is allowed while the
	// round is stopped and leaves the stop in place for a person.
	KindRollback Kind = "rollback"
	// KindReleased records what a node's window let go of when it ended
	// (closed, or left open by an abort): the window Lease and the node's
	// Alertmanager silence, and how each went. It changes nothing else in
	// the state.
	KindReleased Kind = "released"
	// KindOtherActors records what the round saw of, or did to, another
	// party that maintains nodes (Event says which): a wait for a holder
	// beginning, its holders changing and its end; kured's reboot lock
	// taken for the round and let go; the GPU Operator's per-node
	// driver-upgrade skip set on a node. It changes no step's state.
	KindOtherActors Kind = "other_actors"
	// KindPromotion records the promotion gate's verdict on a target
	// kernel as the round's plan took it (Kernel; Detail: the proof or what
	// is missing, and a person's promotion as a residual risk; ApprovalID:
	// that person's kept statement). Written by the server when it writes
	// the plan, from what it verified itself.
	KindPromotion Kind = "promotion"
)

// ActorEvent says what a KindOtherActors record records.
type ActorEvent string

// Actor events.
const (
	// EventWaitBegan: the node's drain waits for the holders in Holders,
	// at most until Until. EventWaitChanged: the holders are another set
	// now. EventWaitEnded: the wait is over; Detail says how (the cordon
	// went ahead, or the round stopped for a person).
	EventWaitBegan   ActorEvent = "wait_began"
	EventWaitChanged ActorEvent = "wait_changed"
	EventWaitEnded   ActorEvent = "wait_ended"
	// EventKuredLockTaken: the round wrote its own holder into kured's
	// lock; EventKuredLockReleased: it took it out again;
	// EventKuredLockReleaseFailed: it could not, and the lock still
	// holds kured back until a person removes it.
	EventKuredLockTaken         ActorEvent = "kured_lock_taken"
	EventKuredLockReleased      ActorEvent = "kured_lock_released"
	EventKuredLockReleaseFailed ActorEvent = "kured_lock_release_failed"
	// EventDriverUpgradeSkipSet: the round labelled the node to keep the
	// GPU Operator's driver upgrade off it during its window (the node's
	// annotation records it as the round's, so any process knows).
	EventDriverUpgradeSkipSet ActorEvent = "driver_upgrade_skip_set"
)

// Holder is another party holding a node, as a wait record keeps it
// (kube/actors' Holder in the journal's words).
type Holder struct {
	Actor   string    `json:"actor"`
	Who     string    `json:"who"`
	Since   time.Time `json:"since,omitzero"`
	What    string    `json:"what,omitempty"`
	Verdict string    `json:"verdict,omitempty"`
}

// Record is one line of the journal.
type Record struct {
	Seq      uint64       `json:"seq"`
	Time     time.Time    `json:"time"`
	Kind     Kind         `json:"kind"`
	Round    string       `json:"round,omitempty"` // session_opened only
	Node     string       `json:"node,omitempty"`
	Step     Step         `json:"step,omitempty"`
	Outcome  Outcome      `json:"outcome,omitempty"`
	Decision DecisionName `json:"decision,omitempty"`
	Detail   string       `json:"detail,omitempty"`
	// Kernel is the running kernel a finished step observed on its node.
	Kernel string `json:"kernel,omitempty"`
	// BootID is the node's boot (/proc/sys/kernel/random/boot_id) that
	// step observed: a trial boot's new boot, the boot a check ran on.
	BootID     string `json:"boot_id,omitempty"`
	ApprovalID string `json:"approval_id,omitempty"`
	// ArgsDigest is ArgsDigest of the tool call's arguments; never the
	// arguments themselves.
	ArgsDigest string    `json:"args_digest,omitempty"`
	Plan       *Schedule `json:"plan,omitempty"`
	// PlanDigest and StepPlan are the plan a person approved for the step
	// that starts (step_started of a destructive step only): re-entry
	// completes exactly this plan, never a file that may have changed.
	PlanDigest string          `json:"plan_digest,omitempty"`
	StepPlan   json.RawMessage `json:"step_plan,omitempty"`
	// Event, Holders and Until are an other_actors record's: what it
	// records, who holds the node (wait events), and when the wait runs
	// out and the round stops for a person.
	Event   ActorEvent `json:"event,omitempty"`
	Holders []Holder   `json:"holders,omitempty"`
	Until   time.Time  `json:"until,omitzero"`
}

// Schedule is what a plan record fixes: the order of the windows and the
// round settings taken from the intent (the soak).
type Schedule struct {
	Order Order `json:"order"`
	// Soak is how long the fleet runs on the new kernels between a green
	// fleet check and autoremove (the intent says, e.g. 48h).
	Soak Duration `json:"soak"`
}

// Meta is what the caller attaches to a record.
type Meta struct {
	// ApprovalID names the person's approval that allowed the step, if any.
	ApprovalID string
	// ArgsDigest is ArgsDigest(arguments) of the tool call.
	ArgsDigest string
	// Detail is a short human-readable note (what was seen, why it failed).
	Detail string
	// Kernel is the running kernel the step observed on its node; the
	// report shows the kernel before and after each window from it.
	Kernel string
	// BootID is the boot of the node the step observed (ended steps only):
	// a later step that depends on this one's outcome holds the host to it.
	BootID string
	// PlanDigest and StepPlan are the approved plan of a starting step.
	PlanDigest string
	StepPlan   json.RawMessage
}
