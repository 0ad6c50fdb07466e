package intent

import (
	"bytes"
	"crypto/sha1" // git's index checksum
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/index"
	"github.com/go-git/go-git/v5/storage/filesystem"
)

// A round commits after every call, each commit changing a handful of the
// thousands of files a large round tracks (a plan and a signature a node,
// the logs' segments). Written whole, .git/index cost every commit bytes in
// proportion to every tracked file (5 MB a window at window 1,000). So the
// index of a large working copy is written split, as git's own
// core.splitIndex writes it (Documentation/gitformat-index.txt, "Split
// index"): the entries in a shared file .git/sharedindex.<its checksum>,
// written seldom, and .git/index holding only the entries changed, added or
// removed since, with a "link" extension naming the shared file. git reads
// and keeps it as it is (core.splitIndex unset), go-git does not read it,
// so everything here reads the index through readIndex or gitStorage.

// splitIndexMinEntries is the size from which the index is written split
// (an intent repository with a round in it reaches it): a smaller one is
// as cheap to write whole (a split file holds up to reshareAt entries),
// and stays readable by tools that do not read a split index (go-git,
// libgit2).
const splitIndexMinEntries = 32

// sharedIndexExpiry is how long a shared index no longer linked is kept
// (a git command that read the index just before may still open it; git
// freshens the shared index it reads).
const sharedIndexExpiry = time.Hour

// indexFile is the working copy's index as read: its entries, and the
// shared index they were split from (nil when the file is whole).
type indexFile struct {
	idx        *index.Index
	shared     *index.Index
	sharedHash plumbing.Hash
	// splitMin is the size from which writes split (splitIndexMinEntries
	// unless a test lowers it; 0 or less never splits).
	splitMin int
	// written is the shared index encode wrote, for the cache.
	written *sharedIndexCache
}

// sharedIndexCache keeps the last shared index read or written: it is
// named by its checksum and never changes, and decoding its thousands of
// entries at every commit cost more than the rest of the index's work.
// Its entries are read, never changed (mergeSplitIndex copies them).
type sharedIndexCache struct {
	hash plumbing.Hash
	idx  *index.Index
}

// readIndex reads gitDir's index, whole or split; a repository without
// one has an empty index, as for go-git. cache, when not nil, keeps the
// shared index between calls.
func readIndex(gitDir string, cache *sharedIndexCache) (*indexFile, error) {
	f := &indexFile{idx: &index.Index{Version: 2}, splitMin: splitIndexMinEntries}
	data, err := os.ReadFile(filepath.Join(gitDir, "index"))
	if errors.Is(err, fs.ErrNotExist) {
		return f, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read index: %w", err)
	}
	whole := &index.Index{}
	err = index.NewDecoder(bytes.NewReader(data)).Decode(whole)
	if err == nil {
		f.idx = whole
		return f, nil
	}
	if !errors.Is(err, index.ErrUnknownExtension) {
		return nil, fmt.Errorf("read index: %w", err)
	}
	split, err := decodeSplitIndex(data)
	if err != nil {
		return nil, fmt.Errorf("read index: %w", err)
	}
	if split.link == nil || split.sharedHash.IsZero() {
		if split.link != nil && (len(split.del) > 0 || len(split.rep) > 0) {
			return nil, fmt.Errorf("read index: %w: a link extension without a shared index marks entries", index.ErrMalformedIndexFile)
		}
		f.idx = &index.Index{Version: split.version, Entries: split.entries}
		return f, nil
	}
	var shared *index.Index
	if cache != nil && cache.idx != nil && cache.hash == split.sharedHash {
		shared = cache.idx
	} else if shared, err = readSharedIndex(gitDir, split.sharedHash); err != nil {
		return nil, err
	}
	if cache != nil {
		cache.hash, cache.idx = split.sharedHash, shared
	}
	merged, err := mergeSplitIndex(shared.Entries, split)
	if err != nil {
		return nil, fmt.Errorf("read index: %w", err)
	}
	f.idx = &index.Index{Version: split.version, Entries: merged}
	f.shared, f.sharedHash = shared, split.sharedHash
	return f, nil
}

func sharedIndexPath(gitDir string, h plumbing.Hash) string {
	return filepath.Join(gitDir, "sharedindex."+h.String())
}

func readSharedIndex(gitDir string, h plumbing.Hash) (*index.Index, error) {
	p := sharedIndexPath(gitDir, h)
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("read the shared index the index links: %w", err)
	}
	if len(data) < 20 || !bytes.Equal(data[len(data)-20:], h[:]) {
		return nil, fmt.Errorf("read index: %w: %s does not end in its name's checksum", index.ErrMalformedIndexFile, p)
	}
	shared := &index.Index{}
	if err := index.NewDecoder(bytes.NewReader(data)).Decode(shared); err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	return shared, nil
}

