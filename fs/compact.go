package fs

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/acpfs/acpfs/ledger"
)

// Audit levels: how much of the reading a view records.
const (
	// AuditCompact records the first read of each (path, content hash)
	// and each distinct refusal in full, and counts their repeats in
	// read_repeat and denied_repeat records. The audit's facts (who read
	// what content, what was refused) are all kept.
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
	// it, new keys are recorded in full, as with AuditOpens.
	maxRepeatKeys = 1 << 17
)

// repeatKey is one aggregated fact. Reads are keyed by content hash,
// refusals by operation and reason.
type repeatKey struct {
	kind, op, path, sha, why string
	// ver is the file version of a read recorded before its hash was
	// known (sha empty): its read_hash follows.
	ver fileVersion
}

type repeatCount struct {
	n           int64
	first, last time.Time
}

// repeats aggregates the records of one view.
type repeats struct {
	mu      sync.Mutex
	seen    map[repeatKey]*repeatCount
	pending map[repeatKey]*repeatCount
	stop    chan struct{}
	done    chan struct{}
	// refusals counts the distinct refusals in seen.
	refusals int
}

func newRepeats() *repeats {
	return &repeats{seen: map[repeatKey]*repeatCount{}, pending: map[repeatKey]*repeatCount{}}
}

// again reports whether k was recorded in full before, and counts it if
// so. The first call for k returns false; the caller records it in full
// and calls recorded.
func (r *repeats) again(k repeatKey, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.seen[k]; !ok {
		return false
	}
	c := r.pending[k]
	if c == nil {
		c = &repeatCount{first: now}
		r.pending[k] = c
	}
	c.n++
	c.last = now
	return true
}

// maxRefusalPaths bounds the distinct refusals kept apart per view.
const maxRefusalPaths = 4096

// crowded reports whether k is a new refusal past maxRefusalPaths.
func (r *repeats) crowded(k repeatKey) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.seen[k]; ok {
		return false
	}
	return r.refusals >= maxRefusalPaths
}

// recorded remembers that k's full record is in the ledger.
func (r *repeats) recorded(k repeatKey) {
	r.mu.Lock()
	if len(r.seen) < maxRepeatKeys {
		r.seen[k] = &repeatCount{}
		if k.kind != ledger.KindRead && k.kind != ledger.KindList {
			r.refusals++
		}
	}
	r.mu.Unlock()
}

// take returns the pending counts and starts new ones.
func (r *repeats) take() map[repeatKey]*repeatCount {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.pending
	if len(p) > 0 {
		r.pending = map[repeatKey]*repeatCount{}
	}
	return p
}

// recordOnce writes rec unless the same fact was recorded in full before
// in this view, in which case it is counted for the next repeat record.
func (f *FS) recordOnce(ctx context.Context, k repeatKey, rec func() error) error {
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

// recordListing records a directory listing, once per directory and view
// session by default: which directories an agent listed is the fact the
// audit needs, and a loop of readdir calls must not grow the ledger.
func (f *FS) recordListing(ctx context.Context, rel string) error {
	rec := func() error { return f.record(ctx, ledger.KindList, "readdir", rel, "", "") }
	if f.audit != AuditCompact {
		return rec()
	}
	k := repeatKey{kind: ledger.KindList, path: rel}
	f.repeats.mu.Lock()
	_, seen := f.repeats.seen[k]
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
func (f *FS) startRepeats() {
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
			}
		}
	}()
}

func (f *FS) stopRepeats() {
	if f.repeats.stop != nil {
		close(f.repeats.stop)
		<-f.repeats.done
		f.repeats.stop = nil
	}
	f.FlushRepeats()
}

// FlushRepeats writes the counts of repeated reads and refusals gathered
// since the last flush. It runs every repeatFlush and when the view
// stops.
func (f *FS) FlushRepeats() {
	p := f.repeats.take()
	if len(p) == 0 {
		return
	}
	g := f.view.Load().grant
	for k, c := range p {
		kind := ledger.KindReadRepeat
		if k.kind != ledger.KindRead {
			kind = ledger.KindDeniedRepeat
		}
		sha := k.sha
		if sha == "" && k.ver != (fileVersion{}) {
			// Repeats of a read whose hash came after it.
			sha, _ = f.hashes.get(k.ver)
		}
		r := ledger.Record{Kind: kind, Agent: g.AgentID, Grant: g.GrantID, Path: k.path, Op: k.op,
			SHA256: sha, Count: c.n, First: stamp(c.first), Last: stamp(c.last), Detail: k.why}
		if _, err := f.ledger.Append(r); err != nil {
			slog.Error("ledger: cannot record repeats", "path", k.path, "count", c.n, "err", err)
		}
	}
}

func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000000Z") }
