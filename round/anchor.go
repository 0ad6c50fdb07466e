package round

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// The anchor is what makes the journal the server's own record rather than
// a file the agent can write. The journal lives in the intent repository,
// where the agent can edit, cut, insert or renumber records and restart the
// server; the anchor lives in the server's state directory, where it
// cannot. For each round the anchor keeps, one fsync'd line per record,
// the record's exact bytes and a running hash over every record so far,
// and, when the journal seals a segment, the segment's SHA-256.
//
// The anchor line is written before the journal line (write-ahead): a
// crash between the two leaves the anchor one record ahead, and Open
// completes the journal from the anchor's copy of that record. Any other
// difference is tampering: Open refuses to act on the round and names the
// first record that differs (ErrTampered). Deleting the last record is
// therefore answered by restoring it, never by forgetting it.
//
// The running hash ("chain") of the last record is the journal's head,
// small enough to be kept where the cluster holds it too (Journal.Head).

// ErrTampered is returned (wrapped in a *TamperError) when a journal does
// not reproduce its anchor.
var ErrTampered = errors.New("the round's journal does not reproduce its anchor in the server's state directory")

// TamperError names where a journal first departs from its anchor.
type TamperError struct {
	Round string
	// Seq is the first record that differs (0 when the difference is a
	// sealed segment as a whole or a missing anchor).
	Seq uint64
	// File is the journal file holding the difference (journal.jsonl or a
	// sealed segment).
	File string
	// Found and Want describe the journal's record and the anchor's.
	Found, Want string
	// Reason says what kind of difference it is.
	Reason string
}

func (e *TamperError) Error() string {
	msg := fmt.Sprintf("round %s: %s", e.Round, e.Reason)
	if e.Seq > 0 {
		msg += fmt.Sprintf(" at record %d", e.Seq)
	}
	if e.File != "" {
		msg += " in " + e.File
	}
	if e.Found != "" {
		msg += "; the journal holds " + e.Found
	}
	if e.Want != "" {
		msg += "; the server wrote " + e.Want
	}
	return msg + " (" + ErrTampered.Error() + ")"
}

func (e *TamperError) Unwrap() error { return ErrTampered }

// WithAnchor anchors the journal in dir, the server's state directory for
// anchors (one file per round, <round>.jsonl): Open refuses a journal that
// does not reproduce it, every append is anchored before it is written,
// and Verify checks the files on disk against it.
func WithAnchor(dir string) Option { return func(j *Journal) { j.anchorDir = dir } }

// anchorEntry is one line of the anchor: a record (Seq, Chain, Line) or a
// sealed segment (Sealed, LastSeq, SHA256).
type anchorEntry struct {
	Seq   uint64 `json:"seq,omitempty"`
	Chain string `json:"chain,omitempty"`
	// Line is the record's journal line, exactly, without its newline.
	Line    string `json:"line,omitempty"`
	Sealed  int    `json:"sealed,omitempty"`
	LastSeq uint64 `json:"last_seq,omitempty"`
	SHA256  string `json:"sha256,omitempty"`
}

// anchor is a round's open anchor file and what it holds.
type anchor struct {
	path    string
	f       *os.File
	size    int64
	records []anchorEntry
	seals   map[int]anchorEntry
	seed    [32]byte // the chain before the first record
	head    [32]byte // the chain after the last record
	// lastSize is the file's size before the last record entry (forget).
	lastSize int64

	// live hashes the live journal file's bytes as written, so Verify
	// compares the file with what the server wrote without the anchor.
	live hash.Hash
	// checked remembers the sealed segments Verify hashed (by inode,
	// size and change time), so a commit hashes only what changed.
	checked map[int]segStamp
}

type segStamp struct {
	ino, size   int64
	ctim, mtime syscall.Timespec
}

// anchorSeed is the chain before the first record: bound to the round.
func anchorSeed(roundID string) [32]byte {
	return sha256.Sum256([]byte("mcp-patch round journal " + roundID))
}

