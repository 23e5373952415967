package protocol

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/internal/atomicfile"
	"github.com/acpfs/acpfs/internal/digest"
)

// A state cache lets a short-lived process (`acpfs append`, one process
// per event) skip the replay of the whole history: it stores the state
// (core) the replay of events.jsonl up to some offset gave, and is used
// only while events.jsonl is still the file it describes:
//
//   - the same file (device and inode),
//   - at least as long, and ending at the cache's offset with the very
//     line the cached state last applied (compared byte for byte),
//   - under a protocol.json whose static declaration (everything the
//     appends do not rewrite) has the same hash.
//
// A file rewritten in place with the same length and the same last line
// would pass; a long-lived Log trusts its consumed prefix the same way
// (it checks one byte). The lines after the offset are applied as usual,
// so a state cache written by one process serves after appends of any
// other. Only clean histories are cached: a broken one is replayed,
// which finds its first problem again.
//
// The cache is written where only its writer's user may write (the
// user's cache directory, see DefaultStateCachePath): whoever could forge
// one could make the log accept an event the history forbids.

// stateCacheVersion changes whenever the cached state changes shape in a
// way an older reader would misread.
const stateCacheVersion = 1

type stateCacheFile struct {
	Version    int    `json:"version"`
	Folder     string `json:"folder"`
	Static     string `json:"static"` // SHA-256 of protocol.json's static declaration
	Dev        uint64 `json:"dev"`
	Ino        uint64 `json:"ino"`
	Offset     int64  `json:"offset"`
	Lines      int    `json:"lines"`
	LastLine   []byte `json:"last_line"` // with its newline
	State      core   `json:"state"`
	Contiguous int    `json:"contiguous"`
	Extra      []int  `json:"extra,omitempty"`
}

// staticHash is the SHA-256 of protocol.json's static declaration: the
// fields appends do not rewrite, encoded with sorted keys.
func staticHash(raw map[string]any) (string, error) {
	m := make(map[string]any, len(raw))
	for k, v := range raw {
		if !dynamicFields[k] {
			m[k] = v
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	return digest.Bytes(b), nil
}

// StateCacheDirEnv names the directory of the state caches, overriding
// the default.
const StateCacheDirEnv = "ACPFS_STATE_CACHE_DIR"

// stateCacheDirEnvOld is StateCacheDirEnv's earlier, deprecated name,
// still honoured when the new one is not set.
const stateCacheDirEnvOld = "ACPFS_CHECKPOINT_DIR"

// DefaultStateCachePath is where the CLI keeps the state cache of folder:
// $ACPFS_STATE_CACHE_DIR (or the deprecated $ACPFS_CHECKPOINT_DIR), else
// acpfs/state-cache in the user's cache directory, under a name derived
// from the folder's absolute path. It is "" when no such directory can be
// found (no state cache is used).
func DefaultStateCachePath(folder string) string {
	dir := cmp.Or(os.Getenv(StateCacheDirEnv), os.Getenv(stateCacheDirEnvOld))
	if dir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			return ""
		}
		dir = filepath.Join(cache, "acpfs", "state-cache")
	}
	abs, err := filepath.Abs(folder)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256([]byte(abs))
	return filepath.Join(dir, hex.EncodeToString(sum[:16])+".json")
}

// OpenLogCached is OpenLog starting from the state cache at path when it
// still describes the folder (see above), replaying only what was
// appended since; otherwise it replays the whole history. path "" means
// no state cache.
func OpenLogCached(folder, path string) (*Log, error) {
	abs, err := filepath.Abs(folder)
	if err != nil {
		return nil, unavailable("folder", "resolve folder %s: %v", folder, err)
	}
	l := &Log{folder: abs, now: time.Now}
	l.mu.Lock()
	defer l.mu.Unlock()
	if path != "" {
		if err := l.loadProtocolLocked(); err != nil {
			return nil, err
		}
		l.restoreStateCacheLocked(path) // a state cache that does not fit is ignored
	}
	if err := l.refreshLocked(); err != nil {
		return nil, err
	}
	return l, nil
}

