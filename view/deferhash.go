package view

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/protocol"
)

// Content hashes of large files are computed after the open returns.
//
// The read record is written before the open returns, as always, with
// what is known at once: the file's size, times and inode (its version).
// When the file's hash is known already (the view or an earlier mount of
// the folder hashed that version: see hashStore) or the file is small,
// the record carries it. Otherwise a background job hashes the version
// through a descriptor of its own and writes a read_hash record naming
// the read's seq. A file that changes while it is hashed has no hash for
// the version that was opened: its read_hash says so, without one, and
// the audit reports that read as of unknown content. A view that stops
// waits for its jobs, so an unmount never leaves a read without its
// read_hash; only a killed daemon can.

// syncHashMax is the largest file hashed before its open returns: a few
// milliseconds of SHA-256, cheaper than a second record.
const syncHashMax = 4 << 20

// hashSlots bounds the background hashes of the process: each one takes
// a core while it runs.
var hashSlots = make(chan struct{}, 2)

// deferredHashes are the background hash jobs of one view, one per file
// version, each with the read records waiting for it.
type deferredHashes struct {
	mu   sync.Mutex
	jobs map[fileVersion]*hashJob
	wg   sync.WaitGroup
}

type hashJob struct {
	reads []pendingRead
}

// pendingRead is a read record whose hash is still to be written.
type pendingRead struct {
	seq          int64
	agent, grant string
	path         string
	pid          uint32
}

// knownHash returns the content hash of the open file fd (version v)
// when it can be had without delay: from the view's or the store's
// cache, by hashing a small file, or incrementally for events.jsonl.
// It returns the version the hash is of: a small file that changed since
// the open looked at it is hashed as it is now, which is what its reads
// will serve.
func (f *View) knownHash(rel string, fd int, v fileVersion) (string, fileVersion, bool, error) {
	if rel == protocol.EventsFile {
		// Append-only: the running hash costs the new bytes only.
		sha, err := f.evHash.sum(fd)
		return sha, v, err == nil, err
	}
	// A file someone holds open for writing (or mapped writable) can
	// change without its version changing (a dirty page written again):
	// a hash kept for its version may not be its content.
	// (Asked only on a cache hit: the lease costs two fcntl calls.)
	if sha, ok := f.hashes.get(v); ok && noWriters(fd) {
		return sha, v, true, nil
	}
	if sha, ok := f.store.get(v); ok && noWriters(fd) {
		f.hashes.put(v, sha)
		return sha, v, true, nil
	}
	if v.size > syncHashMax {
		return "", v, false, nil
	}
	start := time.Now()
	// The open's own stat names the version: hashed as it is, it costs
	// no stat more; one that changed since is hashed as it is now.
	hv, sha := v, ""
	var err error
	if sha, err = hashVersion(fd, v); err == errChanged {
		hv, sha, err = hashFile(fd)
	}
	if err != nil {
		return "", v, false, err
	}
	f.keepHash(hv, sha, start, noWriters(fd))
	return sha, hv, true, nil
}

// keepHash remembers the hash of v, in the store too, when it may be
// given for v later (cacheable).
//
// It is not kept when the file had writers while it was hashed (quiet
// false): their changes need not show in its version.
func (f *View) keepHash(v fileVersion, sha string, start time.Time, quiet bool) {
	if cacheable(v, start) && quiet {
		f.hashes.put(v, sha)
		f.store.put(v, sha)
	}
}

// recordReadOf records the read of the open file fd at rel before any of
// its bytes are served: with its hash when known at once (knownHash),
// else with its version, the hash following in a read_hash record.
// It returns the version recorded.
func (f *View) recordReadOf(ctx context.Context, rel string, fd int, v fileVersion, detail string) (fileVersion, syscall.Errno) {
	sha, v, ok, err := f.knownHash(rel, fd, v)
	if err != nil {
		return v, errnoOf(err)
	}
	if ok {
		return v, f.recordRead(ctx, rel, sha, detail)
	}
	k := repeatKey{kind: ledger.KindRead, op: ledger.OpOpen, path: rel, ver: v}
	err = f.recordOnce(ctx, k, func() error {
		rec, err := f.recordFull(ctx, ledger.KindRead, ledger.OpOpen, rel, "", joinDetail(detail, pendingDetail(v)))
		if err != nil {
			return err
		}
		f.deferHash(fd, v, pendingRead{seq: rec.Seq, agent: rec.Agent, grant: rec.Grant, path: rel, pid: rec.PID})
		return nil
	})
	if err != nil {
		f.ledgerDown(ledger.OpOpen, rel, err)
		return v, syscall.EIO
	}
	return v, 0
}