// splitIndex is a split index file: its own entries (the replacements
// first, nameless, then the additions) and its link extension.
type splitIndex struct {
	version    uint32
	entries    []*index.Entry
	link       []byte
	sharedHash plumbing.Hash
	del, rep   []int // positions in the shared index, ascending
}

// decodeSplitIndex reads an index file (version 2 to 4) entry by entry,
// and its extensions, keeping "link" and skipping the optional ones.
func decodeSplitIndex(data []byte) (*splitIndex, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", index.ErrMalformedIndexFile, fmt.Sprintf(format, a...))
	}
	if len(data) < 12+20 || string(data[:4]) != "DIRC" {
		return nil, bad("no index header")
	}
	body, sum := data[:len(data)-20], data[len(data)-20:]
	if got := sha1.Sum(body); !bytes.Equal(got[:], sum) && !bytes.Equal(sum, make([]byte, 20)) {
		return nil, bad("checksum mismatch")
	}
	s := &splitIndex{version: binary.BigEndian.Uint32(body[4:8])}
	if s.version < 2 || s.version > 4 {
		return nil, bad("version %d", s.version)
	}
	count := binary.BigEndian.Uint32(body[8:12])
	off := 12
	prev := ""
	for range count {
		e, n, err := decodeIndexEntry(body[off:], s.version, prev)
		if err != nil {
			return nil, bad("entry at byte %d: %v", off, err)
		}
		off += n
		prev = e.Name
		s.entries = append(s.entries, e)
	}
	for off < len(body) {
		if len(body)-off < 8 {
			return nil, bad("truncated extension")
		}
		sig, size := string(body[off:off+4]), int(binary.BigEndian.Uint32(body[off+4:off+8]))
		off += 8
		if size > len(body)-off {
			return nil, bad("extension %q longer than the file", sig)
		}
		ext := body[off : off+size]
		off += size
		switch {
		case sig == "link":
			if err := s.readLink(ext); err != nil {
				return nil, bad("link extension: %v", err)
			}
		case sig[0] >= 'A' && sig[0] <= 'Z':
			// Optional (the cached tree, ...): git rebuilds them.
		default:
			return nil, fmt.Errorf("%w: %q", index.ErrUnknownExtension, sig)
		}
	}
	return s, nil
}

func (s *splitIndex) readLink(ext []byte) error {
	if len(ext) < 20 {
		return errors.New("shorter than a hash")
	}
	s.link = ext
	copy(s.sharedHash[:], ext[:20])
	rest := ext[20:]
	if len(rest) == 0 {
		return nil
	}
	del, n, err := decodeEWAH(rest)
	if err != nil {
		return fmt.Errorf("delete bitmap: %w", err)
	}
	rep, m, err := decodeEWAH(rest[n:])
	if err != nil {
		return fmt.Errorf("replace bitmap: %w", err)
	}
	if n+m != len(rest) {
		return errors.New("bytes after the bitmaps")
	}
	s.del, s.rep = del, rep
	return nil
}

// decodeIndexEntry reads one entry of an index of the given version; prev
// is the name before it (version 4 names are compressed against it).
func decodeIndexEntry(b []byte, version uint32, prev string) (*index.Entry, int, error) {
	const head = 62
	if len(b) < head {
		return nil, 0, errors.New("truncated")
	}
	u32 := func(i int) uint32 { return binary.BigEndian.Uint32(b[4*i:]) }
	e := &index.Entry{Dev: u32(4), Inode: u32(5), Mode: filemode.FileMode(u32(6)), UID: u32(7), GID: u32(8), Size: u32(9)}
	if sec, nsec := u32(0), u32(1); sec != 0 || nsec != 0 {
		e.CreatedAt = time.Unix(int64(sec), int64(nsec))
	}
	if sec, nsec := u32(2), u32(3); sec != 0 || nsec != 0 {
		e.ModifiedAt = time.Unix(int64(sec), int64(nsec))
	}
	copy(e.Hash[:], b[40:60])
	flags := binary.BigEndian.Uint16(b[60:62])
	e.Stage = index.Stage(flags>>12) & 0x3
	n := head
	if flags&0x4000 != 0 {
		if version < 3 || len(b) < n+2 {
			return nil, 0, errors.New("extended flags in a version 2 index")
		}
		ext := binary.BigEndian.Uint16(b[n:])
		e.SkipWorktree, e.IntentToAdd = ext&0x4000 != 0, ext&0x2000 != 0
		n += 2
	}
	if version == 4 {
		strip, k := decodeIndexVarint(b[n:])
		if k == 0 || strip > uint64(len(prev)) {
			return nil, 0, errors.New("bad name compression")
		}
		n += k
		end := bytes.IndexByte(b[n:], 0)
		if end < 0 {
			return nil, 0, errors.New("unterminated name")
		}
		e.Name = prev[:len(prev)-int(strip)] + string(b[n:n+end])
		return e, n + end + 1, nil
	}
	nameLen := int(flags & 0x0fff)
	if nameLen == 0x0fff {
		nameLen = bytes.IndexByte(b[n:], 0)
		if nameLen < 0 {
			return nil, 0, errors.New("unterminated name")
		}
	}
	size := (n + nameLen + 8) &^ 7
	if size > len(b) {
		return nil, 0, errors.New("truncated name")
	}
	e.Name = string(b[n : n+nameLen])
	return e, size, nil
}

