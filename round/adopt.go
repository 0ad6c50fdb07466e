package round

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// A round is taken over by a second server (its own state directory, its
// own working copy fetched from the same Git remote) when the server that
// wrote it is gone. The journal it fetched is a file anyone who can push
// could have written, and the anchor that made it the first server's own
// record is in a state directory the second one cannot read. What it can
// trust is the head the first server published where the cluster keeps it
// (the sequence number and the chain of a record of a commit it pushed):
// Adopt anchors the journal in the second server's state directory when,
// and only as far as, its records make that head. Records past the head
// are never adopted: nobody vouched for them.

// ErrNotPublished is returned (wrapped) when Adopt refuses a journal that
// does not make the published head, or an adoption that would anchor a
// record the publisher's history does not have.
var ErrNotPublished = errors.New("the round's journal is not what was published")

// AdoptReport says what Adopt anchored and cut.
type AdoptReport struct {
	// Records is how many records the anchor holds now: the published
	// head's sequence number.
	Records int `json:"records"`
	// Segments is how many sealed segments it holds.
	Segments int `json:"segments"`
	// Cut is how many records past the head were cut from the live
	// journal; 0 when none.
	Cut int `json:"cut,omitempty"`
	// CutFile is the file in the state directory that keeps their bytes
	// for a person to read; "" when nothing was cut.
	CutFile string `json:"cut_file,omitempty"`
	// CutRecords describes each cut record, one line each, oldest first.
	CutRecords []string `json:"cut_records,omitempty"`
	// Replaced says an anchor this server already kept for the round (a
	// prefix of the adopted records: it adopted an earlier head) was
	// extended; false when there was none or it held no record.
	Replaced bool `json:"replaced,omitempty"`
}

// Adopt anchors the journal of the round in dir in anchorDir, the server's
// state directory, on the strength of head, published by the server that
// wrote it, so that Open with WithAnchor(anchorDir) takes the round over
// (and replays the steps in flight as NeedsRecheck, as after any
// restart). The journal's records must make head: the record head.Seq
// exists and its chain is head.Chain (ErrNotPublished otherwise).
// Records after it in the live file are cut away and saved in anchorDir
// for a person (<round>.cut-<unix nanos>.jsonl); records after it in a
// sealed segment, which is never cut, refuse the adoption. An anchor this
// server already keeps for the round is extended when its records are a
// prefix of the adopted ones and refuses the adoption otherwise: this
// server wrote records the publisher's history does not have. A refusal
// changes nothing; a process holding the journal open is ErrLocked.
func Adopt(dir, anchorDir string, head Head) (AdoptReport, error) {
	dir = filepath.Clean(dir)
	id := filepath.Base(dir)
	if !ValidRoundID(id) {
		return AdoptReport{}, fmt.Errorf("adopt round journal %s: directory name %q is not a valid round id", dir, id)
	}
	fail := func(err error) (AdoptReport, error) {
		return AdoptReport{}, fmt.Errorf("adopt round journal %s at its published head (record %d): %w", dir, head.Seq, err)
	}
	f, err := lockJournal(dir, 0)
	if err != nil {
		return fail(err)
	}
	defer f.Close()
	live, err := io.ReadAll(f)
	if err != nil {
		return fail(fmt.Errorf("read %s: %w", JournalFile, err))
	}
	p, err := planAdoption(dir, id, head, live)
	if err != nil {
		return fail(err)
	}
	own, err := openOwnAnchor(anchorDir, id)
	if err != nil {
		return fail(err)
	}
	defer own.close()
	if err := own.check(p.records); err != nil {
		return fail(err)
	}
	rep, err := p.apply(f, anchorDir, id, time.Now())
	if err != nil {
		return fail(err)
	}
	rep.Replaced = len(own.records) > 0
	return rep, nil
}

// notPublished is an ErrNotPublished saying what the journal holds
// against what was published.
func notPublished(format string, args ...any) error {
	return fmt.Errorf("%s (%w)", fmt.Sprintf(format, args...), ErrNotPublished)
}

// adoption is what Adopt decided from the journal's files before it
// changes any of them.
type adoption struct {
	// records are the anchor's record entries, 1..head; entries the whole
	// anchor, each segment's seal after its last record.
	records, entries []anchorEntry
	segments         int
	// keep is the live file's length once cut, liveSize its length now.
	keep, liveSize int64
	// cut are the live records past the head, cutBytes their bytes.
	cut      []journalLine
	cutBytes []byte
}