func nextChain(prev [32]byte, line []byte) [32]byte {
	h := sha256.New()
	h.Write(prev[:])
	h.Write(line)
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// openAnchor opens (creating) the anchor of round id in dir, locked for
// this writer, and reads it; a torn last line (a crash while the anchor
// was written, before the journal was) is cut away.
func openAnchor(dir, roundID string) (*anchor, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("anchor directory: %w", err)
	}
	path := filepath.Join(dir, roundID+".jsonl")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open anchor %s: %w", path, err)
	}
	a := &anchor{path: path, f: f, seals: map[int]anchorEntry{}, seed: anchorSeed(roundID), live: sha256.New(), checked: map[int]segStamp{}}
	a.head = a.seed
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, ErrLocked
		}
		return nil, fmt.Errorf("lock anchor %s: %w", path, err)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("read anchor %s: %w", path, err)
	}
	good := 0
	for good < len(data) {
		end := bytes.IndexByte(data[good:], '\n')
		if end < 0 {
			break // torn: the journal line after it was never written
		}
		var e anchorEntry
		if err := json.Unmarshal(data[good:good+end], &e); err != nil {
			f.Close()
			return nil, fmt.Errorf("anchor %s: byte %d is not an anchor entry: %w", path, good, err)
		}
		if err := a.add(e); err != nil {
			f.Close()
			return nil, fmt.Errorf("anchor %s: %w", path, err)
		}
		good += end + 1
	}
	if good < len(data) {
		if err := f.Truncate(int64(good)); err != nil {
			f.Close()
			return nil, fmt.Errorf("cut the torn tail of anchor %s: %w", path, err)
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return nil, fmt.Errorf("sync anchor %s: %w", path, err)
		}
	}
	a.size = int64(good)
	return a, nil
}

// add takes one entry read from the anchor file, checking its chain.
func (a *anchor) add(e anchorEntry) error {
	if e.Sealed > 0 {
		a.seals[e.Sealed] = e
		return nil
	}
	if e.Seq != uint64(len(a.records))+1 {
		return fmt.Errorf("entry for record %d follows %d entries", e.Seq, len(a.records))
	}
	next := nextChain(a.head, []byte(e.Line))
	if hex.EncodeToString(next[:]) != e.Chain {
		return fmt.Errorf("the chain breaks at record %d", e.Seq)
	}
	a.head = next
	a.records = append(a.records, e)
	return nil
}

// write appends one entry, fsync'd; on failure the file is cut back.
// undoFailed says the cut failed too: the anchor can no longer be trusted
// to match the journal, and appends must stop.
func (a *anchor) write(e anchorEntry) (undoFailed bool, err error) {
	b, err := json.Marshal(e)
	if err != nil {
		return false, err
	}
	b = append(b, '\n')
	_, err = a.f.Write(b)
	if err == nil {
		err = a.f.Sync()
	}
	if err != nil {
		return a.cut(a.size) != nil, fmt.Errorf("anchor %s: %w", a.path, err)
	}
	a.size += int64(len(b))
	return false, nil
}

func (a *anchor) cut(size int64) error {
	if err := a.f.Truncate(size); err != nil {
		return err
	}
	return a.f.Sync()
}

// appendRecord anchors the record line (without newline) about to be
// written; forget undoes it when the journal write then fails.
func (a *anchor) appendRecord(seq uint64, line []byte) (undoFailed bool, err error) {
	next := nextChain(a.head, line)
	e := anchorEntry{Seq: seq, Chain: hex.EncodeToString(next[:]), Line: string(line)}
	before := a.size
	if undoFailed, err := a.write(e); err != nil {
		return undoFailed, err
	}
	a.head = next
	a.records = append(a.records, e)
	a.lastSize = before
	return false, nil
}

// forget removes the last record entry (its journal write failed).
func (a *anchor) forget() error {
	if err := a.cut(a.lastSize); err != nil {
		return err
	}
	a.size = a.lastSize
	a.records = a.records[:len(a.records)-1]
	a.head = a.chainAt(len(a.records))
	return nil
}

// chainAt is the chain after the first n records.
func (a *anchor) chainAt(n int) [32]byte {
	if n == 0 {
		return a.seed
	}
	var out [32]byte
	b, _ := hex.DecodeString(a.records[n-1].Chain)
	copy(out[:], b)
	return out
}

