package ledger

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/acpfs/acpfs/internal/atomicfile"
	"github.com/acpfs/acpfs/internal/digest"
)

// defaultSignAfter is Options.SignAfter's default. A variable so that
// tests which count records can keep the timer out of their way.
var defaultSignAfter = time.Second

// ErrClosed is returned by Append after Close.
var ErrClosed = errors.New("ledger writer is closed")

const (
	defaultBatchInterval = 5 * time.Millisecond
	defaultBatchRecords  = 256
	defaultSignEvery     = 1024
)

// writerState is the body of Writer (declared in ledger.go).
type writerState struct {
	path  string
	opts  Options
	clock func() time.Time
	f     *os.File
	fd    int
	pid   uint32

	mu      sync.Mutex
	cond    sync.Cond // signalled when a batch is done or the writing role is free
	queue   []*request
	spare   []*request
	writing bool // a goroutine owns the batch state below and is writing
	closed  bool

	// Owned by the goroutine that set writing (or by open and close).
	enc         *encoder
	buf         []byte
	seq         int64   // last seq in the file
	hash        string  // last hash in the file
	ctx         lineCtx // version 3: the last record's context
	version     int64   // the format of the file
	size        int64   // file size right after our last write or check; -1 unknown
	lastRepair  *RepairInfo
	lastLine    []byte // the last line (newline included) this writer wrote or checked
	signedSeq   int64  // seq of the last signed record this writer knows of
	resumed     *Broken
	lastKind    Kind  // kind of the last record in the file
	signRepairs bool  // sign the repair record (Repair, not a writer)
	rotErr      error // the failure of a rotation step, for its error
	// formatErr stops the writer for good when another writer's file
	// is in a format version this package does not know.
	formatErr error

	key    *Key
	dir    ledgerDir
	broken atomic.Pointer[Broken]
	// failing is set when a write failed (no space, an immutable file)
	// and cleared by the next write that succeeds.
	failing atomic.Bool
	// signTimer signs a checkpoint SignAfter after the first record
	// that no signature covers yet. Guarded by mu.
	signTimer *time.Timer

	// Batched fsync (SyncBatch). unsynced and syncErr are guarded by mu.
	unsynced    int
	syncErr     error
	syncMu      sync.Mutex // one fsync at a time
	kick        chan struct{}
	full        chan struct{}
	stop        chan struct{}
	flusherDone chan struct{}
}

// request is one Append waiting in the queue.
type request struct {
	rec     Record
	err     error
	written bool
	done    bool
}

// RepairInfo describes a torn tail that was cut off.
type RepairInfo struct {
	Action string // one of the Repair* constants
	Detail string // what was done, for people
	Offset int64  // where the torn bytes started (the new file size before the repair record)
	Bytes  int64  // how many bytes were cut
	SHA256 string // hex SHA-256 of the cut bytes
	Record Record // the repair record that was appended
}

func open(path string, opts Options) (*Writer, error) {
	if opts.Sync < SyncBatch || opts.Sync > SyncOff {
		return nil, fmt.Errorf("open ledger %s: invalid sync mode %d", path, int(opts.Sync))
	}
	opts.setDefaults()
	clock := opts.Clock
	if clock == nil {
		clock = time.Now
	}
	key := opts.Key
	if key == nil {
		var err error
		if key, err = LoadOrCreateKey(filepath.Dir(path)); err != nil {
			return nil, fmt.Errorf("open ledger %s: %w", path, err)
		}
	}
	dir, err := openLedgerDir(filepath.Dir(path), filepath.Base(path))
	if err != nil {
		return nil, err
	}
	// The ledger's directory belongs to the daemon; O_NOFOLLOW still
	// refuses a symlink planted at its name.
	f, err := dir.open(dir.base, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		dir.close()
		return nil, fmt.Errorf("open ledger: %w", err)
	}
	if err := keepPrivate(f); err != nil {
		f.Close()
		dir.close()
		return nil, fmt.Errorf("open ledger %s: %w", path, err)
	}
	w := &Writer{writerState{
		path:  path,
		opts:  opts,
		clock: clock,
		f:     f,
		fd:    int(f.Fd()),
		pid:   uint32(os.Getpid()),
		enc:   newEncoder(),
		size:  -1,
		key:   key,
		dir:   dir,
	}}
	w.cond.L = &w.mu
	if err := w.checkTail(); err != nil {
		_ = w.f.Close()
		dir.close()
		return nil, err
	}
	if w.size == 0 && opts.Sync != SyncOff {
		// A new ledger: make its directory entry durable too.
		if err := atomicfile.At(dir.fd).Sync(); err != nil {
			slog.Debug("ledger: fsync directory", "path", path, "err", err)
		}
	}
	if opts.Sync == SyncBatch {
		w.kick = make(chan struct{}, 1)
		w.full = make(chan struct{}, 1)
		w.stop = make(chan struct{})
		w.flusherDone = make(chan struct{})
		go w.flusher()
	}
	return w, nil
}

