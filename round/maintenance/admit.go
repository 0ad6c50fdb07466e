package maintenance

import (
	"fmt"
	"slices"
	"time"
)

// Expected is the window length a node is assumed to need, and where the
// figure comes from.
type Expected struct {
	Length time.Duration
	// Source: "median" (of this round's closed windows), "estimate" (the
	// intent's estimated_window_minutes) or "none".
	Source string
}

// ExpectedWindow is the median of the round's closed windows so far, or
// the intent's estimate when none closed yet.
func ExpectedWindow(closed []time.Duration, estimate time.Duration) Expected {
	var ds []time.Duration
	for _, d := range closed {
		if d > 0 {
			ds = append(ds, d)
		}
	}
	if len(ds) == 0 {
		if estimate > 0 {
			return Expected{Length: estimate, Source: "estimate"}
		}
		return Expected{Source: "none"}
	}
	slices.Sort(ds)
	k := len(ds)
	if k%2 == 1 {
		return Expected{Length: ds[k/2], Source: "median"}
	}
	return Expected{Length: (ds[k/2-1] + ds[k/2]) / 2, Source: "median"}
}

// Decision says whether a node's window may start now.
type Decision struct {
	Admit bool `json:"admit"`
	// Window is the maintenance window the node would run in (when admitted)
	// or the next one it fits in.
	Window Interval `json:"window,omitzero"`
	// NextFit is when the node's window can start next (zero when admitted
	// now or when no window is long enough).
	NextFit time.Time `json:"next_fit,omitzero"`
	Reason  string    `json:"reason,omitempty"`
}

// AdmitStart decides whether a step that starts a node (the drain) may
// begin at now: only when the node's expected window fits before the
// maintenance window now is in ends. A node already in progress is not
// asked: it finishes. An unrestricted schedule admits everything; an
// expected length of zero (nothing measured, no estimate) needs only an
// open window.
func AdmitStart(s Schedule, now time.Time, exp Expected) Decision {
	if !s.Restricted() {
		return Decision{Admit: true}
	}
	cur, in := s.Current(now)
	if in && cur.End.Sub(now) >= exp.Length {
		return Decision{Admit: true, Window: cur}
	}
	need := fmt.Sprintf("the node's expected window of %s (%s)", exp.Length.Round(time.Minute), exp.Source)
	if exp.Length == 0 {
		need = "an open maintenance window"
	}
	var d Decision
	if in {
		d.Reason = fmt.Sprintf("the maintenance window ends at %s, %s left, too little for %s",
			cur.End.Format(time.RFC3339), cur.End.Sub(now).Round(time.Minute), need)
	} else {
		d.Reason = fmt.Sprintf("outside the maintenance windows; the drain needs %s", need)
	}
	start, ok := s.Fit(now, max(exp.Length, time.Nanosecond))
	if !ok {
		d.Reason += fmt.Sprintf("; no maintenance window in the next %d days is that long (the longest is %s): lengthen a window or lower the estimate",
			int(horizon.Hours()/24), s.Longest(now).Round(time.Minute))
		return d
	}
	d.NextFit = start
	if iv, ok := s.Current(start); ok {
		d.Window = iv
	}
	d.Reason += fmt.Sprintf("; the next window it fits in opens at %s", start.Format(time.RFC3339))
	return d
}