func (a *anchor) close() error {
	if a == nil || a.f == nil {
		return nil
	}
	err := a.f.Close()
	a.f = nil
	return err
}

// journalLine is one record line of the journal as it is on disk.
type journalLine struct {
	file string
	line []byte
}

// splitRecordLines splits whole JSONL lines (each ends in a newline).
func splitRecordLines(file string, data []byte, out []journalLine) []journalLine {
	for len(data) > 0 {
		end := bytes.IndexByte(data, '\n')
		if end < 0 {
			end = len(data)
		}
		out = append(out, journalLine{file: file, line: data[:end]})
		data = data[min(end+1, len(data)):]
	}
	return out
}

// describeLine says what a journal line is, for a tamper report.
func describeLine(line []byte) string {
	var r Record
	if err := json.Unmarshal(line, &r); err != nil {
		return "a line that is not a record"
	}
	s := fmt.Sprintf("record %d %s", r.Seq, r.Kind)
	for _, part := range []string{string(r.Decision), string(r.Step), r.Node, string(r.Outcome)} {
		if part != "" {
			s += " " + part
		}
	}
	return s
}

// reconcile compares the journal on disk (its sealed segments, then live,
// the live file's whole records) with the anchor. It answers the anchor's
// last record when the journal lacks exactly that one (a crash between
// the two writes: the caller writes it back), or the first difference.
func (a *anchor) reconcile(dir, roundID string, segments int, live []byte) ([]byte, error) {
	var lines []journalLine
	segData := make([][]byte, segments+1)
	for n := 1; n <= segments; n++ {
		name := segmentName(JournalFile, n)
		data, err := readFile(dir, name)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
		segData[n] = data
		lines = splitRecordLines(name, data, lines)
	}
	lines = splitRecordLines(JournalFile, live, lines)

	tamper := func(seq uint64, file, found, want, reason string) error {
		return &TamperError{Round: roundID, Seq: seq, File: file, Found: found, Want: want, Reason: reason}
	}
	if len(a.records) == 0 && len(lines) > 0 {
		return nil, tamper(0, "", "", "",
			fmt.Sprintf("the journal holds %d records but the server's state directory holds no anchor for this round: the server did not write them (or its state directory was lost)", len(lines)))
	}
	if err := firstDifference(roundID, lines, a.records); err != nil {
		return nil, err
	}
	var restore []byte
	switch {
	case len(lines) > len(a.records):
		extra := lines[len(a.records)]
		return nil, tamper(uint64(len(a.records))+1, extra.file, describeLine(extra.line), "",
			"a record the server never wrote")
	case len(lines)+1 == len(a.records):
		restore = []byte(a.records[len(lines)].Line)
	case len(lines) < len(a.records):
		missing := a.records[len(lines)]
		return nil, tamper(missing.Seq, "", "nothing", describeLine([]byte(missing.Line)),
			fmt.Sprintf("%d records the server wrote are missing", len(a.records)-len(lines)))
	}
	for n, seal := range a.seals {
		if n > segments {
			return nil, tamper(0, segmentName(JournalFile, n), "", "",
				"a sealed segment the server wrote is missing")
		}
		if sum := sha256.Sum256(segData[n]); hex.EncodeToString(sum[:]) != seal.SHA256 {
			return nil, tamper(0, segmentName(JournalFile, n), "", "",
				"a sealed segment was edited after it was sealed")
		}
	}
	return restore, nil
}

// statStamp is how Verify tells that a sealed segment may have changed since
// it was hashed: its inode, size, and change time (which no one can set).
func statStamp(path string) (segStamp, error) {
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		return segStamp{}, err
	}
	return segStamp{ino: int64(st.Ino), size: st.Size, ctim: st.Ctim, mtime: st.Mtim}, nil
}

// Head is a journal's anchored head: the sequence number of a record and
// the running hash over every record up to it (hex, as in the anchor).
// It is what a server publishes where the cluster keeps it, so that
// another server can take the round over from the pushed journal without
// trusting any record past it (Adopt).
type Head struct {
	Seq   uint64 `json:"seq"`
	Chain string `json:"chain"`
}