// setDefaults fills in the options left unset.
func (opts *Options) setDefaults() {
	if opts.BatchInterval <= 0 {
		opts.BatchInterval = defaultBatchInterval
	}
	if opts.BatchRecords <= 0 {
		opts.BatchRecords = defaultBatchRecords
	}
	if opts.SignEvery <= 0 {
		opts.SignEvery = defaultSignEvery
	}
	if opts.SegmentBytes <= 0 {
		opts.SegmentBytes = defaultSegmentBytes
	}
	if opts.SignAfter <= 0 {
		opts.SignAfter = defaultSignAfter
	}
	if opts.version == 0 {
		opts.version = CurrentVersion
	}
}

// checkTail loads the tail under the lock (repairing a torn line).
func (w *Writer) checkTail() error {
	if err := lockFile(w.fd); err != nil {
		return fmt.Errorf("lock ledger %s: %w", w.path, err)
	}
	// The format first: a newer acpfs's records are not judged by
	// this version's rules (its key, its chain) at all.
	err := w.checkFormat()
	if err == nil {
		err = w.syncTail()
	}
	if uerr := unlockFile(w.fd); err == nil && uerr != nil {
		err = fmt.Errorf("unlock ledger %s: %w", w.path, uerr)
	}
	return err
}

// checkFormat refuses to append to a file whose first record states a
// format version this package does not know (a newer acpfs started it):
// records of this version after it would make a file no reader reads
// right. The version is read as verify reads it (checkVersion). A file
// it knows is continued in its own format; an empty one is started in
// the writer's.
func (w *Writer) checkFormat() error {
	size, err := fstatSize(w.fd)
	if err != nil {
		return fmt.Errorf("stat ledger %s: %w", w.path, err)
	}
	line, err := readLineAt(w.f, 0, size)
	if err != nil {
		return fmt.Errorf("ledger %s: read the first record: %w", w.path, err)
	}
	w.version = w.opts.version
	if line == nil {
		return nil // no complete record yet: this writer's is the first
	}
	if err := checkVersion(w.path, line, &fastLine{}, false); err != nil {
		return fmt.Errorf("append to ledger: %w", err)
	}
	w.version = fileVersion(line, &fastLine{}, false)
	return nil
}

// pos is where the file's chain stands after the last record the writer
// knows of.
func (w *Writer) pos() chainPos {
	return chainPos{seq: w.seq, hash: w.hash, ctx: w.ctx, start: w.size == 0}
}

func (w *Writer) append(r Record) (Record, error) {
	req := &request{rec: r}
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return Record{}, ErrClosed
	}
	w.queue = append(w.queue, req)
	for !req.done && w.writing {
		w.cond.Wait()
	}
	if !req.done {
		w.lead()
	}
	w.mu.Unlock()
	return req.rec, req.err
}

