package round

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// anchored opens the journal in dir anchored in anchors, as the server
// does; segBytes 0 seals nothing.
func anchored(t *testing.T, dir, anchors string, clk *testClock, segBytes int64) (*Journal, error) {
	t.Helper()
	opts := []Option{WithClock(clk.Now), WithLogger(testLogger(t)), WithAnchor(anchors)}
	if segBytes > 0 {
		opts = append(opts, WithSegmentBytes(segBytes))
	}
	j, err := Open(dir, opts...)
	if err == nil {
		t.Cleanup(func() { j.Close() })
	}
	return j, err
}

// fellBack drives cp-1's window to a trial boot that fell back to the old
// kernel: the round is stopped on it.
func fellBack(t *testing.T, j *Journal) {
	t.Helper()
	noErr(t)(j.Plan(fleetOrder(t), soak48, Meta{}))
	noErr(t)(j.StartStep(StepBaseline, "", Meta{}))
	noErr(t)(j.FinishStep(StepBaseline, "", Meta{}))
	noErr(t)(j.StartStep(StepSnapshot, "cp-1", Meta{}))
	noErr(t)(j.FinishStep(StepSnapshot, "cp-1", Meta{}))
	noErr(t)(j.StartStep(StepDrain, "cp-1", Meta{ApprovalID: "ap-1"}))
	noErr(t)(j.FinishStep(StepDrain, "cp-1", Meta{}))
	noErr(t)(j.StartStep(StepInstall, "cp-1", Meta{ApprovalID: "ap-2"}))
	noErr(t)(j.FinishStep(StepInstall, "cp-1", Meta{}))
	noErr(t)(j.StartStep(StepTrialBoot, "cp-1", Meta{ApprovalID: "ap-3"}))
	noErr(t)(j.FailStep(StepTrialBoot, "cp-1", Meta{Detail: "fell back to 6.8.0-50-generic"}))
	if !(j.State().Stop != nil) {
		t.Fatal("the round did not stop on the fallback")
	}
}

// stoppedRound is an anchored journal (sealed at segBytes; 0 never)
// whose round stopped on cp-1's fallback, its directory, its anchor
// directory and its clock.
func stoppedRound(t *testing.T, segBytes int64) (*Journal, string, string, *testClock) {
	t.Helper()
	dir, anchors := roundDir(t), t.TempDir()
	clk := newClock()
	j, err := anchored(t, dir, anchors, clk, segBytes)
	if err != nil {
		t.Fatal(err)
	}
	fellBack(t, j)
	return j, dir, anchors, clk
}

// journalLines reads the journal's live file as lines.
func journalLines(t *testing.T, dir, file string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatal(err)
	}
	return bytes.SplitAfter(bytes.TrimSuffix(b, []byte("\n")), []byte("\n"))
}

func writeLines(t *testing.T, dir, file string, lines [][]byte) {
	t.Helper()
	var b []byte
	for _, l := range lines {
		b = append(b, bytes.TrimSuffix(l, []byte("\n"))...)
		b = append(b, '\n')
	}
	if err := os.WriteFile(filepath.Join(dir, file), b, 0o640); err != nil {
		t.Fatal(err)
	}
}

func recordLine(t *testing.T, r Record) []byte {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func seqOf(t *testing.T, line []byte) uint64 {
	t.Helper()
	var r Record
	if err := json.Unmarshal(line, &r); err != nil {
		t.Fatal(err)
	}
	return r.Seq
}

// greenAfterFallback is the forgery of the review: the journal cut at the
// step_failed trial_boot record, then green trial_boot, verify, uncordon
// and promote-ready records appended and numbered on.
func greenAfterFallback(t *testing.T, lines [][]byte) [][]byte {
	t.Helper()
	var cut [][]byte
	var seq uint64
	for _, l := range lines {
		var r Record
		if err := json.Unmarshal(l, &r); err != nil {
			t.Fatal(err)
		}
		if r.Kind == KindStepFailed {
			break
		}
		cut, seq = append(cut, l), r.Seq
	}
	add := func(r Record) {
		seq++
		r.Seq, r.Time = seq, base
		cut = append(cut, recordLine(t, r))
	}
	add(Record{Kind: KindStepFinished, Step: StepTrialBoot, Node: "cp-1", Outcome: OutcomeDone, Kernel: "6.8.0-51-generic"})
	for _, s := range []Step{StepVerify, StepUncordon} {
		add(Record{Kind: KindStepStarted, Step: s, Node: "cp-1"})
		add(Record{Kind: KindStepFinished, Step: s, Node: "cp-1", Outcome: OutcomeDone})
	}
	return cut
}

func wantTampered(t *testing.T, err error, seq uint64, says ...string) {
	t.Helper()
	var te *TamperError
	if !errors.As(err, &te) || !errors.Is(err, ErrTampered) {
		t.Fatalf("open = %v, want a TamperError", err)
	}
	if te.Seq != seq {
		t.Errorf("tamper names record %d, want %d (%v)", te.Seq, seq, err)
	}
	for _, s := range says {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("tamper error %q does not say %q", err, s)
		}
	}
}

