package window_test

import (
	"testing"

	"github.com/mcp-patch/mcp-patch/round"
)

// Begin starts a step without an approval, carries on one already in
// flight (no second attempt), and is refused before the step's phase
// without writing anything.
func TestRecorderBegin(t *testing.T) {
	r := newRig(t)
	rec := r.w.Rec
	if err := rec.Begin(round.StepUncordon, node); err == nil {
		t.Fatal("begin of an uncordon before the window opened passed")
	}
	if run := r.run(round.StepUncordon); run != nil && (run.State == round.InFlight || len(run.Attempts) > 0) {
		t.Fatalf("a refused begin was journaled: %+v", r.run(round.StepUncordon))
	}
	r.drained(t)
	for range 2 {
		if err := rec.Begin(round.StepInstall, node); err != nil {
			t.Fatal(err)
		}
	}
	run := r.run(round.StepInstall)
	if run == nil || run.State != round.InFlight || len(run.Attempts) != 1 {
		t.Fatalf("two begins of one step in flight: %+v", run)
	}
	if run.Last().ApprovalID != "" {
		t.Errorf("begin journaled an approval id %q", run.Last().ApprovalID)
	}
}
