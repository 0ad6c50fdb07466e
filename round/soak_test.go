package round

import (
	"testing"
	"testing/synctest"
	"time"
)

// The soak runs on the real clock of the journal (time.Now), here the fake
// clock of a synctest bubble: autoremove is refused until the full soak has
// passed since it started, and admitted the moment it has.
func TestSoakOnTheClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j, err := Open(roundDir(t))
		if err != nil {
			t.Fatal(err)
		}
		defer j.Close()
		if _, err := j.Plan(fleetOrder(t), soak48, Meta{}); err != nil {
			t.Fatal(err)
		}
		d := &driver{t: t, j: j, advance: time.Sleep}
		d.until(func(st Status) bool { return st.Next != nil && st.Next.Step == StepSoak })
		rec, err := j.StartStep(StepSoak, "", Meta{})
		if err != nil {
			t.Fatal(err)
		}
		if !rec.Time.Equal(time.Now()) {
			t.Fatalf("soak recorded at %v, clock says %v", rec.Time, time.Now())
		}
		for _, wait := range []time.Duration{0, time.Hour, 46 * time.Hour, 59*time.Minute + 59*time.Second} {
			time.Sleep(wait)
			if _, err := j.StartStep(StepAutoremove, "", Meta{}); ruleOf(err) != RuleSoakBeforeAutoremove {
				t.Fatalf("autoremove %s after the soak started: %v, want soak_before_autoremove", time.Since(rec.Time), err)
			}
		}
		time.Sleep(time.Second)
		if _, err := j.StartStep(StepAutoremove, "", Meta{}); err != nil {
			t.Fatalf("autoremove exactly 48h after the soak started: %v", err)
		}
	})
}