func TestAnchorRefusesAGreenTrialBootWrittenOverAFallback(t *testing.T) {
	j, dir, anchors, clk := stoppedRound(t, 0)
	lines := journalLines(t, dir, JournalFile)
	failedSeq := j.State().LastSeq
	j.Close()

	writeLines(t, dir, JournalFile, greenAfterFallback(t, lines))
	_, err := anchored(t, dir, anchors, clk, 0)
	wantTampered(t, err, failedSeq, "step_finished trial_boot cp-1", "the server wrote record", "step_failed trial_boot cp-1")

	// Restored from what people committed (here: the lines as they were),
	// the round opens again, still stopped on the fallback.
	writeLines(t, dir, JournalFile, lines)
	j2, err := anchored(t, dir, anchors, clk, 0)
	if err != nil {
		t.Fatalf("the restored journal: %v", err)
	}
	if !(j2.State().Stop != nil) {
		t.Fatal("the restored round is not stopped")
	}
}

func TestAnchorRefusesAGreenTrialBootWrittenIntoASealedSegment(t *testing.T) {
	j, dir, anchors, clk := stoppedRound(t, 512)
	for i := 0; bytes.Contains(bytes.Join(journalLines(t, dir, JournalFile), nil), []byte(`"step_failed"`)); i++ {
		if i > 20 {
			t.Fatal("the failure was never sealed")
		}
		noErr(t)(j.Lesson("a note that fills the live file until it is sealed"))
	}
	segs := segmentsOf(t, dir, JournalFile)
	if len(segs) < 2 {
		t.Fatalf("sealed %d segments, want several", len(segs))
	}
	// The segment holding the failure.
	var seg string
	var lines [][]byte
	for _, s := range segs {
		ls := journalLines(t, dir, s)
		if bytes.Contains(bytes.Join(ls, nil), []byte(`"step_failed"`)) {
			seg, lines = s, ls
		}
	}
	if seg == "" {
		t.Fatal("no sealed segment holds the failure: the journal seals at 512 bytes, it should have sealed it")
	}
	j.Close()
	forged := greenAfterFallback(t, lines)
	writeLines(t, dir, seg, forged)
	_, err := anchored(t, dir, anchors, clk, 512)
	var te *TamperError
	if !errors.As(err, &te) || te.File != seg {
		t.Fatalf("open after editing %s = %v, want a TamperError naming it", seg, err)
	}
}

func TestAnchorRefusesAnUnsignedDecisionAppended(t *testing.T) {
	j, dir, anchors, clk := stoppedRound(t, 0)
	next := j.State().LastSeq + 1
	j.Close()
	lines := journalLines(t, dir, JournalFile)
	lines = append(lines, recordLine(t, Record{Seq: next, Time: base, Kind: KindDecision, Decision: DecisionResume, Node: "cp-1", Step: StepTrialBoot}))
	writeLines(t, dir, JournalFile, lines)
	_, err := anchored(t, dir, anchors, clk, 0)
	wantTampered(t, err, next, "a record the server never wrote", "decision resume")
}

