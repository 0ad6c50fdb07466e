package policy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// NonceStore remembers which approvals have been executed. Verifier asks it
// whether a nonce was used and marks one used when the caller commits.
// FileNonceStore keeps them in the server's state directory; a store that
// every server of a cluster sees (kube/usednonces) makes an approval single
// use across servers; Nonces joins several.
type NonceStore interface {
	// Used reports whether nonce has been consumed.
	Used(ctx context.Context, nonce string) (bool, error)
	// Consume marks nonce used, atomically: exactly one of any number of
	// concurrent calls for one nonce succeeds; the others get an error that
	// matches ErrReplayed. It returns only once the mark is durable.
	// expires is when the approval stops being valid: after it, the mark
	// may be forgotten (Verify refuses an expired approval anyway).
	Consume(ctx context.Context, nonce, approvalID string, at, expires time.Time) error
}

// Nonces joins stores: a nonce is used when any store says so, and
// Consume marks it in each, in order, stopping at the first refusal or
// error. Put the store every server shares first: it decides races between
// servers, and a nonce it refuses is marked nowhere else.
func Nonces(stores ...NonceStore) NonceStore { return nonceStores(stores) }

type nonceStores []NonceStore

func (s nonceStores) Used(ctx context.Context, nonce string) (bool, error) {
	for _, st := range s {
		used, err := st.Used(ctx, nonce)
		if err != nil || used {
			return used, err
		}
	}
	return false, nil
}

func (s nonceStores) Consume(ctx context.Context, nonce, approvalID string, at, expires time.Time) error {
	for _, st := range s {
		if err := st.Consume(ctx, nonce, approvalID, at, expires); err != nil {
			return err
		}
	}
	return nil
}

var _ NonceStore = (*FileNonceStore)(nil)

// NonceFileName is the file a FileNonceStore keeps in its directory.
const NonceFileName = "used-nonces"

const nonceFileHeader = "# mcp-patch used nonces v1"

// DefaultLockWait bounds how long a FileNonceStore waits for another process
// holding the file lock.
const DefaultLockWait = 5 * time.Second

// FileNonceStore keeps used nonces in an append-only file, one line each
// ("<nonce> <approval-id> <consumed-at>"), fsynced before Consume returns.
// It is safe for concurrent use by goroutines and, through flock(2), by
// several processes sharing the directory. A line torn by a crash during
// Consume (no final newline) belongs to a Consume that never returned
// success, so it is cut off; any other damage makes the store refuse to
// open: a store that cannot say what was executed must not say "unused".
type FileNonceStore struct {
	// LockWait bounds the wait for another process's lock; zero means
	// DefaultLockWait.
	LockWait time.Duration

	mu     sync.Mutex
	f      *os.File
	path   string
	offset int64 // bytes of the file already read into used
	used   map[string]struct{}
}

// OpenNonceStore opens (creating if needed) the store in dir and loads the
// nonces used so far.
func OpenNonceStore(dir string) (*FileNonceStore, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("open nonce store: %w", err)
	}
	path := filepath.Join(dir, NonceFileName)
	_, statErr := os.Stat(path)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open nonce store: %w", err)
	}
	if errors.Is(statErr, os.ErrNotExist) {
		// The file's directory entry must survive a crash too.
		if err := syncDir(dir); err != nil {
			f.Close()
			return nil, fmt.Errorf("open nonce store: %w", err)
		}
	}
	s := &FileNonceStore{f: f, path: path, used: map[string]struct{}{}}
	if err := s.locked(func() error { return nil }); err != nil {
		f.Close()
		return nil, fmt.Errorf("open nonce store %s: %w", path, err)
	}
	return s, nil
}

// Close releases the file.
func (s *FileNonceStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	s.f = nil
	return err
}

// Len is the number of used nonces known.
func (s *FileNonceStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.used)
}

// Used reports whether nonce has been consumed, by this or another process.
func (s *FileNonceStore) Used(ctx context.Context, nonce string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("look up nonce %s: %w", nonce, err)
	}
	var used bool
	err := s.locked(func() error {
		_, used = s.used[nonce]
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("look up nonce %s: %w", nonce, err)
	}
	return used, nil
}

