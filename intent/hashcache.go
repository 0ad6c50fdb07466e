package intent

import (
	"io/fs"
	"sync"
	"syscall"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
)

// HashCache remembers the blob hash of working-copy files by what stat
// says of them (inode, size, modification and change times), as Git's
// index does, so that a commit does not read and hash again a file that
// has not changed since (a round's node plans, a thousand small files, of
// which a window changes one). A file changed within racyWindow of being
// hashed is not remembered: a write in the same clock tick could leave
// every stat field as it was. Change times cannot be set from user space,
// so an edit behind the server's back always misses. Safe for concurrent
// use; one cache may serve several repositories (keys carry the root).
type HashCache struct {
	mu   sync.Mutex
	m    map[string]cachedHash
	hits uint64
	// now is the clock the racy rule reads (tests); nil: time.Now.
	now func() time.Time
}

// Hits is how many files a commit did not read because their hash was
// remembered.
func (c *HashCache) Hits() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hits
}

// racyWindow is how recent a change may be for its hash to be kept.
const racyWindow = 2 * time.Second

type statKey struct {
	ino, size    uint64
	mtime, ctime int64
}

type cachedHash struct {
	key  statKey
	hash plumbing.Hash
}

// statKeyOf is fi's key; false when the platform gives no inode or times.
func statKeyOf(fi fs.FileInfo) (statKey, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return statKey{}, false
	}
	return statKey{ino: st.Ino, size: uint64(st.Size),
		mtime: st.Mtim.Sec*1e9 + st.Mtim.Nsec, ctime: st.Ctim.Sec*1e9 + st.Ctim.Nsec}, true
}

// lookup answers the hash remembered for root/p when its stat key is k.
func (c *HashCache) lookup(root, p string, k statKey) (plumbing.Hash, bool) {
	if c == nil {
		return plumbing.ZeroHash, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[root+"\x00"+p]
	if !ok || e.key != k {
		return plumbing.ZeroHash, false
	}
	c.hits++
	return e.hash, true
}

// store remembers h for root/p at key k, unless the file changed within
// racyWindow of now (then any entry for it is dropped).
func (c *HashCache) store(root, p string, k statKey, h plumbing.Hash) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if c.now != nil {
		now = c.now()
	}
	if c.m == nil {
		c.m = map[string]cachedHash{}
	}
	name := root + "\x00" + p
	limit := now.Add(-racyWindow).UnixNano()
	if k.mtime > limit || k.ctime > limit {
		delete(c.m, name)
		return
	}
	c.m[name] = cachedHash{key: k, hash: h}
}