func TestAnchorNamesEachKindOfEdit(t *testing.T) {
	cases := []struct {
		name string
		edit func(t *testing.T, lines [][]byte) [][]byte
		// seq is the record the refusal names: index into lines + 1.
		seq  func(lines [][]byte) uint64
		says string
	}{
		{"edited", func(t *testing.T, ls [][]byte) [][]byte {
			ls[4] = bytes.Replace(ls[4], []byte(`"cp-1"`), []byte(`"cp-3"`), 1)
			return ls
		}, func([][]byte) uint64 { return 5 }, "differs"},
		{"deleted in the middle", func(t *testing.T, ls [][]byte) [][]byte {
			return append(ls[:4:4], ls[5:]...)
		}, func([][]byte) uint64 { return 5 }, "differs"},
		{"two deleted at the end", func(t *testing.T, ls [][]byte) [][]byte {
			return ls[:len(ls)-2]
		}, func(ls [][]byte) uint64 { return uint64(len(ls) - 1) }, "2 records the server wrote are missing"},
		{"reordered", func(t *testing.T, ls [][]byte) [][]byte {
			ls[5], ls[6] = ls[6], ls[5]
			return ls
		}, func([][]byte) uint64 { return 6 }, "differs"},
		{"renumbered", func(t *testing.T, ls [][]byte) [][]byte {
			ls[6] = bytes.Replace(ls[6], []byte(`"seq":7,`), []byte(`"seq":8,`), 1)
			return ls
		}, func([][]byte) uint64 { return 7 }, "differs"},
		{"inserted", func(t *testing.T, ls [][]byte) [][]byte {
			extra := recordLine(t, Record{Seq: 3, Time: base, Kind: KindLesson, Detail: "x"})
			return append(ls[:2:2], append([][]byte{extra}, ls[2:]...)...)
		}, func([][]byte) uint64 { return 3 }, "differs"},
		{"emptied", func(t *testing.T, ls [][]byte) [][]byte { return nil },
			func([][]byte) uint64 { return 1 }, "missing"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j, dir, anchors, clk := stoppedRound(t, 0)
			j.Close()
			lines := journalLines(t, dir, JournalFile)
			seq := tc.seq(lines)
			edited := tc.edit(t, lines)
			if len(edited) == 0 {
				if err := os.WriteFile(filepath.Join(dir, JournalFile), nil, 0o640); err != nil {
					t.Fatal(err)
				}
			} else {
				writeLines(t, dir, JournalFile, edited)
			}
			_, err := anchored(t, dir, anchors, clk, 0)
			wantTampered(t, err, seq, tc.says)
		})
	}
}

