package store

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/acpfs/acpfs/protocol"
)

// Events is the history's authority: a protocol.Replica over the
// collaboration's stream, whose message N is line N of events.jsonl.
type Events struct{ s *Store }

var _ protocol.Replica = Events{}

// Events returns the history's authority.
func (s *Store) Events() Events { return Events{s} }

// seen raises the floor below which the stream surely holds messages: a
// clustered stream's leader refuses an append against a sequence it has
// taken before its state (what Since reads) shows the message.
func (e Events) seen(seq uint64) {
	for {
		cur := e.s.eventsFloor.Load()
		if seq <= cur || e.s.eventsFloor.CompareAndSwap(cur, seq) {
			return
		}
	}
}

// wrongLast reads the stream's last sequence from a refused append
// ("wrong last sequence: N").
// Compiled at first use, not when every CLI process starts.
var wrongLast = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`wrong last sequence: (\d+)`) })

// Publish appends line as message n, on condition that the stream holds
// n-1 messages. A publish whose acknowledgement is lost is sent again
// with the same message id, which the server answers with the first
// acknowledgement instead of storing a second copy; the id names this
// host and this call, so another host's identical line is never taken
// for ours.
func (e Events) Publish(n int, line []byte) error {
	if err := e.s.Check(); err != nil {
		return err
	}
	msg := &nats.Msg{Subject: e.s.eventsSubject(), Data: line, Header: nats.Header{}}
	msg.Header.Set(hostHeader, e.s.opts.Host)
	id := e.s.opts.Host + "-" + nuid.Next()
	var err error
	for try := 0; try < 2; try++ {
		var ack *jetstream.PubAck
		ctx, cancel := e.s.ctx()
		ack, err = e.s.js.PublishMsg(ctx, msg,
			jetstream.WithExpectLastSequence(uint64(n-1)), jetstream.WithMsgID(id))
		cancel()
		switch {
		case err == nil && ack.Sequence == uint64(n):
			e.seen(ack.Sequence)
			return nil
		case err == nil:
			return fmt.Errorf("publish line %d: the stream took it as message %d", n, ack.Sequence)
		case isWrongLast(err):
			if m := wrongLast().FindStringSubmatch(err.Error()); m != nil {
				if last, perr := strconv.ParseUint(m[1], 10, 64); perr == nil {
					e.seen(last)
				}
			}
			return fmt.Errorf("line %d: %w", n, protocol.ErrConflict)
		case !errors.Is(offline(err), ErrOffline):
			return fmt.Errorf("publish line %d: %w", n, err)
		}
	}
	err = offline(err)
	e.s.unreachable(err)
	return fmt.Errorf("publish line %d: %w", n, err)
}

// hostHeader names the host that appended a message.
const hostHeader = "Acpfs-Host"

func isWrongLast(err error) bool {
	var api *jetstream.APIError
	if !errors.As(err, &api) {
		return false
	}
	return api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}

// offline turns the client's connection errors into ErrOffline, so that
// callers can tell "try later" from a refusal.
func offline(err error) error {
	switch {
	case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrNoResponders),
		errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, nats.ErrDisconnected), errors.Is(err, jetstream.ErrNoStreamResponse):
		return fmt.Errorf("%w: %v", ErrOffline, err)
	}
	return err
}