// lead writes everything queued as one batch. Called and returns with mu
// held; the queue holds at least the caller's request.
func (w *Writer) lead() {
	w.writing = true
	batch := w.queue
	w.queue = w.spare[:0]
	w.mu.Unlock()

	n := w.writeBatch(batch)
	if n > 0 && w.opts.Sync == SyncAlways {
		if err := w.fsync(); err != nil {
			for _, q := range batch {
				if q.written {
					q.err = fmt.Errorf("fsync ledger after seq %d: %w", q.rec.Seq, err)
				}
			}
		}
	}

	w.mu.Lock()
	for i, q := range batch {
		q.done = true
		batch[i] = nil
	}
	w.spare = batch[:0]
	if n > 0 && w.opts.Sync == SyncBatch {
		if w.unsynced == 0 {
			nudge(w.kick)
		}
		w.unsynced += n
		if w.unsynced >= w.opts.BatchRecords {
			nudge(w.full)
		}
	}
	w.writing = false
	// Wakes the finished callers and lets one waiting caller lead the
	// next batch (everything queued meanwhile).
	w.cond.Broadcast()
}

func nudge(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// writeBatch seals and writes the batch under the file lock, with one
// write(2). It returns how many records were written.
func (w *Writer) writeBatch(batch []*request) int {
	fail := func(err error) int {
		for _, q := range batch {
			if q.err == nil {
				q.err = err
			}
			q.written = false
		}
		return 0
	}
	if err := lockFile(w.fd); err != nil {
		return fail(fmt.Errorf("lock ledger %s: %w", w.path, err))
	}
	defer func() {
		if err := unlockFile(w.fd); err != nil {
			slog.Error("unlock ledger", "path", w.path, "err", err)
		}
	}()
	if b := w.broken.Load(); b != nil && !w.resume(b) {
		return fail(b)
	} else if b != nil {
		w.resumed = b
	}
	if err := w.syncTail(); err != nil {
		return fail(err)
	}
	if w.lastKind == KindSegmentEnd {
		// A rotation that stopped after sealing the file.
		if err := w.finishInterrupted(); err != nil {
			return fail(err)
		}
	} else if w.size >= w.opts.SegmentBytes {
		if err := w.rotate(); err != nil {
			// Keep writing into the current file: a big file loses
			// nothing, a lost record would.
			slog.Error("ledger: cannot start a new segment", "path", w.path, "err", err)
		}
	}
	return w.sealAndWrite(batch, fail)
}

// rollback cuts a failed (possibly partial) write back to size. If that
// fails too, the next append re-reads the tail and repairs the torn line.
func (w *Writer) rollback(size int64) {
	if err := w.f.Truncate(size); err != nil {
		slog.Error("ledger: cannot cut a failed write", "path", w.path, "err", err)
		w.size = -1
		return
	}
	w.size = size
}

// repairTail cuts the torn bytes after t.end and appends a repair record
// saying what was cut. History before t.end is never touched.
func (w *Writer) repairTail(t tailInfo) error {
	if rec, keep, ok := w.sealedTorn(t); ok {
		return w.restoreLineEnd(t, rec, keep)
	}
	info := &RepairInfo{Offset: t.end, Bytes: int64(len(t.cut)), SHA256: digest.Bytes(t.cut)}
	if err := w.f.Truncate(t.end); err != nil {
		w.size = -1
		return fmt.Errorf("repair ledger %s: cut torn line at offset %d: %w", w.path, t.end, err)
	}
	w.size = t.end
	r := Record{
		Kind:   KindRepair,
		Op:     OpTruncate,
		PID:    w.pid,
		SHA256: info.SHA256,
		Detail: fmt.Sprintf("cut a torn last line (no trailing newline): %d bytes at offset %d, starting %s",
			info.Bytes, info.Offset, quotePrefix(t.cut, 120)),
	}
	pos := t.pos()
	if pos.start {
		// The torn line was the file's only one: the repair starts it.
		r.Version = w.version
	}
	// An operator's repair (no writer running) is signed, so that the
	// ledger it leaves has no unsigned tail; a writer's is sealed and
	// signed with its next checkpoint.
	line, err := w.sealRepair(&r, &pos)
	if err != nil {
		return fmt.Errorf("repair ledger %s: %w", w.path, err)
	}
	if err := w.appendRepair(&r, line); err != nil {
		return err
	}
	info.Record = r
	w.lastRepair = info
	slog.Warn("ledger: cut a torn last line and recorded the repair",
		"path", w.path, "seq", r.Seq, "bytes", info.Bytes, "offset", info.Offset)
	return nil
}

// sealedTorn reports whether the "torn" bytes are in fact a whole record a
// writer sealed, whose newline was lost or replaced by one stray byte: it
// continues the chain and carries the key's seal. Cutting it would remove
// a real record; the repair restores its line end instead. keep is how
// many of the torn bytes are the record.
func (w *Writer) sealedTorn(t tailInfo) (Record, int, bool) {
	body := t.cut
	if n := len(body); n > 1 && body[n-1] != '}' {
		body = body[:n-1]
	}
	if t.version >= Version3 {
		pos := t.pos()
		var base *lineCtx
		if !pos.start {
			base = &pos.ctx
		}
		r, kind, _ := w.enc.checkLineV3(body, base, t.hash)
		if kind != "" || r.Seq != t.seq+1 || r.Prev != t.hash || !w.key.authenticV3(w.enc, body, t.hash) {
			return Record{}, 0, false
		}
		return r, len(body), true
	}
	r, kind, _ := w.enc.checkLine(body)
	if kind != "" || r.Seq != t.seq+1 || r.Prev != t.hash || !w.key.authentic(w.enc, &r) {
		return Record{}, 0, false
	}
	return r, len(body), true
}

// restoreLineEnd puts the newline back after a sealed record and records
// what it replaced.
func (w *Writer) restoreLineEnd(t tailInfo, r Record, keep int) error {
	stray := t.cut[keep:]
	if err := w.f.Truncate(t.end + int64(keep)); err != nil {
		return fmt.Errorf("repair ledger %s: %w", w.path, err)
	}
	if _, err := w.f.Write([]byte("\n")); err != nil {
		return fmt.Errorf("repair ledger %s: restore a line end: %w", w.path, err)
	}
	w.seq, w.hash, w.size = r.Seq, r.Hash, t.end+int64(keep)+1
	w.ctx.setRecord(&r)
	what := "its missing newline"
	if len(stray) > 0 {
		what = fmt.Sprintf("the newline in place of %s", quotePrefix(stray, 8))
	}
	rep := Record{Kind: KindRepair, Op: OpRestoreNewline, PID: w.pid, SHA256: digest.Bytes(t.cut),
		Detail: fmt.Sprintf("seq %d is a whole record sealed by a writer: restored %s", r.Seq, what)}
	pos := w.pos()
	line, err := w.sealRepair(&rep, &pos)
	if err != nil {
		return err
	}
	if err := w.appendRepair(&rep, line); err != nil {
		return err
	}
	w.lastRepair = &RepairInfo{
		Action: RepairRestoredNewline, Offset: t.end, Bytes: int64(len(t.cut)),
		SHA256: rep.SHA256, Record: rep, Detail: rep.Detail,
	}
	slog.Warn("ledger: restored the line end of a sealed record", "path", w.path, "seq", r.Seq)
	return nil
}

// sealRepair stamps r as the record after pos and returns its line,
// signed when an operator repairs (signRepairs), sealed otherwise.
func (w *Writer) sealRepair(r *Record, pos *chainPos) ([]byte, error) {
	r.Seq, r.At = pos.seq+1, Stamp(w.clock())
	sanitize(r)
	return w.enc.encodeNext(nil, r, pos, w.version, w.key, w.signRepairs, !w.signRepairs)
}

// appendRepair writes line, the sealed repair record r, at the end of
// the ledger and makes it durable before the repair is reported; a
// failed write is cut off again.
func (w *Writer) appendRepair(r *Record, line []byte) error {
	if _, err := w.f.Write(line); err != nil {
		w.rollback(w.size)
		return fmt.Errorf("repair ledger %s: write repair record: %w", w.path, err)
	}
	w.size += int64(len(line))
	w.seq, w.hash, w.lastLine = r.Seq, r.Hash, line
	w.ctx.setRecord(r)
	if err := w.f.Sync(); err != nil {
		return fmt.Errorf("repair ledger %s: fsync: %w", w.path, err)
	}
	return nil
}

// fsync flushes the file; concurrent callers share nothing but the lock.
func (w *Writer) fsync() error {
	w.syncMu.Lock()
	defer w.syncMu.Unlock()
	return w.f.Sync()
}

// flusher runs in SyncBatch mode: after the first unsynced write it waits
// BatchInterval (or until BatchRecords are pending) and fsyncs once.
func (w *Writer) flusher() {
	defer close(w.flusherDone)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-w.kick:
		}
		timer.Reset(w.opts.BatchInterval)
		select {
		case <-w.stop:
			timer.Stop()
			return
		case <-w.full:
			timer.Stop()
		case <-timer.C:
		}
		w.flushPending()
	}
}

