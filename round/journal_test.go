package round

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func roundDir(t *testing.T) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "rounds", "2026-11")
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func openJournal(t *testing.T, dir string, clk *testClock) *Journal {
	t.Helper()
	j, err := Open(dir, WithClock(clk.Now), WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

// noErr fails the test when an append returns an error.
func noErr(t *testing.T) func(Record, error) {
	return func(_ Record, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
}

// checkConsistent asserts that the journal's state equals a replay of the
// journal file and that state.json says the same.
func checkConsistent(t *testing.T, j *Journal) {
	t.Helper()
	data, err := ReadJournal(j.Dir())
	if err != nil {
		t.Fatal(err)
	}
	replayed, info, err := Replay(data)
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	if info.TornBytes != 0 {
		t.Errorf("journal has a torn tail of %d bytes after a clean append", info.TornBytes)
	}
	live := j.State()
	if diff := cmp.Diff(replayed, live); diff != "" {
		t.Errorf("state differs from replay (-replay +live):\n%s", diff)
	}
	if err := snapshotFileMatches(SnapshotPath(j.Dir(), j.anchorDir), data); err != nil {
		t.Error(err)
	}
}

// readStateFile decodes dir's state.json.
func readStateFile(dir string) (State, error) { return readSnapshotFile(filepath.Join(dir, StateFile)) }

// readSnapshotFile decodes the state snapshot at path.
func readSnapshotFile(path string) (State, error) {
	var st State
	b, err := os.ReadFile(path)
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("state.json is not whole: %w", err)
	}
	return st, nil
}

// snapshotMatches reports whether state.json is the state the first
// last_seq records of the journal bytes data make (a snapshot of a
// prefix: it may lag the journal, never say something it does not).
func snapshotMatches(dir string, data []byte) error {
	return snapshotFileMatches(filepath.Join(dir, StateFile), data)
}

// snapshotFileMatches is snapshotMatches for the snapshot at path.
func snapshotFileMatches(path string, data []byte) error {
	file, err := readSnapshotFile(path)
	if err != nil {
		return err
	}
	sc, err := scanLines(data)
	if err != nil {
		return err
	}
	if file.LastSeq == 0 || file.LastSeq > uint64(len(sc.records)) {
		return fmt.Errorf("state.json at seq %d, journal at %d", file.LastSeq, len(sc.records))
	}
	prefix := NewState(file.RoundID)
	for _, rec := range sc.records[:file.LastSeq] {
		if err := prefix.Apply(rec); err != nil {
			return err
		}
	}
	if diff := cmp.Diff(prefix, &file); diff != "" {
		return fmt.Errorf("state.json differs from the journal's first %d records (-journal +file):\n%s", file.LastSeq, diff)
	}
	return nil
}

func TestJournalReopenRebuildsState(t *testing.T) {
	dir := roundDir(t)
	clk := newClock()
	j := openJournal(t, dir, clk)
	noErr(t)(j.Plan(fleetOrder(t), soak48, Meta{ArgsDigest: "sha256:00"}))
	noErr(t)(j.StartStep(StepBaseline, "", Meta{}))
	noErr(t)(j.FinishStep(StepBaseline, "", Meta{}))
	for _, st := range []Step{StepInspect, StepSimulate, StepDownload, StepSnapshot, StepDrain} {
		clk.Advance(time.Minute)
		noErr(t)(j.StartStep(st, "cp-1", Meta{ApprovalID: "ap-" + string(st)}))
		noErr(t)(j.FinishStep(st, "cp-1", Meta{Kernel: "6.8.0-40-generic"}))
	}
	checkConsistent(t, j)
	before := j.State()
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}

	j2 := openJournal(t, dir, clk)
	after := j2.State()
	if after.Sessions != 2 || after.LastSeq != before.LastSeq+1 {
		t.Errorf("sessions %d last seq %d, want 2 and %d", after.Sessions, after.LastSeq, before.LastSeq+1)
	}
	after.Sessions, after.LastSeq = before.Sessions, before.LastSeq
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("reopened state differs (-before +after):\n%s", diff)
	}
	if j2.Opened().StateFileStale {
		t.Error("state file reported stale after a clean close")
	}
	if got := j2.State().Node("cp-1").KernelBefore; got != "6.8.0-40-generic" {
		t.Errorf("kernel before = %q", got)
	}
	checkConsistent(t, j2)
}

