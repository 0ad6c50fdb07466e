package round

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// publish is what the publishing server does: it hands out its head as
// it stands, under the journal's lock (HoldHead).
func publish(t *testing.T, j *Journal) Head {
	t.Helper()
	var head Head
	if err := j.HoldHead(func(h Head) error { head = h; return nil }); err != nil {
		t.Fatal(err)
	}
	if head.Seq == 0 {
		t.Fatal("the publishing server has no head to publish")
	}
	return head
}

// notes appends n notifications and answers their records.
func notes(t *testing.T, j *Journal, n int) []Record {
	t.Helper()
	var out []Record
	for i := range n {
		r, err := j.Notification("cp-1", fmt.Sprintf("notice %d sent to the on-call channel", i))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// sealUntil appends notifications until the journal has sealed segs
// segments and its live file was just sealed (it is empty).
func sealUntil(t *testing.T, j *Journal, segs int) {
	t.Helper()
	for i := 0; j.segments < segs || j.size > 0; i++ {
		if i > 100 {
			t.Fatalf("%d segments after 100 notifications, want %d", j.segments, segs)
		}
		notes(t, j, 1)
	}
}

// serverA opens a round anchored in server A's state directory (sealed at
// segBytes; 0 never) with the plan and the baseline written.
func serverA(t *testing.T, segBytes int64) (j *Journal, dir string) {
	t.Helper()
	dir = roundDir(t)
	j, err := anchored(t, dir, t.TempDir(), newClock(), segBytes)
	if err != nil {
		t.Fatal(err)
	}
	writeRecords(t, j, 0, 0)
	return j, dir
}

// startSnapshot starts cp-1's snapshot: in flight at the published head.
func startSnapshot(t *testing.T, j *Journal) {
	t.Helper()
	noErr(t)(j.StartStep(StepSnapshot, "cp-1", Meta{}))
}

// pastTheHead finishes cp-1's snapshot and sends a notification: two
// records nobody published.
func pastTheHead(t *testing.T, j *Journal) []Record {
	t.Helper()
	r, err := j.FinishStep(StepSnapshot, "cp-1", Meta{})
	if err != nil {
		t.Fatal(err)
	}
	return append([]Record{r}, notes(t, j, 1)...)
}

// filesIn reads every file in dirs (path: content); a missing directory
// holds none.
func filesIn(t *testing.T, dirs ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, d := range dirs {
		entries, err := os.ReadDir(d)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			b, err := os.ReadFile(filepath.Join(d, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			out[filepath.Join(d, e.Name())] = string(b)
		}
	}
	return out
}

// copyRound is a second working copy of the round in dir, as a fetch of
// the same remote makes it.
func copyRound(t *testing.T, dir string) string {
	t.Helper()
	dst := roundDir(t)
	if err := os.MkdirAll(dst, 0o750); err != nil {
		t.Fatal(err)
	}
	for path, content := range filesIn(t, dir) {
		if err := os.WriteFile(filepath.Join(dst, filepath.Base(path)), []byte(content), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// wantHeadAfterOpen checks that the adopted journal's head is the
// published one with the session_opened record Open appended after it.
func wantHeadAfterOpen(t *testing.T, j *Journal, published Head) {
	t.Helper()
	seq, chain := j.Head()
	prev, err := hex.DecodeString(published.Chain)
	if err != nil {
		t.Fatal(err)
	}
	lines := journalLines(t, j.Dir(), JournalFile)
	last := bytes.TrimSuffix(lines[len(lines)-1], []byte("\n"))
	want := nextChain([32]byte(prev), last)
	if seq != published.Seq+1 || chain != hex.EncodeToString(want[:]) {
		t.Fatalf("head after open = %d %s, want %d %x (the published head, then session_opened)", seq, chain, published.Seq+1, want)
	}
	if !strings.Contains(string(last), `"kind":"session_opened"`) {
		t.Fatalf("last record after open = %s, want session_opened", last)
	}
}

func TestHoldHeadHandsFnTheHeadHeadAnswers(t *testing.T) {
	t.Run("unanchored", func(t *testing.T) {
		j := openJournal(t, roundDir(t), newClock())
		var got Head
		if err := j.HoldHead(func(h Head) error { got = h; return nil }); err != nil {
			t.Fatal(err)
		}
		if got != (Head{}) {
			t.Fatalf("head of a journal without anchor = %+v, want zero", got)
		}
	})
	t.Run("anchored", func(t *testing.T) {
		j, _, _, _ := stoppedRound(t, 512)
		seq, chain := j.Head()
		if got := publish(t, j); got != (Head{Seq: seq, Chain: chain}) {
			t.Fatalf("HoldHead handed %+v, Head answers %d %s", got, seq, chain)
		}
	})
	t.Run("tampered", func(t *testing.T) {
		j, dir, _, _ := stoppedRound(t, 0)
		lines := journalLines(t, dir, JournalFile)
		lines[1] = bytes.Replace(lines[1], []byte(`"seq":2`), []byte(`"seq":2 `), 1)
		writeLines(t, dir, JournalFile, lines)
		ran := false
		err := j.HoldHead(func(Head) error { ran = true; return nil })
		if !errors.Is(err, ErrTampered) || ran {
			t.Fatalf("HoldHead over an edited journal = %v (fn ran: %v), want tampered and fn not run", err, ran)
		}
	})
}

func TestAdoptCutsTheRecordsPastThePublishedHead(t *testing.T) {
	cases := []struct {
		name     string
		segBytes int64
		// write writes up to the head, then past it (its records).
		write    func(t *testing.T, j *Journal) (Head, []Record)
		segments int
	}{
		{"live journal", 0, func(t *testing.T, j *Journal) (Head, []Record) {
			startSnapshot(t, j)
			return publish(t, j), pastTheHead(t, j)
		}, 0},
		{"sealed segments before the head", 1024, func(t *testing.T, j *Journal) (Head, []Record) {
			sealUntil(t, j, 2)
			startSnapshot(t, j)
			return publish(t, j), pastTheHead(t, j)
		}, 2},
		{"the head the last record of a segment", 1024, func(t *testing.T, j *Journal) (Head, []Record) {
			startSnapshot(t, j)
			sealUntil(t, j, 2)
			return publish(t, j), pastTheHead(t, j)
		}, 2},
		{"nothing past the head", 0, func(t *testing.T, j *Journal) (Head, []Record) {
			startSnapshot(t, j)
			return publish(t, j), nil
		}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, dir := serverA(t, tc.segBytes)
			head, past := tc.write(t, a)
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			anchorsB := t.TempDir()
			rep, err := Adopt(dir, anchorsB, head)
			if err != nil {
				t.Fatal(err)
			}
			want := AdoptReport{Records: int(head.Seq), Segments: tc.segments, Cut: len(past), CutFile: rep.CutFile}
			var cutBytes []byte
			for _, r := range past {
				want.CutRecords = append(want.CutRecords, describeLine(recordLine(t, r)))
				cutBytes = append(append(cutBytes, recordLine(t, r)...), '\n')
			}
			if diff := cmp.Diff(want, rep); diff != "" {
				t.Errorf("report (-want +got):\n%s", diff)
			}
			if len(past) > 0 {
				if ok, _ := regexp.MatchString(`^2026-11\.cut-\d+\.jsonl$`, filepath.Base(rep.CutFile)); !ok || filepath.Dir(rep.CutFile) != anchorsB {
					t.Errorf("cut records saved to %s, want <round>.cut-<unix nanos>.jsonl in %s", rep.CutFile, anchorsB)
				}
				if saved, err := os.ReadFile(rep.CutFile); err != nil || !bytes.Equal(saved, cutBytes) {
					t.Errorf("saved cut records = %q (%v), want %q", saved, err, cutBytes)
				}
			}

			b, err := anchored(t, dir, anchorsB, newClock(), tc.segBytes)
			if err != nil {
				t.Fatalf("open of the adopted journal: %v", err)
			}
			wantHeadAfterOpen(t, b, head)
			if diff := cmp.Diff([]Target{{Node: "cp-1", Step: StepSnapshot}}, b.Opened().NeedsRecheck); diff != "" {
				t.Errorf("steps to re-check (-want +got):\n%s", diff)
			}
			if err := b.Verify(); err != nil {
				t.Errorf("verify of the adopted journal: %v", err)
			}
			checkConsistent(t, b)
		})
	}
}

func TestAdoptRefusesAJournalThatDoesNotMakeThePublishedHead(t *testing.T) {
	cases := []struct {
		name     string
		segBytes int64
		// change changes the journal in dir or the published head after
		// the head was published and the server wrote past it.
		change func(t *testing.T, j *Journal, dir string, head *Head)
		says   string
	}{
		{"nothing published", 0, func(t *testing.T, _ *Journal, _ string, head *Head) {
			*head = Head{}
		}, "nothing was published"},
		{"a head past the journal", 0, func(t *testing.T, _ *Journal, _ string, head *Head) {
			head.Seq += 5
		}, "the journal holds 7 records; the published head is record 10"},
		{"a chain the journal does not make", 0, func(t *testing.T, _ *Journal, _ string, head *Head) {
			head.Chain = strings.Repeat("0", 64)
		}, "record 5's chain differs from the published head"},
		{"a record before the head edited", 0, func(t *testing.T, _ *Journal, dir string, _ *Head) {
			lines := journalLines(t, dir, JournalFile)
			lines[2] = bytes.Replace(lines[2], []byte(`"time":"2026-11-03`), []byte(`"time":"2026-11-04`), 1)
			writeLines(t, dir, JournalFile, lines)
		}, "record 5's chain differs from the published head: the journal is not what the publishing server wrote"},
		{"a sealed record before the head edited", 1024, func(t *testing.T, _ *Journal, dir string, _ *Head) {
			seg := segmentName(JournalFile, 1)
			lines := journalLines(t, dir, seg)
			lines[0] = bytes.Replace(lines[0], []byte(`"time":"2026-11-03`), []byte(`"time":"2026-11-04`), 1)
			writeLines(t, dir, seg, lines)
		}, "chain differs from the published head"},
		{"records past the head sealed", 1024, func(t *testing.T, j *Journal, _ string, _ *Head) {
			sealUntil(t, j, j.segments+1)
		}, "journal-000003.jsonl, a sealed segment, holds records past the published head"},
		{"a sealed segment ending in a partial record", 1024, func(t *testing.T, _ *Journal, dir string, _ *Head) {
			seg := filepath.Join(dir, segmentName(JournalFile, 1))
			b, err := os.ReadFile(seg)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(seg, b[:len(b)-1], 0o640); err != nil {
				t.Fatal(err)
			}
		}, "journal-000001.jsonl, a sealed segment, ends in a partial record"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, dir := serverA(t, tc.segBytes)
			if tc.segBytes > 0 {
				sealUntil(t, a, 2)
			}
			startSnapshot(t, a)
			head := publish(t, a)
			pastTheHead(t, a)
			tc.change(t, a, dir, &head)
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			anchorsB := filepath.Join(t.TempDir(), "state", "anchors")
			before := filesIn(t, dir, anchorsB)
			_, err := Adopt(dir, anchorsB, head)
			if !errors.Is(err, ErrNotPublished) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("adopt = %v, want ErrNotPublished saying %q", err, tc.says)
			}
			t.Log(err)
			if diff := cmp.Diff(before, filesIn(t, dir, anchorsB)); diff != "" {
				t.Errorf("a refused adoption changed files (-before +after):\n%s", diff)
			}
			if _, err := os.Stat(anchorsB); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a refused adoption made the state directory (%v)", err)
			}
		})
	}
}

// twoServers is a round server A wrote and keeps writing (a, open; its
// working copy dirA) and server B adopted at an earlier head, published
// while cp-1's snapshot was in flight, into its own working copy dirB and
// state directory anchorsB: B stood by since.
func twoServers(t *testing.T) (a *Journal, dirA, dirB, anchorsB string) {
	t.Helper()
	a, dirA = serverA(t, 0)
	startSnapshot(t, a)
	earlier := publish(t, a)
	dirB, anchorsB = copyRound(t, dirA), t.TempDir()
	if _, err := Adopt(dirB, anchorsB, earlier); err != nil {
		t.Fatal(err)
	}
	return a, dirA, dirB, anchorsB
}

// adoptAgain is B taking the round over again from a fresh fetch of A's
// working copy at head, A stopped: its files before and the result.
func adoptAgain(t *testing.T, a *Journal, dirA, anchorsB string, head Head) (string, map[string]string, AdoptReport, error) {
	t.Helper()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	fetched := copyRound(t, dirA)
	before := filesIn(t, fetched, anchorsB)
	rep, err := Adopt(fetched, anchorsB, head)
	return fetched, before, rep, err
}

func TestAdoptExtendsItsOwnAnchorFromAnEarlierHead(t *testing.T) {
	a, dirA, _, anchorsB := twoServers(t)
	pastTheHead(t, a)
	head := publish(t, a)
	fetched, _, rep, err := adoptAgain(t, a, dirA, anchorsB, head)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(AdoptReport{Records: int(head.Seq), Replaced: true}, rep); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
	b, err := anchored(t, fetched, anchorsB, newClock(), 0)
	if err != nil {
		t.Fatalf("open of the adopted journal: %v", err)
	}
	wantHeadAfterOpen(t, b, head)
	if n := len(b.Opened().NeedsRecheck); n != 0 {
		t.Errorf("%d steps to re-check, want none: cp-1's snapshot finished before the head", n)
	}
}

func TestAdoptRefusesWhatItsOwnAnchorDoesNotShare(t *testing.T) {
	cases := []struct {
		name string
		// diverge has B write on its own (b) and A go on (a): A's head.
		diverge func(t *testing.T, a, b *Journal) Head
		says    string
	}{
		{"a record the publisher wrote otherwise", func(t *testing.T, a, b *Journal) Head {
			noErr(t)(b.Lesson("written by server B alone"))
			noErr(t)(a.Lesson("written by server A"))
			notes(t, a, 1)
			return publish(t, a)
		}, "differs from the journal at record 6"},
		{"records past the published head", func(t *testing.T, a, b *Journal) Head {
			notes(t, b, 2)
			pastTheHead(t, a)
			return publish(t, a)
		}, "holds 8 records, past the published head (record 7)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, dirA, dirB, anchorsB := twoServers(t)
			b, err := anchored(t, dirB, anchorsB, newClock(), 0)
			if err != nil {
				t.Fatal(err)
			}
			head := tc.diverge(t, a, b)
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			fetched, before, _, err := adoptAgain(t, a, dirA, anchorsB, head)
			if !errors.Is(err, ErrNotPublished) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("adopt = %v, want ErrNotPublished saying %q", err, tc.says)
			}
			t.Log(err)
			if diff := cmp.Diff(before, filesIn(t, fetched, anchorsB)); diff != "" {
				t.Errorf("a refused adoption changed files (-before +after):\n%s", diff)
			}
		})
	}
}

