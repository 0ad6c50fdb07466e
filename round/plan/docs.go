package plan

import (
	"fmt"
	"sort"
	"strings"
)

// Closing is what the round's close writes into the os-layer's own
// documents: "a task is unfinished until the docs are updated".
type Closing struct {
	Round string
	// Date is the close date, YYYY-MM-DD.
	Date string
	// Deviations are the stops, decisions and accepted risks of the
	// round, in words.
	Deviations []string
	// Report is the repository path of the round report.
	Report string
	// Lessons are the lessons the round recorded.
	Lessons []string
}

// ChangelogEntry is the round's entry for os-layer/changelog.md: kernels
// before → after per role, the kernel and NVIDIA packages that moved,
// deviations and a link to the report.
func ChangelogEntry(f Fleet, c Closing) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## %s · round %s\n\n", c.Date, c.Round)
	kernels := map[string]map[string]bool{}
	notable := map[string]bool{}
	for _, n := range f.Nodes {
		if kernels[n.Role] == nil {
			kernels[n.Role] = map[string]bool{}
		}
		kernels[n.Role][orDash(n.Running)+" → "+orDash(n.Target)] = true
		for _, l := range append(append([]string{}, n.Packages.Kernel...), n.Packages.Nvidia...) {
			notable[strings.Fields(l)[0]] = true
		}
	}
	for _, role := range sortedKeys(kernels) {
		fmt.Fprintf(&b, "- kernel, %s nodes: %s\n", role, strings.Join(sortedKeys(kernels[role]), ", "))
	}
	if len(notable) > 0 {
		fmt.Fprintf(&b, "- packages of note: %s\n", strings.Join(sortedKeys(notable), ", "))
	}
	if len(c.Deviations) == 0 {
		b.WriteString("- deviations: none\n")
	}
	for _, d := range c.Deviations {
		fmt.Fprintf(&b, "- deviation: %s\n", oneLine(d))
	}
	fmt.Fprintf(&b, "- plan %s (revision %d, %d signatures); report: [%s](../%s)\n\n", f.Digest, f.Revision, f.Signatures, c.Report, c.Report)
	return b.String()
}

// HasEntry reports whether a changelog already carries the round's entry.
func HasEntry(doc, round string) bool {
	for _, l := range strings.Split(doc, "\n") {
		if strings.HasPrefix(l, "## ") && strings.HasSuffix(strings.TrimSpace(l), "· round "+round) {
			return true
		}
	}
	return false
}

// InsertChangelog puts entry first among the "## " entries (the
// changelog is newest first); a doc that has the round's entry is
// returned unchanged.
func InsertChangelog(doc, round, entry string) string {
	if HasEntry(doc, round) {
		return doc
	}
	if i := strings.Index(doc, "\n## "); i >= 0 {
		return doc[:i+1] + entry + doc[i+1:]
	}
	if doc != "" && !strings.HasSuffix(doc, "\n") {
		doc += "\n"
	}
	return doc + "\n" + entry
}

// changesAStep says whether a lesson asks for a step to change: it names
// what to do next time, or a step of the runbook.
func changesAStep(lesson string) bool {
	l := strings.ToLower(lesson)
	for _, w := range []string{"next time", "from now on", "before the", "runbook", "step", "must ", "should "} {
		if strings.Contains(l, w) {
			return true
		}
	}
	return false
}

// RunbookProposal appends to os-layer/runbook.md, for review on the
// working branch, the round's lessons that change a step; ok is false
// when none does (or the doc already has the round's proposal).
func RunbookProposal(doc string, c Closing) (string, bool) {
	var lessons []string
	for _, l := range c.Lessons {
		if changesAStep(l) {
			lessons = append(lessons, l)
		}
	}
	head := "## Proposed by round " + c.Round
	if len(lessons) == 0 || strings.Contains(doc, head) {
		return doc, false
	}
	sort.Strings(lessons)
	var b strings.Builder
	b.WriteString(doc)
	if doc != "" && !strings.HasSuffix(doc, "\n") {
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "\n%s (%s)\n\nLessons of this round that change a step. Review them on the round's working branch: fold each into the step it changes, or strike it.\n\n", head, c.Date)
	for _, l := range lessons {
		fmt.Fprintf(&b, "- %s\n", oneLine(l))
	}
	return b.String(), true
}
