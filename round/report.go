package round

import (
	"bytes"
	"cmp"
	"encoding/xml"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

const stampFormat = "2006-01-02 15:04:05Z"

func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(stampFormat)
}

func span(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	return d.Round(time.Second).String()
}

// mdCell makes text safe inside a Markdown table cell.
func mdCell(s string) string {
	s = strings.NewReplacer("|", `\|`, "\r", " ", "\n", " ").Replace(s)
	return strings.TrimSpace(s)
}

// mdLine makes text safe as one Markdown list line.
func mdLine(s string) string {
	return strings.TrimSpace(strings.NewReplacer("\r", " ", "\n", " ").Replace(s))
}

// spent is the time the attempts of r took; an attempt in flight counts up
// to until.
func (r *StepRun) spent(until time.Time) time.Duration {
	var d time.Duration
	for _, a := range r.Attempts {
		end := a.Ended
		if end.IsZero() {
			end = until
		}
		d += end.Sub(a.Started)
	}
	return d
}

func outcomeWord(r *StepRun) string {
	switch {
	case r.NeedsRecheck:
		return "in flight, needs re-check"
	case r.State == Failed && r.RiskAccepted:
		return "failed, residual risk accepted"
	}
	return string(r.State)
}

// RenderReport writes the round report in Markdown: the order with its
// reasons, each window's steps and durations, failures and decisions,
// lessons, and the kernel before and after on each node. The output depends
// only on the state, so it is the same for the same journal.
func RenderReport(w io.Writer, s *State) error {
	var b bytes.Buffer
	st := s.Status(s.Updated)
	fmt.Fprintf(&b, "# Patch round %s\n\n", s.RoundID)
	fmt.Fprintf(&b, "- Phase: %s\n", st.Phase)
	fmt.Fprintf(&b, "- Journal: %d records, %s to %s (UTC), %d server session(s)\n", s.LastSeq, stamp(s.Started), stamp(s.Updated), s.Sessions)
	fmt.Fprintf(&b, "- Windows closed: %d of %d\n", st.WindowsClosed, st.WindowsTotal)
	if s.Plan != nil {
		fmt.Fprintf(&b, "- Soak: %s", time.Duration(s.Plan.Soak))
		if !s.SoakStarted.IsZero() {
			fmt.Fprintf(&b, ", started %s", stamp(s.SoakStarted))
		}
		b.WriteString("\n")
	}
	if s.FindingsCommit != "" {
		fmt.Fprintf(&b, "- Findings commit: %s\n", mdLine(s.FindingsCommit))
	}
	if s.Stop != nil && !s.Closed {
		fmt.Fprintf(&b, "- Stopped at %s %s: %s\n", s.Stop.Step, s.Stop.Node, mdLine(s.Stop.Reason))
	}
	fmt.Fprintf(&b, "\n![Timeline of the round](%s)\n", TimelineFile)

	b.WriteString("\n## Order\n\n")
	if s.Plan == nil {
		b.WriteString("No order was recorded.\n")
	} else {
		b.WriteString("| # | Node | Role | Why here |\n|---|---|---|---|\n")
		for _, n := range s.Nodes {
			role := string(n.Role)
			if n.Canary {
				role += " (canary)"
			}
			if n.VM {
				role += ", VM"
			}
			fmt.Fprintf(&b, "| %d | %s | %s | %s |\n", n.Index+1, mdCell(n.Node), role, mdCell(n.Reason))
		}
		for _, note := range s.Plan.Order.Notes {
			fmt.Fprintf(&b, "\nNote: %s\n", mdLine(note))
		}
	}

	b.WriteString("\n## Windows\n")
	for _, n := range s.Nodes {
		fmt.Fprintf(&b, "\n### %d. %s\n\n", n.Index+1, mdLine(n.Node))
		switch n.Window {
		case WindowClosed:
			fmt.Fprintf(&b, "Window %s to %s (%s).\n\n", stamp(n.Opened), stamp(n.ClosedAt), span(n.ClosedAt.Sub(n.Opened)))
		case WindowOpen:
			fmt.Fprintf(&b, "Window opened %s, still open at the last record.\n\n", stamp(n.Opened))
		default:
			b.WriteString("Window never opened.\n\n")
		}
		writeStepTable(&b, n.Steps, NodeSteps, s.Updated)
	}

	b.WriteString("\n## Round steps\n\n")
	writeStepTable(&b, s.RoundSteps, RoundSteps, s.Updated)

	b.WriteString("\n## Failures and decisions\n\n")
	type event struct {
		seq  uint64
		text string
	}
	var events []event
	for _, f := range s.Failures {
		events = append(events, event{f.Seq, fmt.Sprintf("%s — **failed**: %s%s: %s", stamp(f.Time), f.Step, onNode(f.Node), mdLine(f.Reason))})
	}
	for _, d := range s.Decisions {
		text := fmt.Sprintf("%s — decision **%s**%s", stamp(d.Time), d.Name, onNode(d.Node))
		if d.Step != "" {
			text += fmt.Sprintf(" (step %s)", d.Step)
		}
		if d.ApprovalID != "" {
			text += fmt.Sprintf(", approval %s", mdLine(d.ApprovalID))
		}
		if d.Detail != "" {
			text += ": " + mdLine(d.Detail)
		}
		events = append(events, event{d.Seq, text})
	}
	for _, r := range s.Recoveries {
		events = append(events, event{r.Seq, fmt.Sprintf("%s — journal recovery: %s", stamp(r.Time), mdLine(r.Detail))})
	}
	for _, r := range s.Rollbacks {
		text := fmt.Sprintf("%s — rollback of %s to its old kernel: %s", stamp(r.Started), r.Node, r.State)
		if r.Kernel != "" {
			text += " (runs " + mdLine(r.Kernel) + ")"
		}
		if r.Detail != "" {
			text += ": " + mdLine(r.Detail)
		}
		events = append(events, event{r.StartSeq, text})
	}
	for _, n := range s.Notifications {
		events = append(events, event{n.Seq, fmt.Sprintf("%s — %s", stamp(n.Time), mdLine(n.Detail))})
	}
	for _, r := range s.Releases {
		events = append(events, event{r.Seq, fmt.Sprintf("%s — window of %s ended: %s", stamp(r.Time), r.Node, mdLine(r.Detail))})
	}
	slices.SortFunc(events, func(a, b event) int { return cmp.Compare(a.seq, b.seq) })
	if len(events) == 0 {
		b.WriteString("None.\n")
	}
	for _, e := range events {
		fmt.Fprintf(&b, "- %s\n", e.text)
	}

	b.WriteString("\n## Lessons\n\n")
	if len(s.Lessons) == 0 {
		b.WriteString("None recorded.\n")
	}
	for _, l := range s.Lessons {
		fmt.Fprintf(&b, "- %s\n", mdLine(l.Text))
	}

	b.WriteString("\n## Kernels\n\n| Node | Before | After |\n|---|---|---|\n")
	for _, n := range s.Nodes {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", mdCell(n.Node), cmp.Or(mdCell(n.KernelBefore), "unknown"), cmp.Or(mdCell(n.KernelAfter), "unchanged"))
	}
	_, err := w.Write(b.Bytes())
	return err
}

