// Package maintenance owns the maintenance windows a team allows patch work
// in: their declaration (days, start, end, IANA time zone), its validation,
// and the pure decisions built on them — is a drain admitted now, when does
// the next window open, how much window time lies between two instants.
// It reads the clock it is handed and nothing else: no I/O, no journal.
package maintenance

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
	_ "time/tzdata" // zones resolve on hosts without /usr/share/zoneinfo
)

// Declared is one maintenance window as the intent writes it.
type Declared struct {
	// Days the window starts on: mon..sun (or full English names). A
	// window whose end is not after its start runs past midnight into
	// the next day.
	Days []string `json:"days"`
	// Start and End are wall-clock times "HH:MM" in TimeZone; End "24:00"
	// is midnight at the end of the day.
	Start string `json:"start"`
	End   string `json:"end"`
	// TimeZone is an IANA zone name ("Europe/Berlin", "UTC").
	TimeZone string `json:"time_zone"`
}

// Window is one validated declaration.
type Window struct {
	Days       []time.Weekday
	Start, End int // minutes after local midnight; End may exceed 1440 when the window crosses midnight
	Zone       *time.Location
	Declared   Declared
}

// Schedule is a set of windows. The zero Schedule has no windows, which
// means no restriction: every instant is window time.
type Schedule struct {
	Windows []Window
}

// Interval is one occurrence of window time [Start, End).
type Interval struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
}

// Len is the interval's length.
func (iv Interval) Len() time.Duration { return iv.End.Sub(iv.Start) }

// horizon bounds every search for a window: a schedule with no window long
// enough within it answers "none".
const horizon = 400 * 24 * time.Hour

var dayNames = map[string]time.Weekday{
	"sun": time.Sunday, "mon": time.Monday, "tue": time.Tuesday, "wed": time.Wednesday,
	"thu": time.Thursday, "fri": time.Friday, "sat": time.Saturday,
	"sunday": time.Sunday, "monday": time.Monday, "tuesday": time.Tuesday, "wednesday": time.Wednesday,
	"thursday": time.Thursday, "friday": time.Friday, "saturday": time.Saturday,
}

// Compile validates the declarations and returns their schedule. Each
// problem is named by the window's position (windows[2].time_zone): an
// unknown zone, a malformed or empty window, no days, a repeated day, or
// two windows that overlap (touching is allowed: they join).
func Compile(decls []Declared) (Schedule, error) {
	var errs []error
	var s Schedule
	for i, d := range decls {
		field := fmt.Sprintf("windows[%d]", i)
		w, err := compileOne(field, d)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s.Windows = append(s.Windows, w)
	}
	if len(errs) > 0 {
		return Schedule{}, errors.Join(errs...)
	}
	if err := s.checkOverlap(); err != nil {
		return Schedule{}, err
	}
	return s, nil
}

func compileOne(field string, d Declared) (Window, error) {
	var errs []error
	bad := func(sub, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s.%s: "+format, append([]any{field, sub}, args...)...))
	}
	w := Window{Declared: d}
	if d.TimeZone == "" {
		bad("time_zone", "is empty, want an IANA zone such as Europe/Berlin or UTC")
	} else if loc, err := time.LoadLocation(d.TimeZone); err != nil || d.TimeZone == "Local" {
		bad("time_zone", "%q is not an IANA time zone", d.TimeZone)
	} else {
		w.Zone = loc
	}
	if len(d.Days) == 0 {
		bad("days", "is empty, want days such as [sat, sun]")
	}
	for _, name := range d.Days {
		wd, ok := dayNames[strings.ToLower(strings.TrimSpace(name))]
		if !ok {
			bad("days", "%q is not a day (mon, tue, wed, thu, fri, sat, sun)", name)
			continue
		}
		if slices.Contains(w.Days, wd) {
			bad("days", "%q is listed twice", name)
			continue
		}
		w.Days = append(w.Days, wd)
	}
	start, errS := clock(d.Start, false)
	if errS != nil {
		bad("start", "%v", errS)
	}
	end, errE := clock(d.End, true)
	if errE != nil {
		bad("end", "%v", errE)
	}
	if errS == nil && errE == nil {
		if start == end {
			bad("end", "%s equals start %s: the window is empty", d.End, d.Start)
		}
		if end <= start {
			end += 24 * 60 // runs past midnight
		}
		w.Start, w.End = start, end
	}
	if len(errs) > 0 {
		return Window{}, errors.Join(errs...)
	}
	return w, nil
}

// clock parses "HH:MM"; "24:00" only when allow24.
func clock(s string, allow24 bool) (int, error) {
	var h, m int
	if len(s) != 5 || s[2] != ':' {
		return 0, fmt.Errorf("%q is not a time HH:MM", s)
	}
	if _, err := fmt.Sscanf(s, "%02d:%02d", &h, &m); err != nil {
		return 0, fmt.Errorf("%q is not a time HH:MM", s)
	}
	if h == 24 && m == 0 && allow24 {
		return 24 * 60, nil
	}
	if h < 0 || h > 23 || m < 0 || m > 59 {
		return 0, fmt.Errorf("%q is not a time of day (00:00-23:59)", s)
	}
	return h*60 + m, nil
}

