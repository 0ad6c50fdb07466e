package policy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func nonceN(i int) string { return fmt.Sprintf("%032x", i) }

func TestNonceStorePersists(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenNonceStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := s.Consume(context.Background(), nonceN(i), "id"+nonceN(i)[:8], t0, t0.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Consume(context.Background(), nonceN(3), "again", t0, t0.Add(time.Hour)); !errors.Is(err, ErrReplayed) {
		t.Errorf("consume twice: got %v, want replayed", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Used(context.Background(), nonceN(0)); err == nil {
		t.Error("Used on a closed store succeeded")
	}

	data, err := os.ReadFile(filepath.Join(dir, NonceFileName))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(lines) != 6 || lines[0] != nonceFileHeader || lines[1] != nonceN(0)+" id00000000 2026-11-29T14:00:00Z" {
		t.Errorf("file:\n%s", data)
	}
	if fi, err := os.Stat(filepath.Join(dir, NonceFileName)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("file mode: %v %v", fi.Mode(), err)
	}

	r, err := OpenNonceStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Len() != 5 {
		t.Errorf("reopened with %d nonces, want 5", r.Len())
	}
	for i := range 6 {
		used, err := r.Used(context.Background(), nonceN(i))
		if err != nil {
			t.Fatal(err)
		}
		if used != (i < 5) {
			t.Errorf("Used(%d) = %v after reopen", i, used)
		}
	}
}

// TestNonceStoreSeesOtherWriters: two openers of one directory (two
// processes, in effect) see each other's consumptions.
func TestNonceStoreSeesOtherWriters(t *testing.T) {
	dir := t.TempDir()
	a, err := OpenNonceStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := OpenNonceStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := a.Consume(context.Background(), nonceN(1), "x", t0, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if used, err := b.Used(context.Background(), nonceN(1)); err != nil || !used {
		t.Errorf("b.Used after a.Consume = %v, %v", used, err)
	}
	if err := b.Consume(context.Background(), nonceN(1), "y", t0, t0.Add(time.Hour)); !errors.Is(err, ErrReplayed) {
		t.Errorf("b.Consume of a's nonce: got %v, want replayed", err)
	}
}

func TestNonceStoreLockIsBounded(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenNonceStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	f, err := os.Open(filepath.Join(dir, NonceFileName))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	s.LockWait = 50 * time.Millisecond
	if err := s.Consume(context.Background(), nonceN(1), "x", t0, t0.Add(time.Hour)); err == nil || !strings.Contains(err.Error(), "another process") {
		t.Errorf("Consume under a foreign lock: got %v", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	if err := s.Consume(context.Background(), nonceN(1), "x", t0, t0.Add(time.Hour)); err != nil {
		t.Errorf("Consume after the lock was released: %v", err)
	}
}

func TestNonceStoreDamage(t *testing.T) {
	good := nonceFileHeader + "\n" + nonceN(1) + " id1 2026-11-29T14:00:00Z\n"
	tests := []struct {
		name, content string
		wantErr       string // "" means it opens
		wantUsed      []string
		wantFile      string // content after open, when it opens
	}{
		{name: "empty file gets a header", content: "", wantFile: nonceFileHeader + "\n"},
		{name: "good", content: good, wantUsed: []string{nonceN(1)}, wantFile: good},
		{name: "torn last line is cut", content: good + nonceN(2)[:10], wantUsed: []string{nonceN(1)}, wantFile: good},
		{name: "torn header starts afresh", content: nonceFileHeader[:5], wantFile: nonceFileHeader + "\n"},
		{name: "wrong header", content: "# something else\n", wantErr: "first line"},
		{name: "damaged line", content: good + "zzz id 2026\n", wantErr: "damaged line"},
		{name: "blank line", content: good + "\n" + nonceN(2) + " id2 2026-11-29T14:00:00Z\n", wantErr: "damaged line"},
		{name: "bad time", content: good + nonceN(2) + " id2 yesterday\n", wantErr: "damaged line"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, NonceFileName)
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := OpenNonceStore(dir)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for _, n := range tt.wantUsed {
				if used, err := s.Used(context.Background(), n); err != nil || !used {
					t.Errorf("Used(%s) = %v, %v", n, used, err)
				}
			}
			if got, _ := os.ReadFile(path); string(got) != tt.wantFile {
				t.Errorf("file after open:\n%q\nwant\n%q", got, tt.wantFile)
			}
			if err := s.Consume(context.Background(), nonceN(9), "id9", t0, t0.Add(time.Hour)); err != nil {
				t.Errorf("Consume after repair: %v", err)
			}
		})
	}
}

func TestNonceStoreRefusesShrink(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenNonceStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Consume(context.Background(), nonceN(1), "x", t0, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(dir, NonceFileName), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Used(context.Background(), nonceN(1)); err == nil || !strings.Contains(err.Error(), "shrank") {
		t.Errorf("after someone truncated the file: got %v, want 'shrank'", err)
	}
}

func TestNonceStoreRefusesBadInput(t *testing.T) {
	s := openStore(t)
	for _, c := range []struct{ nonce, id string }{
		{"short", "id"}, {strings.Repeat("AB", 16), "id"}, {nonceN(1), ""}, {nonceN(1), "a b"}, {nonceN(1), "a\nb"},
	} {
		if err := s.Consume(context.Background(), c.nonce, c.id, t0, t0.Add(time.Hour)); err == nil {
			t.Errorf("Consume(%q, %q) succeeded", c.nonce, c.id)
		}
	}
	if s.Len() != 0 {
		t.Errorf("bad input left %d nonces", s.Len())
	}
}
