package window

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mcp-patch/mcp-patch/round"
)

// EventKind names a window transition.
type EventKind string

// Transitions the recorder reports.
const (
	EventStarted  EventKind = "started"
	EventFinished EventKind = "finished"
	EventFailed   EventKind = "failed"
	// EventStopped is a failure that stopped the round (the first one).
	EventStopped EventKind = "stopped"
)

// Event is one transition, after the journal holds it.
type Event struct {
	Kind       EventKind
	Round      string
	Step       round.Step
	Node       string
	ApprovalID string
	PlanDigest string
	Detail     string
	Time       time.Time
}

// Approval is the verified approval a step starts under.
type Approval struct {
	ID     string
	Digest string
}

// Recorder writes a round's journal records for the window. Every method
// returns the journal's error; none is ever dropped: a step whose record
// could not be written stops and says so.
type Recorder struct {
	J Journal
	// Events, when set, receives each transition once it is journaled.
	Events func(Event)
	// Durable, when set, runs after an approved step's start is journaled
	// and before Start returns, so before the step acts: it puts the
	// record where another server that takes the round over finds it (the
	// intent remote, the head published on the window Lease). When it
	// fails, Start fails and the step does nothing: it stays in flight with
	// nothing begun, and only a fresh approval starts it again.
	Durable func(round.Record) error
	// Now stamps events; nil: time.Now.
	Now func() time.Time
}

func (r *Recorder) emit(kind EventKind, rec round.Record, step round.Step, node string) {
	if r.Events == nil {
		return
	}
	t := rec.Time
	if t.IsZero() && r.Now != nil {
		t = r.Now()
	}
	r.Events(Event{Kind: kind, Round: r.J.RoundID(), Step: step, Node: node, ApprovalID: rec.ApprovalID,
		PlanDigest: rec.PlanDigest, Detail: rec.Detail, Time: t})
}

// InFlight is the step's run when it is in flight, else nil.
func (r *Recorder) InFlight(step round.Step, node string) *round.StepRun {
	run := r.J.StepRun(step, node)
	if run == nil || run.State != round.InFlight {
		return nil
	}
	return run
}

// StepRun is the run of step on node ("" for round steps), or nil.
func StepRun(st *round.State, step round.Step, node string) *round.StepRun {
	return st.StepRun(step, node)
}

// Start records that an approved step begins, with the approval id, the
// plan digest and the plan itself, before anything acts. A step in flight
// whose host showed nothing began is restarted under the fresh approval.
func (r *Recorder) Start(p Plan, a Approval) error {
	if a.ID == "" || a.Digest != p.Digest() {
		return fmt.Errorf("start %s on %s: the approval (digest %s) does not cover the plan (digest %s)", p.Step(), p.Target(), a.Digest, p.Digest())
	}
	raw, err := Encode(p)
	if err != nil {
		return err
	}
	node := p.Target()
	if node == FleetTarget {
		node = ""
	}
	m := round.Meta{ApprovalID: a.ID, PlanDigest: a.Digest, StepPlan: raw}
	var rec round.Record
	if r.InFlight(p.Step(), node) != nil {
		rec, err = r.J.RestartStep(p.Step(), node, m)
	} else {
		rec, err = r.J.StartStep(p.Step(), node, m)
	}
	if err != nil {
		return err
	}
	r.emit(EventStarted, rec, p.Step(), node)
	if r.Durable != nil {
		if err := r.Durable(rec); err != nil {
			return fmt.Errorf("%s on %s started but its record is not where another server would find it, so it does nothing: %w", p.Step(), orRound(node), err)
		}
	}
	return nil
}

// Begin records that a step without an approval begins (write steps,
// checks being recorded); a step already in flight is carried on.
func (r *Recorder) Begin(step round.Step, node string) error {
	if r.InFlight(step, node) != nil && !step.ReadOnly() {
		return nil
	}
	rec, err := r.J.StartStep(step, node, round.Meta{})
	if err != nil {
		return err
	}
	r.emit(EventStarted, rec, step, node)
	return nil
}

// Finish records that a step in flight ended green.
func (r *Recorder) Finish(step round.Step, node, kernel, detail string) error {
	return r.FinishOn(step, node, Boot{Kernel: kernel}, detail)
}

