package egress

import (
	"log/slog"
	"sync"
	"time"

	"github.com/acpfs/acpfs/ledger"
)

// A command that loops on connections would otherwise grow the ledger,
// which every agent's view shares, by a record each: as views do for
// reads and refusals, the first connection of each kind, operation and
// destination is recorded in full (and, when allowed, before it is
// made), and its repeats are counted in a record of the same kind with
// Count, First and Last, written every repeatFlush and when the proxy
// stops.
const (
	repeatFlush = 10 * time.Second
	// maxRepeatKeys bounds what the proxy remembers of destinations it
	// recorded; past it, it forgets them all (the next connection to
	// each is recorded in full again).
	maxRepeatKeys = 1 << 14
	// maxPending bounds the counts held between two flushes.
	maxPending = 1 << 10
)

type repeatKey struct {
	kind ledger.Kind
	op   ledger.Op
	dest string
}

type repeatCount struct {
	n           int64
	first, last time.Time
}

type repeats struct {
	mu      sync.Mutex
	seen    map[repeatKey]struct{}
	pending map[repeatKey]*repeatCount
	kick    chan struct{}
}

func newRepeats() *repeats {
	return &repeats{seen: map[repeatKey]struct{}{}, pending: map[repeatKey]*repeatCount{}, kick: make(chan struct{}, 1)}
}

// note reports whether k was recorded in full already, and counts it
// then; otherwise the caller records it in full (and calls forget if it
// could not).
func (r *repeats) note(k repeatKey, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.seen[k]; !ok {
		if len(r.seen) >= maxRepeatKeys {
			clear(r.seen)
		}
		r.seen[k] = struct{}{}
		return false
	}
	c := r.pending[k]
	if c == nil {
		c = &repeatCount{first: now}
		r.pending[k] = c
	}
	c.n++
	c.last = now
	if len(r.pending) >= maxPending {
		select {
		case r.kick <- struct{}{}:
		default:
		}
	}
	return true
}

func (r *repeats) forget(k repeatKey) {
	r.mu.Lock()
	delete(r.seen, k)
	r.mu.Unlock()
}

func (r *repeats) take() map[repeatKey]*repeatCount {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.pending
	r.pending = map[repeatKey]*repeatCount{}
	return p
}

// flushRepeats writes the counts gathered since the last flush.
func (s *Server) flushRepeats() {
	for k, c := range s.rep.take() {
		r := ledger.Record{Kind: k.kind, Agent: s.cfg.Agent, Grant: s.cfg.Grant, Op: k.op, Count: c.n,
			First: ledger.Stamp(c.first), Last: ledger.Stamp(c.last), Detail: k.dest + ": repeats of the connection recorded in full before"}
		if _, err := s.cfg.Ledger.Append(r); err != nil {
			slog.Error("egress proxy: cannot record repeats", "kind", k.kind, "host", k.dest, "count", c.n, "err", err)
		}
	}
}

// flusher flushes every repeatFlush, or at once when many counts wait,
// until stop is closed.
func (s *Server) flusher(stop <-chan struct{}) {
	t := time.NewTicker(repeatFlush)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			s.flushRepeats()
		case <-s.rep.kick:
			s.flushRepeats()
		}
	}
}