func TestJournalRefusesASecondWriter(t *testing.T) {
	t.Run("same process", func(t *testing.T) {
		dir := roundDir(t)
		openJournal(t, dir, newClock())
		if _, err := Open(dir); !errors.Is(err, ErrLocked) {
			t.Fatalf("second Open: %v, want ErrLocked", err)
		}
	})
	t.Run("another process", func(t *testing.T) {
		dir := roundDir(t)
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), childModeEnv+"=hold", childDirEnv+"="+dir)
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		cmd.Stderr = &out
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		line := make([]byte, 64)
		n, err := stdout.Read(line)
		if err != nil || !strings.HasPrefix(string(line[:n]), "locked") {
			t.Fatalf("child said %q, %v (stderr %s)", line[:n], err, out.String())
		}
		if _, err := Open(dir); !errors.Is(err, ErrLocked) {
			t.Fatalf("Open while another process holds the journal: %v, want ErrLocked", err)
		}
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Fatalf("child: %v (stderr %s)", err, out.String())
		}
		j, err := Open(dir)
		if err != nil {
			t.Fatalf("Open after the other process left: %v", err)
		}
		j.Close()
	})
}

func TestJournalTornTailIsSavedTruncatedAndRecorded(t *testing.T) {
	dir := roundDir(t)
	clk := newClock()
	j := openJournal(t, dir, clk)
	noErr(t)(j.Plan(fleetOrder(t), soak48, Meta{}))
	noErr(t)(j.StartStep(StepInspect, "cp-1", Meta{}))
	j.Close()
	path := filepath.Join(dir, JournalFile)
	whole, _ := os.ReadFile(path)
	torn := []byte(`{"seq":4,"time":"2026-11-03T08:00:00Z","kind":"step_fin`)
	appendBytes(t, path, torn)

	j2 := openJournal(t, dir, clk)
	rep := j2.Opened()
	if rep.TornBytes != len(torn) {
		t.Fatalf("torn bytes = %d, want %d", rep.TornBytes, len(torn))
	}
	saved, err := os.ReadFile(filepath.Join(dir, rep.TornSavedAs))
	if err != nil || !bytes.Equal(saved, torn) {
		t.Fatalf("saved torn tail = %q, %v", saved, err)
	}
	after, _ := os.ReadFile(path)
	if !bytes.HasPrefix(after, whole) {
		t.Fatal("records before the torn line changed")
	}
	if bytes.Contains(after, torn) {
		t.Fatal("torn bytes still in the journal")
	}
	st := j2.State()
	if len(st.Recoveries) != 1 || !strings.Contains(st.Recoveries[0].Detail, rep.TornSavedAs) {
		t.Fatalf("recoveries = %+v", st.Recoveries)
	}
	if got := st.Node("cp-1").Steps[StepInspect]; got.State != InFlight || !got.NeedsRecheck {
		t.Errorf("inspect = %+v, want in flight and NeedsRecheck", got)
	}
	checkConsistent(t, j2)
}

func TestJournalCompletesALastLineMissingItsNewline(t *testing.T) {
	dir := roundDir(t)
	clk := newClock()
	j := openJournal(t, dir, clk)
	noErr(t)(j.Plan(fleetOrder(t), soak48, Meta{}))
	j.Close()
	path := filepath.Join(dir, JournalFile)
	data, _ := os.ReadFile(path)
	if err := os.WriteFile(path, bytes.TrimSuffix(data, []byte("\n")), 0o640); err != nil {
		t.Fatal(err)
	}
	j2 := openJournal(t, dir, clk)
	if j2.State().Plan == nil || j2.Opened().TornBytes != 0 {
		t.Fatalf("plan lost or reported torn: %+v", j2.Opened())
	}
	checkConsistent(t, j2)
}

