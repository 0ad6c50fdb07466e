package round

import (
	"bytes"
	"cmp"
	"encoding/xml"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Timeline colours, by outcome.
const (
	colourDone      = "#2e7d32"
	colourFailed    = "#c62828"
	colourAccepted  = "#ef6c00"
	colourInFlight  = "#f9a825"
	colourAbandoned = "#9e9e9e"
	colourWindow    = "#e3f2fd"
	colourSoak      = "#a5d6a7"
	colourDecision  = "#1565c0"
	colourDrill     = "#6a1b9a"
	colourBreak     = "#eeeeee"
)

// Timeline geometry, in pixels.
const (
	// stepMinW is the narrowest a step's attempt is drawn: a lab step of
	// a few milliseconds beside a 48-hour soak still shows as a box.
	stepMinW = 6.0
	// idleMinW is the narrowest stretch where nothing runs.
	idleMinW = 1.0
	// breakW is the width of a stretch drawn as a break (the soak, a night
	// between windows).
	breakW = 56.0
	// minBreak is the shortest stretch drawn as a break, whatever the
	// windows' length.
	minBreak = 10 * time.Minute
)

// axis maps the round's time to x on the timeline. It is piecewise linear
// between the moments something starts or ends: a stretch where a step runs
// is at least stepMinW wide, one where nothing runs at least idleMinW, and
// a stretch longer than its breakAfter is drawn breakW wide as a break; the
// rest of the width is shared in proportion to time. So the windows keep
// their order and proportions while each step stays visible, and the soak
// is a marked span instead of the whole picture.
type axis struct {
	ts     []time.Time // moments, ascending, distinct
	xs     []float64   // x of each moment
	breaks []axisBreak
	width  float64 // from the first moment to the last
}

// axisBreak is a stretch drawn as a break.
type axisBreak struct {
	From, To time.Time
	X0, X1   float64
}

// busySpan is a stretch of time in which a step runs.
type busySpan struct{ from, to time.Time }

// newAxis lays out moments over at least width pixels starting at left;
// busy are the stretches where a step runs; stretches longer than
// breakAfter are breaks. The axis is wider than width only where the
// minimum widths do not fit in 70% of it.
func newAxis(moments []time.Time, busy []busySpan, left, width float64, breakAfter time.Duration) axis {
	ts := slices.Clone(moments)
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	ts = slices.CompactFunc(ts, func(a, b time.Time) bool { return a.Equal(b) })
	if len(ts) == 0 {
		ts = []time.Time{time.Unix(0, 0).UTC()}
	}
	if len(ts) == 1 {
		ts = append(ts, ts[0].Add(time.Minute))
	}
	n := len(ts) - 1
	mins := make([]float64, n)
	broken := make([]bool, n)
	var fixed float64
	var linear time.Duration
	for i := range n {
		d := ts[i+1].Sub(ts[i])
		switch {
		case d > breakAfter:
			broken[i] = true
			fixed += breakW
			continue
		case covered(busy, ts[i], ts[i+1]):
			mins[i] = stepMinW
		default:
			mins[i] = idleMinW
		}
		fixed += mins[i]
		linear += d
	}
	width = max(width, fixed/0.7)
	free := width - fixed
	a := axis{ts: ts, xs: make([]float64, len(ts)), width: width}
	x := left
	a.xs[0] = x
	for i := range n {
		w := mins[i]
		switch {
		case broken[i]:
			w = breakW
			a.breaks = append(a.breaks, axisBreak{From: ts[i], To: ts[i+1], X0: x, X1: x + w})
		case linear > 0:
			w += free * float64(ts[i+1].Sub(ts[i])) / float64(linear)
		default:
			w += free / float64(n)
		}
		x += w
		a.xs[i+1] = x
	}
	return a
}

// covered reports whether a busy stretch covers all of from..to.
func covered(busy []busySpan, from, to time.Time) bool {
	for _, b := range busy {
		if !b.from.After(from) && !b.to.Before(to) {
			return true
		}
	}
	return false
}

// x is where t falls on the axis; times outside it fall on its ends.
func (a axis) x(t time.Time) float64 {
	i, found := slices.BinarySearchFunc(a.ts, t, func(e, t time.Time) int { return e.Compare(t) })
	switch {
	case found:
		return a.xs[i]
	case i == 0:
		return a.xs[0]
	case i == len(a.ts):
		return a.xs[len(a.xs)-1]
	}
	t0, t1 := a.ts[i-1], a.ts[i]
	return a.xs[i-1] + (a.xs[i]-a.xs[i-1])*float64(t.Sub(t0))/float64(t1.Sub(t0))
}

// breakAfter is the shortest stretch the timeline of s draws as a break:
// three times its longest window, and never under minBreak. A soak, or a
// night between windows, is broken; a window never is.
func breakAfter(s *State) time.Duration {
	longest := time.Duration(0)
	for _, n := range s.Nodes {
		if n.Window == WindowClosed {
			longest = max(longest, n.ClosedAt.Sub(n.Opened))
		}
	}
	return max(minBreak, 3*longest)
}

// drillMark is a fallback drill as the timeline marks it: the window
// package records each drill's verdict as a lesson "fallback drill on
// NODE ...", "passed" when the fallback was proven.
type drillMark struct {
	Node   string
	Passed bool
	Time   time.Time
	Text   string
}

// drillMarks finds the fallback drills among the lessons of s, on nodes of
// the round.
func drillMarks(s *State) []drillMark {
	var out []drillMark
	for _, l := range s.Lessons {
		rest, ok := strings.CutPrefix(l.Text, "fallback drill on ")
		if !ok {
			continue
		}
		node, verdict, _ := strings.Cut(rest, " ")
		node = strings.TrimSuffix(node, ":")
		if s.Node(node) == nil {
			continue
		}
		out = append(out, drillMark{Node: node, Passed: strings.HasPrefix(verdict, "passed"), Time: l.Time, Text: l.Text})
	}
	return out
}

// stepLabels are the names written inside a step's box where it is wide
// enough.
var stepLabels = map[Step]string{
	StepInspect: "insp", StepSimulate: "sim", StepDownload: "dl", StepSnapshot: "snap",
	StepDrain: "drain", StepInstall: "install", StepTrialBoot: "trial boot", StepVerify: "verify",
	StepUncordon: "uncordon", StepGPUAcceptance: "gpu", StepPromote: "promote", StepGate: "gate",
	StepBaseline: "baseline", StepFleetCheck: "fleet check", StepSoak: "soak",
	StepAutoremove: "autoremove", StepClose: "close",
}

// RenderTimeline writes the round as an SVG picture: one row per node (and
// one for round-level steps), a box per attempt of each step coloured by
// outcome, each window shaded, decisions and fallback drills marked, on a
// UTC time axis stretched so that every step is visible and broken where a
// long stretch (the soak, a night) would crowd the windows out. Each step's
// box carries data-node and data-step attributes and a title saying when
// it ran. The output depends only on the state.
func RenderTimeline(w io.Writer, s *State) error {
	const (
		labelW = 190.0
		chartW = 900.0
		rowH   = 26.0
		top    = 74.0
		right  = 24.0
	)
	t0, t1 := s.Started, s.Updated
	if t0.IsZero() {
		t0 = time.Unix(0, 0).UTC()
	}
	if !t1.After(t0) {
		t1 = t0.Add(time.Minute)
	}
	end := func(a Attempt) time.Time {
		if a.Ended.IsZero() {
			return t1
		}
		return a.Ended
	}
	moments := []time.Time{t0, t1}
	var busy []busySpan
	addRuns := func(runs map[Step]*StepRun, order []Step) {
		for _, step := range order {
			r := runs[step]
			if r == nil {
				continue
			}
			for _, a := range r.Attempts {
				moments = append(moments, a.Started, end(a))
				if step != StepSoak {
					busy = append(busy, busySpan{a.Started, end(a)})
				}
			}
		}
	}
	for _, n := range s.Nodes {
		addRuns(n.Steps, NodeSteps)
		if n.Window != WindowPending {
			moments = append(moments, n.Opened)
		}
		if n.Window == WindowClosed {
			moments = append(moments, n.ClosedAt)
		}
	}
	addRuns(s.RoundSteps, RoundSteps)
	drills := drillMarks(s)
	for _, d := range s.Decisions {
		moments = append(moments, d.Time)
	}
	for _, d := range drills {
		moments = append(moments, d.Time)
	}
	moments = slices.DeleteFunc(moments, func(t time.Time) bool { return t.Before(t0) || t.After(t1) })
	ax := newAxis(moments, busy, labelW, chartW, breakAfter(s))

	rows := len(s.Nodes) + 1
	axisBottom := top + float64(rows)*rowH
	width := labelW + ax.width + right

	// The body first: the legend's lines fix the height.
	var b bytes.Buffer
	fmt.Fprintf(&b, `<text x="10" y="20" font-size="15" font-weight="bold">%s</text>`+"\n",
		esc(fmt.Sprintf("Patch round %s — %s to %s (UTC)", s.RoundID, stamp(t0), stamp(t1))))
	fmt.Fprintf(&b, `<text x="10" y="38" fill="#555555">%s</text>`+"\n",
		esc(fmt.Sprintf("Time runs left to right, stretched so that every step shows (at least %.0f px); stretches over %s are broken and labelled with their length.",
			stepMinW, breakAfter(s))))

	// Breaks: a shaded band over every row, a double slash on the axis and
	// the stretch's length (the soak says so).
	var soak *StepRun
	if r := s.RoundSteps[StepSoak]; r != nil && len(r.Attempts) > 0 {
		soak = r
	}
	for _, br := range ax.breaks {
		label := "idle " + span(br.To.Sub(br.From))
		if soak != nil && covered([]busySpan{{soak.Attempts[0].Started, end(soak.Attempts[len(soak.Attempts)-1])}}, br.From, br.To) {
			label = "soak " + span(br.To.Sub(br.From))
		}
		fmt.Fprintf(&b, `<rect class="break" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s</title></rect>`+"\n",
			br.X0, top-4, br.X1-br.X0, axisBottom-top+4, colourBreak, esc(fmt.Sprintf("%s: %s to %s, not to scale", label, stamp(br.From), stamp(br.To))))
		for _, dx := range []float64{br.X0 + breakW/2 - 5, br.X0 + breakW/2 + 1} {
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#777777" stroke-width="1.5"/>`+"\n", dx, axisBottom+6, dx+4, axisBottom-6)
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#555555" font-style="italic">%s</text>`+"\n", (br.X0+br.X1)/2, axisBottom+20, esc(label))
	}

	// Time labels: the round's start and each window's opening, as many
	// as fit without overlapping; the date where it changes.
	type tick struct {
		t     time.Time
		label string
	}
	ticks := []tick{{t: t0}}
	for _, n := range s.Nodes {
		if n.Window != WindowPending {
			ticks = append(ticks, tick{t: n.Opened})
		}
	}
	for _, br := range ax.breaks {
		ticks = append(ticks, tick{t: br.To})
	}
	slices.SortStableFunc(ticks, func(a, b tick) int { return a.t.Compare(b.t) })
	// lastEnd is where the last label drawn ends.
	lastEnd, lastDay := -1e9, ""
	for _, tk := range ticks {
		xt := ax.x(tk.t)
		day := tk.t.UTC().Format("2006-01-02")
		label := tk.t.UTC().Format("15:04:05")
		if day != lastDay {
			label = tk.t.UTC().Format("01-02 15:04:05")
		}
		textW := 7 * float64(len(label))
		anchor, tx, from, to := "start", xt+2, xt+2, xt+2+textW
		if to > width {
			anchor, tx, from, to = "end", xt-2, xt-2-textW, xt-2
		}
		if from < lastEnd+8 {
			continue
		}
		lastEnd, lastDay = to, day
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#cccccc" stroke-width="0.5"/>`+"\n", xt, top-6, xt, axisBottom)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="%s" fill="#555555">%s</text>`+"\n", tx, top-10, anchor, esc(label))
	}

	row := func(i int, label string) float64 {
		y := top + float64(i)*rowH
		if i%2 == 1 {
			fmt.Fprintf(&b, `<rect x="0" y="%.1f" width="%.0f" height="%.0f" fill="#000000" fill-opacity="0.025"/>`+"\n", y, width, rowH)
		}
		fmt.Fprintf(&b, `<text x="8" y="%.1f">%s</text>`+"\n", y+rowH/2+4, esc(label))
		return y
	}
	steps := func(y float64, node string, runs map[Step]*StepRun, order []Step) {
		for _, step := range order {
			r := runs[step]
			if r == nil {
				continue
			}
			for i, a := range r.Attempts {
				colour := colourFor(r, i)
				if step == StepSoak && colour == colourDone {
					colour = colourSoak
				}
				x0, x1 := ax.x(a.Started), ax.x(end(a))
				// Preflight runs outside the window: drawn lower and lighter.
				by, bh, opacity := y+5, rowH-10, 1.0
				if slices.Contains(PreflightSteps, step) {
					by, bh, opacity = y+9, rowH-14, 0.55
				}
				tip := fmt.Sprintf("%s%s: %s, %s to %s (%s)", step, onNode(node), cmp.Or(string(a.Outcome), "in flight"),
					stamp(a.Started), stamp(end(a)), span(end(a).Sub(a.Started)))
				if a.Detail != "" {
					tip += " — " + a.Detail
				}
				fmt.Fprintf(&b, `<rect class="step" data-node="%s" data-step="%s" x="%.1f" y="%.1f" width="%.1f" height="%.0f" fill="%s" fill-opacity="%.2f" stroke="#ffffff" stroke-width="0.5"><title>%s</title></rect>`+"\n",
					esc(node), esc(string(step)), x0, by, max(x1-x0, 2), bh, colour, opacity, esc(tip))
				if text := stepLabels[step]; x1-x0 >= 6*float64(len(text))+4 {
					fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" font-size="10" fill="#ffffff" pointer-events="none">%s</text>`+"\n",
						(x0+x1)/2, y+rowH/2+3.5, esc(text))
				}
			}
		}
	}
	for i, n := range s.Nodes {
		label := fmt.Sprintf("%d. %s", n.Index+1, n.Node)
		if n.Canary {
			label += " (canary)"
		}
		y := row(i, label)
		if n.Window != WindowPending {
			closed := n.ClosedAt
			if closed.IsZero() {
				closed = t1
			}
			fmt.Fprintf(&b, `<rect class="window" x="%.1f" y="%.1f" width="%.1f" height="%.0f" fill="%s"><title>%s</title></rect>`+"\n",
				ax.x(n.Opened), y+1, max(ax.x(closed)-ax.x(n.Opened), 1), rowH-2, colourWindow,
				esc(fmt.Sprintf("window of %s: %s to %s (%s)", n.Node, stamp(n.Opened), stamp(closed), span(closed.Sub(n.Opened)))))
		}
		steps(y, n.Node, n.Steps, NodeSteps)
	}
	yRound := row(len(s.Nodes), "round")
	steps(yRound, "", s.RoundSteps, RoundSteps)

	rowOf := func(node string) float64 {
		if n := s.Node(node); n != nil {
			return top + float64(n.Index)*rowH
		}
		return yRound
	}
	// Fallback drills: a purple flag above the node's row at the verdict.
	for _, d := range drills {
		cx, y := ax.x(d.Time), rowOf(d.Node)
		colour := colourDrill
		if !d.Passed {
			colour = colourFailed
		}
		fmt.Fprintf(&b, `<path class="drill" d="M%.1f %.1fL%.1f %.1fL%.1f %.1fL%.1f %.1fZ" fill="%s" stroke="#ffffff" stroke-width="0.5"><title>%s</title></path>`+"\n",
			cx, y+rowH-3, cx, y+1, cx+9, y+5, cx, y+9, colour, esc(stamp(d.Time)+" — "+d.Text))
	}
	// Decisions: a diamond on the row they concern.
	for _, d := range s.Decisions {
		cx, cy := ax.x(d.Time), rowOf(d.Node)+rowH/2
		fmt.Fprintf(&b, `<path class="decision" d="M%.1f %.1fL%.1f %.1fL%.1f %.1fL%.1f %.1fZ" fill="%s" stroke="#ffffff" stroke-width="0.5"><title>%s</title></path>`+"\n",
			cx, cy-7, cx+6, cy, cx, cy+7, cx-6, cy, colourDecision, esc(fmt.Sprintf("decision %s%s at %s %s", d.Name, onNode(d.Node), stamp(d.Time), d.Detail)))
	}

	// Legend, on as many lines as the width needs.
	ly, lx := axisBottom+48, 10.0
	item := func(text string, swatch func(x, y float64)) {
		w := 30 + 6.5*float64(len(text))
		if lx+w > width {
			ly, lx = ly+18, 10
		}
		swatch(lx, ly)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", lx+18, ly, esc(text))
		lx += w
	}
	for _, it := range []struct{ colour, text string }{
		{colourDone, "done"}, {colourFailed, "failed"}, {colourAccepted, "failed, risk accepted"},
		{colourInFlight, "in flight"}, {colourAbandoned, "abandoned"}, {colourSoak, "soak"}, {colourWindow, "window open"},
		{colourBreak, "break (not to scale)"},
	} {
		item(it.text, func(x, y float64) {
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="14" height="10" fill="%s" stroke="#999999" stroke-width="0.5"/>`+"\n", x, y-9, it.colour)
		})
	}
	item("preflight (lower, lighter)", func(x, y float64) {
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="14" height="6" fill="%s" fill-opacity="0.55"/>`+"\n", x, y-5, colourDone)
	})
	item("decision", func(x, y float64) {
		fmt.Fprintf(&b, `<path d="M%.1f %.1fL%.1f %.1fL%.1f %.1fL%.1f %.1fZ" fill="%s"/>`+"\n", x+7, y-10, x+12, y-4, x+7, y+2, x+2, y-4, colourDecision)
	})
	item("fallback drill", func(x, y float64) {
		fmt.Fprintf(&b, `<path d="M%.1f %.1fL%.1f %.1fL%.1f %.1fL%.1f %.1fZ" fill="%s"/>`+"\n", x+3, y+2, x+3, y-10, x+12, y-6, x+3, y-2, colourDrill)
	})
	b.WriteString("</svg>\n")
	height := ly + 16
	var out bytes.Buffer
	fmt.Fprintf(&out, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="12">`+"\n",
		width, height, width, height)
	fmt.Fprintf(&out, `<title>%s</title>`+"\n", esc("Timeline of patch round "+s.RoundID))
	fmt.Fprintf(&out, `<rect x="0" y="0" width="%.0f" height="%.0f" fill="#ffffff"/>`+"\n", width, height)
	out.Write(b.Bytes())
	_, err := w.Write(out.Bytes())
	return err
}

func colourFor(r *StepRun, i int) string {
	a := r.Attempts[i]
	switch a.Outcome {
	case OutcomeDone:
		return colourDone
	case OutcomeAbandoned:
		return colourAbandoned
	case OutcomeFailed:
		if i == len(r.Attempts)-1 && r.RiskAccepted {
			return colourAccepted
		}
		return colourFailed
	}
	return colourInFlight
}

// esc escapes s as XML text (and attribute value); characters XML cannot
// hold become U+FFFD.
func esc(s string) string {
	var b strings.Builder
	if err := xml.EscapeText(&b, []byte(s)); err != nil {
		// A strings.Builder does not fail; keep the picture valid if it did.
		return "\uFFFD"
	}
	return b.String()
}