// planAdoption reads the sealed segments, takes live as the live file's
// bytes, and decides the anchor that head vouches for.
func planAdoption(dir, id string, head Head, live []byte) (adoption, error) {
	if head.Seq == 0 {
		return adoption{}, notPublished("nothing was published for this round (the published head is record 0)")
	}
	segs, err := readSegments(dir)
	if err != nil {
		return adoption{}, err
	}
	p := adoption{segments: len(segs), liveSize: int64(len(live))}
	if len(segs) > 0 && bytes.Equal(live, segs[len(segs)-1]) {
		live = nil // a seal cut off between its two steps: Open empties it
	}
	var lines []journalLine
	ends := make([]int, len(segs)) // lines up to the end of each segment
	for n, data := range segs {
		lines = splitRecordLines(segmentName(JournalFile, n+1), data, lines)
		ends[n] = len(lines)
	}
	sealed := len(lines)
	lines = splitRecordLines(JournalFile, live, lines)
	if uint64(len(lines)) < head.Seq {
		return adoption{}, notPublished("the journal holds %d records; the published head is record %d", len(lines), head.Seq)
	}
	adopted := lines[:head.Seq]
	if p.records, err = chainRecords(id, adopted, head); err != nil {
		return adoption{}, err
	}
	if sealed > len(adopted) {
		return adoption{}, notPublished("%s, a sealed segment, holds records past the published head (record %d of %d): sealed records are never cut",
			lines[len(adopted)].file, len(adopted)+1, len(lines))
	}
	p.entries = withSeals(p.records, segs, ends)
	p.keep = int64(min(len(live), linesLen(adopted[sealed:])))
	if cut := lines[len(adopted):]; len(cut) > 0 {
		p.cut, p.cutBytes = cut, live[p.keep:]
	}
	return p, nil
}

// linesLen is the length of whole lines, each with its newline.
func linesLen(lines []journalLine) int {
	n := 0
	for _, l := range lines {
		n += len(l.line) + 1
	}
	return n
}

// readSegments reads the journal's sealed segments in dir, in order. A
// segment is written whole: one that ends in a partial record is not
// what any server sealed.
func readSegments(dir string) ([][]byte, error) {
	n, err := segmentCount(dir, JournalFile)
	if err != nil {
		return nil, err
	}
	segs := make([][]byte, n)
	for i := range segs {
		name := segmentName(JournalFile, i+1)
		if segs[i], err = readFile(dir, name); err != nil {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
		if len(segs[i]) > 0 && segs[i][len(segs[i])-1] != '\n' {
			return nil, notPublished("%s, a sealed segment, ends in a partial record", name)
		}
	}
	return segs, nil
}

// chainRecords chains the record lines from the round's seed into anchor
// entries; the last must carry the published chain. Only the head's chain
// was published, so a difference before it is named at the head.
func chainRecords(id string, lines []journalLine, head Head) ([]anchorEntry, error) {
	chain := anchorSeed(id)
	out := make([]anchorEntry, len(lines))
	for i, l := range lines {
		chain = nextChain(chain, l.line)
		out[i] = anchorEntry{Seq: uint64(i) + 1, Chain: hex.EncodeToString(chain[:]), Line: string(l.line)}
	}
	if got := out[len(out)-1].Chain; got != head.Chain {
		return nil, notPublished("record %d's chain differs from the published head: the journal is not what the publishing server wrote (the journal's %s, or a record before it, differs)",
			head.Seq, describeLine(lines[len(lines)-1].line))
	}
	return out, nil
}

// withSeals is the anchor's entries: the records, each sealed segment's
// seal (its digest, ends[n] records up to its end) after its last record.
func withSeals(records []anchorEntry, segs [][]byte, ends []int) []anchorEntry {
	out := make([]anchorEntry, 0, len(records)+len(segs))
	seal := func(n int) anchorEntry {
		return anchorEntry{Sealed: n + 1, LastSeq: uint64(ends[n]), SHA256: hex.EncodeToString(sha256Sum(segs[n]))}
	}
	n := 0
	for i, r := range records {
		for ; n < len(segs) && ends[n] == i; n++ {
			out = append(out, seal(n))
		}
		out = append(out, r)
	}
	for ; n < len(segs); n++ {
		out = append(out, seal(n))
	}
	return out
}

// apply saves the records past the head, writes the anchor and cuts the
// live file (f, locked) back to the head, in that order: a crash between
// any two leaves a journal Open refuses (records past the anchor, or no
// anchor) and Adopt, run again, completes; the saved bytes are never lost.
func (p adoption) apply(f *os.File, anchorDir, id string, now time.Time) (AdoptReport, error) {
	rep := AdoptReport{Records: len(p.records), Segments: p.segments}
	if err := os.MkdirAll(anchorDir, 0o700); err != nil {
		return AdoptReport{}, fmt.Errorf("anchor directory: %w", err)
	}
	if len(p.cut) > 0 {
		name := fmt.Sprintf("%s.cut-%d.jsonl", id, now.UnixNano())
		if err := writeFileNew(anchorDir, name, p.cutBytes); err != nil {
			return AdoptReport{}, fmt.Errorf("save the records past the published head: %w", err)
		}
		rep.Cut, rep.CutFile = len(p.cut), filepath.Join(anchorDir, name)
		for _, l := range p.cut {
			rep.CutRecords = append(rep.CutRecords, describeLine(l.line))
		}
	}
	if err := writeAnchor(anchorDir, id, p.entries); err != nil {
		return AdoptReport{}, err
	}
	if p.keep == p.liveSize {
		return rep, nil
	}
	if err := f.Truncate(p.keep); err != nil {
		return AdoptReport{}, fmt.Errorf("cut %s back to the published head: %w", JournalFile, err)
	}
	if err := f.Sync(); err != nil {
		return AdoptReport{}, fmt.Errorf("cut %s back to the published head: %w", JournalFile, err)
	}
	return rep, nil
}

// writeAnchor replaces the round's anchor with entries, whole: a reader
// (Open, CheckAnchored) sees the old anchor or the new one. It is the
// server's file, mode 0600 as openAnchor creates it.
func writeAnchor(anchorDir, id string, entries []anchorEntry) error {
	var b []byte
	for _, e := range entries {
		line, err := json.Marshal(e)
		if err != nil {
			return err
		}
		b = append(append(b, line...), '\n')
	}
	name := id + ".jsonl"
	tmp, err := writeTemp(anchorDir, name, b)
	if err != nil {
		return fmt.Errorf("write anchor %s: %w", name, err)
	}
	if err := os.Chmod(tmp, 0o600); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write anchor %s: %w", name, err)
	}
	if err := os.Rename(tmp, filepath.Join(anchorDir, name)); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write anchor %s: %w", name, err)
	}
	return syncDir(anchorDir)
}