func onNode(node string) string {
	if node == "" {
		return ""
	}
	return " on " + mdLine(node)
}

func writeStepTable(b *bytes.Buffer, runs map[Step]*StepRun, order []Step, until time.Time) {
	b.WriteString("| Step | Attempts | First start | Last end | Time spent | Outcome |\n|---|---|---|---|---|---|\n")
	for _, step := range order {
		r := runs[step]
		if r == nil {
			continue
		}
		if len(r.Attempts) == 0 {
			fmt.Fprintf(b, "| %s | 0 | | | | %s |\n", step, r.State)
			continue
		}
		last := r.Attempts[len(r.Attempts)-1]
		fmt.Fprintf(b, "| %s | %d | %s | %s | %s | %s |\n", step, len(r.Attempts), stamp(r.Attempts[0].Started),
			stamp(last.Ended), span(r.spent(until)), outcomeWord(r))
	}
}

// Timeline colours, by outcome.
const (
	colourDone      = "#2e7d32"
	colourFailed    = "#c62828"
	colourAccepted  = "#ef6c00"
	colourInFlight  = "#f9a825"
	colourAbandoned = "#9e9e9e"
	colourWindow    = "#e3f2fd"
	colourSoak      = "#a5d6a7"
)

// RenderTimeline writes the round as an SVG picture: one row per node (and
// one for round-level steps), a bar per attempt of each step coloured by
// outcome, the open window shaded, decisions as marks, and a UTC time axis.
// The output depends only on the state.
func RenderTimeline(w io.Writer, s *State) error {
	const (
		labelW = 190.0
		chartW = 900.0
		rowH   = 24.0
		top    = 56.0
		right  = 20.0
	)
	t0, t1 := s.Started, s.Updated
	if t0.IsZero() {
		t0 = time.Unix(0, 0).UTC()
	}
	if !t1.After(t0) {
		t1 = t0.Add(time.Minute)
	}
	total := t1.Sub(t0)
	x := func(t time.Time) float64 {
		return labelW + float64(t.Sub(t0))/float64(total)*chartW
	}
	rows := len(s.Nodes) + 1
	height := top + float64(rows)*rowH + 70
	width := labelW + chartW + right

	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="12">`+"\n",
		width, height, width, height)
	fmt.Fprintf(&b, `<title>%s</title>`+"\n", esc("Timeline of patch round "+s.RoundID))
	fmt.Fprintf(&b, `<rect x="0" y="0" width="%.0f" height="%.0f" fill="#ffffff"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="10" y="20" font-size="15" font-weight="bold">%s</text>`+"\n",
		esc(fmt.Sprintf("Patch round %s — %s to %s (UTC)", s.RoundID, stamp(t0), stamp(t1))))

	// Time axis.
	tick := tickInterval(total)
	first := t0.Truncate(tick)
	if first.Before(t0) {
		first = first.Add(tick)
	}
	axisBottom := top + float64(rows)*rowH
	labelFormat := "15:04"
	if total > 24*time.Hour || t0.UTC().YearDay() != t1.UTC().YearDay() {
		labelFormat = "01-02 15:04"
	}
	for t := first; !t.After(t1); t = t.Add(tick) {
		xt := x(t)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#cccccc" stroke-width="0.5"/>`+"\n", xt, top-6, xt, axisBottom)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#555555">%s</text>`+"\n", xt, top-10, esc(t.UTC().Format(labelFormat)))
	}

	row := func(i int, label string) float64 {
		y := top + float64(i)*rowH
		if i%2 == 1 {
			fmt.Fprintf(&b, `<rect x="0" y="%.1f" width="%.0f" height="%.0f" fill="#fafafa"/>`+"\n", y, width, rowH)
		}
		fmt.Fprintf(&b, `<text x="8" y="%.1f">%s</text>`+"\n", y+rowH/2+4, esc(label))
		return y
	}
	bar := func(y float64, a Attempt, colour, tip string) {
		end := a.Ended
		if end.IsZero() {
			end = t1
		}
		x0, x1 := x(a.Started), x(end)
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.0f" fill="%s" stroke="#ffffff" stroke-width="0.5"><title>%s</title></rect>`+"\n",
			x0, y+5, max(x1-x0, 2), rowH-10, colour, esc(tip))
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
				end := a.Ended
				if end.IsZero() {
					end = t1
				}
				tip := fmt.Sprintf("%s%s: %s, %s to %s (%s)", step, onNode(node), cmp.Or(string(a.Outcome), "in flight"),
					stamp(a.Started), stamp(end), span(end.Sub(a.Started)))
				if a.Detail != "" {
					tip += " — " + a.Detail
				}
				bar(y, a, colour, tip)
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
			end := n.ClosedAt
			if end.IsZero() {
				end = t1
			}
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.0f" fill="%s"><title>%s</title></rect>`+"\n",
				x(n.Opened), y+1, max(x(end)-x(n.Opened), 1), rowH-2, colourWindow,
				esc(fmt.Sprintf("window of %s: %s to %s", n.Node, stamp(n.Opened), stamp(end))))
		}
		steps(y, n.Node, n.Steps, NodeSteps)
	}
	yRound := row(len(s.Nodes), "round")
	steps(yRound, "", s.RoundSteps, RoundSteps)

	// Decisions: a diamond on the row they concern.
	for _, d := range s.Decisions {
		y := yRound
		if n := s.Node(d.Node); n != nil {
			y = top + float64(n.Index)*rowH
		}
		cx, cy := x(d.Time), y+rowH/2
		fmt.Fprintf(&b, `<path d="M%.1f %.1fL%.1f %.1fL%.1f %.1fL%.1f %.1fZ" fill="#1565c0"><title>%s</title></path>`+"\n",
			cx, cy-6, cx+5, cy, cx, cy+6, cx-5, cy, esc(fmt.Sprintf("decision %s%s at %s %s", d.Name, onNode(d.Node), stamp(d.Time), d.Detail)))
	}

	// Legend.
	ly := axisBottom + 30
	lx := labelW
	for _, item := range []struct{ colour, text string }{
		{colourDone, "done"}, {colourFailed, "failed"}, {colourAccepted, "failed, risk accepted"},
		{colourInFlight, "in flight"}, {colourAbandoned, "abandoned"}, {colourSoak, "soak"}, {colourWindow, "window open"},
	} {
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="14" height="10" fill="%s" stroke="#999999" stroke-width="0.5"/>`+"\n", lx, ly-9, item.colour)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", lx+18, ly, esc(item.text))
		lx += 30 + 7*float64(len(item.text))
	}
	fmt.Fprintf(&b, `<path d="M%.1f %.1fL%.1f %.1fL%.1f %.1fL%.1f %.1fZ" fill="#1565c0"/>`+"\n", lx+7, ly-10, lx+12, ly-4, lx+7, ly+2, lx+2, ly-4)
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f">decision</text>`+"\n", lx+18, ly)
	b.WriteString("</svg>\n")
	_, err := w.Write(b.Bytes())
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