// FinishOn records that a step in flight ended green on the node's boot
// b: what a later step holds the host to (DecideOnTrialBoot).
func (r *Recorder) FinishOn(step round.Step, node string, b Boot, detail string) error {
	rec, err := r.J.FinishStep(step, node, round.Meta{Kernel: b.Kernel, BootID: b.ID, Detail: detail})
	if err != nil {
		return fmt.Errorf("record %s on %s as finished: %w", step, orRound(node), err)
	}
	r.emit(EventFinished, rec, step, node)
	return nil
}

// Fail records that a step in flight failed: the round stops.
func (r *Recorder) Fail(step round.Step, node, detail string) error {
	return r.FailOn(step, node, Boot{}, detail)
}

// FailOn records that a check failed on the node's boot b: the round
// stops; a person who accepts the risk accepts it for that boot.
func (r *Recorder) FailOn(step round.Step, node string, b Boot, detail string) error {
	wasStopped := r.J.Shared().Stop != nil
	rec, err := r.J.FailStep(step, node, round.Meta{Kernel: b.Kernel, BootID: b.ID, Detail: detail})
	if err != nil {
		return fmt.Errorf("record %s on %s as failed: %w", step, orRound(node), err)
	}
	r.emit(EventFailed, rec, step, node)
	if !wasStopped && r.J.Shared().Stop != nil {
		r.emit(EventStopped, rec, step, node)
	}
	return nil
}

// Interrupt records that this server stopped following step on node,
// in flight, whose work on the host runs on: the round stops and the step
// stays in flight (round.OutcomeInterrupted), observed after a resume.
func (r *Recorder) Interrupt(step round.Step, node, detail string) error {
	wasStopped := r.J.Shared().Stop != nil
	rec, err := r.J.InterruptStep(step, node, round.Meta{Detail: detail})
	if err != nil {
		return fmt.Errorf("record %s on %s as interrupted: %w", step, orRound(node), err)
	}
	r.emit(EventFailed, rec, step, node)
	if !wasStopped && r.J.Shared().Stop != nil {
		r.emit(EventStopped, rec, step, node)
	}
	return nil
}

// Stop records a failure of step on node, starting the step first when it
// is not in flight (a decision that stops the round before it acts).
func (r *Recorder) Stop(step round.Step, node, detail string) error {
	if r.InFlight(step, node) == nil {
		if _, err := r.J.StartStep(step, node, round.Meta{}); err != nil {
			var re *round.RuleError
			if errors.As(err, &re) && r.J.Shared().Stop != nil {
				return nil // already stopped: the first failure stands
			}
			return fmt.Errorf("record %s on %s as started before its failure: %w", step, orRound(node), err)
		}
	}
	return r.Fail(step, node, detail)
}

// Lesson records something the window taught.
func (r *Recorder) Lesson(text string) error {
	if _, err := r.J.Lesson(text); err != nil {
		return fmt.Errorf("record the lesson: %w", err)
	}
	return nil
}

// Stopped is a step that stopped the round; Journal is the error of the
// journal write when recording it failed too (then the stop is not on
// record and a person must see this answer).
type Stopped struct {
	Reasons []string
	Next    string
	Journal error
}

func (s *Stopped) Error() string {
	msg := strings.Join(s.Reasons, "; ")
	if s.Journal != nil {
		msg += " (and the failure could not be recorded: " + s.Journal.Error() + ")"
	}
	return msg
}

// StopWith records the failure and returns it as *Stopped carrying the
// journal's error, if any: the one call a step makes to stop.
func (r *Recorder) StopWith(step round.Step, node, next string, reasons ...string) error {
	err := r.Stop(step, node, strings.Join(reasons, "; "))
	if err != nil {
		reasons = append(reasons, "the failure could not be recorded in the journal: "+err.Error())
	}
	return &Stopped{Reasons: reasons, Next: next, Journal: err}
}

// FailWith is StopWith for a step already in flight.
func (r *Recorder) FailWith(step round.Step, node, next string, reasons ...string) error {
	err := r.Fail(step, node, strings.Join(reasons, "; "))
	if err != nil {
		reasons = append(reasons, "the failure could not be recorded in the journal: "+err.Error())
	}
	return &Stopped{Reasons: reasons, Next: next, Journal: err}
}

func orRound(node string) string {
	if node == "" {
		return "the round"
	}
	return node
}