// restoreStateCacheLocked adopts the state cache at path if it fits the
// folder.
func (l *Log) restoreStateCacheLocked(path string) bool {
	b, err := readPrivate(path)
	if err != nil {
		return false
	}
	var cp stateCacheFile
	if json.Unmarshal(b, &cp) != nil || cp.Version != stateCacheVersion || cp.Folder != l.folder || cp.Offset <= 0 {
		return false
	}
	if h, err := staticHash(l.proto.Raw); err != nil || h != cp.Static {
		return false
	}
	f, id, err := openEvents(l.folder)
	if err != nil {
		return false
	}
	defer f.Close()
	n := int64(len(cp.LastLine))
	if id.dev != cp.Dev || id.ino != cp.Ino || id.size < cp.Offset || n == 0 || n > cp.Offset || cp.LastLine[n-1] != '\n' {
		return false
	}
	got := make([]byte, n)
	if _, err := f.ReadAt(got, cp.Offset-n); err != nil || !bytes.Equal(got, cp.LastLine) {
		return false
	}
	if cp.Offset > n {
		// The last line starts a line: the byte before it ends one.
		var prev [1]byte
		if _, err := f.ReadAt(prev[:], cp.Offset-n-1); err != nil || prev[0] != '\n' {
			return false
		}
	}
	l.resetLocked()
	l.state = cp.State
	l.seen = seqSet{contiguous: cp.Contiguous}
	for _, s := range cp.Extra {
		if l.seen.extra == nil {
			l.seen.extra = map[int]struct{}{}
		}
		l.seen.extra[s] = struct{}{}
	}
	l.offset, l.lines = cp.Offset, cp.Lines
	l.evID = fileID{dev: cp.Dev, ino: cp.Ino, size: cp.Offset}
	l.needReplay = false
	return true
}

// SaveStateCache writes the state derived so far to path (see
// OpenLogCached). It writes nothing while the history has a problem or is
// empty.
func (l *Log) SaveStateCache(path string) error {
	b, err := l.stateCacheData(path)
	if b == nil || err != nil {
		return err
	}
	return writePrivate(path, b)
}

// StartStateCache is SaveStateCache of the state as it is now, written
// while the caller goes on (an append, whose protocol.json write then
// syncs to disk at the same time as the cache); wait returns the error
// of the write once it is done. A cache of the state before an append
// still fits the folder after it: the next process applies that
// append's line on top of it.
func (l *Log) StartStateCache(path string) (wait func() error) {
	b, err := l.stateCacheData(path)
	if b == nil || err != nil {
		return func() error { return err }
	}
	done := make(chan error, 1)
	go func() { done <- writePrivate(path, b) }()
	return func() error { return <-done }
}

// stateCacheData renders the state cache of the state derived so far,
// or nil when none is to be written.
func (l *Log) stateCacheData(path string) ([]byte, error) {
	if path == "" {
		return nil, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.historyBad != nil || l.offset == 0 || l.proto == nil {
		return nil, nil
	}
	static, err := staticHash(l.proto.Raw)
	if err != nil {
		return nil, err
	}
	f, id, err := openEvents(l.folder)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if id.dev != l.evID.dev || id.ino != l.evID.ino || id.size < l.offset {
		return nil, nil // replaced since: the next process replays
	}
	last, err := lastLine(f, l.offset)
	if err != nil {
		return nil, err
	}
	cp := stateCacheFile{
		Version: stateCacheVersion, Folder: l.folder, Static: static,
		Dev: l.evID.dev, Ino: l.evID.ino, Offset: l.offset, Lines: l.lines, LastLine: last,
		State: l.state, Contiguous: l.seen.contiguous,
	}
	for s := range l.seen.extra {
		cp.Extra = append(cp.Extra, s)
	}
	return json.Marshal(&cp)
}

// openEvents opens folder's events.jsonl for reading, without following
// a symlink in its place, and identifies the file it opened.
func openEvents(folder string) (*os.File, fileID, error) {
	f, err := atomicfile.OpenFile(filepath.Join(folder, EventsFile), unix.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fileID{}, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fileID{}, err
	}
	return f, idOf(fi), nil
}

// lastLine returns the line of f that ends at off (with its newline).
func lastLine(f *os.File, off int64) ([]byte, error) {
	for chunk := int64(4096); ; chunk *= 4 {
		start := max(off-chunk, 0)
		buf := make([]byte, off-start)
		if _, err := f.ReadAt(buf, start); err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		if len(buf) == 0 || buf[len(buf)-1] != '\n' {
			return nil, fmt.Errorf("%s does not end a line at byte %d", EventsFile, off)
		}
		if i := bytes.LastIndexByte(buf[:len(buf)-1], '\n'); i >= 0 {
			return buf[i+1:], nil
		}
		if start == 0 {
			return buf, nil
		}
	}
}

// readPrivate reads path if it is a regular file of this user that
// nobody else may write, in a directory nobody else may write.
func readPrivate(path string) ([]byte, error) {
	for _, p := range []string{filepath.Dir(path), path} {
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return nil, err
		}
		if int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0 {
			return nil, fmt.Errorf("%s is not private to uid %d", p, os.Geteuid())
		}
	}
	f, err := atomicfile.OpenFile(path, unix.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, 16<<20))
}

// writePrivate replaces path with data, readable and writable by this
// user only, by the one rule of internal/atomicfile.
func writePrivate(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return atomicfile.WriteFile(path, data, 0o600)
}
