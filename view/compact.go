package view

import (
	"container/list"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"syscall"
	"time"

	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/ledger"
)

// Audit levels: how much of the reading a view records.
const (
	// AuditCompact records the first read of each (path, content hash),
	// each distinct refusal and the first no-op change (an open for
	// writing that wrote nothing, a change of times only) of each path in
	// full. Repeated reads teach only a count: one reads_repeated record
	// per view and interval. Repeated refusals and no-op changes are
	// counted per key in denied_repeat and write_repeat records. The
	// audit's facts (who read what content, what was refused, who changed
	// what) are all kept.
	AuditCompact = ""
	// AuditOpens records every open in full.
	AuditOpens = "opens"
	// AuditReads records every open and every read request.
	AuditReads = "reads"
)

const (
	// repeatFlush bounds how long a repeat waits to be counted in the
	// ledger.
	repeatFlush = 10 * time.Second
	// maxRepeatKeys bounds the memory of the aggregation per view; past
	// it, the key used least recently is forgotten (its next occurrence
	// is recorded in full again).
	maxRepeatKeys = 1 << 17
	// maxPending bounds the repeat counts held between two flushes: past
	// it they are flushed at once.
	maxPending = 1 << 12
)

// repeatKey is one aggregated fact. Reads are keyed by content hash,
// refusals by operation and reason, no-op changes by operation.
type repeatKey struct {
	kind           ledger.Kind
	op             ledger.Op
	path, sha, why string
	// ver is the file version of a read recorded before its hash was
	// known (sha empty): its read_hash follows.
	ver fileVersion
}

type repeatCount struct {
	n           int64
	first, last time.Time
}

// readCount counts the repeated reads of a view between two flushes: how
// many, of how many distinct contents, when the first and the last came.
type readCount struct {
	repeatCount
	contents int64
}

// seenEntry is a key recorded in full, with the flush interval in which
// it was last read again (to count distinct contents per interval).
type seenEntry struct {
	key      repeatKey
	interval uint64
}

// readPath is a read key without its content: one path read one way.
type readPath struct {
	op   ledger.Op
	path string
}

// repeats aggregates the records of one view.
type repeats struct {
	mu      sync.Mutex
	seen    map[repeatKey]*list.Element // of lru
	lru     *list.List                  // the *seenEntry of seen, most recently used first
	pending map[repeatKey]*repeatCount  // refusals and no-op changes
	// reads counts repeated reads, whatever their path: a repeat teaches
	// the reviewer only that the agent read again what it had read.
	reads readCount
	// interval counts the flushes (takeAll), for readCount.contents.
	interval uint64
	// latest is the one content of each path whose reads count as
	// repeats. A file rewritten 60,000 times has 60,000 versions, each
	// read recorded in full as it comes; only the last one can be read
	// again, so only its key is kept (a content that comes back is
	// recorded in full once more, which costs a record, not memory).
	latest map[readPath]repeatKey
	stop   chan struct{}
	done   chan struct{}
	// kick asks the flusher for a flush before its tick (maxPending).
	kick chan struct{}
	// refusals counts the distinct refusals in seen.
	refusals int
}

func newRepeats() *repeats {
	return &repeats{seen: map[repeatKey]*list.Element{}, lru: list.New(), pending: map[repeatKey]*repeatCount{},
		latest: map[readPath]repeatKey{}, kick: make(chan struct{}, 1)}
}

// refusal reports whether k is a refusal's key.
func (k repeatKey) refusal() bool {
	return k.kind != ledger.KindRead && k.kind != ledger.KindList && k.kind != ledger.KindWrite
}

// hasLocked returns k's entry if k was recorded in full, and marks it
// used; nil if not.
func (r *repeats) hasLocked(k repeatKey) *seenEntry {
	e, ok := r.seen[k]
	if !ok {
		return nil
	}
	r.lru.MoveToFront(e)
	return e.Value.(*seenEntry)
}

