package window

import (
	"errors"
	"io/fs"
	"log/slog"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcp-patch/mcp-patch/intent"
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

// mapBook is a round's files in memory (a missing file is os.ErrNotExist).
type mapBook map[string][]byte

func (b mapBook) ReadFile(round, name string) ([]byte, error) {
	if f, ok := b[round+"/"+name]; ok {
		return f, nil
	}
	return nil, fs.ErrNotExist
}

func (b mapBook) WriteFile(round, name string, data []byte) error {
	b[round+"/"+name] = data
	return nil
}

func (b mapBook) ReadNodeFile(round, folder, node string) ([]byte, error) {
	return b.ReadFile(round, folder+"/"+node+".json")
}

func (b mapBook) WriteNodeFile(round, folder, node string, data []byte) error {
	return b.WriteFile(round, folder+"/"+node+".json", data)
}

func (b mapBook) NodeFiles(round, folder string) ([]string, error) {
	var nodes []string
	for k := range b {
		if rest, ok := strings.CutPrefix(k, round+"/"+folder+"/"); ok {
			nodes = append(nodes, strings.TrimSuffix(rest, ".json"))
		}
	}
	sort.Strings(nodes)
	return nodes, nil
}

// A node's plan is its own file: saved and read back whole; an unreadable
// one is left out (and logged), never half-read; a fleet's nodes.json is
// no node plan.
func TestRoundNodePlans(t *testing.T) {
	b := mapBook{}
	r := &Round{ID: "2026-11", Book: b, Log: slog.New(slog.DiscardHandler)}
	want := NodePlan{Node: "gpu-a", TargetKernel: "6.8.0-45-generic", PackageDigest: "sha256:aa", PackageLines: []string{"linux-image 6.8.0-45"}}
	if err := r.SaveNodePlan(want); err != nil {
		t.Fatal(err)
	}
	b["2026-11/nodes/gpu-b.json"] = []byte("{not json")
	b["2026-11/nodes.json"] = []byte(`{"gpu-c": {"node": "gpu-c"}}`)
	got, ok := r.NodePlan("gpu-a")
	if !ok || !cmp.Equal(got, want) {
		t.Fatalf("gpu-a's plan read back: %v %s", ok, cmp.Diff(want, got))
	}
	if _, ok := r.NodePlan("gpu-b"); ok {
		t.Error("an unreadable node plan was read")
	}
	all := r.NodePlans()
	if len(all) != 1 || !cmp.Equal(all["gpu-a"], want) {
		t.Errorf("node plans %v, want gpu-a's alone", all)
	}
	var none *Round
	if p := none.NodePlans(); len(p) != 0 {
		t.Errorf("no round has node plans: %v", p)
	}
}

func TestJobWait(t *testing.T) {
	cases := []struct {
		name     string
		settings intent.Settings
		sel      string
		wait     time.Duration
		refused  bool
	}{
		{name: "no drain settings waits for nothing"},
		{name: "no wait_for_jobs waits for nothing", settings: intent.Settings{Drain: &intent.DrainSettings{}}},
		{name: "a selector and its bound", settings: intent.Settings{Drain: &intent.DrainSettings{WaitForJobs: &intent.WaitForJobs{Selector: "job=train", MaxWaitMinutes: 30}}},
			sel: "job=train", wait: 30 * time.Minute},
		{name: "a selector that does not parse is refused", settings: intent.Settings{Drain: &intent.DrainSettings{WaitForJobs: &intent.WaitForJobs{Selector: "job in (", MaxWaitMinutes: 30}}},
			refused: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sel, wait, err := JobWait(c.settings)
			var ref *Refusal
			if c.refused != errors.As(err, &ref) || (err != nil && !c.refused) {
				t.Fatalf("err %v, refused %v", err, c.refused)
			}
			got := ""
			if sel != nil {
				got = sel.String()
			}
			if got != c.sel || wait != c.wait {
				t.Errorf("selector %q wait %v, want %q %v", got, wait, c.sel, c.wait)
			}
		})
	}
}