// decodeIndexVarint is git's offset varint (varint.c); it answers the
// value and the bytes read, 0 when malformed.
func decodeIndexVarint(b []byte) (uint64, int) {
	var v uint64
	for i, c := range b {
		if i > 0 {
			v++
		}
		if v > math.MaxUint64>>7 {
			return 0, 0
		}
		v = v<<7 | uint64(c&127)
		if c&128 == 0 {
			return v, i + 1
		}
	}
	return 0, 0
}

// mergeSplitIndex is the index git reads from a shared index and a split
// one: shared entries replaced (in position order) and deleted as the
// bitmaps say, then the split's additions.
func mergeSplitIndex(shared []*index.Entry, s *splitIndex) ([]*index.Entry, error) {
	out := make([]*index.Entry, len(shared))
	for i, e := range shared {
		c := *e
		out[i] = &c
	}
	if len(s.rep) > len(s.entries) {
		return nil, fmt.Errorf("%d replacements, %d entries", len(s.rep), len(s.entries))
	}
	for k, pos := range s.rep {
		if pos >= len(out) {
			return nil, fmt.Errorf("replacement at %d of a shared index of %d", pos, len(out))
		}
		e := s.entries[k]
		if e.Name != "" {
			return nil, fmt.Errorf("replacement %d has a name", k)
		}
		e.Name = out[pos].Name
		out[pos] = e
	}
	gone := map[int]bool{}
	for _, pos := range s.del {
		if pos >= len(out) {
			return nil, fmt.Errorf("deletion at %d of a shared index of %d", pos, len(out))
		}
		gone[pos] = true
	}
	kept := out[:0]
	for i, e := range out {
		if !gone[i] {
			kept = append(kept, e)
		}
	}
	byName := map[string]int{}
	for i, e := range kept {
		if e.Stage == 0 {
			byName[e.Name] = i
		}
	}
	for _, e := range s.entries[len(s.rep):] {
		if e.Name == "" {
			return nil, errors.New("an added entry has no name")
		}
		if i, ok := byName[e.Name]; ok && e.Stage == 0 {
			kept[i] = e
			continue
		}
		kept = append(kept, e)
	}
	sort.SliceStable(kept, func(i, j int) bool {
		if kept[i].Name != kept[j].Name {
			return kept[i].Name < kept[j].Name
		}
		return kept[i].Stage < kept[j].Stage
	})
	return kept, nil
}

// decodeEWAH reads one of git's EWAH bitmaps (ewah/ewah_io.c) and answers
// its set bits and the bytes it took.
func decodeEWAH(b []byte) ([]int, int, error) {
	if len(b) < 8 {
		return nil, 0, errors.New("truncated")
	}
	bits := int(binary.BigEndian.Uint32(b))
	words := int(binary.BigEndian.Uint32(b[4:]))
	size := 8 + 8*words + 4
	if words > (len(b)-12)/8 || size > len(b) {
		return nil, 0, errors.New("truncated")
	}
	word := func(i int) uint64 { return binary.BigEndian.Uint64(b[8+8*i:]) }
	var set []int
	pos := 0 // in words of the bitmap
	for i := 0; i < words; {
		rlw := word(i)
		i++
		run, lit := int(rlw>>1&0xffffffff), int(rlw>>33)
		if rlw&1 != 0 {
			for k := pos * 64; k < (pos+run)*64 && k < bits; k++ {
				set = append(set, k)
			}
		}
		pos += run
		if lit > words-i {
			return nil, 0, errors.New("literal words past the end")
		}
		for l := range lit {
			w := word(i + l)
			for bit := 0; w != 0; bit++ {
				if w&1 != 0 && pos*64+bit < bits {
					set = append(set, pos*64+bit)
				}
				w >>= 1
			}
			pos++
		}
		i += lit
	}
	return set, size, nil
}