// forgetLocked drops k from the keys recorded in full.
func (r *repeats) forgetLocked(k repeatKey) {
	e, ok := r.seen[k]
	if !ok {
		return
	}
	r.lru.Remove(e)
	delete(r.seen, k)
	if k.refusal() {
		r.refusals--
	}
	if p := (readPath{op: k.op, path: k.path}); k.kind == ledger.KindRead && r.latest[p] == k {
		delete(r.latest, p)
	}
}

// again reports whether k was recorded in full before, and counts it if
// so. The first call for k returns false; the caller records it in full
// and calls recorded.
func (r *repeats) again(k repeatKey, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.hasLocked(k)
	if e == nil {
		return false
	}
	if k.kind == ledger.KindRead {
		r.countReadLocked(e, now)
		return true
	}
	c := r.pending[k]
	if c == nil {
		c = &repeatCount{first: now}
		r.pending[k] = c
		if len(r.pending) >= maxPending {
			select {
			case r.kick <- struct{}{}:
			default: // a flush is asked for already
			}
		}
	}
	c.n++
	c.last = now
	return true
}

// countReadLocked counts a repeated read of e's key, recorded in full.
func (r *repeats) countReadLocked(e *seenEntry, now time.Time) {
	c := &r.reads
	if c.n == 0 {
		c.first = now
	}
	c.n++
	c.last = now
	if e.interval != r.interval+1 {
		// +1: the zero value of a new entry means not read again yet.
		e.interval = r.interval + 1
		c.contents++
	}
}

// maxRefusalPaths bounds the distinct refusals kept apart per view.
const maxRefusalPaths = 4096

// crowded reports whether k is a new refusal past maxRefusalPaths.
func (r *repeats) crowded(k repeatKey) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.hasLocked(k) != nil {
		return false
	}
	return r.refusals >= maxRefusalPaths
}

// recorded remembers that k's full record is in the ledger.
func (r *repeats) recorded(k repeatKey) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.hasLocked(k) != nil {
		return
	}
	if k.kind == ledger.KindRead {
		// A new content of the path supersedes the one before.
		p := readPath{op: k.op, path: k.path}
		if old, ok := r.latest[p]; ok {
			r.forgetLocked(old)
		}
		r.latest[p] = k
	}
	r.seen[k] = r.lru.PushFront(&seenEntry{key: k})
	if k.refusal() {
		r.refusals++
	}
	if len(r.seen) > maxRepeatKeys {
		r.forgetLocked(r.lru.Back().Value.(*seenEntry).key)
	}
}

// takeAll returns the pending counts of refusals and no-op changes and
// the count of repeated reads, and starts new ones.
func (r *repeats) takeAll() (map[repeatKey]*repeatCount, readCount) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.pending
	if len(p) > 0 {
		r.pending = map[repeatKey]*repeatCount{}
	}
	reads := r.reads
	r.reads = readCount{}
	r.interval++
	return p, reads
}

// recordOnce writes rec unless the same fact was recorded in full before
// in this view, in which case it is counted for the next repeat record.
func (f *View) recordOnce(ctx context.Context, k repeatKey, rec func() error) error {
	if f.audit != AuditCompact {
		return rec()
	}
	if f.repeats.again(k, time.Now()) {
		return nil
	}
	if err := rec(); err != nil {
		return err
	}
	f.repeats.recorded(k)
	return nil
}

// recordNoop records a permitted change that changes no byte: an open
// for writing closed without a write through it, or a change of times
// only. Each is a fact of the path the audit needs once; a loop of them
// must not grow the ledger, so repeats are counted in write_repeat
// records, as repeated reads are.
func (f *View) recordNoop(ctx context.Context, op ledger.Op, rel, detail string) error {
	k := repeatKey{kind: ledger.KindWrite, op: op, path: rel, why: detail}
	return f.recordOnce(ctx, k, func() error { return f.record(ctx, ledger.KindWrite, op, rel, "", detail) })
}