func TestJournalRefusesACorruptMiddleLine(t *testing.T) {
	dir := roundDir(t)
	clk := newClock()
	j := openJournal(t, dir, clk)
	noErr(t)(j.Plan(fleetOrder(t), soak48, Meta{}))
	noErr(t)(j.StartStep(StepInspect, "cp-1", Meta{}))
	j.Close()
	path := filepath.Join(dir, JournalFile)
	data, _ := os.ReadFile(path)
	lines := bytes.SplitAfter(data, []byte("\n"))
	lines[1] = []byte("{garbage\n")
	bad := bytes.Join(lines, nil)
	if err := os.WriteFile(path, bad, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("Open of a corrupt journal: %v, want an error naming line 2", err)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, bad) {
		t.Error("Open changed a corrupt journal")
	}
}

func TestJournalRefusesAJournalOfAnotherRound(t *testing.T) {
	dir := roundDir(t)
	j := openJournal(t, dir, newClock())
	j.Close()
	other := filepath.Join(filepath.Dir(dir), "2026-12")
	if err := os.Rename(dir, other); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(other); err == nil || !strings.Contains(err.Error(), "2026-11") {
		t.Fatalf("Open of a moved journal: %v", err)
	}
	if _, err := Open(filepath.Join(t.TempDir(), "bad round")); err == nil {
		t.Fatal("Open accepted a directory name that is not a round id")
	}
}

func TestJournalInFlightStepComesBackNeedingRecheck(t *testing.T) {
	dir := roundDir(t)
	clk := newClock()
	j := openJournal(t, dir, clk)
	noErr(t)(j.Plan(fleetOrder(t), soak48, Meta{}))
	noErr(t)(j.StartStep(StepBaseline, "", Meta{}))
	noErr(t)(j.FinishStep(StepBaseline, "", Meta{}))
	noErr(t)(j.StartStep(StepSnapshot, "cp-1", Meta{}))
	noErr(t)(j.FinishStep(StepSnapshot, "cp-1", Meta{}))
	noErr(t)(j.StartStep(StepDrain, "cp-1", Meta{}))
	noErr(t)(j.FinishStep(StepDrain, "cp-1", Meta{}))
	noErr(t)(j.StartStep(StepInstall, "cp-1", Meta{ApprovalID: "ap-1"}))
	j.Close() // the process "dies" with install in flight

	j2 := openJournal(t, dir, clk)
	if diff := cmp.Diff([]Target{{Node: "cp-1", Step: StepInstall}}, j2.Opened().NeedsRecheck); diff != "" {
		t.Fatalf("NeedsRecheck (-want +got):\n%s", diff)
	}
	st := j2.Status()
	if st.Next == nil || !st.Next.Recheck || !strings.Contains(st.NextAction, "do not repeat it blindly") {
		t.Fatalf("next = %+v %q", st.Next, st.NextAction)
	}
	if _, err := j2.StartStep(StepInstall, "cp-1", Meta{}); ruleOf(err) != RuleStepInFlight {
		t.Fatalf("restart of install: %v, want step_in_flight", err)
	}
	noErr(t)(j2.FinishStep(StepInstall, "cp-1", Meta{Detail: "re-checked: dpkg finished, packages at target"}))
	if r := j2.State().Node("cp-1").Steps[StepInstall]; r.NeedsRecheck || r.State != Done {
		t.Fatalf("install after re-check = %+v", r)
	}
	checkConsistent(t, j2)
}

