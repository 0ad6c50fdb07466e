package round

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// SegmentBytes is the size at which the live journal.jsonl (and
// audit.jsonl) is sealed: its whole records move, as they are, into the
// next numbered segment beside it (journal-000001.jsonl, ...) and the live
// file starts empty. Sealed segments never change again, so a commit of
// the round's files compresses and stores the live file and the new
// segments only: what a window costs in Git stays the same from the first
// window of a 1,000-node round to the last (one file per log made every
// commit store the whole grown log again).
const SegmentBytes = 64 << 10

// WithSegmentBytes sets the size at which the live logs are sealed (tests
// seal small logs; default SegmentBytes).
func WithSegmentBytes(n int64) Option { return func(j *Journal) { j.segBytes = n } }

// segmentName is the name of the n-th (1-based) sealed segment of file
// (JournalFile or AuditFile).
func segmentName(file string, n int) string {
	return fmt.Sprintf("%s-%06d.jsonl", strings.TrimSuffix(file, ".jsonl"), n)
}

// segmentCount is how many sealed segments of file dir holds: they must be
// numbered 1..n without a gap, each a regular file.
func segmentCount(dir, file string) (int, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	return countSegments(dir, file, entries)
}

// countSegments is segmentCount over entries, dir's listing.
func countSegments(dir, file string, entries []os.DirEntry) (int, error) {
	prefix := strings.TrimSuffix(file, ".jsonl") + "-"
	var nums []int
	for _, e := range entries {
		name := e.Name()
		mid, ok := strings.CutPrefix(name, prefix)
		if !ok {
			continue
		}
		digits, ok := strings.CutSuffix(mid, ".jsonl")
		if !ok || len(digits) != 6 {
			continue
		}
		n, err := strconv.Atoi(digits)
		if err != nil || n < 1 {
			continue
		}
		if !e.Type().IsRegular() {
			if e.Type()&os.ModeSymlink != 0 {
				return 0, symlinkRefusal(filepath.Join(dir, name))
			}
			return 0, fmt.Errorf("%w: %s is not a regular file", ErrUnsafePath, filepath.Join(dir, name))
		}
		nums = append(nums, n)
	}
	slices.Sort(nums)
	for i, n := range nums {
		if n != i+1 {
			return 0, fmt.Errorf("sealed segments of %s: %s is missing (found %s)", file, segmentName(file, i+1), segmentName(file, n))
		}
	}
	return len(nums), nil
}

// SegmentFiles names the sealed segments of the round's journal and audit
// log in dir, oldest first: the files a commit of the round adds once.
func SegmentFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, file := range []string{JournalFile, AuditFile} {
		n, err := countSegments(dir, file, entries)
		if err != nil {
			return nil, err
		}
		for i := 1; i <= n; i++ {
			out = append(out, segmentName(file, i))
		}
	}
	return out, nil
}

// readSealed reads the sealed segments from..to (1-based, inclusive) of
// the journal and scans them: each must be whole records, none torn, each
// record following the one before it. The ends are offsets into the
// segments read, one after the other.
func readSealed(dir string, from, to int, lastSeq uint64) (scanned, error) {
	var out scanned
	for n := from; n <= to; n++ {
		name := segmentName(JournalFile, n)
		data, err := readFile(dir, name)
		if err != nil {
			return scanned{}, fmt.Errorf("read %s: %w", name, err)
		}
		sc, err := scanLines(data)
		if err != nil {
			return scanned{}, fmt.Errorf("%s: %w", name, err)
		}
		if len(sc.torn) > 0 || sc.missingNewline {
			return scanned{}, fmt.Errorf("%s: a sealed segment ends in a partial record (byte %d): segments are written whole and never change", name, sc.good)
		}
		for _, rec := range sc.records {
			if rec.Seq != lastSeq+1 {
				return scanned{}, fmt.Errorf("%s: record %d follows record %d", name, rec.Seq, lastSeq)
			}
			lastSeq = rec.Seq
		}
		for i := range sc.records {
			out.records = append(out.records, sc.records[i])
			out.ends = append(out.ends, out.good+sc.ends[i])
		}
		out.good += len(data)
	}
	return out, nil
}

