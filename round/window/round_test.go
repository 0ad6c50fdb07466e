package window

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcp-patch/mcp-patch/round"
)

// The round's own records (download, snapshot, uncordon, checks, close)
// go through the window Recorder: a begin carries on an attempt in
// flight, a refusal by a standing rule writes nothing, a failure stops
// the round, every transition reaches the Events hook, and a journal that
// cannot be written is an error, never dropped.
func TestRoundRecordsThroughTheRecorder(t *testing.T) {
	j := plannedJournal(t)
	t.Cleanup(func() {
		if err := j.Close(); err != nil {
			t.Error(err)
		}
	})
	var events []EventKind
	s := &Round{Journal: j, ID: "2026-11", Events: func(e Event) { events = append(events, e.Kind) }}

	before := j.State().LastSeq
	var ref *Refusal
	if err := s.Begin(round.StepUncordon, "gpu-a"); !errors.As(err, &ref) {
		t.Fatalf("uncordon before the window opened: %v, want a refusal", err)
	}
	if j.State().LastSeq != before || len(events) != 0 {
		t.Fatalf("a refused begin wrote the journal (seq %d → %d) or sent %v", before, j.State().LastSeq, events)
	}

	for range 2 {
		if err := s.Begin(round.StepDownload, "gpu-a"); err != nil {
			t.Fatal(err)
		}
	}
	run := s.StepRun(round.StepDownload, "gpu-a")
	if run == nil || run.State != round.InFlight || len(run.Attempts) != 1 {
		t.Fatalf("two begins of one download: %+v", run)
	}
	if err := s.Finish(round.StepDownload, "gpu-a", "", "fetched"); err != nil {
		t.Fatal(err)
	}
	if err := s.Begin(round.StepSnapshot, "gpu-a"); err != nil {
		t.Fatal(err)
	}
	if err := s.Fail(round.StepSnapshot, "gpu-a", "disk full"); err != nil {
		t.Fatal(err)
	}
	st := j.State()
	if st.Stop == nil || st.Stop.Step != round.StepSnapshot || st.Stop.Node != "gpu-a" {
		t.Fatalf("a failed snapshot did not stop the round: %+v", st.Stop)
	}
	want := []EventKind{EventStarted, EventFinished, EventStarted, EventFailed, EventStopped}
	if len(events) != len(want) {
		t.Fatalf("events %v, want %v", events, want)
	}
	for i := range want {
		if events[i] != want[i] {
			t.Fatalf("events %v, want %v", events, want)
		}
	}

}

// A journal that cannot be written stops the step with an error.
func TestRoundJournalErrorIsReported(t *testing.T) {
	j := plannedJournal(t)
	s := &Round{Journal: j, ID: "2026-11"}
	if err := s.Begin(round.StepDownload, "gpu-a"); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(round.StepDownload, "gpu-a", "", "fetched"); err == nil {
		t.Error("finishing a step in a closed journal reported no error")
	}
	if err := s.Fail(round.StepDownload, "gpu-a", "lost"); err == nil {
		t.Error("failing a step in a closed journal reported no error")
	}
}

func plannedJournal(t *testing.T) *round.Journal {
	t.Helper()
	now := time.Date(2026, 11, 3, 12, 0, 0, 0, time.UTC)
	j, err := round.Open(filepath.Join(t.TempDir(), "2026-11"), round.WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	o, err := round.PlanOrder([]round.NodeInfo{{Name: "gpu-a", GPU: true, Canary: true}}, round.Placement{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Plan(o, time.Hour, round.Meta{}); err != nil {
		t.Fatal(err)
	}
	return j
}
