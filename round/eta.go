package round

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/mcp-patch/mcp-patch/round/maintenance"
)

// ETAConfig holds the estimate's defaults.
type ETAConfig struct {
	// DefaultWindow is the window length assumed for a node when no window
	// was measured anywhere. 0 means none: ETA then needs a measurement.
	DefaultWindow time.Duration
	// BetweenWindows is the pause assumed before each remaining window
	// (preflight, people signing approvals). 0 means none.
	BetweenWindows time.Duration
	// Maintenance is when work may start a node. The zero Schedule allows
	// any time; otherwise each remaining node starts at the first window it
	// fits in, and the deadline is compared in window time.
	Maintenance maintenance.Schedule
}

// Estimate says when the round is expected to have every node patched and
// whether that meets the deadline the intent gives (48h for
// external-facing systems, 14 days internal, ...).
type Estimate struct {
	// PatchedBy is when the last window is expected to close.
	PatchedBy time.Time `json:"patched_by"`
	// SoakEndsBy is when the soak after it is expected to end (autoremove).
	SoakEndsBy time.Time     `json:"soak_ends_by,omitzero"`
	Deadline   time.Time     `json:"deadline,omitzero"`
	Meets      bool          `json:"meets_deadline"`
	Slack      time.Duration `json:"slack"` // deadline - PatchedBy; negative when late
	// Remaining lists the nodes still to patch and the window assumed.
	Remaining []NodeEstimate `json:"remaining,omitempty"`
	// WindowTimeNeeded and WindowTimeLeft are set under maintenance windows:
	// the window time the remaining nodes need, and the window time between
	// now and the deadline (the compliance clock that counts).
	WindowTimeNeeded time.Duration `json:"window_time_needed,omitempty"`
	WindowTimeLeft   time.Duration `json:"window_time_left,omitempty"`
	Notes            []string      `json:"notes,omitempty"`
}

// NodeEstimate is the time assumed for one node still to patch.
type NodeEstimate struct {
	Node string        `json:"node"`
	Left time.Duration `json:"left"`
	// Source: measured (this node's own window), median (of the measured
	// windows), default (ETAConfig.DefaultWindow).
	Source string `json:"source"`
}

// WindowDurations returns how long each closed window of this round took
// (drain start to green gate).
func (s *State) WindowDurations() map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, n := range s.Nodes {
		if n.Window == WindowClosed {
			out[n.Node] = n.ClosedAt.Sub(n.Opened)
		}
	}
	return out
}

// ETA estimates when the round will have patched every node. measured
// gives window durations by node (earlier rounds, say); this round's own
// closed windows are added and take precedence. A node without its own
// measurement gets the median of all measured windows, or
// cfg.DefaultWindow when nothing was measured. An open window counts with
// the time it has left (never below zero). A zero deadline means none.
func ETA(s *State, measured map[string]time.Duration, now, deadline time.Time, cfg ETAConfig) (Estimate, error) {
	if s == nil || s.Plan == nil {
		return Estimate{}, errors.New("estimate round: no order recorded")
	}
	all := map[string]time.Duration{}
	for node, d := range measured {
		if d <= 0 {
			return Estimate{}, fmt.Errorf("estimate round %s: measured window of %s is %s, not positive", s.RoundID, node, d)
		}
		all[node] = d
	}
	for node, d := range s.WindowDurations() {
		if d > 0 {
			all[node] = d
		}
	}
	var median time.Duration
	if len(all) > 0 {
		ds := make([]time.Duration, 0, len(all))
		for _, d := range all {
			ds = append(ds, d)
		}
		slices.Sort(ds)
		if k := len(ds); k%2 == 1 {
			median = ds[k/2]
		} else {
			median = (ds[k/2-1] + ds[k/2]) / 2
		}
	}
	est := Estimate{Deadline: deadline}
	if s.Stop != nil {
		est.Notes = append(est.Notes, fmt.Sprintf("the round is stopped at %s %s; the estimate assumes it resumes now", s.Stop.Step, s.Stop.Node))
	}
	if s.Aborted {
		est.Notes = append(est.Notes, "the round was aborted; the remaining nodes will not be patched in it")
	}
	left := time.Duration(0)
	at := now // under maintenance windows: when the node before has finished
	for _, n := range s.Nodes {
		if n.Window == WindowClosed {
			continue
		}
		ne := NodeEstimate{Node: n.Node}
		var w time.Duration
		switch d, ok := all[n.Node]; {
		case ok:
			w, ne.Source = d, "measured"
		case median > 0:
			w, ne.Source = median, "median"
		case cfg.DefaultWindow > 0:
			w, ne.Source = cfg.DefaultWindow, "default"
		default:
			return Estimate{}, fmt.Errorf("estimate round %s: no window measured and no default window set", s.RoundID)
		}
		node := w
		if n.Window == WindowOpen {
			w = max(w-now.Sub(n.Opened), 0)
			node = w
			at = at.Add(w) // a node in progress finishes, window or not
		} else {
			w += cfg.BetweenWindows
			start, ok := cfg.Maintenance.Fit(at.Add(cfg.BetweenWindows), node)
			if !ok {
				return Estimate{}, fmt.Errorf("estimate round %s: no maintenance window is long enough for %s's expected window of %s", s.RoundID, n.Node, node)
			}
			at = start.Add(node)
		}
		ne.Left = w
		left += w
		est.WindowTimeNeeded += node
		est.Remaining = append(est.Remaining, ne)
	}
	est.PatchedBy = now.Add(left)
	if cfg.Maintenance.Restricted() {
		est.PatchedBy = at
		if !deadline.IsZero() {
			est.WindowTimeLeft = cfg.Maintenance.WindowTime(now, deadline)
			est.Notes = append(est.Notes, fmt.Sprintf("only maintenance-window time counts: %s of window time before the deadline, %s needed",
				est.WindowTimeLeft.Round(time.Minute), est.WindowTimeNeeded.Round(time.Minute)))
		}
	} else {
		est.WindowTimeNeeded = 0
	}
	if s.Plan.Soak > 0 {
		start := est.PatchedBy
		if !s.SoakStarted.IsZero() {
			start = s.SoakStarted
		}
		est.SoakEndsBy = start.Add(time.Duration(s.Plan.Soak))
	}
	if deadline.IsZero() {
		est.Meets = true
		est.Notes = append(est.Notes, "no deadline given")
		return est, nil
	}
	est.Slack = deadline.Sub(est.PatchedBy)
	est.Meets = est.Slack >= 0
	return est, nil
}
