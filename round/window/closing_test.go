package window_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/plan"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// What the component docs say of a closing round: each decision in
// words, an abort, the journal's lessons and then the intent's.
func TestClosing(t *testing.T) {
	st := &round.State{RoundID: "2026-11", Aborted: true,
		Decisions: []round.Decision{
			{Name: round.DecisionResume, Step: round.StepInstall, Node: "gpu-2", Detail: "dpkg finished by hand"},
			{Name: round.DecisionResidualRiskAccepted},
		},
		Lessons: []round.Lesson{{Text: "the canary's /boot was short"}}}
	// Late in the evening west of UTC: the date is UTC's.
	now := time.Date(2026, 11, 30, 23, 30, 0, 0, time.FixedZone("UTC-5", -5*3600))
	got := window.Closing(st, now, []string{"hold nvidia-dkms on GPU servers"})
	want := plan.Closing{Round: "2026-11", Date: "2026-12-01", Report: "rounds/2026-11/" + round.ReportFile,
		Deviations: []string{"resume at install on gpu-2: dpkg finished by hand", string(round.DecisionResidualRiskAccepted), "the round was aborted"},
		Lessons:    []string{"the canary's /boot was short", "hold nvidia-dkms on GPU servers"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("closing (-want +got):\n%s", diff)
	}
}
