package view

import (
	"bufio"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/internal/atomicfile"
)

// HashStoreName is the file, beside the ledger, that keeps content hashes
// across mounts. It is never in a view: the ledger's directory is hidden
// from every view and masked in `acpfs run`.
const HashStoreName = "content-hashes.cache"

// maxStoredHashes bounds the store; past it the oldest half is dropped at
// the next compaction.
const maxStoredHashes = 1 << 16

// hashStore keeps content hashes by file version (device, inode, size,
// modification and change times) in a file, so that a remounted view does
// not hash again what it hashed before. A file's ctime moves on every
// change and cannot be set back by its writers, so a version whose hash
// is known is that content. The file is trusted only when it belongs to
// the daemon's user and nobody else may write it: whoever could write it
// could make the ledger record a false hash.
type hashStore struct {
	mu    sync.Mutex
	path  string
	m     map[fileID]versionHash // the last version of each file (see hashCache)
	order []fileID               // insertion order, for compaction
	f     *os.File               // nil when the store is memory-only
	lines int                    // lines in the file
	refs  int                    // views using it (under storesMu)
}

var (
	storesMu sync.Mutex
	stores   = map[string]*hashStore{}
)

// openHashStore returns the store at path, shared by every view of this
// process that uses it. A store that cannot be opened, or is not the
// daemon's own, works in memory only.
func openHashStore(path string) *hashStore {
	storesMu.Lock()
	defer storesMu.Unlock()
	if s := stores[path]; s != nil {
		s.refs++
		return s
	}
	s := &hashStore{path: path, m: map[fileID]versionHash{}, refs: 1}
	if err := s.load(); err != nil {
		slog.Warn("content hash store not used; hashes are kept in memory only", "path", path, "err", err)
		if s.f != nil {
			s.f.Close()
			s.f = nil
		}
	}
	stores[path] = s
	return s
}

// release ends one view's use of the store; the last one closes it.
func (s *hashStore) release() {
	if s == nil {
		return
	}
	storesMu.Lock()
	defer storesMu.Unlock()
	if s.refs--; s.refs > 0 {
		return
	}
	delete(stores, s.path)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f != nil {
		s.f.Close()
		s.f = nil
	}
}

func (s *hashStore) load() error {
	f, err := os.OpenFile(s.path, os.O_RDWR|os.O_APPEND|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	s.f = f
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0 {
		return fmt.Errorf("%s is not a regular file of uid %d that only it may write", s.path, os.Geteuid())
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		s.lines++
		if v, sha, ok := parseStoreLine(sc.Text()); ok {
			s.setLocked(v, sha)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if s.lines > 2*len(s.m)+1024 {
		s.compactLocked()
	}
	return nil
}

func storeLine(v fileVersion, sha string) string {
	return fmt.Sprintf("%d %d %d %d %d %s\n", v.dev, v.ino, v.size, v.mtimeNs, v.ctimeNs, sha)
}

func parseStoreLine(line string) (fileVersion, string, bool) {
	f := strings.Fields(line)
	if len(f) != 6 || len(f[5]) != 64 {
		return fileVersion{}, "", false
	}
	var n [5]int64
	for i := range n {
		x, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return fileVersion{}, "", false
		}
		n[i] = x
	}
	return fileVersion{dev: uint64(n[0]), ino: uint64(n[1]), size: uint64(n[2]), mtimeNs: n[3], ctimeNs: n[4]}, f[5], true
}

// setLocked keeps sha as the hash of v, unless a later version of its
// file is known: only the last one can still be read.
func (s *hashStore) setLocked(v fileVersion, sha string) {
	id := v.id()
	old, ok := s.m[id]
	if ok && old.v.ctimeNs > v.ctimeNs {
		return
	}
	if !ok {
		s.order = append(s.order, id)
	}
	s.m[id] = versionHash{v: v, sha: sha}
	if len(s.m) > maxStoredHashes {
		for _, old := range s.order[:len(s.order)/2] {
			delete(s.m, old)
		}
		s.order = append([]fileID(nil), s.order[len(s.order)/2:]...)
	}
}

// get returns the stored hash of v.
func (s *hashStore) get(v fileVersion) (string, bool) {
	if s == nil {
		return "", false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[v.id()]
	if !ok || e.v != v {
		return "", false
	}
	return e.sha, true
}

// put stores the hash of v, in the file too.
func (s *hashStore) put(v fileVersion, sha string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.m[v.id()]; ok && (old.v == v && old.sha == sha || old.v.ctimeNs > v.ctimeNs) {
		return
	}
	s.setLocked(v, sha)
	if s.f == nil {
		return
	}
	// One write(2) of one line with O_APPEND: other processes sharing
	// the store append whole lines too.
	if _, err := s.f.WriteString(storeLine(v, sha)); err != nil {
		slog.Warn("content hash store: write failed; keeping hashes in memory", "path", s.path, "err", err)
		s.f.Close()
		s.f = nil
		return
	}
	s.lines++
	// Lines of versions since superseded are dropped too: a file
	// rewritten 60,000 times must not leave 60,000 lines.
	if s.lines > 2*maxStoredHashes || s.lines > 2*len(s.m)+1024 {
		s.compactLocked()
	}
}

// compactLocked rewrites the file with the hashes in memory.
func (s *hashStore) compactLocked() {
	var b strings.Builder
	for _, id := range s.order {
		if e, ok := s.m[id]; ok {
			b.WriteString(storeLine(e.v, e.sha))
		}
	}
	// A cache: losing it costs hashing again, but a torn one must not be
	// read, hence the one rule of internal/atomicfile.
	if err := atomicfile.WriteFile(s.path, []byte(b.String()), 0o600); err != nil {
		return
	}
	s.f.Close()
	s.f = nil
	// Appended to like the original, with O_APPEND: other processes
	// append whole lines to the same file.
	if f, err := os.OpenFile(s.path, os.O_WRONLY|os.O_APPEND|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err == nil {
		s.f = f
	}
	s.lines = len(s.m)
}
