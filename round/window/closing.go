package window

import (
	"time"

	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/plan"
)

// Closing is what a round's entry in the component docs says at close
// (plan.ChangelogEntry, plan.RunbookProposal), read from its journal st on
// day now: each decision and an abort as a deviation, the lessons the
// journal recorded and then those the intent holds for the round
// (componentLessons). Pure.
func Closing(st *round.State, now time.Time, componentLessons []string) plan.Closing {
	c := plan.Closing{Round: st.RoundID, Date: now.UTC().Format("2006-01-02"), Report: "rounds/" + st.RoundID + "/" + round.ReportFile}
	for _, dc := range st.Decisions {
		line := string(dc.Name)
		if dc.Step != "" {
			line += " at " + string(dc.Step)
		}
		if dc.Node != "" {
			line += " on " + dc.Node
		}
		if dc.Detail != "" {
			line += ": " + dc.Detail
		}
		c.Deviations = append(c.Deviations, line)
	}
	if st.Aborted {
		c.Deviations = append(c.Deviations, "the round was aborted")
	}
	for _, l := range st.Lessons {
		c.Lessons = append(c.Lessons, l.Text)
	}
	c.Lessons = append(c.Lessons, componentLessons...)
	return c
}