// recordSetattr records a setattr before it is made (see recordChange);
// one of times only is a no-op change (recordNoop).
func (f *View) recordSetattr(ctx context.Context, op ledger.Op, rel string, in *SetAttr) syscall.Errno {
	if !in.timesOnly() {
		return f.recordChange(ctx, op, rel, "")
	}
	if err := f.recordNoop(ctx, op, rel, "times only"); err != nil {
		f.ledgerDown(op, rel, err)
		return syscall.EIO
	}
	return 0
}

// recordListing records a directory listing, once per directory and view
// session by default: which directories an agent listed is the fact the
// audit needs, and a loop of readdir calls must not grow the ledger.
func (f *View) recordListing(ctx context.Context, rel string) error {
	rec := func() error { return f.record(ctx, ledger.KindList, ledger.OpReaddir, rel, "", "") }
	if f.audit != AuditCompact {
		return rec()
	}
	k := repeatKey{kind: ledger.KindList, path: rel}
	f.repeats.mu.Lock()
	seen := f.repeats.hasLocked(k) != nil
	f.repeats.mu.Unlock()
	if seen {
		return nil
	}
	if err := rec(); err != nil {
		return err
	}
	f.repeats.recorded(k)
	return nil
}

// startRepeats starts the periodic flush of repeat counts.
func (f *View) startRepeats() {
	f.repeats.stop = make(chan struct{})
	f.repeats.done = make(chan struct{})
	go func() {
		defer close(f.repeats.done)
		t := time.NewTicker(repeatFlush)
		defer t.Stop()
		for {
			select {
			case <-f.repeats.stop:
				return
			case <-t.C:
				f.FlushRepeats()
			case <-f.repeats.kick:
				f.FlushRepeats()
			}
		}
	}()
}

func (f *View) stopRepeats() {
	if f.repeats.stop != nil {
		close(f.repeats.stop)
		<-f.repeats.done
		f.repeats.stop = nil
	}
	f.FlushRepeats()
}

// FlushRepeats writes the counts of repeated reads, refusals and no-op
// changes gathered since the last flush, as records of the grant in
// force. It runs every repeatFlush, before a grant change (so that the
// counts of one grant are not recorded under the next, but for the few a
// request in flight adds during the change: see SetGrant) and when the
// view stops.
func (f *View) FlushRepeats() { f.flushRepeatsAs(f.gv.Load().grant) }

// flushRepeatsAs is FlushRepeats for the repeats made under g.
func (f *View) flushRepeatsAs(g *grants.Grant) {
	p, reads := f.repeats.takeAll()
	if reads.n > 0 {
		r := ledger.Record{Kind: ledger.KindReadsRepeated, Agent: g.AgentID, Grant: g.GrantID, Op: ledger.OpOpen,
			Count: reads.n, First: ledger.Stamp(reads.first), Last: ledger.Stamp(reads.last), Detail: repeatedDetail(reads.contents)}
		if _, err := f.ledger.Append(r); err != nil {
			slog.Error("ledger: cannot record repeated reads", "count", reads.n, "err", err)
		}
	}
	for k, c := range p {
		kind := ledger.KindDeniedRepeat
		if k.kind == ledger.KindWrite {
			kind = ledger.KindWriteRepeat
		}
		r := ledger.Record{Kind: kind, Agent: g.AgentID, Grant: g.GrantID, Path: k.path, Op: k.op,
			Count: c.n, First: ledger.Stamp(c.first), Last: ledger.Stamp(c.last), Detail: k.why}
		if _, err := f.ledger.Append(r); err != nil {
			slog.Error("ledger: cannot record repeats", "path", k.path, "count", c.n, "err", err)
		}
	}
}

// repeatedDetail is the detail of a reads_repeated record: how many
// files (contents, each recorded in full before) its reads opened.
func repeatedDetail(files int64) string {
	if files == 1 {
		return "1 file"
	}
	return fmt.Sprintf("%d files", files)
}
