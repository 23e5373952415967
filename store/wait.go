package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Missing says what a host still lacks to serve a collaboration: its
// protocol.json, its history (events.jsonl), or both.
type Missing struct{ Protocol, History bool }

// Any reports whether anything is missing.
func (m Missing) Any() bool { return m.Protocol || m.History }

// String names what is missing, for messages: "no protocol.json", "no
// history (events.jsonl)", or both joined by "and".
func (m Missing) String() string {
	var parts []string
	if m.Protocol {
		parts = append(parts, "no "+protocolJSON)
	}
	if m.History {
		parts = append(parts, "no history (events.jsonl)")
	}
	if len(parts) == 0 {
		return "nothing missing"
	}
	return strings.Join(parts, " and ")
}

// ErrNotPublished says the collaboration's documents or history never
// reached the store within the bound a host waited for them.
var ErrNotPublished = errors.New("not published in the store")

// waitRecheck is how often WaitPublished asks the server again besides
// what its watch and subscription tell it: a safety net for a watch lost
// with a connection, not the way it learns of a publication.
const waitRecheck = 2 * time.Second

// WaitPublished waits until the store holds what need says this host
// lacks: protocol.json in the documents' bucket, at least one line of
// history in the events stream. It learns of them from a watch of the
// bucket's key and a subscription to the stream's subject, not by
// polling. progress, if set, is called at once and every `every` while
// something is missing (what, and how long it has waited). Past bound
// (0: at once) it returns an error wrapping ErrNotPublished that names
// what is missing.
func (s *Store) WaitPublished(ctx context.Context, need Missing, bound, every time.Duration, progress func(m Missing, waited time.Duration)) error {
	start := time.Now()
	w, err := s.watchPublished(ctx, need)
	if err != nil {
		return err
	}
	defer w.close()
	missing := need
	s.recheckPublished(&missing)
	if bound > 0 && missing.Any() {
		if every <= 0 {
			every = 5 * time.Second
		}
		if err := s.awaitPublished(ctx, w, &missing, start, bound, every, progress); err != nil {
			return err
		}
	}
	if missing.Any() {
		return s.notPublished(missing, bound)
	}
	return nil
}

// publishWatch is what WaitPublished listens to: a kick for each line of
// the events stream, and the updates of protocol.json's key.
type publishWatch struct {
	kick      chan struct{}
	protoSeen <-chan jetstream.KeyValueEntry
	stops     []func()
}

// close ends the subscription and the watch, the last made first.
func (w *publishWatch) close() {
	for i := len(w.stops) - 1; i >= 0; i-- {
		w.stops[i]()
	}
}

// watchPublished subscribes to the events subject when need lacks
// history and watches protocol.json's key when need lacks it, before the
// first look, so that nothing published falls between.
func (s *Store) watchPublished(ctx context.Context, need Missing) (*publishWatch, error) {
	w := &publishWatch{kick: make(chan struct{}, 1)}
	if need.History {
		sub, err := s.nc.Subscribe(s.eventsSubject(), func(*nats.Msg) {
			select {
			case w.kick <- struct{}{}:
			default:
			}
		})
		if err != nil {
			return nil, fmt.Errorf("collaboration %s: follow %s: %w", s.opts.Collab, s.eventsSubject(), offline(err))
		}
		w.stops = append(w.stops, func() { _ = sub.Unsubscribe() })
	}
	if need.Protocol {
		wctx, cancel := context.WithCancel(ctx)
		w.stops = append(w.stops, cancel)
		kw, err := s.docs.Watch(wctx, keyOf(protocolJSON))
		if err != nil {
			w.close()
			return nil, fmt.Errorf("collaboration %s: watch %s in the store: %w", s.opts.Collab, protocolJSON, offline(err))
		}
		w.stops = append(w.stops, func() { drainWatch(kw) })
		w.protoSeen = kw.Updates()
	}
	return w, nil
}

// recheckPublished asks the server for what missing still lacks.
func (s *Store) recheckPublished(missing *Missing) {
	if missing.Protocol && s.hasProtocol() {
		missing.Protocol = false
	}
	if missing.History && s.hasHistory() {
		missing.History = false
	}
}

// awaitPublished waits, up to bound from start, until missing lacks
// nothing, from what w tells it and a recheck every waitRecheck,
// reporting progress every `every`.
func (s *Store) awaitPublished(ctx context.Context, w *publishWatch, missing *Missing, start time.Time, bound, every time.Duration, progress func(m Missing, waited time.Duration)) error {
	deadline := time.NewTimer(bound - time.Since(start))
	defer deadline.Stop()
	report := time.NewTicker(every)
	defer report.Stop()
	recheck := time.NewTicker(waitRecheck)
	defer recheck.Stop()
	if progress != nil {
		progress(*missing, 0)
	}
	protoSeen := w.protoSeen
	for missing.Any() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("collaboration %s: waiting for the store: %w", s.opts.Collab, ctx.Err())
		case <-deadline.C:
			s.recheckPublished(missing)
			if missing.Any() {
				return s.notPublished(*missing, bound)
			}
		case e, ok := <-protoSeen:
			if !ok {
				protoSeen = nil // the watch ended; the recheck takes over
				continue
			}
			// nil marks the end of the first replay; a put is the document.
			if e != nil && e.Operation() == jetstream.KeyValuePut {
				missing.Protocol = false
			}
		case <-w.kick:
			s.recheckPublished(missing)
		case <-recheck.C:
			s.recheckPublished(missing)
		case <-report.C:
			if progress != nil && missing.Any() {
				progress(*missing, time.Since(start))
			}
		}
	}
	return nil
}

func (s *Store) notPublished(m Missing, bound time.Duration) error {
	return fmt.Errorf("collaboration %s: %s in the store after waiting %s: %w (start the host whose folder holds the initialized collaboration first, with acpfs up --store, or wait longer with --store-wait)",
		s.opts.Collab, m, Seconds(bound), ErrNotPublished)
}

// Seconds writes a wait for people: "60s" rather than "1m0s" (whole
// seconds from one second on).
func Seconds(d time.Duration) string {
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return fmt.Sprintf("%ds", int64(d.Round(time.Second)/time.Second))
}

// hasProtocol reports whether the documents' bucket holds protocol.json
// now (false when the server cannot say).
func (s *Store) hasProtocol() bool {
	ctx, cancel := s.ctx()
	defer cancel()
	e, err := s.docs.Get(ctx, keyOf(protocolJSON))
	return err == nil && e.Operation() == jetstream.KeyValuePut
}

// hasHistory reports whether the events stream holds a line now.
func (s *Store) hasHistory() bool {
	ctx, cancel := s.ctx()
	defer cancel()
	info, err := s.events.Info(ctx)
	return err == nil && info.State.LastSeq > 0
}