func TestJournalRefusalWritesNothing(t *testing.T) {
	dir := roundDir(t)
	j := openJournal(t, dir, newClock())
	noErr(t)(j.Plan(fleetOrder(t), soak48, Meta{}))
	path := filepath.Join(dir, JournalFile)
	before, _ := os.ReadFile(path)
	if _, err := j.StartStep(StepDrain, "cp-2", Meta{}); ruleOf(err) != RuleBaselineBeforeDrain {
		t.Fatalf("drain: %v", err)
	}
	if _, err := j.FinishStep(StepDrain, "cp-2", Meta{}); err == nil {
		t.Fatal("finish of a step never started was recorded")
	}
	if _, err := j.FailStep(StepInspect, "cp-1", Meta{}); err == nil {
		t.Fatal("failure without a reason was recorded")
	}
	if _, err := j.Decide(DecisionResume, "", "", Meta{}); ruleOf(err) != RuleNotStopped {
		t.Fatalf("resume: %v", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Fatal("a refused call changed the journal")
	}
}

func TestJournalConcurrentAppendsAreSerialized(t *testing.T) {
	dir := roundDir(t)
	j := openJournal(t, dir, newClock())
	noErr(t)(j.Plan(fleetOrder(t), soak48, Meta{}))
	nodes := []string{"cp-1", "cp-2", "cp-3", "gpu-a", "gpu-b", "vm-1"}
	const perNode = 15
	var wg sync.WaitGroup
	errs := make(chan error, len(nodes))
	for _, n := range nodes {
		wg.Go(func() {
			for range perNode {
				if _, err := j.StartStep(StepInspect, n, Meta{}); err != nil {
					errs <- err
					return
				}
				if _, err := j.FinishStep(StepInspect, n, Meta{}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st := j.State()
	if want := uint64(2 + len(nodes)*perNode*2); st.LastSeq != want {
		t.Fatalf("last seq %d, want %d", st.LastSeq, want)
	}
	for _, n := range nodes {
		if got := len(st.Node(n).Steps[StepInspect].Attempts); got != perNode {
			t.Errorf("%s: %d attempts, want %d", n, got, perNode)
		}
	}
	checkConsistent(t, j)
}

func TestJournalStaleStateFileIsRebuilt(t *testing.T) {
	dir := roundDir(t)
	clk := newClock()
	j := openJournal(t, dir, clk)
	noErr(t)(j.Plan(fleetOrder(t), soak48, Meta{}))
	j.Close()
	if err := os.WriteFile(filepath.Join(dir, StateFile), []byte(`{"round_id":"2026-11","last_seq":99}`), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "."+StateFile+".tmp-123"), []byte("half"), 0o640); err != nil {
		t.Fatal(err)
	}
	j2 := openJournal(t, dir, clk)
	if !j2.Opened().StateFileStale {
		t.Error("a state file that disagrees with the journal was not reported")
	}
	if _, err := os.Stat(filepath.Join(dir, "."+StateFile+".tmp-123")); !errors.Is(err, os.ErrNotExist) {
		t.Error("half-written state temp file left behind")
	}
	checkConsistent(t, j2)
}

func TestAuditLog(t *testing.T) {
	dir := roundDir(t)
	clk := newClock()
	j := openJournal(t, dir, clk)
	type args struct {
		Node     string `json:"node"`
		Approval string `json:"approval"`
		Force    bool   `json:"force"`
	}
	secret := "-----BEGIN SSH SIGNATURE-----secret"
	rec, err := j.Audit(AuditEntry{Tool: "drain_node", Node: "cp-1", Args: args{Node: "cp-1", Approval: secret},
		ApprovalID: "ap-7", Decision: Refused, Rule: RuleBaselineBeforeDrain, Reason: "no baseline", Outcome: "refused"})
	if err != nil {
		t.Fatal(err)
	}
	// The same arguments as a map, keys in another order, give the same digest.
	sameAsMap, err := ArgsDigest(map[string]any{"force": false, "approval": secret, "node": "cp-1"})
	if err != nil {
		t.Fatal(err)
	}
	if rec.ArgsDigest != sameAsMap || !strings.HasPrefix(sameAsMap, "sha256:") {
		t.Errorf("digest %s, map digest %s", rec.ArgsDigest, sameAsMap)
	}
	if other, _ := ArgsDigest(args{Node: "cp-2", Approval: secret}); other == rec.ArgsDigest {
		t.Error("different arguments gave the same digest")
	}
	canon, _ := CanonicalJSON(map[string]any{"b": 1, "a": "<&>"})
	if string(canon) != `{"a":"<&>","b":1}` {
		t.Errorf("canonical JSON = %s", canon)
	}
	if _, err := j.Audit(AuditEntry{Tool: "check_gate", Decision: Allowed, Outcome: "green"}); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Audit(AuditEntry{Tool: "x", Decision: "maybe"}); err == nil {
		t.Error("audit accepted a decision that is neither allowed nor refused")
	}
	j.Close()
	path := filepath.Join(dir, AuditFile)
	data, _ := os.ReadFile(path)
	if bytes.Contains(data, []byte("SIGNATURE")) {
		t.Fatal("audit log holds the arguments")
	}
	var lines []AuditRecord
	for _, l := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		var r AuditRecord
		if err := json.Unmarshal(l, &r); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, r)
	}
	if len(lines) != 2 || lines[0].Seq != 1 || lines[1].Seq != 2 || lines[0].Rule != RuleBaselineBeforeDrain || lines[0].Round != "2026-11" {
		t.Fatalf("audit lines = %+v", lines)
	}

	// A torn audit line is saved aside and the sequence goes on.
	appendBytes(t, path, []byte(`{"seq":3,"ti`))
	j2 := openJournal(t, dir, clk)
	if j2.Opened().AuditTornBytes != 12 {
		t.Fatalf("audit torn bytes = %d", j2.Opened().AuditTornBytes)
	}
	rec3, err := j2.Audit(AuditEntry{Tool: "round_status", Decision: Allowed})
	if err != nil || rec3.Seq != 3 {
		t.Fatalf("audit after torn tail: %+v %v", rec3, err)
	}
	if r := j2.State().Recoveries; len(r) != 1 || !strings.Contains(r[0].Detail, "audit.jsonl.torn-413 and truncated") {
		t.Fatalf("journal does not record the torn audit line: %+v", r)
	}
}

// A torn tail saved by an Open that died before recording it is recorded
// by the next Open, once.
func TestJournalRecordsATornTailSavedButNotRecorded(t *testing.T) {
	dir := roundDir(t)
	clk := newClock()
	j := openJournal(t, dir, clk)
	j.Close()
	if err := os.WriteFile(filepath.Join(dir, JournalFile+".torn-1210"), []byte(`{"seq":9,"ti`), 0o640); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		j := openJournal(t, dir, clk)
		r := j.State().Recoveries
		if len(r) != 1 || r[0].Detail != "torn last line of journal.jsonl (12 bytes at offset 1210: a crash mid-write, never acknowledged) saved to journal.jsonl.torn-1210 and truncated" {
			t.Fatalf("recoveries = %+v", r)
		}
		j.Close()
	}
}

func appendBytes(t *testing.T, path string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// holdChild opens the journal and holds it until its stdin closes.
func holdChild(dir string) int {
	j, err := Open(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("locked")
	_, _ = os.Stdin.Read(make([]byte, 1))
	if err := j.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func TestJournalNotificationKeepsFindingsAndReplays(t *testing.T) {
	dir := roundDir(t)
	clk := newClock()
	j := openJournal(t, dir, clk)
	noErr(t)(j.Plan(fleetOrder(t), soak48, Meta{}))
	noErr(t)(j.FindingsCommitted("abc123"))
	noErr(t)(j.Notification("cp-1", "notification approval_needed to chat sent (attempt 1, HTTP 200, delivery d1)"))
	if !j.State().FindingsCommitted {
		t.Error("a notification record made the committed findings stale")
	}
	if _, err := j.Notification("cp-1", " "); err == nil {
		t.Error("an empty notification was recorded")
	}
	before := j.State()
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	after := openJournal(t, dir, clk).State()
	if diff := cmp.Diff(before.Notifications, after.Notifications); diff != "" || len(after.Notifications) != 1 {
		t.Errorf("notifications after replay (-before +after):\n%s", diff)
	}
}

func TestJournalReleasedKeepsFindingsAndReplays(t *testing.T) {
	dir := roundDir(t)
	clk := newClock()
	j := openJournal(t, dir, clk)
	noErr(t)(j.Plan(fleetOrder(t), soak48, Meta{}))
	noErr(t)(j.FindingsCommitted("abc123"))
	noErr(t)(j.Released("cp-1", "window Lease released; Alertmanager silence s-1 expired"))
	if !j.State().FindingsCommitted {
		t.Error("a release record made the committed findings stale")
	}
	if _, err := j.Released("cp-1", " "); err == nil {
		t.Error("an empty release was recorded")
	}
	if _, err := j.Released("nowhere-9", "window Lease released"); err == nil {
		t.Error("the release of a node outside the order was recorded")
	}
	before := j.State()
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	after := openJournal(t, dir, clk).State()
	if diff := cmp.Diff(before.Releases, after.Releases); diff != "" || len(after.Releases) != 1 || after.Releases[0].Node != "cp-1" {
		t.Errorf("releases after replay (-before +after):\n%s", diff)
	}
}

func TestJournalObserverSeesEveryRecordOnDisk(t *testing.T) {
	dir := roundDir(t)
	var seen []Kind
	var lastSeq uint64
	j, err := Open(dir, WithClock(newClock().Now), WithObserver(func(r Record, st *State) {
		seen = append(seen, r.Kind)
		lastSeq = st.LastSeq
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	noErr(t)(j.Plan(fleetOrder(t), soak48, Meta{}))
	if _, err := j.StartStep(StepDrain, "cp-1", Meta{}); err == nil {
		t.Fatal("drain before preflight admitted")
	}
	want := []Kind{KindSessionOpened, KindPlan}
	if diff := cmp.Diff(want, seen); diff != "" || lastSeq != 2 {
		t.Errorf("observed (-want +got):\n%s (last seq %d); a refused record must not be observed", diff, lastSeq)
	}
}

// The observer shares each state it is given: no later append changes one
// (each applies to a copy), so what it kept reads the same at the end of
// the round as when it was handed over.
func TestJournalObservedStatesNeverChangeLater(t *testing.T) {
	dir := roundDir(t)
	type kept struct {
		st   *State
		json string
	}
	var all []kept
	j, err := Open(dir, WithClock(newClock().Now), WithObserver(func(r Record, st *State) {
		b, err := json.Marshal(st)
		if err != nil {
			t.Error(err)
		}
		all = append(all, kept{st, string(b)})
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	noErr(t)(j.Plan(fleetOrder(t), soak48, Meta{}))
	noErr(t)(j.StartStep(StepBaseline, "", Meta{}))
	noErr(t)(j.FinishStep(StepBaseline, "", Meta{}))
	noErr(t)(j.StartStep(StepInspect, "cp-1", Meta{}))
	noErr(t)(j.FailStep(StepInspect, "cp-1", Meta{Detail: "unreachable"}))
	noErr(t)(j.StartRollback("cp-1", Meta{ApprovalID: "ap-1"}))
	noErr(t)(j.EndRollback("cp-1", OutcomeDone, Meta{Kernel: "6.8.0-40-generic"}))
	if len(all) < 7 {
		t.Fatalf("observed %d states", len(all))
	}
	for i, k := range all {
		b, err := json.Marshal(k.st)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != k.json {
			t.Errorf("observed state %d (seq %d) changed after it was handed over", i, k.st.LastSeq)
		}
		if k.st.LastSeq != uint64(i+1) {
			t.Errorf("observed state %d has last seq %d", i, k.st.LastSeq)
		}
	}
}

func TestJournalRollbackWhileStopped(t *testing.T) {
	dir := roundDir(t)
	j := openJournal(t, dir, newClock())
	noErr(t)(j.Plan(fleetOrder(t), soak48, Meta{}))
	noErr(t)(j.StartStep(StepBaseline, "", Meta{}))
	noErr(t)(j.FailStep(StepBaseline, "", Meta{Detail: "stop the round"}))
	if j.State().Stop == nil {
		t.Fatal("not stopped")
	}
	if _, err := j.EndRollback("cp-1", OutcomeDone, Meta{}); err == nil {
		t.Fatal("ended a rollback that never started")
	}
	noErr(t)(j.StartRollback("cp-1", Meta{ApprovalID: "ap-1", Detail: "from 6.8.0-45-generic"}))
	if _, err := j.StartRollback("cp-1", Meta{}); err == nil {
		t.Fatal("two rollbacks of one node in flight")
	}
	if _, err := j.StartRollback("nope", Meta{}); err == nil {
		t.Fatal("rollback of a node outside the order")
	}
	noErr(t)(j.EndRollback("cp-1", OutcomeDone, Meta{Kernel: "6.8.0-40-generic", Detail: "boot id changed, verify green"}))
	st := j.State()
	r := st.Rollback("cp-1")
	if r == nil || r.State != Done || r.Kernel != "6.8.0-40-generic" || r.ApprovalID != "ap-1" || st.Stop == nil {
		t.Fatalf("rollback %+v, stop %+v: the round must stay stopped", r, st.Stop)
	}
	j.Close()
	if after := openJournal(t, dir, newClock()).State(); !cmp.Equal(after.Rollbacks, st.Rollbacks) {
		t.Errorf("replayed rollbacks %+v", after.Rollbacks)
	}
	var b strings.Builder
	if err := RenderReport(&b, st); err != nil || !strings.Contains(b.String(), "rollback of cp-1 to its old kernel: done") {
		t.Errorf("report lacks the rollback:\n%s", b.String())
	}
}

// Hold keeps appends out while it runs: a record written from another
// goroutine during it lands after it, so what Hold's function reads of
// journal.jsonl and state.json is one matching pair (state.json the
// snapshot of a prefix of that journal).
func TestJournalHoldKeepsAppendsOut(t *testing.T) {
	dir := roundDir(t)
	j := openJournal(t, dir, newClock())
	noErr(t)(j.Plan(fleetOrder(t), soak48, Meta{ArgsDigest: "sha256:00"}))
	appended := make(chan error, 1)
	err := j.Hold(func() error {
		go func() {
			_, err := j.Lesson("written while the journal was held")
			appended <- err
		}()
		for range 50 {
			select {
			case err := <-appended:
				return fmt.Errorf("a record was appended while the journal was held (%v)", err)
			default:
				runtime.Gosched()
			}
		}
		return filesMatch(dir)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-appended; err != nil {
		t.Fatal(err)
	}
	checkConsistent(t, j)
}

// filesMatch reports whether state.json is the snapshot of a prefix of
// journal.jsonl (read without the journal's lock).
func filesMatch(dir string) error {
	data, err := ReadJournal(dir)
	if err != nil {
		return err
	}
	return snapshotMatches(dir, data)
}

func TestSnapshotDue(t *testing.T) {
	for _, c := range []struct {
		name                 string
		sinceSnap, snapBytes int64
		want                 bool
	}{
		{"no snapshot yet", 100, 0, true},
		{"small round, journal grew less than the floor", minSnapshotBytes - 1, 1 << 10, false},
		{"small round, journal grew by the floor", minSnapshotBytes, 1 << 10, true},
		{"big round, journal grew less than the snapshot", 9 << 20, 10 << 20, false},
		{"big round, journal grew by the snapshot", 10 << 20, 10 << 20, true},
	} {
		if got := snapshotDue(c.sinceSnap, c.snapBytes); got != c.want {
			t.Errorf("%s: snapshotDue(%d, %d) = %v, want %v", c.name, c.sinceSnap, c.snapBytes, got, c.want)
		}
	}
}

// A long round rewrites state.json only as often as the journal grows by
// its size: over many records the bytes written to state.json stay within
// a small multiple of the journal's, and state.json stays the snapshot of
// a prefix (and of the whole journal after Close).
func TestJournalSnapshotWritesStayProportionalToTheJournal(t *testing.T) {
	dir := roundDir(t)
	clk := newClock()
	j := openJournal(t, dir, clk)
	noErr(t)(j.Plan(fleetOrder(t), soak48, Meta{}))
	var stateWritten int64
	lastSeq := uint64(0)
	for i := range 400 {
		clk.Advance(time.Second)
		noErr(t)(j.Lesson(fmt.Sprintf("lesson %d: %s", i, strings.Repeat("x", 100))))
		fi, err := os.Stat(filepath.Join(dir, StateFile))
		if err != nil {
			t.Fatal(err)
		}
		st, err := readStateFile(dir)
		if err != nil {
			t.Fatal(err)
		}
		if st.LastSeq != lastSeq {
			stateWritten += fi.Size()
			lastSeq = st.LastSeq
		}
	}
	whole, err := ReadJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	journalBytes := int64(len(whole))
	if stateWritten > 3*journalBytes {
		t.Errorf("state.json rewrites took %d bytes for a journal of %d: not proportional", stateWritten, journalBytes)
	}
	if err := filesMatch(dir); err != nil {
		t.Error(err)
	}
	last := j.State().LastSeq
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := readStateFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.LastSeq != last {
		t.Errorf("state.json after Close at seq %d, want the journal's last record %d", st.LastSeq, last)
	}
	t.Logf("journal %d bytes, state.json rewrites %d bytes", journalBytes, stateWritten)
}

// An append applies its record to a copy that shares what the record
// cannot change (State.successor). Over a whole scripted round (a canary's
// panic and resume, a red gate accepted as residual risk and resumed, a
// VM's hypervisor attestation, the soak and close), every state the
// chain of shared copies made is, at the end, what it was when it was
// made, and each is the state a full copy at every record makes.
func TestSharedCopiesAreTheStatesFullCopiesMake(t *testing.T) {
	j := scriptedRound(t)
	data, err := ReadJournal(j.Dir())
	if err != nil {
		t.Fatal(err)
	}
	sc, err := scanLines(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(sc.records) < 100 {
		t.Fatalf("the scripted round has %d records", len(sc.records))
	}
	type kept struct {
		st   *State
		json string
	}
	var shared []kept
	cur, full := NewState(j.RoundID()), NewState(j.RoundID())
	for _, rec := range sc.records {
		nx := cur.successor(rec)
		if err := nx.Apply(rec); err != nil {
			t.Fatalf("record %d: %v", rec.Seq, err)
		}
		full = full.Clone()
		if err := full.Apply(rec); err != nil {
			t.Fatalf("record %d (full copy): %v", rec.Seq, err)
		}
		a, err := json.Marshal(nx)
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(full)
		if err != nil {
			t.Fatal(err)
		}
		if string(a) != string(b) {
			t.Fatalf("after record %d (%s %s %s) the shared copy differs from the full copy", rec.Seq, rec.Kind, rec.Step, rec.Node)
		}
		shared = append(shared, kept{nx, string(a)})
		cur = nx
	}
	for _, k := range shared {
		b, err := json.Marshal(k.st)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != k.json {
			t.Errorf("the state made at record %d changed later", k.st.LastSeq)
		}
	}
}