// Head is the journal's anchored head: the sequence number of its last
// record and the running hash over every record up to it (hex), or 0 and
// "" for a journal opened without an anchor.
func (j *Journal) Head() (uint64, string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	h := j.headLocked()
	return h.Seq, h.Chain
}

// HoldHead runs fn with the journal's lock held, as Hold does, and hands
// it the anchored head at that instant (the zero Head for a journal
// without an anchor or records): the head fn publishes is the head of
// the files it commits, never of a record appended between the two.
func (j *Journal) HoldHead(fn func(Head) error) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.verifyLocked(true); err != nil {
		return err
	}
	return fn(j.headLocked())
}

// headLocked is the anchored head. j.mu is held.
func (j *Journal) headLocked() Head {
	if j.anc == nil || len(j.anc.records) == 0 {
		return Head{}
	}
	last := j.anc.records[len(j.anc.records)-1]
	return Head{Seq: last.Seq, Chain: last.Chain}
}

// Verify checks the journal's files on disk against its anchor: every
// sealed segment has the digest it was sealed with (only segments whose
// inode, size or change time moved since they were last checked are read
// again) and the live file holds exactly what the server wrote. A
// difference is a *TamperError and the journal refuses every append from
// then on: the round stops until a person restores the files. Call it
// before committing the round's files, so that the history people audit
// is the journal the server decides from. A journal opened without an
// anchor has nothing to check.
func (j *Journal) Verify() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.verifyLocked(true)
}

// verifyLocked checks the files (the sealed segments too when full) and
// keeps a difference as the journal's breakage, so that nothing is
// appended after it; files that are again what the server wrote (a person
// restored them) lift it. A breakage of another kind is left to the
// caller. j.mu is held.
func (j *Journal) verifyLocked(full bool) error {
	if j.anc == nil || j.view {
		return nil
	}
	var prior *TamperError
	if j.broken != nil && !errors.As(j.broken, &prior) {
		return nil
	}
	err := j.checkFiles(full)
	var te *TamperError
	switch {
	case errors.As(err, &te):
		if prior == nil {
			j.log.Warn("the round's files are not what the server wrote; nothing is appended until they are", "round", j.roundID, "err", err)
		}
		j.broken = te
	case err == nil && prior != nil:
		j.log.Warn("the round's files are again what the server wrote; appends resume", "round", j.roundID, "was", prior.Error())
		j.broken = nil
	}
	return err
}

func (j *Journal) checkFiles(full bool) error {
	tamper := func(file, reason string) error {
		return &TamperError{Round: j.roundID, File: file, Reason: reason}
	}
	if err := j.checkLive(tamper); err != nil || !full {
		return err
	}
	n, err := segmentCount(j.dir, JournalFile)
	if err != nil {
		return tamper("", "the sealed segments are not as the server left them: "+err.Error())
	}
	if n != j.segments {
		return tamper(segmentName(JournalFile, max(n, j.segments)),
			fmt.Sprintf("the journal has %d sealed segments, the server sealed %d", n, j.segments))
	}
	for i := 1; i <= n; i++ {
		name := segmentName(JournalFile, i)
		st, err := statStamp(filepath.Join(j.dir, name))
		if err != nil {
			return fmt.Errorf("check %s: %w", name, err)
		}
		if prev, ok := j.anc.checked[i]; ok && prev == st {
			continue
		}
		data, err := readFile(j.dir, name)
		if err != nil {
			return fmt.Errorf("check %s: %w", name, err)
		}
		sum := sha256.Sum256(data)
		if seal, ok := j.anc.seals[i]; !ok || hex.EncodeToString(sum[:]) != seal.SHA256 {
			return tamper(name, "a sealed segment was edited after it was sealed")
		}
		j.anc.checked[i] = st
	}
	return nil
}

