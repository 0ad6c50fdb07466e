package round

import (
	"bytes"
	"cmp"
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
	for _, o := range s.OtherActors {
		events = append(events, event{o.Seq, fmt.Sprintf("%s — other actors: %s", stamp(o.Time), mdLine(o.Detail))})
	}
	slices.SortFunc(events, func(a, b event) int { return cmp.Compare(a.seq, b.seq) })
	if len(events) == 0 {
		b.WriteString("None.\n")
	}
	for _, e := range events {
		fmt.Fprintf(&b, "- %s\n", e.text)
	}

	if len(s.Promotions) > 0 {
		b.WriteString("\n## Promotion\n\n")
		seen := map[string]bool{}
		for i := len(s.Promotions) - 1; i >= 0; i-- {
			p := s.Promotions[i]
			if seen[p.Kernel] {
				continue
			}
			seen[p.Kernel] = true
			fmt.Fprintf(&b, "- %s: %s", mdLine(p.Kernel), mdLine(p.Detail))
			if p.ApprovalID != "" {
				fmt.Fprintf(&b, " (statement %s)", mdLine(p.ApprovalID))
			}
			b.WriteString("\n")
		}
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