// encodeEWAH writes a bitmap of n bits with the given set ones (ascending)
// as git reads it: one marker word, all the bitmap's words literal.
func encodeEWAH(n int, set []int) []byte {
	words := make([]uint64, (n+63)/64)
	for _, k := range set {
		words[k/64] |= 1 << (k % 64)
	}
	b := binary.BigEndian.AppendUint32(nil, uint32(n))
	b = binary.BigEndian.AppendUint32(b, uint32(1+len(words)))
	b = binary.BigEndian.AppendUint64(b, uint64(len(words))<<33)
	for _, w := range words {
		b = binary.BigEndian.AppendUint64(b, w)
	}
	return binary.BigEndian.AppendUint32(b, 0) // the marker word's position
}

// encodeIndex is an index file of version 2 or 3 (3 when an entry has
// extended flags) holding entries as they are (in their order; a nameless
// one is a split index's replacement) and ending in the given extensions.
func encodeIndex(entries []*index.Entry, exts ...[]byte) ([]byte, error) {
	version := uint32(2)
	for _, e := range entries {
		if e.SkipWorktree || e.IntentToAdd {
			version = 3
		}
	}
	b := []byte("DIRC")
	b = binary.BigEndian.AppendUint32(b, version)
	b = binary.BigEndian.AppendUint32(b, uint32(len(entries)))
	stamp := func(t time.Time) (uint32, uint32, error) {
		if t.IsZero() {
			return 0, 0, nil
		}
		if t.Unix() < 0 || t.Unix() > math.MaxUint32 {
			return 0, 0, index.ErrInvalidTimestamp
		}
		return uint32(t.Unix()), uint32(t.Nanosecond()), nil
	}
	for _, e := range entries {
		start := len(b)
		cs, cn, err := stamp(e.CreatedAt)
		if err != nil {
			return nil, err
		}
		ms, mn, err := stamp(e.ModifiedAt)
		if err != nil {
			return nil, err
		}
		for _, v := range []uint32{cs, cn, ms, mn, e.Dev, e.Inode, uint32(e.Mode), e.UID, e.GID, e.Size} {
			b = binary.BigEndian.AppendUint32(b, v)
		}
		b = append(b, e.Hash[:]...)
		flags := uint16(e.Stage&0x3) << 12
		flags |= uint16(min(len(e.Name), 0x0fff))
		var ext uint16
		if e.SkipWorktree {
			ext |= 0x4000
		}
		if e.IntentToAdd {
			ext |= 0x2000
		}
		if ext != 0 {
			flags |= 0x4000
		}
		b = binary.BigEndian.AppendUint16(b, flags)
		if ext != 0 {
			b = binary.BigEndian.AppendUint16(b, ext)
		}
		b = append(b, e.Name...)
		pad := 8 - (len(b)-start)%8
		b = append(b, make([]byte, pad)...)
	}
	for _, x := range exts {
		b = append(b, x...)
	}
	sum := sha1.Sum(b)
	return append(b, sum[:]...), nil
}

// sameEntry: a and b say the same of the same path (git would not need
// the split index to replace a with b).
func sameEntry(a, b *index.Entry) bool {
	return a.Name == b.Name && a.Hash == b.Hash && a.Mode == b.Mode && a.Size == b.Size &&
		a.ModifiedAt.Equal(b.ModifiedAt) && a.CreatedAt.Equal(b.CreatedAt) &&
		a.Dev == b.Dev && a.Inode == b.Inode && a.UID == b.UID && a.GID == b.GID &&
		a.Stage == b.Stage && a.SkipWorktree == b.SkipWorktree && a.IntentToAdd == b.IntentToAdd
}

// reshareAt is how many entries the split file may hold before the shared
// index is written again. The split file costs every commit its entries
// (a round commits some 20 times a window and adds about 3 files), the
// shared one costs all of them once; their sum is least for a bound near
// the square root of half the index (8 for 128 entries, 36 for 2,700).
func reshareAt(shared int) int {
	return max(8, int(math.Sqrt(float64(shared)/2)))
}