// checkOverlap expands every window over a fixed reference year (so that
// zones with different DST rules are compared across their changes) and
// refuses two occurrences of different windows that overlap.
func (s Schedule) checkOverlap() error {
	ref := time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)
	type occ struct {
		Interval
		w int
	}
	var all []occ
	for i, w := range s.Windows {
		for _, iv := range w.occurrences(ref.Add(-48*time.Hour), ref.Add(366*24*time.Hour)) {
			all = append(all, occ{iv, i})
		}
	}
	sort.Slice(all, func(a, b int) bool { return all[a].Start.Before(all[b].Start) })
	seen := map[[2]int]bool{}
	var errs []error
	for a := range all {
		for b := a + 1; b < len(all) && all[b].Start.Before(all[a].End); b++ {
			if all[a].w == all[b].w {
				continue // a window's own days cannot overlap each other, but a 24h window touching itself is fine
			}
			k := [2]int{min(all[a].w, all[b].w), max(all[a].w, all[b].w)}
			if seen[k] {
				continue
			}
			seen[k] = true
			errs = append(errs, fmt.Errorf("windows[%d] and windows[%d] overlap (for example %s to %s and %s to %s)",
				k[0], k[1], all[a].Start.Format(time.RFC3339), all[a].End.Format(time.RFC3339),
				all[b].Start.Format(time.RFC3339), all[b].End.Format(time.RFC3339)))
		}
	}
	return errors.Join(errs...)
}

// occurrences lists w's intervals that end after from and start before to.
func (w Window) occurrences(from, to time.Time) []Interval {
	var out []Interval
	day := from.In(w.Zone).AddDate(0, 0, -2)
	day = time.Date(day.Year(), day.Month(), day.Day(), 0, 0, 0, 0, w.Zone)
	for ; day.Before(to); day = day.AddDate(0, 0, 1) {
		if !slices.Contains(w.Days, day.Weekday()) {
			continue
		}
		iv := Interval{Start: at(day, w.Start), End: at(day, w.End)}
		if iv.End.After(from) && iv.Start.Before(to) && iv.End.After(iv.Start) {
			out = append(out, iv)
		}
	}
	return out
}

// at is local midnight of day plus min minutes of wall-clock time, in the
// day's zone. A wall time that a DST change skips (02:30 on the night
// clocks jump from 02:00 to 03:00) is the instant of the jump, so a window
// is never longer than declared.
func at(day time.Time, min int) time.Time {
	h, m := (min%(24*60))/60, min%60
	t := time.Date(day.Year(), day.Month(), day.Day()+min/(24*60), h, m, 0, 0, day.Location())
	if t.Hour() != h || t.Minute() != m {
		if _, end := t.ZoneBounds(); !end.IsZero() && end.After(t) {
			return end
		}
	}
	return t
}

// Restricted reports whether the schedule limits work to windows at all.
func (s Schedule) Restricted() bool { return len(s.Windows) > 0 }

// intervals lists window time in [from, to), touching occurrences joined.
func (s Schedule) intervals(from, to time.Time) []Interval {
	var all []Interval
	for _, w := range s.Windows {
		all = append(all, w.occurrences(from, to)...)
	}
	sort.Slice(all, func(a, b int) bool { return all[a].Start.Before(all[b].Start) })
	var out []Interval
	for _, iv := range all {
		if n := len(out); n > 0 && !iv.Start.After(out[n-1].End) {
			if iv.End.After(out[n-1].End) {
				out[n-1].End = iv.End
			}
			continue
		}
		out = append(out, iv)
	}
	return out
}

// Current returns the window time now is in, if any.
func (s Schedule) Current(now time.Time) (Interval, bool) {
	if !s.Restricted() {
		return Interval{Start: now, End: now.Add(horizon)}, true
	}
	for _, iv := range s.intervals(now.Add(-48*time.Hour), now.Add(48*time.Hour)) {
		if !now.Before(iv.Start) && now.Before(iv.End) {
			return iv, true
		}
	}
	return Interval{}, false
}

// NextOpen returns the first window that starts after now (the one now is
// in does not count), if one opens within the search horizon.
func (s Schedule) NextOpen(now time.Time) (Interval, bool) {
	if !s.Restricted() {
		return Interval{}, false
	}
	for _, iv := range s.intervals(now, now.Add(horizon)) {
		if iv.Start.After(now) {
			return iv, true
		}
	}
	return Interval{}, false
}

// Fit returns the earliest instant at or after from at which work of length
// d can start and finish inside one window: from itself when the window it
// is in has d left, else the start of the first window at least d long.
// False when no window within the horizon is long enough.
func (s Schedule) Fit(from time.Time, d time.Duration) (time.Time, bool) {
	if !s.Restricted() {
		return from, true
	}
	for _, iv := range s.intervals(from, from.Add(horizon)) {
		start := iv.Start
		if start.Before(from) {
			start = from
		}
		if iv.End.Sub(start) >= d {
			return start, true
		}
	}
	return time.Time{}, false
}

// WindowTime is how much window time lies in [from, to).
func (s Schedule) WindowTime(from, to time.Time) time.Duration {
	if !to.After(from) {
		return 0
	}
	if !s.Restricted() {
		return to.Sub(from)
	}
	var sum time.Duration
	for _, iv := range s.intervals(from, to) {
		a, b := iv.Start, iv.End
		if a.Before(from) {
			a = from
		}
		if b.After(to) {
			b = to
		}
		if b.After(a) {
			sum += b.Sub(a)
		}
	}
	return sum
}

// Longest is the longest single window of the schedule (over the
// reference horizon from now); zero for an unrestricted schedule.
func (s Schedule) Longest(now time.Time) time.Duration {
	var best time.Duration
	for _, iv := range s.intervals(now, now.Add(15*24*time.Hour)) {
		best = max(best, iv.Len())
	}
	return best
}
