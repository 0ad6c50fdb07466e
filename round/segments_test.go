package round

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// sealedPair opens two journals of the same round in two directories,
// one that never seals and one that seals its live files at segBytes, and
// writes the same records and audit lines to both (one clock).
func sealedPair(t *testing.T, segBytes int64, records int) (whole, sealed *Journal) {
	t.Helper()
	clk := newClock()
	open := func(dir string, n int64) *Journal {
		j, err := Open(dir, WithClock(clk.Now), WithLogger(testLogger(t)), WithSegmentBytes(n))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { j.Close() })
		return j
	}
	whole = open(roundDir(t), 0)
	sealed = open(roundDir(t), segBytes)
	for _, j := range []*Journal{whole, sealed} {
		writeRecords(t, j, 0, records)
	}
	return whole, sealed
}

// writeRecords appends a plan and the baseline (from 0), then
// notifications and audit lines numbered from..to. The journals' clock
// stands still, so two journals get the same lines.
func writeRecords(t *testing.T, j *Journal, from, to int) {
	t.Helper()
	if from == 0 {
		noErr(t)(j.Plan(fleetOrder(t), soak48, Meta{ArgsDigest: "sha256:00"}))
		noErr(t)(j.StartStep(StepBaseline, "", Meta{}))
		noErr(t)(j.FinishStep(StepBaseline, "", Meta{}))
	}
	for i := from; i < to; i++ {
		noErr(t)(j.Notification(fmt.Sprintf("cp-%d", i%3+1), fmt.Sprintf("notice %d sent to the on-call channel", i)))
		if _, err := j.Audit(AuditEntry{Tool: "round_status", Decision: Allowed, Outcome: "ok", Detail: fmt.Sprintf("call %d", i)}); err != nil {
			t.Fatal(err)
		}
	}
}

func segmentsOf(t *testing.T, dir, file string) []string {
	t.Helper()
	n, err := segmentCount(dir, file)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i := 1; i <= n; i++ {
		out = append(out, segmentName(file, i))
	}
	return out
}

func concat(t *testing.T, dir string, names ...string) []byte {
	t.Helper()
	var b bytes.Buffer
	for _, n := range names {
		data, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		b.Write(data)
	}
	return b.Bytes()
}

