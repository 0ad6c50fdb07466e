package round

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestAttemptKeepsTheBootItEndedOn: the boot a step observed when it
// ended (kernel and boot_id) is kept on its attempt, green or red, and a
// reopened journal reads it back: a later step holds the host to it.
func TestAttemptKeepsTheBootItEndedOn(t *testing.T) {
	dir := roundDir(t)
	clk := newClock()
	j := openJournal(t, dir, clk)
	noErr(t)(j.Plan(fleetOrder(t), soak48, Meta{}))
	noErr(t)(j.StartStep(StepVerify, "cp-1", Meta{}))
	noErr(t)(j.FailStep(StepVerify, "cp-1", Meta{Kernel: "6.8.0-51-generic", BootID: "b-red", Detail: "bond0 down"}))
	noErr(t)(j.StartStep(StepInspect, "cp-1", Meta{}))
	noErr(t)(j.FinishStep(StepInspect, "cp-1", Meta{Kernel: "6.8.0-51-generic", BootID: "b-green"}))
	checkConsistent(t, j)
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j = openJournal(t, dir, clk)
	type seen struct{ Kernel, BootID string }
	got := map[Step]seen{}
	for _, s := range []Step{StepVerify, StepInspect} {
		a := j.StepRun(s, "cp-1").Last()
		got[s] = seen{a.Kernel, a.BootID}
	}
	want := map[Step]seen{StepVerify: {"6.8.0-51-generic", "b-red"}, StepInspect: {"6.8.0-51-generic", "b-green"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("boots on the attempts (-want +got):\n%s", diff)
	}
}