func joinDetail(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// pendingDetail names the version whose hash a read_hash will give.
func pendingDetail(v fileVersion) string {
	return fmt.Sprintf("sha256 follows in a read_hash record; size=%d mtime=%s ctime=%s inode=%d",
		v.size, ledger.Stamp(time.Unix(0, v.mtimeNs)), ledger.Stamp(time.Unix(0, v.ctimeNs)), v.ino)
}

// deferHash hashes version v of the open file fd in the background and
// then records read_hash for r (and for any read of v recorded meanwhile).
func (f *View) deferHash(fd int, v fileVersion, r pendingRead) {
	d := &f.deferred
	d.mu.Lock()
	if j := d.jobs[v]; j != nil {
		j.reads = append(j.reads, r)
		d.mu.Unlock()
		return
	}
	// A descriptor of its own: the handle may be closed before the job
	// is done.
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		d.mu.Unlock()
		f.finishHash(v, []pendingRead{r}, "", fmt.Errorf("dup: %w", err))
		return
	}
	if d.jobs == nil {
		d.jobs = map[fileVersion]*hashJob{}
	}
	j := &hashJob{reads: []pendingRead{r}}
	d.jobs[v] = j
	d.wg.Add(1)
	d.mu.Unlock()
	go func() {
		defer d.wg.Done()
		hashSlots <- struct{}{}
		start := time.Now()
		quiet := noWriters(dup)
		sha, err := hashVersion(dup, v)
		quiet = quiet && noWriters(dup)
		<-hashSlots
		unix.Close(dup)
		if err == nil {
			f.keepHash(v, sha, start, quiet)
		}
		d.mu.Lock()
		delete(d.jobs, v)
		reads := j.reads
		d.mu.Unlock()
		f.finishHash(v, reads, sha, err)
	}()
}

// errChanged is the failure of a hash whose file changed meanwhile.
var errChanged = fmt.Errorf("the file changed while it was hashed: the content read is unknown")

// hashBufs are the read buffers of hashVersion: a hash per new file
// version must not cost an allocation of its own.
var hashBufs = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// hashVersion hashes fd, which must still be version v when it is done.
func hashVersion(fd int, v fileVersion) (string, error) {
	h := sha256.New()
	bp := hashBufs.Get().(*[]byte)
	_, err := io.CopyBuffer(h, io.NewSectionReader(fdReader(fd), 0, int64(v.size)), *bp)
	hashBufs.Put(bp)
	if err != nil {
		return "", fmt.Errorf("hash: %w", err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return "", fmt.Errorf("fstat: %w", err)
	}
	if versionOf(&st) != v {
		return "", errChanged
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// finishHash writes the read_hash records of reads.
func (f *View) finishHash(v fileVersion, reads []pendingRead, sha string, err error) {
	for _, r := range reads {
		rec := ledger.Record{Kind: ledger.KindReadHash, Agent: r.agent, Grant: r.grant, Path: r.path, Op: ledger.OpOpen, PID: r.pid,
			SHA256: sha, Detail: fmt.Sprintf("read seq %d", r.seq)}
		if err != nil {
			rec.Detail = fmt.Sprintf("read seq %d: %v", r.seq, err)
		}
		if _, aerr := f.ledger.Append(rec); aerr != nil {
			slog.Error("ledger: cannot record a content hash", "path", r.path, "read_seq", r.seq, "err", aerr)
			continue
		}
		if err == nil {
			// The read and its hash are the full record of this content:
			// later opens of it are repeats.
			f.repeats.recorded(repeatKey{kind: ledger.KindRead, op: ledger.OpOpen, path: r.path, sha: sha})
		}
	}
}

// waitHashes waits for the background hashes (and their records).
func (f *View) waitHashes() { f.deferred.wg.Wait() }

// recordFull writes one record for this view's agent and returns it.
func (f *View) recordFull(ctx context.Context, kind ledger.Kind, op ledger.Op, rel, sha, detail string) (ledger.Record, error) {
	g := f.gv.Load().grant
	r := ledger.Record{Kind: kind, Agent: g.AgentID, Grant: g.GrantID, Path: rel, Op: op, SHA256: sha, Detail: detail}
	if c, ok := f.caller(ctx); ok {
		r.PID = c.PID
	}
	rec, err := f.ledger.Append(r)
	if err != nil {
		slog.Error("ledger append failed", "kind", kind, "path", rel, "err", err)
	}
	return rec, err
}

// noWriters reports whether nobody holds the file open for writing or
// mapped writable: a read lease is granted only then. The lease is given
// back at once; only the answer matters.
func noWriters(fd int) bool {
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETLEASE, unix.F_RDLCK); err != nil {
		return false
	}
	_, _ = unix.FcntlInt(uintptr(fd), unix.F_SETLEASE, unix.F_UNLCK)
	return true
}