// ReadJournal returns the round's whole journal in dir, its sealed
// segments and then the live journal.jsonl, as one JSONL stream, without
// locking or changing anything. A live file that still repeats the last
// segment (a seal cut off between its two steps) is left out.
func ReadJournal(dir string) ([]byte, error) {
	n, err := segmentCount(dir, JournalFile)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	var last []byte
	for i := 1; i <= n; i++ {
		data, err := readFile(dir, segmentName(JournalFile, i))
		if err != nil {
			return nil, err
		}
		buf.Write(data)
		last = data
	}
	live, err := readFile(dir, JournalFile)
	if err != nil && !(n > 0 && errors.Is(err, os.ErrNotExist)) {
		return nil, err
	}
	if n > 0 && bytes.Equal(live, last) {
		live = nil
	}
	buf.Write(live)
	return buf.Bytes(), nil
}

// sealLog moves the whole records of a live log (f, size bytes) into
// segment n: the segment is written whole (temporary file, fsync, link
// under its name, fsync of the directory), then the live file is emptied
// and synced. Readers holding the read lock see the log before or after,
// never both. If emptying fails, the segment is removed again so the
// records are never on disk twice; when even that fails, the error says
// so and the caller refuses further appends.
func sealLog(dir string, f *os.File, file string, n int, size int64) (undoFailed bool, err error) {
	name := segmentName(file, n)
	// Readers hold the read lock while they count the segments and read
	// them and the live file: under the writer's lock they see the log
	// wholly before the seal or wholly after it.
	unlock, err := repairLock(f)
	if err != nil {
		return false, fmt.Errorf("seal %s: %w", file, err)
	}
	defer func() {
		if uerr := unlock(); uerr != nil && err == nil {
			err = fmt.Errorf("seal %s: %w", file, uerr)
		}
	}()
	data := make([]byte, size)
	if _, err := f.ReadAt(data, 0); err != nil && !errors.Is(err, io.EOF) {
		return false, fmt.Errorf("seal %s: read: %w", file, err)
	}
	if err := writeFileNew(dir, name, data); err != nil {
		return false, fmt.Errorf("seal %s into %s: %w", file, name, err)
	}
	err = f.Truncate(0)
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		return false, nil
	}
	if rerr := os.Remove(filepath.Join(dir, name)); rerr != nil {
		return true, fmt.Errorf("seal %s: emptying it failed (%w) and %s, which repeats its records, could not be removed (%v)", file, err, name, rerr)
	}
	if serr := syncDir(dir); serr != nil {
		return true, fmt.Errorf("seal %s: emptying it failed (%w) and the removal of %s could not be synced (%v)", file, err, name, serr)
	}
	return false, fmt.Errorf("seal %s: %w (nothing sealed)", file, err)
}

// writeFileNew writes dir/name, which must not exist: temporary file,
// fsync, hard link under the name (refused when it exists), fsync of the
// directory.
func writeFileNew(dir, name string, data []byte) error {
	tmp, err := writeTemp(dir, name, data)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	if err := os.Link(tmp, filepath.Join(dir, name)); err != nil {
		return err
	}
	return syncDir(dir)
}

// dropRepeatedSegment handles a seal cut off between its two steps: the
// live file (data) still holds exactly the records of the last segment
// (last). It is emptied, under the repair lock readers wait for. Any other
// overlap is corruption and an error.
func dropRepeatedSegment(f *os.File, path string, data, last []byte) (bool, error) {
	if len(data) == 0 || !bytes.Equal(data, last) {
		return false, nil
	}
	unlock, err := repairLock(f)
	if err != nil {
		return false, err
	}
	err = f.Truncate(0)
	if err == nil {
		err = f.Sync()
	}
	if err = errors.Join(err, unlock()); err != nil {
		return false, fmt.Errorf("empty %s, which repeats its last sealed segment: %w", path, err)
	}
	return true, nil
}