// Since returns the stream's lines after the first n.
func (e Events) Since(n int) ([][]byte, error) {
	if err := e.s.Check(); err != nil {
		return nil, err
	}
	ctx, cancel := e.s.ctx()
	defer cancel()
	info, err := e.s.events.Info(ctx)
	// A message the stream took may not show in its state yet: wait for
	// it (a while) rather than take the folder for ahead of the stream.
	// A floor never reached (the message was lost with a leader before a
	// quorum stored it) is given up, so that it cannot stop appends.
	deadline := time.Now().Add(2 * time.Second)
	for wait := time.Millisecond; err == nil && info.State.LastSeq < e.s.eventsFloor.Load(); wait = min(2*wait, 50*time.Millisecond) {
		if time.Now().After(deadline) {
			e.s.eventsFloor.Store(info.State.LastSeq)
			break
		}
		time.Sleep(wait)
		info, err = e.s.events.Info(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("events stream: %w", offline(err))
	}
	last := int(info.State.LastSeq)
	if last <= n {
		return nil, nil
	}
	if info.State.FirstSeq != 1 || int(info.State.Msgs) != last {
		return nil, fmt.Errorf("events stream holds messages %d..%d (%d): the history must start at 1 without gaps",
			info.State.FirstSeq, last, info.State.Msgs)
	}
	return e.fetch(ctx, n+1, last)
}

// fetch reads messages from..to of the events stream. A message is one
// line: one holding a line break would put two lines in the copy under
// one number, so it is refused whoever published it.
func (e Events) fetch(ctx context.Context, from, to int) ([][]byte, error) {
	out, err := e.fetchRaw(ctx, from, to)
	for i, m := range out {
		if bytes.IndexByte(m, '\n') >= 0 {
			return nil, fmt.Errorf("events message %d holds a line break", from+i)
		}
	}
	return out, err
}

func (e Events) fetchRaw(ctx context.Context, from, to int) ([][]byte, error) {
	out := make([][]byte, 0, to-from+1)
	if to-from < 4 {
		for seq := from; seq <= to; seq++ {
			m, err := e.s.events.GetMsg(ctx, uint64(seq))
			if err != nil {
				return nil, fmt.Errorf("events message %d: %w", seq, offline(err))
			}
			out = append(out, m.Data)
		}
		return out, nil
	}
	c, err := e.s.events.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:   uint64(from),
	})
	if err != nil {
		return nil, fmt.Errorf("events consumer: %w", offline(err))
	}
	for len(out) < to-from+1 {
		batch, err := c.Fetch(min(to-from+1-len(out), 4096), jetstream.FetchMaxWait(e.s.opts.Timeout))
		if err != nil {
			return nil, fmt.Errorf("events fetch: %w", offline(err))
		}
		got := 0
		for m := range batch.Messages() {
			meta, err := m.Metadata()
			if err != nil {
				return nil, fmt.Errorf("events fetch: %w", err)
			}
			if int(meta.Sequence.Stream) != from+len(out) {
				return nil, fmt.Errorf("events fetch: message %d where %d was due", meta.Sequence.Stream, from+len(out))
			}
			out = append(out, m.Data())
			got++
		}
		if err := batch.Error(); err != nil {
			return nil, fmt.Errorf("events fetch: %w", offline(err))
		}
		if got == 0 {
			return nil, fmt.Errorf("events fetch: %w: no message after %d", ErrOffline, from+len(out)-1)
		}
	}
	return out, nil
}

// Seed makes the stream and folder/events.jsonl agree before a host
// serves the folder: the lines of a folder whose stream is still empty
// (a collaboration initialized on this host) are published, and a
// folder whose lines differ from the stream's, or go on past them, is
// refused rather than merged.
func (e Events) Seed(folder string) error {
	local, err := readLines(filepath.Join(folder, protocol.EventsFile))
	if err != nil {
		return err
	}
	remote, err := e.Since(0)
	if err != nil {
		return err
	}
	for i := 0; i < len(local) && i < len(remote); i++ {
		if !bytes.Equal(local[i], remote[i]) {
			return fmt.Errorf("%s line %d differs from the store's history of %s: this folder belongs to another collaboration or was changed without the store",
				protocol.EventsFile, i+1, e.s.opts.Collab)
		}
	}
	if len(remote) > 0 && len(local) > len(remote) {
		// Only the host that starts a collaboration brings lines of its
		// own (its initialized event); lines a later host holds beyond
		// the stream were written without the store.
		return fmt.Errorf("%s has %d line(s) after line %d that the store's history of %s does not hold (written without the store?); remove them to start",
			protocol.EventsFile, len(local)-len(remote), len(remote), e.s.opts.Collab)
	}
	for i := len(remote); i < len(local); i++ {
		if err := e.Publish(i+1, local[i]); err != nil {
			return fmt.Errorf("seed the store with %s line %d: %w", protocol.EventsFile, i+1, err)
		}
	}
	return nil
}

// readLines returns the complete lines of path (none if it is missing).
func readLines(path string) ([][]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|noFollow, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out [][]byte
	r := bufio.NewReaderSize(f, 1<<16)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			break // a last line without newline is not complete
		}
		out = append(out, bytes.Clone(line[:len(line)-1]))
	}
	return out, nil
}

// Follow keeps log's folder caught up with the stream until ctx ends:
// every message on the subject, every reconnection and a slow tick make
// it pull what the folder lacks. Errors are logged, not fatal: a host
// cut off from the server keeps serving its copy.
func (e Events) Follow(ctx context.Context, log *protocol.Log) error {
	kick := make(chan struct{}, 1)
	poke := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	sub, err := e.s.nc.Subscribe(e.s.eventsSubject(), func(*nats.Msg) { poke() })
	if err != nil {
		return fmt.Errorf("follow %s: %w", e.s.eventsSubject(), err)
	}
	e.s.OnChange(func(up bool) {
		if up {
			poke()
		}
	})
	go func() {
		defer sub.Unsubscribe()
		tick := time.NewTicker(2 * time.Second)
		defer tick.Stop()
		poke()
		for {
			select {
			case <-ctx.Done():
				return
			case <-kick:
			case <-tick.C:
			}
			if !e.s.Connected() {
				continue
			}
			if n, err := log.Pull(); err != nil {
				slog.Warn("catch up with the store", "collab", e.s.opts.Collab, "err", err)
			} else if n > 0 {
				slog.Debug("caught up with the store", "lines", n)
			}
		}
	}()
	return nil
}