// Consume marks nonce used and returns once the mark is on disk. The file
// keeps every nonce; expires is not needed here.
func (s *FileNonceStore) Consume(ctx context.Context, nonce, approvalID string, at, expires time.Time) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("consume nonce %s: %w", nonce, err)
	}
	if !nonceRE().MatchString(nonce) {
		return fmt.Errorf("consume nonce %q: not 32 lowercase hex digits", nonce)
	}
	if approvalID == "" || strings.ContainsAny(approvalID, " \t\r\n") {
		return fmt.Errorf("consume nonce %s: approval id %q is empty or has whitespace", nonce, approvalID)
	}
	err := s.locked(func() error {
		if _, ok := s.used[nonce]; ok {
			return refusal(ReasonReplayed, "", "", "", fmt.Sprintf("nonce %s has already been used", nonce))
		}
		line := nonce + " " + approvalID + " " + at.UTC().Format(time.RFC3339Nano) + "\n"
		n, err := s.f.Write([]byte(line))
		if err != nil {
			return fmt.Errorf("append: %w", err)
		}
		if err := s.f.Sync(); err != nil {
			return fmt.Errorf("fsync: %w", err)
		}
		s.offset += int64(n)
		s.used[nonce] = struct{}{}
		return nil
	})
	if err != nil {
		return fmt.Errorf("consume nonce %s: %w", nonce, err)
	}
	return nil
}

// locked runs fn holding the mutex and the file lock, after reading what
// other processes appended since the last look.
func (s *FileNonceStore) locked(fn func() error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return errors.New("nonce store is closed")
	}
	if err := s.flock(); err != nil {
		return err
	}
	defer syscall.Flock(int(s.f.Fd()), syscall.LOCK_UN)
	if err := s.refresh(); err != nil {
		return err
	}
	return fn()
}

func (s *FileNonceStore) flock() error {
	wait := s.LockWait
	if wait <= 0 {
		wait = DefaultLockWait
	}
	deadline := time.Now().Add(wait)
	for delay := time.Millisecond; ; delay = min(delay*2, 50*time.Millisecond) {
		err := syscall.Flock(int(s.f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			return fmt.Errorf("lock %s: %w", s.path, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("lock %s: another process has held it for %s", s.path, wait)
		}
		time.Sleep(delay)
	}
}

// refresh reads lines appended since offset. The caller holds the lock.
func (s *FileNonceStore) refresh() error {
	fi, err := s.f.Stat()
	if err != nil {
		return fmt.Errorf("stat: %w", err)
	}
	size := fi.Size()
	switch {
	case size < s.offset:
		return fmt.Errorf("%s shrank from %d to %d bytes: refusing to trust it", s.path, s.offset, size)
	case size == 0:
		if _, err := s.f.Write([]byte(nonceFileHeader + "\n")); err != nil {
			return fmt.Errorf("write header: %w", err)
		}
		if err := s.f.Sync(); err != nil {
			return fmt.Errorf("fsync: %w", err)
		}
		s.offset = int64(len(nonceFileHeader) + 1)
		return nil
	case size == s.offset:
		return nil
	}
	buf := make([]byte, size-s.offset)
	if _, err := s.f.ReadAt(buf, s.offset); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read: %w", err)
	}
	complete := bytes.LastIndexByte(buf, '\n') + 1
	if complete < len(buf) {
		// A torn final line: its Consume never returned, nothing ran on it.
		if err := s.f.Truncate(s.offset + int64(complete)); err != nil {
			return fmt.Errorf("cut torn line: %w", err)
		}
		if err := s.f.Sync(); err != nil {
			return fmt.Errorf("fsync: %w", err)
		}
		if s.offset == 0 && complete == 0 {
			return s.refresh() // only a torn header: start afresh
		}
	}
	if complete == 0 {
		return nil
	}
	lineNo := 0
	for line := range strings.SplitSeq(string(buf[:complete-1]), "\n") {
		lineNo++
		if s.offset == 0 && lineNo == 1 {
			if line != nonceFileHeader {
				return fmt.Errorf("%s: first line %q is not %q", s.path, line, nonceFileHeader)
			}
			continue
		}
		f := strings.Split(line, " ")
		if len(f) != 3 || !nonceRE().MatchString(f[0]) || f[1] == "" {
			return fmt.Errorf("%s: damaged line %q", s.path, line)
		}
		if _, err := time.Parse(time.RFC3339Nano, f[2]); err != nil {
			return fmt.Errorf("%s: damaged line %q: %w", s.path, line, err)
		}
		s.used[f[0]] = struct{}{}
	}
	s.offset += int64(complete)
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
