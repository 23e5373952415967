package protocol

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/acpfs/acpfs/internal/atomicfile"
)

// Deferred protocol.json writes.
//
// The fsync that makes a protocol.json rewrite durable costs most of an
// append (0.7–0.8 ms on the machines measured, more than everything else
// together). A long-lived Log (a daemon serving views) therefore writes
// the file off the critical path: the append renders the new content in
// memory, which views serve at once (ProtocolJSON), and a background
// writer replaces the file, coalescing appends that come faster than a
// write. The file is replaced exactly as before (temporary file, fsync,
// rename), so a crash at any moment leaves either the previous complete
// protocol.json or the new one, never a torn or empty one; it may leave
// one behind events.jsonl, as a crash between the two writes of an append
// always could, and the next start-up reconciliation (Reconcile) brings
// it up to date.

// protoWriter is the state of the deferred writes of one Log.
type protoWriter struct {
	on    bool   // DeferProtocolWrites was called and Close was not
	dirty bool   // the in-memory protocol.json is ahead of the file
	gen   uint64 // renders of the in-memory protocol.json so far
	// foreign counts loads of a protocol.json this log did not write
	// itself; a write rendered before one must not replace it.
	foreign  uint64
	reloaded bool // a load happened since the last catch-up ended
	// flushMu serializes writes of the file, so that SyncProtocol
	// returns only once a write under way has ended too.
	flushMu sync.Mutex
	kick    chan struct{}
	stop    chan struct{}
	done    chan struct{}
}

// A burst of appends is written once: the writer waits until appends
// pause for coalesceQuiet, and at most coalesceMax after the first one.
const (
	coalesceQuiet = 2 * time.Millisecond
	coalesceMax   = 20 * time.Millisecond
)

// ProtocolTempPrefix begins the names of the temporary files that a
// protocol.json rewrite renames over it; they live beside it for a few
// milliseconds, and views never show them.
const ProtocolTempPrefix = "." + ProtocolFile + ".tmp-"

// maxFlushRounds bounds one flush: appends arriving faster than the disk
// takes a write are coalesced into the next round, and after this many
// the writer waits for the next append (or retry) instead of spinning.
const maxFlushRounds = 8

// DeferProtocolWrites makes the appends of this log return before their
// protocol.json rewrite reaches the disk; a background writer does it,
// coalesced. The derived state, and ProtocolJSON, change at once. Close
// (or SyncProtocol) writes what is pending. Meant for daemons, whose
// views serve protocol.json from memory; the CLI keeps writing it before
// it returns.
func (l *Log) DeferProtocolWrites() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pw.on || l.closed {
		return
	}
	l.pw.on = true
	l.pw.kick = make(chan struct{}, 1)
	l.pw.stop = make(chan struct{})
	l.pw.done = make(chan struct{})
	go l.writeLoop(l.pw.kick, l.pw.stop, l.pw.done)
}

// SyncProtocol writes protocol.json now if a deferred write is pending.
func (l *Log) SyncProtocol() error { return l.flushProtocol() }

// ProtocolJSON returns protocol.json as the history so far gives it: the
// file's content when it states the derived fields, else the file's
// static declaration with the derived phase, owner and waiting list (a
// deferred write of this or another process not yet done, or an append
// that a crash interrupted before its rewrite). Views serve this. The
// slice must not be modified.
func (l *Log) ProtocolJSON() ([]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, unavailable("closed", "the log of %s is closed", l.folder)
	}
	if err := l.refreshLocked(); err != nil {
		return nil, err
	}
	if l.proto == nil {
		return nil, unavailable("protocol-json", "missing protocol.json in %s", l.folder)
	}
	if l.historyBad == nil && l.state.Phase != "" && !l.derivedMatchesLocked() {
		// Lines of other writers came in since the content was last
		// rendered. Stamped with the last event's time, so that views
		// of other processes render the same bytes for the same
		// history; a write of ours still pending now writes this.
		at := l.now()
		if l.state.LastAtOK && !l.pw.dirty {
			at = l.state.LastAt
		}
		l.renderProtocolLocked(&l.state, at)
	}
	data, err := l.protocolDataLocked()
	if err != nil {
		return nil, unavailable("protocol-json", "%v", err)
	}
	return data, nil
}

// markDirtyLocked notes that the in-memory protocol.json is ahead of the file and wakes the
// writer.
func (l *Log) markDirtyLocked() {
	if l.pw.dirty {
		return // the writer is on it; it polls for more (coalesce)
	}
	l.pw.dirty = true
	select {
	case l.pw.kick <- struct{}{}:
	default:
	}
}

// pending reports whether a write is pending, and the render it would
// write.
func (l *Log) pending() (bool, uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pw.dirty && !l.closed, l.pw.gen
}