// flushPending fsyncs if any written record is not yet synced.
func (w *Writer) flushPending() {
	w.syncMu.Lock()
	defer w.syncMu.Unlock()
	w.mu.Lock()
	n := w.unsynced
	w.unsynced = 0
	w.mu.Unlock()
	if n == 0 {
		return
	}
	if err := w.f.Sync(); err != nil {
		slog.Error("ledger: batched fsync failed", "path", w.path, "records", n, "err", err)
		w.mu.Lock()
		if w.syncErr == nil {
			w.syncErr = fmt.Errorf("fsync ledger %s: %w", w.path, err)
		}
		w.mu.Unlock()
	}
}

// sync makes every record whose Append returned durable, whatever the
// mode (an explicit request is honoured even in SyncOff).
func (w *Writer) sync() error {
	w.mu.Lock()
	closed := w.closed
	w.unsynced = 0
	w.mu.Unlock()
	if closed {
		return ErrClosed
	}
	err := w.fsync()
	w.mu.Lock()
	serr := w.syncErr
	w.syncErr = nil
	w.mu.Unlock()
	if err != nil {
		return fmt.Errorf("fsync ledger %s: %w", w.path, err)
	}
	return serr
}

func (w *Writer) close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return ErrClosed
	}
	if w.signTimer != nil {
		w.signTimer.Stop()
		w.signTimer = nil
	}
	w.mu.Unlock()
	// A writer always ends with a signature over everything it wrote, so
	// that a stopped ledger has no unauthenticated tail.
	var errs []error
	if w.broken.Load() == nil {
		if _, err := w.append(Record{Kind: KindSignedCheckpoint}); err != nil && !errors.Is(err, ErrClosed) {
			errs = append(errs, err)
		}
	}
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return ErrClosed
	}
	w.closed = true
	if w.signTimer != nil {
		w.signTimer.Stop()
		w.signTimer = nil
	}
	// Queued callers still lead their batches; wait for them.
	for w.writing || len(w.queue) > 0 {
		w.cond.Wait()
	}
	w.mu.Unlock()

	if w.stop != nil {
		close(w.stop)
		<-w.flusherDone
	}
	if w.opts.Sync != SyncOff {
		if err := w.fsync(); err != nil {
			errs = append(errs, fmt.Errorf("fsync ledger %s: %w", w.path, err))
		}
	}
	w.mu.Lock()
	errs = append(errs, w.syncErr)
	w.syncErr = nil
	w.mu.Unlock()
	if err := w.f.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close ledger %s: %w", w.path, err))
	}
	w.dir.close()
	return errors.Join(errs...)
}

// syncDir fsyncs a directory so that a new entry in it survives a crash.
func syncDir(dir string) {
	d, err := os.Open(dir)
	if err != nil {
		return
	}
	if err := d.Sync(); err != nil {
		slog.Debug("ledger: fsync directory", "dir", dir, "err", err)
	}
	_ = d.Close()
}
