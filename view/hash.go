package view

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// hashCache remembers content hashes by file identity and version, so
// that the SHA-256 in each read record costs one hash per file version,
// not one per open. A file whose size, mtime or ctime changed is hashed
// again; ctime moves on every write, even one that restores the mtime.
//
// Only the last version of each file is kept: a version whose file has
// changed since never comes back (ctime only moves forward), so a file
// rewritten 60,000 times costs one entry, not 60,000.
type hashCache struct {
	mu sync.Mutex
	m  map[fileID]versionHash
}

// fileID names a file (not one of its versions): device and inode.
type fileID struct{ dev, ino uint64 }

// versionHash is the hash of one version of a file.
type versionHash struct {
	v   fileVersion
	sha string
}

func (v fileVersion) id() fileID { return fileID{dev: v.dev, ino: v.ino} }

type fileVersion struct {
	dev, ino, size   uint64
	mtimeNs, ctimeNs int64
}

func versionOf(st *syscall.Stat_t) fileVersion {
	return fileVersion{
		dev: uint64(st.Dev), ino: st.Ino, size: uint64(st.Size),
		mtimeNs: st.Mtim.Nano(), ctimeNs: st.Ctim.Nano(),
	}
}

// unixVersion is versionOf for a golang.org/x/sys stat.
func unixVersion(st *unix.Stat_t) fileVersion {
	return fileVersion{
		dev: st.Dev, ino: st.Ino, size: uint64(st.Size),
		mtimeNs: st.Mtim.Nano(), ctimeNs: st.Ctim.Nano(),
	}
}

// maxCachedHashes bounds memory; the cache is simply reset when full,
// which only costs re-hashing.
const maxCachedHashes = 1 << 16

// get returns the cached hash of version v.
func (c *hashCache) get(v fileVersion) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[v.id()]
	if !ok || e.v != v {
		return "", false
	}
	return e.sha, true
}

// put caches the hash of version v.
func (c *hashCache) put(v fileVersion, s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[v.id()]; ok && e.v.ctimeNs > v.ctimeNs {
		return // a hash of an older version, finished late
	}
	if c.m == nil || len(c.m) >= maxCachedHashes {
		c.m = make(map[fileID]versionHash)
	}
	c.m[v.id()] = versionHash{v: v, sha: s}
}

// hashFile hashes the open file fd and returns the version it hashed: the
// same version before and after the whole content was read. A file that
// changes meanwhile is hashed again; after three tries it is errChanged.
func hashFile(fd int) (fileVersion, string, error) {
	for try := 0; try < 3; try++ {
		var st syscall.Stat_t
		if err := syscall.Fstat(fd, &st); err != nil {
			return fileVersion{}, "", fmt.Errorf("fstat: %w", err)
		}
		v := versionOf(&st)
		sha, err := hashVersion(fd, v)
		if err == nil {
			return v, sha, nil
		}
		if err != errChanged {
			return fileVersion{}, "", err
		}
	}
	return fileVersion{}, "", errChanged
}

// cacheable reports whether the hash of version v, taken at start, may be
// kept and given for v later. A change within the same tick of a coarse
// clock as the last one could leave size, mtime and ctime as they were:
// only a version whose last change is a second older than the hash is
// known to be one content.
func cacheable(v fileVersion, start time.Time) bool {
	return start.Sub(time.Unix(0, v.ctimeNs)) >= time.Second
}

// appendHasher keeps a running SHA-256 of events.jsonl. The file only
// grows, so hashing the new bytes since the last call gives the hash of
// the whole file at O(new bytes): an open at event 100,000 costs what an
// open at event 10 costs.
type appendHasher struct {
	mu       sync.Mutex
	h        hash.Hash
	dev, ino uint64
	off      int64
	// buf is the copy buffer, kept: every open of events.jsonl hashes
	// what was appended since, and a new 32 KiB buffer each time was
	// most of what a view allocated under load.
	buf []byte
}

// sum hashes the open events.jsonl fd.
func (a *appendHasher) sum(fd int) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return "", fmt.Errorf("fstat: %w", err)
	}
	if a.h == nil || st.Size < a.off || uint64(st.Dev) != a.dev || st.Ino != a.ino {
		// First use, or the file was replaced or shrank (only possible
		// by hand on the backing folder): start over.
		a.h, a.off, a.dev, a.ino = sha256.New(), 0, uint64(st.Dev), st.Ino
	}
	if st.Size > a.off {
		if a.buf == nil {
			a.buf = make([]byte, 32<<10)
		}
		n, err := io.CopyBuffer(a.h, io.NewSectionReader(fdReader(fd), a.off, st.Size-a.off), a.buf)
		a.off += n
		if err != nil {
			return "", err
		}
	}
	// Sum does not reset the running state.
	return hex.EncodeToString(a.h.Sum(nil)), nil
}

// fdReader reads at offsets without moving the descriptor's position,
// which belongs to the handle about to be returned to the kernel.
type fdReader int

func (r fdReader) ReadAt(p []byte, off int64) (int, error) {
	n, err := syscall.Pread(int(r), p, off)
	if n == 0 && err == nil && len(p) > 0 {
		return 0, io.EOF
	}
	return n, err
}