// afterCatchUpLocked settles a pending write after protocol.json was
// written by someone else (another process, a person): if the new file
// already states the derived fields there is nothing left to write;
// otherwise the pending content is rendered again from the new file, so
// that no change of its static declaration is lost.
func (l *Log) afterCatchUpLocked() {
	if !l.pw.reloaded {
		return
	}
	l.pw.reloaded = false
	if !l.pw.dirty {
		return
	}
	if l.historyBad == nil && l.state.Phase != "" && !l.derivedMatchesLocked() {
		l.renderProtocolLocked(&l.state, l.now())
		return
	}
	l.pw.dirty = false
}

// stopWriter ends deferred writing: later appends write protocol.json
// before they return, and the background writer is gone when it returns.
func (l *Log) stopWriter() {
	l.mu.Lock()
	stop, done := l.pw.stop, l.pw.done
	l.pw.on, l.pw.stop = false, nil
	l.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
}

// writeLoop is the background writer. It is woken once when the file
// falls behind and writes until it has caught up.
func (l *Log) writeLoop(kick, stop, done chan struct{}) {
	defer close(done)
	const firstRetry, maxRetry = 50 * time.Millisecond, 5 * time.Second
	delay := firstRetry
	var retry <-chan time.Time
	for {
		select {
		case <-stop:
			return
		case <-kick:
		case <-retry:
		}
		retry = nil
		for {
			if !l.coalesce(stop) {
				return
			}
			if err := l.flushProtocol(); err != nil {
				// The views keep serving the derived state; the file is
				// behind until a write succeeds (or the next start-up).
				slog.Error("protocol.json: deferred write failed; retrying", "folder", l.folder, "err", err, "retry_in", delay)
				retry = time.After(delay)
				delay = min(2*delay, maxRetry)
				break
			}
			delay = firstRetry
			if dirty, _ := l.pending(); !dirty {
				break
			}
		}
	}
}

// coalesce waits until no append came for coalesceQuiet, or coalesceMax
// passed, so that a burst is written once. It returns false when stop
// closed meanwhile (Close writes what is pending itself).
func (l *Log) coalesce(stop chan struct{}) bool {
	limit := time.Now().Add(coalesceMax)
	_, gen := l.pending()
	t := time.NewTimer(coalesceQuiet)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return false
		case <-t.C:
		}
		_, now := l.pending()
		if now == gen || !time.Now().Before(limit) {
			return true
		}
		gen = now
		t.Reset(coalesceQuiet)
	}
}

// flushProtocol writes protocol.json while this log's content is ahead of
// it. The temporary file is written and synced without any lock, so that
// appends are not held up by the disk; only the rename happens under the
// events lock, after catching up, and only if nobody else wrote the file
// since the content was rendered.
func (l *Log) flushProtocol() error {
	l.pw.flushMu.Lock()
	defer l.pw.flushMu.Unlock()
	for i := 0; i < maxFlushRounds; i++ {
		l.mu.Lock()
		if !l.pw.dirty || l.closed {
			l.mu.Unlock()
			return nil
		}
		data, err := l.protocolDataLocked()
		gen, foreign := l.pw.gen, l.pw.foreign
		l.mu.Unlock()
		if err != nil {
			return err
		}
		if err := l.flushRound(data, gen, foreign); err != nil {
			return err
		}
	}
	return nil
}

// flushRound writes data, rendered at gen after foreign loads, to a
// temporary file and installs it; the directory is synced once the lock
// is released.
func (l *Log) flushRound(data []byte, gen, foreign uint64) error {
	path := filepath.Join(l.folder, ProtocolFile)
	tmp, err := atomicfile.NewTemp(l.folder, ProtocolFile)
	if err != nil {
		return fmt.Errorf("write %s: %w", ProtocolFile, err)
	}
	defer tmp.Discard()
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", ProtocolFile, err)
	}
	if err := tmp.Finish(atomicfile.PermOf(path, 0o644)); err != nil {
		return fmt.Errorf("write %s: %w", ProtocolFile, err)
	}
	installed, err := l.installProtocol(path, tmp, gen, foreign)
	if err != nil || !installed {
		return err
	}
	return atomicfile.SyncDir(l.folder)
}

// installProtocol renames tmp (rendered at gen, after foreign loads) over
// path, unless the file changed hands since. It reports whether it did.
func (l *Log) installProtocol(path string, tmp *atomicfile.Temp, gen, foreign uint64) (bool, error) {
	lk, err := l.lock(context.Background())
	if err != nil {
		return false, err
	}
	defer l.unlock(lk)
	if !l.pw.dirty || l.pw.foreign != foreign {
		// Someone else wrote protocol.json meanwhile: their content
		// must not be replaced with what was rendered before it. The
		// catch-up rendered again if anything is still missing.
		return false, nil
	}
	if err := tmp.Rename(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			// A reconciliation in another process removed the
			// temporary file: write it again.
			return false, nil
		}
		return false, fmt.Errorf("replace %s: %w", ProtocolFile, err)
	}
	if fi, err := os.Lstat(path); err == nil {
		l.protoID = idOf(fi)
	}
	if l.pw.gen == gen {
		l.pw.dirty = false
	}
	return true, nil
}