func TestAdoptAfterAnOpenRefusedForWantOfAnAnchor(t *testing.T) {
	a, dir := serverA(t, 0)
	head := publish(t, a)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	anchorsB := t.TempDir()
	if _, err := anchored(t, dir, anchorsB, newClock(), 0); !errors.Is(err, ErrTampered) {
		t.Fatalf("open before the adoption = %v, want tampered (no anchor)", err)
	}
	rep, err := Adopt(dir, anchorsB, head)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Replaced {
		t.Error("the empty anchor the refused open left was reported as extended")
	}
	b, err := anchored(t, dir, anchorsB, newClock(), 0)
	if err != nil {
		t.Fatalf("open of the adopted journal: %v", err)
	}
	wantHeadAfterOpen(t, b, head)
}

func TestAdoptWaitsWhileTheRoundIsOpen(t *testing.T) {
	t.Run("the journal", func(t *testing.T) {
		a, dir := serverA(t, 0)
		if _, err := Adopt(dir, t.TempDir(), publish(t, a)); !errors.Is(err, ErrLocked) {
			t.Fatalf("adopt while the journal is open = %v, want ErrLocked", err)
		}
	})
	t.Run("its own anchor", func(t *testing.T) {
		a, dirA, dirB, anchorsB := twoServers(t)
		if _, err := anchored(t, dirB, anchorsB, newClock(), 0); err != nil {
			t.Fatal(err)
		}
		_, _, _, err := adoptAgain(t, a, dirA, anchorsB, publish(t, a))
		if !errors.Is(err, ErrLocked) {
			t.Fatalf("adopt while this server holds the round open = %v, want ErrLocked", err)
		}
	})
}
