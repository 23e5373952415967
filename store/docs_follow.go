package store

// The documents' sync: following the bucket (its watch, catch-up, waiters).

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// restartWatch drops the watch and starts another, whose first replay
// brings the last revision of every key again.
func (d *Docs) restartWatch(ctx context.Context, floor uint64) {
	d.stopWatch()
	d.floor = floor
	d.startWatch(ctx)
}

// startWatch follows the bucket: first the last revision of every key
// (applied together, then the folder is scanned), then every update.
func (d *Docs) startWatch(ctx context.Context) {
	if !d.s.Connected() {
		return
	}
	// The watch's context bounds the creation of its consumer too: a
	// request that the server never answers (its JetStream leader died
	// meanwhile) would otherwise hold this goroutine for good. Ending
	// the context also ends the subscription, so it is only ended on
	// time out, never when the watch was made in time.
	wctx, cancel := context.WithCancel(ctx)
	timer := time.AfterFunc(d.s.opts.Timeout, cancel)
	kw, err := d.s.docs.WatchAll(wctx)
	if !timer.Stop() && err == nil {
		drainWatch(kw)
		kw, err = nil, fmt.Errorf("watch the bucket: %w", context.DeadlineExceeded)
	}
	if err != nil {
		cancel()
		// Retried at every tick: said once.
		if !d.watchFailing {
			slog.Warn("documents: watch the bucket", "collab", d.s.Collab(), "err", offline(err))
		}
		d.watchFailing = true
		return
	}
	d.watchFailing = false
	d.kw, d.updates, d.stopKW = kw, kw.Updates(), cancel
	d.collecting, d.initial, d.watchStart = true, nil, time.Now()
	d.behindSince = time.Time{}
}

func (d *Docs) stopWatch() {
	if d.kw != nil {
		drainWatch(d.kw)
	}
	d.dropWatch()
}

// dropWatch forgets the watch (stopped, or ended by itself).
func (d *Docs) dropWatch() {
	if d.stopKW != nil {
		d.stopKW()
	}
	d.kw, d.updates, d.stopKW, d.collecting, d.initial = nil, nil, nil, false, nil
}

// drainWatch stops a watch. Its subscription blocks on a full channel:
// it is drained until the subscription closes it.
func drainWatch(kw jetstream.KeyWatcher) {
	ch := kw.Updates()
	_ = kw.Stop()
	go func() {
		for range ch {
		}
	}()
}

func (d *Docs) onEntry(e jetstream.KeyValueEntry, ok bool) {
	switch {
	case !ok:
		// The subscription ended (connection closed, consumer lost):
		// the tick starts another.
		d.dropWatch()
	case e == nil:
		// The last initial value: protocol.json first, so that a host
		// that starts from an empty folder gets a collaboration before
		// its documents.
		initial := d.initial
		d.collecting, d.initial = false, nil
		d.applied = max(d.applied, d.floor)
		d.floor = 0
		pk := keyOf(protocolJSON)
		sort.SliceStable(initial, func(i, j int) bool {
			return initial[i].Key() == pk && initial[j].Key() != pk
		})
		for _, e := range initial {
			d.applyEntry(e)
		}
		// What changed here meanwhile (offline, or before this host
		// started) is published now.
		d.scan("")
		d.readyOnce.Do(func() { close(d.ready) })
		d.checkWaiters()
	case d.collecting:
		d.initial = append(d.initial, e)
	default:
		d.applyEntry(e)
		d.checkWaiters()
	}
}

func (d *Docs) onSync(done chan error) {
	if !d.s.Connected() {
		done <- fmt.Errorf("documents: %w", ErrOffline)
		return
	}
	d.expireBusy()
	d.scan("")
	ctx, cancel := d.s.ctx()
	defer cancel()
	st, err := d.s.docs.Status(ctx)
	if err != nil {
		done <- fmt.Errorf("documents bucket: %w", offline(err))
		return
	}
	var last uint64
	if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok {
		last = bs.StreamInfo().State.LastSeq
	}
	d.waiters = append(d.waiters, waiter{rev: last, done: done})
	d.checkWaiters()
}

func (d *Docs) checkWaiters() {
	if d.kw == nil || d.collecting {
		return
	}
	keep := d.waiters[:0]
	for _, w := range d.waiters {
		if d.applied >= w.rev {
			w.done <- nil
		} else {
			keep = append(keep, w)
		}
	}
	d.waiters = keep
}