// checkLive checks that journal.jsonl is the file the server appends to
// (not one put in its place) and holds exactly what it wrote there.
func (j *Journal) checkLive(tamper func(file, reason string) error) error {
	fi, err := j.f.Stat()
	if err != nil {
		return fmt.Errorf("check %s: %w", JournalFile, err)
	}
	onDisk, err := os.Lstat(filepath.Join(j.dir, JournalFile))
	if err != nil || !os.SameFile(fi, onDisk) {
		return tamper(JournalFile, "the live journal was replaced by another file")
	}
	if fi.Size() != j.size {
		return tamper(JournalFile, fmt.Sprintf("the live journal holds %d bytes, the server wrote %d", fi.Size(), j.size))
	}
	data := make([]byte, j.size)
	if _, err := j.f.ReadAt(data, 0); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("check %s: %w", JournalFile, err)
	}
	if !bytes.Equal(sha256Sum(data), j.anc.live.Sum(nil)) {
		return tamper(JournalFile, "the live journal's records were edited")
	}
	return nil
}

func sha256Sum(b []byte) []byte {
	s := sha256.Sum256(b)
	return s[:]
}

// openAnchored opens the journal's anchor and reconciles the journal read
// at open (all: its records, sealed then live; j.f the live file) with
// it: a journal that lacks exactly the anchor's last record gets it back;
// any other difference refuses the open. j.size is the live file's.
func (j *Journal) openAnchored(f *os.File, all *scanned) error {
	a, err := openAnchor(j.anchorDir, j.roundID)
	if err != nil {
		return err
	}
	j.anc = a
	live := make([]byte, j.size)
	if _, err := f.ReadAt(live, 0); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read %s: %w", JournalFile, err)
	}
	restore, err := a.reconcile(j.dir, j.roundID, j.segments, live)
	if err != nil {
		return err
	}
	if restore != nil {
		var rec Record
		if err := json.Unmarshal(restore, &rec); err != nil {
			return fmt.Errorf("anchor %s: record to restore: %w", a.path, err)
		}
		line := append(restore, '\n')
		if _, err := f.Write(line); err != nil {
			return fmt.Errorf("restore record %d from the anchor: %w", rec.Seq, err)
		}
		if err := f.Sync(); err != nil {
			return fmt.Errorf("restore record %d from the anchor: %w", rec.Seq, err)
		}
		live = append(live, line...)
		j.size += int64(len(line))
		all.records = append(all.records, rec)
		all.ends = append(all.ends, int(j.sealedBytes+j.size))
		all.good = int(j.sealedBytes + j.size)
		j.opened.Restored = rec.Seq
		j.log.Warn("the journal lacked the last record the server wrote; written back from the anchor", "round", j.roundID, "seq", rec.Seq)
	}
	a.live.Write(live)
	for n := 1; n <= j.segments; n++ {
		if _, ok := a.seals[n]; ok {
			if st, err := statStamp(filepath.Join(j.dir, segmentName(JournalFile, n))); err == nil {
				a.checked[n] = st
			}
			continue
		}
		// Sealed by a process that died before anchoring the seal: its
		// records matched the anchor, so its bytes are the server's.
		data, err := readFile(j.dir, segmentName(JournalFile, n))
		if err != nil {
			return err
		}
		if undoFailed, err := a.write(anchorEntry{Sealed: n, LastSeq: lastSeqOf(data), SHA256: hex.EncodeToString(sha256Sum(data))}); err != nil {
			if undoFailed {
				return fmt.Errorf("anchor the seal of %s: %w (and the anchor could not be cut back)", segmentName(JournalFile, n), err)
			}
			return fmt.Errorf("anchor the seal of %s: %w", segmentName(JournalFile, n), err)
		}
		a.seals[n] = anchorEntry{Sealed: n, SHA256: hex.EncodeToString(sha256Sum(data))}
	}
	return nil
}

// lastSeqOf is the sequence number of the last record in whole JSONL data.
func lastSeqOf(data []byte) uint64 {
	lines := splitRecordLines("", data, nil)
	if len(lines) == 0 {
		return 0
	}
	var r Record
	if json.Unmarshal(lines[len(lines)-1].line, &r) != nil {
		return 0
	}
	return r.Seq
}

