package round

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// roundFiles is every file of the round directory with its bytes.
func roundFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = string(b)
	}
	return out
}

// plannedDir is a round directory whose journal holds a plan and a step
// in flight, closed by its writer.
func plannedDir(t *testing.T) string {
	t.Helper()
	dir := roundDir(t)
	j := openJournal(t, dir, newClock())
	noErr(t)(j.Plan(fleetOrder(t), soak48, Meta{}))
	noErr(t)(j.StartStep(StepInspect, "cp-1", Meta{}))
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// A view writes nothing at all: opening it, reading its state and status,
// and every write method leave each file of the round byte-identical (no
// session_opened record, no state.json rewrite, no audit log, no repair);
// each write answers ErrReadOnlyView.
func TestViewWritesNothing(t *testing.T) {
	dir := plannedDir(t)
	// A stale state.json: a writer would rewrite it; a view must not.
	if err := os.WriteFile(filepath.Join(dir, StateFile), []byte("{}\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	before := roundFiles(t, dir)
	v, err := OpenView(dir, WithClock(newClock().Now))
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	st := v.State()
	if st.Plan == nil || st.Node("cp-1").Steps[StepInspect] == nil {
		t.Fatalf("view state misses the journal's records: %+v", st)
	}
	if got := v.Opened().Records; got != 3 {
		t.Errorf("view read %d records, want 3", got)
	}
	_ = v.Status()
	writes := map[string]error{}
	_, writes["StartStep"] = v.StartStep(StepSimulate, "cp-1", Meta{})
	_, writes["FailStep"] = v.FailStep(StepInspect, "cp-1", Meta{Detail: "x"})
	_, writes["Lesson"] = v.Lesson("learned")
	_, writes["Notification"] = v.Notification("cp-1", "sent")
	_, writes["Audit"] = v.Audit(AuditEntry{Tool: "round_status", Decision: Allowed})
	_, _, writes["WriteReport"] = v.WriteReport()
	for name, err := range writes {
		if !errors.Is(err, ErrReadOnlyView) {
			t.Errorf("%s on a view: %v, want ErrReadOnlyView", name, err)
		}
	}
	if after := roundFiles(t, dir); !maps.Equal(before, after) {
		t.Fatalf("a view changed the round's files:\nbefore %v\nafter  %v", sizes(before), sizes(after))
	}
}

// The repro of "a --read-only server takes the journal's exclusive lock":
// a view open beside the writer, before or after it, never makes the
// writer's Open answer ErrLocked, and the view follows the writer's
// appends.
func TestViewTakesNoExclusiveLock(t *testing.T) {
	dir := plannedDir(t)
	v, err := OpenView(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	_ = v.State()
	w, err := Open(dir)
	if err != nil {
		t.Fatalf("writer beside a view: %v", err)
	}
	noErr(t)(w.FinishStep(StepInspect, "cp-1", Meta{}))
	if r := v.State().Node("cp-1").Steps[StepInspect]; r == nil || r.State != Done {
		t.Fatalf("the view did not follow the writer: %+v", r)
	}
	v2, err := OpenView(dir)
	if err != nil {
		t.Fatalf("view beside a writer: %v", err)
	}
	defer v2.Close()
	if got, want := v2.State().LastSeq, w.State().LastSeq; got != want {
		t.Fatalf("view beside the writer reads seq %d, writer %d", got, want)
	}
	if _, err := Open(dir); !errors.Is(err, ErrLocked) {
		t.Fatalf("a second writer: %v, want ErrLocked (views change nothing about writers)", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// A view leaves a torn last line where it is (not replayed, not saved,
// not truncated); the writer that opens later repairs it and the view
// reads the repaired journal.
func TestViewLeavesATornTailToTheWriter(t *testing.T) {
	dir := plannedDir(t)
	path := filepath.Join(dir, JournalFile)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`{"seq":99,"kind":"step_st`); err != nil {
		t.Fatal(err)
	}
	f.Close()
	before, _ := os.ReadFile(path)
	v, err := OpenView(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	seq := v.State().LastSeq
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Fatal("a view repaired the torn tail")
	}
	if m, _ := filepath.Glob(path + ".torn-*"); len(m) > 0 {
		t.Fatalf("a view saved the torn tail: %v", m)
	}
	w, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if w.Opened().TornBytes == 0 {
		t.Fatal("the writer found no torn tail")
	}
	if got := v.State().LastSeq; got <= seq || got != w.State().LastSeq {
		t.Fatalf("view after the repair: seq %d (before %d, writer %d)", got, seq, w.State().LastSeq)
	}
}

// sizes names each file with its length.
func sizes(m map[string]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, fmt.Sprintf("%s:%d", k, len(v)))
	}
	slices.Sort(out)
	return out
}