// tickInterval picks a round interval giving at most about ten ticks.
func tickInterval(total time.Duration) time.Duration {
	for _, d := range []time.Duration{time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute,
		30 * time.Minute, time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour,
		24 * time.Hour, 48 * time.Hour, 7 * 24 * time.Hour} {
		if total/d <= 10 {
			return d
		}
	}
	return 14 * 24 * time.Hour * time.Duration(1+total/(140*24*time.Hour))
}

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// WriteReport renders the report and the timeline into the round's
// directory (report.md, timeline.svg), each by atomic replace, and returns
// their paths. The caller commits them with the lessons.
func (j *Journal) WriteReport() (report, timeline string, err error) {
	if j.view {
		return "", "", fmt.Errorf("write report of round %s: %w", j.roundID, ErrReadOnlyView)
	}
	st := j.State()
	var md, svg bytes.Buffer
	if err := RenderReport(&md, st); err != nil {
		return "", "", fmt.Errorf("write report of round %s: %w", j.roundID, err)
	}
	if err := RenderTimeline(&svg, st); err != nil {
		return "", "", fmt.Errorf("write timeline of round %s: %w", j.roundID, err)
	}
	if err := writeFileAtomic(j.dir, ReportFile, md.Bytes()); err != nil {
		return "", "", fmt.Errorf("write report of round %s: %w", j.roundID, err)
	}
	if err := writeFileAtomic(j.dir, TimelineFile, svg.Bytes()); err != nil {
		return "", "", fmt.Errorf("write timeline of round %s: %w", j.roundID, err)
	}
	return filepath.Join(j.dir, ReportFile), filepath.Join(j.dir, TimelineFile), nil
}
