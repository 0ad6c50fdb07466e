package window

import (
	"fmt"
	"time"
)

// RedGate is the course of a red gate at close_window: a gate may settle
// within the settle time after it first turned red (pods restarting after
// the reboot, a firing alert clearing); past it, the gate stays red and
// the round stops.
type RedGate struct {
	// Since is when the gate first turned red.
	Since time.Time
	// First: it turned red now; Since is to be recorded.
	First bool
	// Settling: still within the settle time; the caller answers in
	// progress and records nothing else.
	Settling bool
	// Until is the end of the settle time.
	Until time.Time
}

// DecideRedGate is the course of a gate red now, which first turned red at
// since (zero: it turns red now).
func DecideRedGate(since, now time.Time, settle time.Duration) RedGate {
	r := RedGate{Since: since}
	if since.IsZero() {
		r.Since, r.First = now, true
	}
	r.Until = r.Since.Add(settle)
	r.Settling = now.Sub(r.Since) < settle
	return r
}

// Next is what to do about the red gate: wait and call again while it may
// settle, else stop for a person.
func (r RedGate) Next() string {
	if r.Settling {
		return fmt.Sprintf("Wait and call close_window again (the gate may settle until %s).", r.Until.UTC().Format(time.RFC3339))
	}
	return "Stop: the gate stayed red. Tell a person what failed; nothing else is cordoned until they sign resume or abort."
}