// anchorSeal anchors the segment just sealed (the live file's bytes as
// written, which the live hash covers) and starts the live hash afresh.
// An anchor write that fails is filled in at the next open (the segment's
// records are anchored one by one); one that could not be cut back stops
// appends. j.mu is held.
func (j *Journal) anchorSeal() {
	e := anchorEntry{Sealed: j.segments, LastSeq: j.state.LastSeq, SHA256: hex.EncodeToString(j.anc.live.Sum(nil))}
	j.anc.live.Reset()
	undoFailed, err := j.anc.write(e)
	if err != nil {
		if undoFailed {
			j.broken = fmt.Errorf("anchoring the seal of %s failed (%w) and could not be undone; reopen the journal", segmentName(JournalFile, j.segments), err)
		}
		j.log.Warn("could not anchor a sealed segment; the next open anchors it from its records", "round", j.roundID, "segment", segmentName(JournalFile, j.segments), "err", err)
		return
	}
	j.anc.seals[j.segments] = e
	if st, err := statStamp(filepath.Join(j.dir, segmentName(JournalFile, j.segments))); err == nil {
		j.anc.checked[j.segments] = st
	}
}

// RestoreReport says what RestoreFromAnchor wrote.
type RestoreReport struct {
	// Records is how many records the journal holds now.
	Records int `json:"records"`
	// Segments is how many sealed segments it holds.
	Segments int `json:"segments"`
	// Replaced names the files whose bytes changed (or were removed).
	Replaced []string `json:"replaced,omitempty"`
}

// RestoreFromAnchor writes the journal of the round in dir back from its
// anchor in anchorDir: each sealed segment as it was sealed and the live
// file with the records after them, byte for byte as the server wrote
// them; segment files the server never sealed are removed. It is the way
// out of a tampered journal for a person who holds the state directory
// (the anchor only ever gives back what the server wrote), and refuses
// while a process holds the journal open (ErrLocked).
func RestoreFromAnchor(dir, anchorDir string) (RestoreReport, error) {
	dir = filepath.Clean(dir)
	id := filepath.Base(dir)
	if !ValidRoundID(id) {
		return RestoreReport{}, fmt.Errorf("restore round journal %s: directory name %q is not a valid round id", dir, id)
	}
	fail := func(err error) (RestoreReport, error) {
		return RestoreReport{}, fmt.Errorf("restore round journal %s from its anchor: %w", dir, err)
	}
	f, err := lockJournal(dir, os.O_CREATE)
	if err != nil {
		return fail(err)
	}
	defer f.Close()
	a, err := openAnchor(anchorDir, id)
	if err != nil {
		return fail(err)
	}
	defer a.close()
	if len(a.records) == 0 {
		return fail(fmt.Errorf("the state directory holds no anchor for round %s", id))
	}
	files := map[string][]byte{}
	seg := 1
	var cur []byte
	for _, e := range a.records {
		cur = append(append(cur, e.Line...), '\n')
		if s, ok := a.seals[seg]; ok && s.LastSeq == e.Seq {
			files[segmentName(JournalFile, seg)] = cur
			cur, seg = nil, seg+1
		}
	}
	files[JournalFile] = cur
	for n, s := range a.seals {
		name := segmentName(JournalFile, n)
		if b, ok := files[name]; !ok || hex.EncodeToString(sha256Sum(b)) != s.SHA256 {
			return fail(fmt.Errorf("the anchor's records do not make %s as it was sealed", name))
		}
	}
	rep := RestoreReport{Records: len(a.records), Segments: seg - 1}
	names := slices.Sorted(maps.Keys(files))
	for _, name := range names {
		old, err := readFile(dir, name)
		if err == nil && bytes.Equal(old, files[name]) {
			continue
		}
		if name == JournalFile {
			// In place: the lock this restore holds is the file's.
			err = f.Truncate(0)
			if err == nil {
				_, err = f.WriteAt(files[name], 0)
			}
			if err == nil {
				err = f.Sync()
			}
		} else {
			err = writeFileAtomic(dir, name, files[name])
		}
		if err != nil {
			return fail(err)
		}
		rep.Replaced = append(rep.Replaced, name)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fail(err)
	}
	for _, e := range entries {
		if _, ok := files[e.Name()]; ok || !strings.HasPrefix(e.Name(), "journal-") || !strings.HasSuffix(e.Name(), ".jsonl") {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
			return fail(err)
		}
		rep.Replaced = append(rep.Replaced, e.Name())
	}
	if err := syncDir(dir); err != nil {
		return fail(err)
	}
	return rep, nil
}