// encode answers the bytes of .git/index for f.idx and, when a new shared
// index is due, that file's bytes and checksum. The index is split when it
// holds at least f.splitMin entries, none of them a conflict.
func (f *indexFile) encode() (main, shared []byte, sharedHash plumbing.Hash, err error) {
	// go-git's Index.Add appends: git wants them by name, then stage.
	sort.SliceStable(f.idx.Entries, func(i, j int) bool {
		a, b := f.idx.Entries[i], f.idx.Entries[j]
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return a.Stage < b.Stage
	})
	entries := f.idx.Entries
	split := f.splitMin > 0 && len(entries) >= f.splitMin
	for _, e := range entries {
		if e.Stage != 0 || e.Name == "" {
			split = false
		}
	}
	if !split {
		var buf bytes.Buffer
		f.idx.Cache = nil
		if f.idx.Version < 2 {
			f.idx.Version = 2
		}
		if err := index.NewEncoder(&buf).Encode(f.idx); err != nil {
			return nil, nil, plumbing.ZeroHash, err
		}
		return buf.Bytes(), nil, plumbing.ZeroHash, nil
	}
	base, baseHash := f.shared, f.sharedHash
	var rep, add []*index.Entry
	var repAt, delAt []int
	diff := func() {
		rep, add, repAt, delAt = nil, nil, nil, nil
		at := make(map[string]int, len(base.Entries))
		for i, e := range base.Entries {
			at[e.Name] = i
		}
		present := make([]bool, len(base.Entries))
		for _, e := range entries {
			i, ok := at[e.Name]
			if !ok || base.Entries[i].Stage != 0 {
				add = append(add, e)
				continue
			}
			present[i] = true
			if !sameEntry(base.Entries[i], e) {
				c := *e
				c.Name = ""
				rep, repAt = append(rep, &c), append(repAt, i)
			}
		}
		for i, ok := range present {
			if !ok {
				delAt = append(delAt, i)
			}
		}
		sort.Slice(rep, func(i, j int) bool { return repAt[i] < repAt[j] })
		sort.Ints(repAt)
	}
	if base != nil {
		diff()
	}
	if base == nil || len(rep)+len(add)+len(delAt) > reshareAt(len(base.Entries)) {
		sorted := make([]*index.Entry, len(entries))
		copy(sorted, entries)
		if shared, err = encodeIndex(sorted); err != nil {
			return nil, nil, plumbing.ZeroHash, err
		}
		copy(sharedHash[:], shared[len(shared)-20:])
		kept := make([]*index.Entry, len(sorted))
		for i, e := range sorted {
			c := *e
			kept[i] = &c
		}
		base, baseHash = &index.Index{Version: 2, Entries: kept}, sharedHash
		f.written = &sharedIndexCache{hash: sharedHash, idx: base}
		diff()
	}
	link := append([]byte("link"), 0, 0, 0, 0)
	link = append(link, baseHash[:]...)
	link = append(link, encodeEWAH(len(base.Entries), delAt)...)
	link = append(link, encodeEWAH(len(base.Entries), repAt)...)
	binary.BigEndian.PutUint32(link[4:8], uint32(len(link)-8))
	main, err = encodeIndex(append(rep, add...), link)
	return main, shared, sharedHash, err
}

// writeShared writes a shared index as git does (into a temporary file,
// synced, renamed to its checksum's name) and removes the shared indexes
// no longer linked that have expired.
func writeShared(gitDir string, data []byte, h plumbing.Hash) error {
	p := sharedIndexPath(gitDir, h)
	if _, err := os.Stat(p); err != nil {
		tmp := p + ".mcp-patch.tmp"
		if err := os.WriteFile(tmp, data, 0o644); err != nil {
			return err
		}
		f, err := os.Open(tmp)
		if err == nil {
			err = errors.Join(f.Sync(), f.Close())
		}
		if err == nil {
			err = os.Rename(tmp, p)
		}
		if err != nil {
			_ = os.Remove(tmp)
			return err
		}
	}
	old, _ := filepath.Glob(filepath.Join(gitDir, "sharedindex.*"))
	for _, o := range old {
		if o == p || strings.HasSuffix(o, ".tmp") {
			continue
		}
		if _, err := hex.DecodeString(strings.TrimPrefix(filepath.Base(o), "sharedindex.")); err != nil {
			continue
		}
		if fi, err := os.Stat(o); err == nil && time.Since(fi.ModTime()) > sharedIndexExpiry {
			_ = os.Remove(o)
		}
	}
	return nil
}

// gitStorage is a repository's storage whose index is read as git reads
// it, split or whole, so that go-git's worktree (status, checkout) works on
// a split index; an index it sets is written whole.
type gitStorage struct {
	*filesystem.Storage
}

func (s gitStorage) Index() (*index.Index, error) {
	f, err := readIndex(s.Filesystem().Root(), nil)
	if err != nil {
		return nil, err
	}
	return f.idx, nil
}
