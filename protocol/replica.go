package protocol

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
)

// Replica is the authority for a history served from several hosts. The
// folder's events.jsonl is then a copy: lines enter it only from the
// authority, or once the authority took them. A Replica must not call
// back into the Log.
type Replica interface {
	// Publish makes line the authority's event line n (1-based) on
	// condition that it holds exactly n-1 lines. When it holds more it
	// returns an error wrapping ErrConflict, and the caller catches up
	// and validates again, so two hosts never both append line n.
	Publish(n int, line []byte) error
	// Since returns the authority's lines after the first n, in order,
	// without their newline.
	Since(n int) ([][]byte, error)
}

// ErrConflict says that another host appended first.
var ErrConflict = errors.New("another host appended first")

// maxConflicts bounds how often one append catches up and tries again;
// each retry means another host's append went in, so the bound is only
// reached under a flood.
const maxConflicts = 64

// SetReplica makes r the authority for this log's history (nil: the
// folder is the authority, as on a single host). Every append is then
// published to r before it reaches events.jsonl.
//
// The copy is trusted as far as its last line is the authority's line at
// the same number (one request); otherwise the next append or pull
// checks every line and cuts the copy back to the authority's history.
func (l *Log) SetReplica(r Replica) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.replica = r
	l.verified = 0
	if r == nil || l.lines == 0 {
		return
	}
	f, err := os.OpenFile(filepath.Join(l.folder, EventsFile), os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return
	}
	defer f.Close()
	last, err := lastLine(f, l.offset)
	if err != nil {
		return
	}
	last = bytes.TrimSuffix(last, []byte("\n"))
	if auth, err := r.Since(l.lines - 1); err == nil && len(auth) > 0 && bytes.Equal(auth[0], last) {
		l.verified = l.offset
	}
}

// Pull copies the authority's lines that the folder lacks into
// events.jsonl, applies them and updates protocol.json. It returns how
// many lines it copied. Without a replica it only catches up.
func (l *Log) Pull() (int, error) {
	lk, err := l.lock(context.Background())
	if err != nil {
		return 0, err
	}
	defer l.unlock(lk)
	if l.replica == nil {
		return 0, nil
	}
	got, err := l.pullLocked(lk.File())
	return len(got), err
}

// pullLocked copies the authority's missing lines into f (the locked
// events.jsonl, caught up) and applies them. It returns the lines copied.
func (l *Log) pullLocked(f *os.File) ([][]byte, error) {
	lines, err := l.replica.Since(l.lines)
	if err != nil {
		return nil, unavailable(RuleStore, "cannot reach the store to catch up: %v", err)
	}
	if len(lines) == 0 {
		return nil, nil
	}
	if err := l.cutTailLocked(f); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	for _, line := range lines {
		buf.Write(line)
		buf.WriteByte('\n')
	}
	if n, err := f.Write(buf.Bytes()); err != nil || n != buf.Len() {
		l.undoLocked(f)
		return nil, unavailable("io", "write %s: %v", EventsFile, err)
	}
	l.verified = l.offset + int64(buf.Len())
	if err := l.catchUpLocked(f, true); err != nil {
		return nil, err
	}
	if l.state.Phase == "" {
		return lines, nil
	}
	if l.pw.on {
		l.renderProtocolLocked(&l.state, l.now())
		l.markDirtyLocked()
		return lines, nil
	}
	if err := l.writeProtocolLocked(&l.state); err != nil {
		return lines, unavailable("io", "write %s: %v", ProtocolFile, err)
	}
	return lines, nil
}

// publishLocked hands an accepted line to the authority. On a conflict
// it catches up, so that the caller can judge the line again.
func (l *Log) publishLocked(f *os.File, n int, line []byte) error {
	err := l.replica.Publish(n, line)
	if err == nil {
		return nil
	}
	if !errors.Is(err, ErrConflict) {
		return &Error{Kind: Unavailable, Line: n, Rule: RuleStore,
			Msg: fmt.Sprintf("the store did not confirm the event, so this host did not append it (if the store took it all the same, it comes back with the next catch-up): %v", err)}
	}
	got, err := l.pullLocked(f)
	if err != nil {
		return err
	}
	if len(got) == 0 {
		// The store holds fewer lines than the folder: something wrote
		// to the copy without the store.
		return &Error{Kind: Unavailable, Line: n, Rule: "store-diverged",
			Msg: fmt.Sprintf("%s has lines the store does not hold (written without the store?); the folder must be made a copy of the store's history again", EventsFile)}
	}
	return errConflictRetry
}

// errConflictRetry tells commitRetryLocked to build and check the line
// again against the state it just caught up with.
var errConflictRetry = &Error{Kind: Rejected, Rule: "conflict", Msg: "another host appended first and the event no longer fits"}

// commitRetryLocked commits the line mk builds, building it again after
// each conflict with another host (mk sees the caught-up state).
func (l *Log) commitRetryLocked(f *os.File, mk func() []byte, participant string, record func(Event) error) (Event, error) {
	for i := 0; ; i++ {
		ev, err := l.commitLocked(f, mk(), participant, record)
		if err == nil || i == maxConflicts {
			return ev, err
		}
		if err != errConflictRetry {
			if l.replica == nil || KindOf(err) != Rejected {
				return ev, err
			}
			// Refused against the folder's copy, which may lag the
			// store: judge again only if the store had more.
			got, perr := l.pullLocked(f)
			if perr != nil || len(got) == 0 {
				return ev, err
			}
		}
	}
}

// cutTailLocked removes an incomplete last line from the copy (f is
// locked for writing). Every acpfs writer writes a whole line at once
// under the lock, so with a replica such a tail was written without the
// store: the store's lines go in its place.
func (l *Log) cutTailLocked(f *os.File) error {
	if l.evID.size == l.offset {
		return nil
	}
	slog.Warn("an incomplete line written to the copy without the store was removed",
		"file", filepath.Join(l.folder, EventsFile), "bytes", l.evID.size-l.offset)
	if err := f.Truncate(l.offset); err != nil {
		l.needReplay = true
		return unavailable("io", "cut an incomplete line from %s: %v", EventsFile, err)
	}
	if fi, err := f.Stat(); err == nil {
		l.evID = idOf(fi)
	}
	return nil
}