func TestAnchorWritesBackTheLastRecordCutAway(t *testing.T) {
	// The anchor is written before the journal: a crash between the two,
	// or an agent cutting the last record, leaves the journal one short.
	// The record comes back; the stop it made stays.
	j, dir, anchors, clk := stoppedRound(t, 0)
	j.Close()
	lines := journalLines(t, dir, JournalFile)
	last := lines[len(lines)-1]
	writeLines(t, dir, JournalFile, lines[:len(lines)-1])

	j2, err := anchored(t, dir, anchors, clk, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := j2.Opened().Restored; got != seqOf(t, last) {
		t.Fatalf("restored record %d, want %d", got, seqOf(t, last))
	}
	if !(j2.State().Stop != nil) {
		t.Fatal("the round is not stopped after its last record came back")
	}
	after := journalLines(t, dir, JournalFile)
	if !bytes.Equal(bytes.TrimSuffix(after[len(lines)-1], []byte("\n")), bytes.TrimSuffix(last, []byte("\n"))) {
		t.Fatalf("record %d written back as %s, want %s", seqOf(t, last), after[len(lines)-1], last)
	}
	checkConsistent(t, j2)
}

func TestAnchorRefusesAJournalItNeverAnchored(t *testing.T) {
	dir := roundDir(t)
	clk := newClock()
	j := openJournal(t, dir, clk) // written without an anchor
	noErr(t)(j.Plan(fleetOrder(t), soak48, Meta{}))
	j.Close()
	_, err := anchored(t, dir, t.TempDir(), clk, 0)
	wantTampered(t, err, 0, "holds no anchor for this round")
}

func TestAnchorVerifyCatchesEditsWhileTheServerRuns(t *testing.T) {
	t.Run("live file", func(t *testing.T) {
		j, dir, _, _ := stoppedRound(t, 0)
		if err := j.Verify(); err != nil {
			t.Fatalf("verify of an untouched journal: %v", err)
		}
		lines := journalLines(t, dir, JournalFile)
		orig := append([][]byte{}, lines...)
		lines[len(lines)-1] = bytes.Replace(lines[len(lines)-1], []byte(`step_failed`), []byte(`step_finish`), 1)
		writeLines(t, dir, JournalFile, lines)
		err := j.Verify()
		if !errors.Is(err, ErrTampered) {
			t.Fatalf("verify after an edit of the live file = %v", err)
		}
		if _, err := j.Lesson("after the edit"); !errors.Is(err, ErrTampered) {
			t.Fatalf("append after a tamper = %v, want refused with the tamper", err)
		}
		// Put back as the server wrote it, the journal takes records again.
		writeLines(t, dir, JournalFile, orig)
		noErr(t)(j.Lesson("after the restore"))
		if err := j.Verify(); err != nil {
			t.Fatalf("verify after the restore: %v", err)
		}
	})
	t.Run("a record appended by hand", func(t *testing.T) {
		j, dir, _, _ := stoppedRound(t, 0)
		next := j.State().LastSeq + 1
		lines := journalLines(t, dir, JournalFile)
		writeLines(t, dir, JournalFile, append(lines, recordLine(t, Record{Seq: next, Time: base, Kind: KindDecision, Decision: DecisionResume, Node: "cp-1", Step: StepTrialBoot})))
		if _, err := j.Lesson("after the forged line"); !errors.Is(err, ErrTampered) {
			t.Fatalf("append after a hand-written record = %v, want refused", err)
		}
		if n := len(journalLines(t, dir, JournalFile)); n != len(lines)+1 {
			t.Fatalf("the journal holds %d lines, want the %d the server wrote and the forged one", n, len(lines))
		}
	})
	t.Run("sealed segment", func(t *testing.T) {
		j, dir, anchors, clk := stoppedRound(t, 512)
		if err := j.Verify(); err != nil {
			t.Fatalf("verify of an untouched journal: %v", err)
		}
		segs := segmentsOf(t, dir, JournalFile)
		seg := segs[0]
		ls := journalLines(t, dir, seg)
		ls[0] = bytes.Replace(ls[0], []byte(`"seq":1`), []byte(`"seq":1 `), 1)
		writeLines(t, dir, seg, ls)
		var te *TamperError
		if err := j.Verify(); !errors.As(err, &te) || te.File != seg {
			t.Fatalf("verify after an edit of %s = %v, want a TamperError naming it", seg, err)
		}
		j.Close()
		_, err := anchored(t, dir, anchors, clk, 512)
		if !errors.Is(err, ErrTampered) {
			t.Fatalf("reopen after the edit = %v, want tampered", err)
		}
	})
}

func TestAnchorFollowsSealsAndReopens(t *testing.T) {
	j, dir, anchors, clk := stoppedRound(t, 512)
	seq, head := j.Head()
	if seq != j.State().LastSeq || len(head) != 64 {
		t.Fatalf("head = %d %q, want the last record %d and a SHA-256", seq, head, j.State().LastSeq)
	}
	j.Close()
	for i := range 3 {
		j2, err := anchored(t, dir, anchors, clk, 512)
		if err != nil {
			t.Fatalf("reopen %d: %v", i, err)
		}
		noErr(t)(j2.Lesson("reopened"))
		if err := j2.Verify(); err != nil {
			t.Fatalf("verify after reopen %d: %v", i, err)
		}
		j2.Close()
	}
	if n := len(segmentsOf(t, dir, JournalFile)); n < 3 {
		t.Fatalf("%d segments, want several", n)
	}
}

func TestDecisionWithoutAProofCountsForNothing(t *testing.T) {
	j, dir, anchors, clk := stoppedRound(t, 0)
	noErr(t)(j.Decide(DecisionResume, "cp-1", StepTrialBoot, Meta{ApprovalID: "ap-resume", Detail: "resumed by alice"}))
	if j.State().Stop != nil {
		t.Fatal("the resume did not lift the stop")
	}
	j.Close()

	// Reopened with the signature proven: the resume stands.
	proven := func(Record) error { return nil }
	j2, err := Open(dir, WithClock(clk.Now), WithAnchor(anchors), WithDecisionCheck(proven))
	if err != nil {
		t.Fatal(err)
	}
	if j2.State().Stop != nil {
		t.Fatal("a proven resume did not lift the stop after reopening")
	}
	j2.Close()

	// Reopened when its kept signature no longer verifies: the round is
	// stopped again and the state names the decision.
	var checked []uint64
	unproven := func(r Record) error {
		checked = append(checked, r.Seq)
		return errors.New("the kept signature ap-resume no longer verifies: key not in allowed_signers")
	}
	j3, err := Open(dir, WithClock(clk.Now), WithAnchor(anchors), WithDecisionCheck(unproven))
	if err != nil {
		t.Fatal(err)
	}
	defer j3.Close()
	st := j3.State()
	if st.Stop == nil || st.Stop.Step != StepTrialBoot {
		t.Fatalf("stop after an unproven resume = %+v, want the trial boot's", st.Stop)
	}
	if len(checked) != 1 || len(st.Unproven) != 1 || !strings.Contains(st.Unproven[0].Detail, "decision resume on cp-1 (approval ap-resume) counts for nothing") {
		t.Fatalf("checked %v, unproven %+v", checked, st.Unproven)
	}
	if _, err := j3.StartStep(StepUncordon, "cp-1", Meta{}); ruleOf(err) == "" {
		t.Fatal("a step was admitted while the round is stopped")
	}
}

func TestRestoreFromAnchorGivesBackWhatTheServerWrote(t *testing.T) {
	for _, segBytes := range []int64{0, 512} {
		t.Run(fmt.Sprintf("segments of %d bytes", segBytes), func(t *testing.T) {
			j, dir, anchors, clk := stoppedRound(t, segBytes)
			want := j.State()
			if _, err := RestoreFromAnchor(dir, anchors); !errors.Is(err, ErrLocked) {
				t.Fatalf("restore while the journal is open = %v, want ErrLocked", err)
			}
			j.Close()
			before, err := ReadJournal(dir)
			if err != nil {
				t.Fatal(err)
			}
			// The forgery of the review, then a segment the server never
			// sealed beside it.
			writeLines(t, dir, JournalFile, greenAfterFallback(t, journalLines(t, dir, JournalFile)))
			if err := os.WriteFile(filepath.Join(dir, segmentName(JournalFile, 40)), []byte("{}\n"), 0o640); err != nil {
				t.Fatal(err)
			}
			if _, err := anchored(t, dir, anchors, clk, segBytes); !errors.Is(err, ErrTampered) {
				t.Fatalf("open of the forged journal = %v, want tampered", err)
			}
			rep, err := RestoreFromAnchor(dir, anchors)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(rep.Replaced, JournalFile) || !slices.Contains(rep.Replaced, segmentName(JournalFile, 40)) {
				t.Errorf("restore replaced %v, want the live file and the stray segment", rep.Replaced)
			}
			after, err := ReadJournal(dir)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(after, before) {
				t.Fatalf("restored journal differs from what the server wrote (%d vs %d bytes)", len(after), len(before))
			}
			j2, err := anchored(t, dir, anchors, clk, segBytes)
			if err != nil {
				t.Fatalf("open after the restore: %v", err)
			}
			got := j2.State()
			if got.Stop == nil || got.Stop.Seq != want.Stop.Seq {
				t.Fatalf("stop after the restore = %+v, want %+v", got.Stop, want.Stop)
			}
		})
	}
}

func TestCheckAnchoredReadsBesideTheWriter(t *testing.T) {
	_, dir, anchors, _ := stoppedRound(t, 512)
	if err := CheckAnchored(dir, anchors); err != nil {
		t.Fatalf("check of the journal as written: %v", err)
	}
	lines := journalLines(t, dir, JournalFile)
	writeLines(t, dir, JournalFile, greenAfterFallback(t, lines))
	if err := CheckAnchored(dir, anchors); !errors.Is(err, ErrTampered) {
		t.Fatalf("check of a forged journal = %v, want tampered", err)
	}
	writeLines(t, dir, JournalFile, lines)
	if err := CheckAnchored(dir, t.TempDir()); !errors.Is(err, ErrTampered) {
		t.Fatalf("check without an anchor = %v, want tampered", err)
	}
}

// CheckReproduced wants the journal to hold every record of its anchor:
// a journal one record short (a prefix, which CheckAnchored accepts beside
// a writer) is what a server taking the round over must adopt instead.
func TestCheckReproducedWantsEveryRecord(t *testing.T) {
	_, dir, anchors, _ := stoppedRound(t, 512)
	if err := CheckReproduced(dir, anchors); err != nil {
		t.Fatalf("check of the journal as written: %v", err)
	}
	lines := journalLines(t, dir, JournalFile)
	writeLines(t, dir, JournalFile, lines[:len(lines)-1])
	if err := CheckAnchored(dir, anchors); err != nil {
		t.Fatalf("CheckAnchored of a prefix: %v", err)
	}
	if err := CheckReproduced(dir, anchors); !errors.Is(err, ErrTampered) || !strings.Contains(err.Error(), "1 records the server wrote are missing") {
		t.Fatalf("CheckReproduced of a prefix = %v, want tampered, one missing", err)
	}
}

// A step in flight that never began on its host starts again under a
// fresh approval only while the round runs: a person's signature on the
// step is not a resume (found by the hostile agent, seed 78).
func TestRestartOfAStepInFlightWaitsForAResume(t *testing.T) {
	j := openJournal(t, roundDir(t), newClock())
	noErr(t)(j.Plan(fleetOrder(t), soak48, Meta{}))
	noErr(t)(j.StartStep(StepBaseline, "", Meta{}))
	noErr(t)(j.FinishStep(StepBaseline, "", Meta{}))
	noErr(t)(j.StartStep(StepSnapshot, "cp-1", Meta{}))
	noErr(t)(j.FinishStep(StepSnapshot, "cp-1", Meta{}))
	noErr(t)(j.StartStep(StepDrain, "cp-1", Meta{ApprovalID: "ap-1"}))
	noErr(t)(j.FinishStep(StepDrain, "cp-1", Meta{}))
	noErr(t)(j.StartStep(StepInstall, "cp-1", Meta{ApprovalID: "ap-2", PlanDigest: "sha256:aa"}))
	noErr(t)(j.StartStep(StepVerify, "cp-1", Meta{}))
	noErr(t)(j.FailStep(StepVerify, "cp-1", Meta{Detail: "bond0 down"}))
	if _, err := j.RestartStep(StepInstall, "cp-1", Meta{ApprovalID: "ap-3", PlanDigest: "sha256:aa"}); ruleOf(err) != RuleRoundStopped {
		t.Fatalf("restart of the install while the round is stopped = %v, want round_stopped", err)
	}
	noErr(t)(j.Decide(DecisionResume, "cp-1", StepVerify, Meta{ApprovalID: "ap-resume"}))
	noErr(t)(j.RestartStep(StepInstall, "cp-1", Meta{ApprovalID: "ap-3", PlanDigest: "sha256:aa"}))
}

// An interrupted step (its Lease lost while its work on the host ran on)
// stops the round but stays in flight, its one attempt open: after a
// resume it ends by observation, never by a second start; a journal read
// back from disk says the same.
func TestAnInterruptedStepStaysInFlightThroughTheStop(t *testing.T) {
	dir := roundDir(t)
	j := openJournal(t, dir, newClock())
	noErr(t)(j.Plan(fleetOrder(t), soak48, Meta{}))
	noErr(t)(j.StartStep(StepBaseline, "", Meta{}))
	noErr(t)(j.FinishStep(StepBaseline, "", Meta{}))
	noErr(t)(j.StartStep(StepSnapshot, "cp-1", Meta{}))
	noErr(t)(j.FinishStep(StepSnapshot, "cp-1", Meta{}))
	noErr(t)(j.StartStep(StepDrain, "cp-1", Meta{ApprovalID: "ap-1"}))
	noErr(t)(j.FinishStep(StepDrain, "cp-1", Meta{}))
	noErr(t)(j.StartStep(StepInstall, "cp-1", Meta{ApprovalID: "ap-2", PlanDigest: "sha256:aa"}))
	if _, err := j.InterruptStep(StepInstall, "cp-1", Meta{}); err == nil {
		t.Fatal("an interruption without a reason was recorded")
	}
	noErr(t)(j.InterruptStep(StepInstall, "cp-1", Meta{Detail: "rule window_lease: the Lease was lost"}))

	check := func(st *State, wantStop bool) *StepRun {
		t.Helper()
		if (st.Stop != nil) != wantStop || (wantStop && (st.Stop.Step != StepInstall || st.Stop.Node != "cp-1")) {
			t.Fatalf("stop = %+v, want stopped=%v on the install of cp-1", st.Stop, wantStop)
		}
		run := st.StepRun(StepInstall, "cp-1")
		if run == nil || run.State != InFlight || len(run.Attempts) != 1 || run.Attempts[0].EndSeq != 0 || run.Attempts[0].Outcome != "" {
			t.Fatalf("install = %+v, want in flight in its one open attempt", run)
		}
		return run
	}
	if run := check(j.State(), true); !run.NeedsRecheck {
		t.Fatalf("install = %+v, want it marked to be re-checked", run)
	}
	if n := len(j.State().Failures); n != 1 {
		t.Fatalf("%d failures, want the interruption as one", n)
	}
	noErr(t)(j.Decide(DecisionResume, "cp-1", StepInstall, Meta{ApprovalID: "ap-resume"}))
	check(j.State(), false)
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}

	j = openJournal(t, dir, newClock())
	check(j.State(), false)
	noErr(t)(j.FinishStep(StepInstall, "cp-1", Meta{}))
	if run := j.State().StepRun(StepInstall, "cp-1"); run.State != Done || len(run.Attempts) != 1 || run.Attempts[0].Outcome != OutcomeDone {
		t.Fatalf("install after the observation = %+v, want done in its one attempt", run)
	}
}