func TestJournalSealsSegmentsAndReplaysThemWhole(t *testing.T) {
	whole, sealed := sealedPair(t, 2<<10, 120)
	jsegs := segmentsOf(t, sealed.Dir(), JournalFile)
	asegs := segmentsOf(t, sealed.Dir(), AuditFile)
	if len(jsegs) < 3 || len(asegs) < 3 {
		t.Fatalf("sealed %d journal and %d audit segments, want several of each", len(jsegs), len(asegs))
	}
	if len(segmentsOf(t, whole.Dir(), JournalFile)) != 0 {
		t.Fatal("a journal without a segment size sealed a segment")
	}
	for _, name := range append(jsegs, asegs...) {
		fi, err := os.Stat(filepath.Join(sealed.Dir(), name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() < 2<<10 || fi.Size() > 4<<10 {
			t.Errorf("%s is %d bytes, want the segment size and at most one more record", name, fi.Size())
		}
	}
	live, err := os.ReadFile(filepath.Join(sealed.Dir(), JournalFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(live) >= 2<<10 {
		t.Errorf("live journal holds %d bytes after sealing at 2 KiB", len(live))
	}

	// The segments and the live file, in order, are the unsealed journal
	// byte for byte; the same for the audit log.
	want, err := os.ReadFile(filepath.Join(whole.Dir(), JournalFile))
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadJournal(sealed.Dir())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("segments + live journal differ from the unsealed journal (%d vs %d bytes)", len(got), len(want))
	}
	wantAudit := concat(t, whole.Dir(), AuditFile)
	if gotAudit := concat(t, sealed.Dir(), append(asegs, AuditFile)...); !bytes.Equal(gotAudit, wantAudit) {
		t.Fatalf("audit segments + live audit log differ from the unsealed one (%d vs %d bytes)", len(gotAudit), len(wantAudit))
	}

	if diff := cmp.Diff(whole.State(), sealed.State()); diff != "" {
		t.Errorf("state differs (-unsealed +sealed):\n%s", diff)
	}
	st, info, err := ReadState(sealed.Dir())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(whole.State(), st); diff != "" || info.Records != int(whole.State().LastSeq) {
		t.Errorf("ReadState over segments: %d records, diff (-unsealed +read):\n%s", info.Records, diff)
	}

	// A reader follows the writer across seals, and a reopened writer
	// replays the segments and carries on their sequence numbers.
	view, err := OpenView(sealed.Dir())
	if err != nil {
		t.Fatal(err)
	}
	defer view.Close()
	if diff := cmp.Diff(sealed.State(), view.State()); diff != "" {
		t.Errorf("view differs (-writer +view):\n%s", diff)
	}
	writeRecords(t, sealed, 120, 200)
	if n := len(segmentsOf(t, sealed.Dir(), JournalFile)); n <= len(jsegs) {
		t.Fatalf("no new segment after 80 more records (%d)", n)
	}
	if diff := cmp.Diff(sealed.State(), view.State()); diff != "" {
		t.Errorf("view after more seals differs (-writer +view):\n%s", diff)
	}
	before := sealed.State()
	auditSeq := sealed.auditSeq
	if err := sealed.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := Open(sealed.Dir(), WithSegmentBytes(2<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if got := again.State(); got.LastSeq != before.LastSeq+1 || got.Sessions != before.Sessions+1 {
		t.Errorf("reopened at seq %d (%d sessions), want %d (%d)", got.LastSeq, got.Sessions, before.LastSeq+1, before.Sessions+1)
	}
	if again.Opened().StateFileStale {
		t.Error("state.json reported stale after a clean close with segments")
	}
	rec, err := again.Audit(AuditEntry{Tool: "round_status", Decision: Allowed, Outcome: "ok"})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Seq != auditSeq+1 {
		t.Errorf("audit line after reopen has seq %d, want %d", rec.Seq, auditSeq+1)
	}
}

// A seal cut off after the segment was written but before the live file
// was emptied leaves the same records twice on disk: the next open
// empties the live file and replays each record once.
func TestJournalSealCutOffIsRepairedAtOpen(t *testing.T) {
	_, sealed := sealedPair(t, 2<<10, 60)
	dir := sealed.Dir()
	want := sealed.State()
	wantAudit := sealed.auditSeq
	if err := sealed.Close(); err != nil {
		t.Fatal(err)
	}
	// The seal's first step, as a process that died before the second
	// would have left it: the live file's records also in a new segment.
	for _, file := range []string{JournalFile, AuditFile} {
		live := concat(t, dir, file)
		if len(live) == 0 {
			t.Fatalf("%s is empty at close; the test needs records in it", file)
		}
		next := len(segmentsOf(t, dir, file)) + 1
		if err := os.WriteFile(filepath.Join(dir, segmentName(file, next)), live, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	j, err := Open(dir, WithSegmentBytes(2<<10), WithLogger(testLogger(t)))
	if err != nil {
		t.Fatalf("open after a cut-off seal: %v", err)
	}
	defer j.Close()
	got := j.State()
	if got.LastSeq != want.LastSeq+1 || got.Sessions != want.Sessions+1 {
		t.Errorf("reopened at seq %d (%d sessions), want %d (%d): a record was lost or replayed twice",
			got.LastSeq, got.Sessions, want.LastSeq+1, want.Sessions+1)
	}
	data, err := ReadJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	replayed, _, err := Replay(data)
	if err != nil {
		t.Fatalf("replay after repair: %v", err)
	}
	if diff := cmp.Diff(replayed, got); diff != "" {
		t.Errorf("state differs from the replayed journal (-replay +open):\n%s", diff)
	}
	rec, err := j.Audit(AuditEntry{Tool: "round_status", Decision: Allowed, Outcome: "ok"})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Seq != wantAudit+1 {
		t.Errorf("audit seq %d after the repair, want %d", rec.Seq, wantAudit+1)
	}
}

func TestJournalSegmentsMissingOrOverlappingAreRefused(t *testing.T) {
	cases := []struct {
		name   string
		break_ func(t *testing.T, dir string)
		want   string
	}{
		{"a segment missing", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, segmentName(JournalFile, 1))); err != nil {
				t.Fatal(err)
			}
		}, "journal-000001.jsonl is missing"},
		{"live records repeat part of a segment", func(t *testing.T, dir string) {
			segs := segmentsOf(t, dir, JournalFile)
			last := concat(t, dir, segs[len(segs)-1])
			first, _, _ := bytes.Cut(last, []byte{'\n'})
			appendBytes(t, filepath.Join(dir, JournalFile), append(first, '\n'))
		}, "replay"},
		{"a segment that ends mid-record", func(t *testing.T, dir string) {
			p := filepath.Join(dir, segmentName(JournalFile, 1))
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, data[:len(data)-5], 0o640); err != nil {
				t.Fatal(err)
			}
		}, "partial record"},
		{"a segment that is a symbolic link", func(t *testing.T, dir string) {
			p := filepath.Join(dir, segmentName(AuditFile, 1))
			if err := os.Rename(p, p+".real"); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(p+".real", p); err != nil {
				t.Fatal(err)
			}
		}, "symbolic link"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, sealed := sealedPair(t, 2<<10, 60)
			dir := sealed.Dir()
			if err := sealed.Close(); err != nil {
				t.Fatal(err)
			}
			c.break_(t, dir)
			before := dirState(t, dir)
			_, err := Open(dir, WithSegmentBytes(2<<10))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("open: %v, want an error saying %q", err, c.want)
			}
			if after := dirState(t, dir); after != before {
				t.Errorf("a refused open changed the round directory:\n%s\nwas\n%s", after, before)
			}
		})
	}
}

// dirState lists dir's files with their sizes and modification times.
func dirState(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range entries {
		fi, err := os.Lstat(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s %d %s\n", e.Name(), fi.Size(), fi.ModTime().Format(time.RFC3339Nano))
	}
	return b.String()
}

func TestSegmentFilesNamesSealedSegmentsOldestFirst(t *testing.T) {
	_, sealed := sealedPair(t, 2<<10, 40)
	got, err := SegmentFiles(sealed.Dir())
	if err != nil {
		t.Fatal(err)
	}
	want := append(segmentsOf(t, sealed.Dir(), JournalFile), segmentsOf(t, sealed.Dir(), AuditFile)...)
	if diff := cmp.Diff(want, got); diff != "" || len(got) == 0 {
		t.Errorf("SegmentFiles (-want +got):\n%s", diff)
	}
	if got[0] != "journal-000001.jsonl" {
		t.Errorf("first segment %q", got[0])
	}
}

// A seal that cannot be written (here: something already holds the
// segment's name) leaves the live journal as it was: appends go on, the
// state replays whole, and the next append after the obstacle is gone
// seals.
func TestJournalSealThatFailsLeavesTheLogLive(t *testing.T) {
	dir := roundDir(t)
	j, err := Open(dir, WithSegmentBytes(2<<10), WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	blocker := filepath.Join(dir, segmentName(JournalFile, 1))
	if err := os.Mkdir(blocker, 0o750); err != nil {
		t.Fatal(err)
	}
	writeRecords(t, j, 0, 40)
	fi, err := os.Stat(filepath.Join(dir, JournalFile))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() < 2<<10 {
		t.Fatalf("the live journal is %d bytes: it was sealed past the obstacle", fi.Size())
	}
	if err := os.Remove(blocker); err != nil {
		t.Fatal(err)
	}
	writeRecords(t, j, 40, 41)
	if n := len(segmentsOf(t, dir, JournalFile)); n != 1 {
		t.Fatalf("%d segments after the obstacle went, want 1", n)
	}
	want := j.State()
	st, _, err := ReadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, st); diff != "" {
		t.Errorf("replayed state differs (-journal +replay):\n%s", diff)
	}
}