// CheckAnchored compares the journal in dir with its anchor in anchorDir
// without locking or changing anything, for a reader beside a writer
// (the round's closed or open state, a status view). The journal must be
// a prefix of the anchor (the writer anchors a record before it writes
// it, and may append while this reads); anything else is a *TamperError.
func CheckAnchored(dir, anchorDir string) error { return checkAnchored(dir, anchorDir, false) }

// CheckReproduced is CheckAnchored for a journal no writer holds: the
// journal must hold exactly the records of its anchor, no fewer (a server
// that takes a round over keeps its own anchor only when it reproduces
// what the remote holds, else adopts the published head).
func CheckReproduced(dir, anchorDir string) error { return checkAnchored(dir, anchorDir, true) }

func checkAnchored(dir, anchorDir string, exactly bool) error {
	dir = filepath.Clean(dir)
	id := filepath.Base(dir)
	data, err := ReadJournal(dir)
	if err != nil {
		return fmt.Errorf("read round journal %s: %w", dir, err)
	}
	raw, err := os.ReadFile(filepath.Join(anchorDir, id+".jsonl"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("read the anchor of round %s: %w", id, err)
	}
	want, err := anchorRecords(raw)
	if err != nil {
		return fmt.Errorf("anchor of round %s: %w", id, err)
	}
	lines := splitRecordLines(JournalFile, data, nil)
	if len(lines) > len(want) {
		extra := lines[len(want)]
		if len(want) == 0 {
			return &TamperError{Round: id, Reason: fmt.Sprintf("the journal holds %d records but the server's state directory holds no anchor for this round", len(lines))}
		}
		return &TamperError{Round: id, Seq: uint64(len(want)) + 1, Found: describeLine(extra.line), Reason: "a record the server never wrote"}
	}
	if err := firstDifference(id, lines, want); err != nil {
		return err
	}
	if exactly && len(want) > len(lines) {
		missing := want[len(lines)]
		return &TamperError{Round: id, Seq: missing.Seq, Found: "nothing", Want: describeLine([]byte(missing.Line)),
			Reason: fmt.Sprintf("%d records the server wrote are missing", len(want)-len(lines))}
	}
	return nil
}

// lockJournal opens the round's live journal file in dir (flag adds to
// O_RDWR) and takes its lock as Open does, for a change of the round's
// files that no writer may see half done: ErrLocked while a process
// holds the journal open.
func lockJournal(dir string, flag int) (*os.File, error) {
	f, err := openFile(dir, JournalFile, os.O_RDWR|flag, 0o640)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, ErrLocked
		}
		return nil, fmt.Errorf("lock %s: %w", JournalFile, err)
	}
	return f, nil
}

// anchorRecords reads the record entries of anchor bytes, as far as its
// whole lines go (a last line without its newline is a write in progress
// or torn by a crash, and not yet the server's).
func anchorRecords(raw []byte) ([]anchorEntry, error) {
	var out []anchorEntry
	for _, l := range bytes.SplitAfter(raw, []byte("\n")) {
		if len(l) == 0 || l[len(l)-1] != '\n' {
			break
		}
		var e anchorEntry
		if err := json.Unmarshal(l, &e); err != nil {
			return nil, err
		}
		if e.Sealed == 0 {
			out = append(out, e)
		}
	}
	return out, nil
}

// firstDifference compares the journal's lines with the anchor's records
// as far as both go and names the first record that differs.
func firstDifference(roundID string, lines []journalLine, want []anchorEntry) error {
	for i := range min(len(lines), len(want)) {
		w := []byte(want[i].Line)
		if !bytes.Equal(lines[i].line, w) {
			return &TamperError{Round: roundID, Seq: want[i].Seq, File: lines[i].file, Found: describeLine(lines[i].line), Want: describeLine(w),
				Reason: "a record differs from what the server wrote (edited, inserted, deleted, reordered or renumbered)"}
		}
	}
	return nil
}