// ownAnchor is the anchor this server already keeps for the round, held
// under its lock (as openAnchor takes it) while Adopt replaces it; f is
// nil when there is none.
type ownAnchor struct {
	path    string
	f       *os.File
	records []anchorEntry
}

// openOwnAnchor opens and locks the round's anchor in anchorDir, if there
// is one: it is neither created nor changed, so that a refusal leaves the
// state directory as it was.
func openOwnAnchor(anchorDir, id string) (*ownAnchor, error) {
	path := filepath.Join(anchorDir, id+".jsonl")
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, os.ErrNotExist) {
		return &ownAnchor{path: path}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open anchor %s: %w", path, err)
	}
	a := &ownAnchor{path: path, f: f}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		a.close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, ErrLocked
		}
		return nil, fmt.Errorf("lock anchor %s: %w", path, err)
	}
	data, err := io.ReadAll(f)
	if err == nil {
		a.records, err = anchorRecords(data)
	}
	if err != nil {
		a.close()
		return nil, fmt.Errorf("read anchor %s: %w", path, err)
	}
	return a, nil
}

// check refuses an own anchor that is not a prefix of the records to be
// adopted: this server wrote records the publisher's history does not
// have, and adopting would forget them.
func (a *ownAnchor) check(adopted []anchorEntry) error {
	if len(a.records) > len(adopted) {
		return notPublished("this server's anchor %s holds %d records, past the published head (record %d): it wrote records the publisher's history does not have",
			a.path, len(a.records), len(adopted))
	}
	for i, e := range a.records {
		if e.Seq != adopted[i].Seq || e.Line != adopted[i].Line {
			return notPublished("this server's anchor %s differs from the journal at record %d (it holds %s, the journal %s): it wrote something the publisher's history does not have",
				a.path, adopted[i].Seq, describeLine([]byte(e.Line)), describeLine([]byte(adopted[i].Line)))
		}
	}
	return nil
}

func (a *ownAnchor) close() {
	if a.f != nil {
		a.f.Close() // read only: nothing to flush; closing drops the lock
		a.f = nil
	}
}
