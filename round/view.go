package round

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ErrReadOnlyView is returned by every write of a journal opened with
// OpenView: a read-only process appends nothing and rewrites nothing.
var ErrReadOnlyView = errors.New("round journal is open read-only: this process writes nothing")

// readLockWait bounds how long a reader waits for the writer's repair of
// a torn tail (the only time the writer rewrites bytes a reader may be
// reading); past it the reader reads anyway, as a torn tail is never
// replayed.
const readLockWait = 2 * time.Second

// OpenView opens the journal of the round whose directory is dir for
// reading only. It writes nothing at all: no session_opened record, no
// state.json rewrite, no repair of a torn tail (a torn last line is not
// replayed), no audit log. It never takes the journal's exclusive lock,
// so a read-write server opens the same journal beside it; while it reads
// journal.jsonl it holds a shared (read) lock of its own kind (an open
// file description lock, which never conflicts with the writer's flock)
// that only the writer's repair of a torn tail at open waits for. Every
// State and Status reads the journal again when it changed on disk, so a
// long-running read-only server follows the writer. Every write method
// answers ErrReadOnlyView.
func OpenView(dir string, opts ...Option) (*Journal, error) {
	dir = filepath.Clean(dir)
	id := filepath.Base(dir)
	if !ValidRoundID(id) {
		return nil, fmt.Errorf("open round journal %s: directory name %q is not a valid round id", dir, id)
	}
	j := &Journal{dir: dir, roundID: id, clock: time.Now, view: true}
	for _, o := range opts {
		o(j)
	}
	if j.root != "" {
		if err := CheckDir(j.root, j.dir); err != nil {
			return nil, fmt.Errorf("open round journal %s: %w", dir, err)
		}
	}
	j.broken = ErrReadOnlyView
	if err := j.refreshLocked(); err != nil {
		return nil, fmt.Errorf("open round journal %s: %w", dir, err)
	}
	if j.state.RoundID != j.roundID {
		return nil, fmt.Errorf("open round journal %s: journal belongs to round %s, not %s", dir, j.state.RoundID, j.roundID)
	}
	j.opened = OpenReport{Records: j.viewRecords, NeedsRecheck: j.state.needsRecheck()}
	return j, nil
}

// ReadOnly says whether the journal was opened with OpenView.
func (j *Journal) ReadOnly() bool { return j.view }

// refreshLocked reads the journal again when the live file's size or
// modification time or the number of sealed segments changed since the
// last read, and replays it into j.state: the segments sealed since the
// last read onto the state the earlier ones made, then the live file.
// j.mu is held (or j is not shared yet).
func (j *Journal) refreshLocked() error {
	f, err := openFile(j.dir, JournalFile, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	unlock := readLock(f)
	err = j.readViewLocked(f)
	if uerr := unlock(); err == nil && uerr != nil {
		err = fmt.Errorf("read %s: %w", filepath.Join(j.dir, JournalFile), uerr)
	}
	return err
}

// readViewLocked is refreshLocked's read, with the read lock held: the
// writer's seal (segment written, live file emptied) happens wholly
// before or after it. Without the lock (its wait ran out) a live record
// already in a segment is skipped by its sequence number.
func (j *Journal) readViewLocked(f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	n, err := segmentCount(j.dir, JournalFile)
	if err != nil {
		return err
	}
	if j.state != nil && n == j.viewSegments && fi.Size() == j.size && fi.ModTime().Equal(j.viewMod) {
		return nil
	}
	sealed, sealedRecs := j.viewSealed, j.viewSealedRec
	from := j.viewSegments + 1
	if sealed == nil || n < j.viewSegments {
		sealed, sealedRecs, from = NewState(j.roundID), 0, 1
	}
	if n >= from {
		sc, err := readSealed(j.dir, from, n, sealed.LastSeq)
		if err != nil {
			return err
		}
		sealed = sealed.Clone()
		for _, rec := range sc.records {
			if err := sealed.Apply(rec); err != nil {
				return fmt.Errorf("replay %s to %s in %s: %w", segmentName(JournalFile, from), segmentName(JournalFile, n), j.dir, err)
			}
		}
		sealedRecs += len(sc.records)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return fmt.Errorf("read %s: %w", filepath.Join(j.dir, JournalFile), err)
	}
	sc, err := scanLines(data)
	if err != nil {
		return fmt.Errorf("%s: %w", filepath.Join(j.dir, JournalFile), err)
	}
	st := sealed.Clone()
	records := sealedRecs
	for _, rec := range sc.records {
		if rec.Seq <= st.LastSeq && st.LastSeq > 0 {
			continue
		}
		if err := st.Apply(rec); err != nil {
			return fmt.Errorf("replay %s: %w", filepath.Join(j.dir, JournalFile), err)
		}
		records++
	}
	j.state, j.size, j.viewMod, j.viewRecords = st, fi.Size(), fi.ModTime(), records
	j.viewSegments, j.viewSealed, j.viewSealedRec = n, sealed, sealedRecs
	return nil
}

// refreshView brings a view's state up to the journal on disk; a read
// that fails keeps the last state read (logged), as a reader must not
// fail a status call on a writer's passing rename.
func (j *Journal) refreshView() {
	if !j.view {
		return
	}
	if err := j.refreshLocked(); err != nil && j.log != nil {
		j.log.Warn("round journal could not be read again; answering from the last read", "round", j.roundID, "err", err)
	}
}

// readLock takes a shared open file description lock on the whole of f,
// waiting at most readLockWait for a writer's repair; it answers the
// unlock. Without the lock (a file system without OFD locks, or the wait
// ran out) the read goes on: a torn tail is not replayed.
func readLock(f *os.File) func() error {
	lk := unix.Flock_t{Type: unix.F_RDLCK, Whence: io.SeekStart}
	deadline := time.Now().Add(readLockWait)
	for {
		err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk)
		if err == nil {
			return func() error { return unlockOFD(f) }
		}
		if !errors.Is(err, syscall.EAGAIN) && !errors.Is(err, syscall.EACCES) || time.Now().After(deadline) {
			return func() error { return nil }
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// repairLock takes an exclusive open file description lock on the whole
// of f for the writer's repair of a torn tail at open, waiting for the
// readers reading at that moment (each holds it for one read of the
// file); it answers the unlock. It never conflicts with the writer's own
// flock, and appends never take it: a reader that meets a half-written
// last line leaves it out.
func repairLock(f *os.File) (func() error, error) {
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart}
	if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLKW, &lk); err != nil {
		if errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOLCK) {
			return func() error { return nil }, nil // no OFD locks here: readers do without
		}
		return nil, fmt.Errorf("lock %s for repair: %w", f.Name(), err)
	}
	return func() error { return unlockOFD(f) }, nil
}

// unlockOFD releases the open file description lock on f (the writer's
// flock is another lock and stays).
func unlockOFD(f *os.File) error {
	un := unix.Flock_t{Type: unix.F_UNLCK, Whence: io.SeekStart}
	if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &un); err != nil {
		return fmt.Errorf("unlock %s: %w", f.Name(), err)
	}
	return nil
}
