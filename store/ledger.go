package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/acpfs/acpfs/internal/atomicfile"
	"github.com/acpfs/acpfs/ledger"
)

// Each host ships its ledger to the subject acp.<collab>.ledger.<host> of
// the collaboration's ledger stream. A message is either
//
//   - a key message (header Acpfs-Ledger: key): the host's ledger.pub, as
//     the file holds it, sent before the first record it signs; its
//     header Acpfs-Ledger-After names the record it follows ("SEQ HASH",
//     "0 " for none); or
//   - a records message (Acpfs-Ledger: records): one or more consecutive
//     record lines exactly as the host's ledger file holds them, newline
//     included.
//
// Every message carries Acpfs-Ledger-Key, the id of the key the shipper
// checks signatures with, so that a shipper restarted with another key
// sends that key first. A shipper publishes on condition that the
// subject still ends with the message it last saw (expected last
// sequence per subject), so two shippers of one host never interleave;
// after a lost acknowledgement or a reconnection it asks the stream for
// the subject's last message and continues after the record it holds.
const (
	ledgerHeader      = "Acpfs-Ledger"
	ledgerKeyHeader   = "Acpfs-Ledger-Key"
	ledgerAfterHeader = "Acpfs-Ledger-After"
	ledgerKindKey     = "key"
	ledgerKindRecords = "records"
)

// shipPoll is how often a shipper looks for new records while nothing
// else wakes it: a writer signs within a second of going quiet, and only
// signed records are shipped.
const shipPoll = 250 * time.Millisecond

// maxShipMessage bounds the records of one message, below the server's
// default payload limit (1 MiB).
const maxShipMessage = 256 << 10

// maxKeyMessage bounds a key message: a ledger.pub line is about 80
// bytes.
const maxKeyMessage = 512

// Shipper copies this host's ledger to the store as its writers sign it.
// The local ledger stays the host's ledger, and it is the spool: while
// the server is unreachable records stay there, and the shipper continues
// from the stream's last record when the connection is back.
type Shipper struct {
	s       *Store
	subject string
	key     ledger.PublicKey
	keyText []byte
	fol     *ledger.Follower

	wake  chan struct{}
	flush chan chan error
	quit  chan struct{}
	done  chan struct{}
	stop  sync.Once

	resync  atomic.Bool // ask the stream where the subject ends before publishing
	shipped atomic.Int64

	// Owned by the shipping goroutine.
	lastMsg  uint64 // stream sequence of the subject's last message
	keySent  bool
	lastWarn string
	// A ledger that cannot be shipped (it diverged from the stream's
	// copy, a record is forged) stays so until an operator acts: it is
	// tried again less and less often, not at every poll.
	backoff time.Duration
	retryAt time.Time
	// Since when records have waited for a signature, to warn once when
	// they wait far longer than a writer takes to sign.
	waitSince  time.Time
	waitWarned bool
	finalErr   error // why the last attempt, at Stop, failed
}

// unsignedWarnAfter is how long records may wait for a signature before
// the shipper warns: writers sign within a second.
const unsignedWarnAfter = 30 * time.Second

// maxShipBackoff bounds the wait between attempts to ship a ledger that
// could not be shipped.
const maxShipBackoff = time.Minute

// ShipLedger starts shipping the ledger at path (with its sealed
// segments) to this host's subject, checking signatures with the public
// key at pubKeyPath (the run directory's ledger.pub). Only records a
// valid signature covers are shipped, bytes unchanged, so the copy
// verifies on any host; a writer signs within a second of going quiet and
// when it closes. It returns at once, also while the server is
// unreachable. Close the ledger's writer before Stop, so that its last
// signed records are shipped.
func ShipLedger(ctx context.Context, s *Store, path, pubKeyPath string) (*Shipper, error) {
	key, err := ledger.LoadPublicKey(pubKeyPath)
	if err != nil {
		return nil, fmt.Errorf("ship ledger: %w", err)
	}
	text, err := readKeyText(pubKeyPath)
	if err != nil {
		return nil, fmt.Errorf("ship ledger: %w", err)
	}
	fol, err := ledger.NewFollower(path, []ledger.PublicKey{key})
	if err != nil {
		return nil, fmt.Errorf("ship ledger: %w", err)
	}
	sh := &Shipper{
		s: s, subject: s.ledgerSubject(s.opts.Host), key: key, keyText: text, fol: fol,
		wake: make(chan struct{}, 1), flush: make(chan chan error), quit: make(chan struct{}), done: make(chan struct{}),
	}
	sh.resync.Store(true)
	s.OnChange(func(up bool) {
		if up {
			// The server may have lost or gained messages meanwhile.
			sh.resync.Store(true)
			sh.nudge()
		}
	})
	go sh.run(ctx)
	return sh, nil
}

// readKeyText reads the public key file as shipped: one short line.
func readKeyText(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|noFollow, 0)
	if err != nil {
		return nil, fmt.Errorf("open ledger public key: %w", err)
	}
	defer f.Close()
	b := make([]byte, maxKeyMessage)
	n, _ := f.Read(b)
	return bytes.Clone(b[:n]), nil
}

func (sh *Shipper) nudge() {
	select {
	case sh.wake <- struct{}{}:
	default:
	}
}

// Shipped returns the seq of the last record the stream acknowledged.
func (sh *Shipper) Shipped() int64 { return sh.shipped.Load() }

// Flush ships every record a signature covers now, and returns when the
// stream holds them: ErrOffline while the server cannot be reached, or
// why the ledger cannot be shipped.
func (sh *Shipper) Flush(ctx context.Context) error {
	reply := make(chan error, 1)
	select {
	case sh.flush <- reply:
	case <-sh.done:
		return errors.New("ship ledger: stopped")
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stop ships what is signed (when the server answers) and stops. It
// returns why records were left to ship (ErrOffline when the server could
// not be reached): they stay in the local ledger, and the next shipper
// sends them.
func (sh *Shipper) Stop() error {
	sh.stop.Do(func() { close(sh.quit) })
	<-sh.done
	_ = sh.fol.Close()
	return sh.finalErr
}

func (sh *Shipper) run(ctx context.Context) {
	defer close(sh.done)
	t := time.NewTicker(shipPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			sh.finalErr = sh.final()
			return
		case <-sh.quit:
			sh.finalErr = sh.final()
			return
		case reply := <-sh.flush:
			reply <- sh.pump()
			continue
		case <-t.C:
		case <-sh.wake:
		}
		if !sh.s.Connected() || time.Now().Before(sh.retryAt) {
			continue
		}
		err := sh.pump()
		sh.watchUnsigned()
		switch {
		case err == nil:
			sh.lastWarn, sh.backoff, sh.retryAt = "", 0, time.Time{}
		case errors.Is(err, ErrOffline):
		default:
			sh.backoff = min(max(2*sh.backoff, time.Second), maxShipBackoff)
			sh.retryAt = time.Now().Add(sh.backoff)
			if msg := err.Error(); msg != sh.lastWarn {
				sh.lastWarn = msg
				slog.Error("store: cannot ship the ledger", "collab", sh.s.opts.Collab, "host", sh.s.opts.Host, "err", err)
			}
		}
	}
}

// watchUnsigned warns when records have waited for a signature for far
// longer than a writer takes to sign them: they are not shipped.
func (sh *Shipper) watchUnsigned() {
	n := sh.fol.Unsigned()
	switch {
	case n == 0:
		sh.waitSince, sh.waitWarned = time.Time{}, false
	case sh.waitSince.IsZero():
		sh.waitSince = time.Now()
	case !sh.waitWarned && time.Since(sh.waitSince) > unsignedWarnAfter:
		sh.waitWarned = true
		slog.Warn("store: ledger records no signature covers are not shipped; run acpfs ledger verify on the ledger",
			"host", sh.s.opts.Host, "records", n, "after seq", sh.Shipped())
	}
}

// final ships the last signed records when the server answers.
func (sh *Shipper) final() error {
	err := sh.pump()
	if err != nil {
		slog.Warn("store: ledger records left to ship at the next start", "host", sh.s.opts.Host, "shipped", sh.Shipped(), "err", err)
	}
	return err
}

// pump publishes every signed record not yet in the stream.
func (sh *Shipper) pump() error {
	if err := sh.s.Check(); err != nil {
		return err
	}
	if sh.resync.Swap(false) {
		if err := sh.resume(); err != nil {
			sh.resync.Store(true)
			return err
		}
	}
	for raced := 0; ; {
		lines, err := sh.fol.Next(4 * maxShipMessage)
		if err != nil {
			return fmt.Errorf("ledger after seq %d: %w", sh.Shipped(), err)
		}
		if len(lines) == 0 {
			return nil
		}
		for len(lines) > 0 {
			n, size := 1, len(lines[0].Data)
			for n < len(lines) && size+len(lines[n].Data) <= maxShipMessage {
				size += len(lines[n].Data)
				n++
			}
			err := sh.publishRecords(lines[:n])
			if errors.Is(err, errRaced) && raced < 3 {
				// Another shipper of this host published these records
				// (or some of them): continue after what it sent.
				raced++
				if err := sh.resume(); err != nil {
					sh.resync.Store(true)
					return err
				}
				break
			}
			if err != nil {
				// Where the stream ends is unknown now: ask it next time.
				sh.resync.Store(true)
				return err
			}
			lines = lines[n:]
		}
	}
}

// errRaced says the subject did not end where this shipper expected:
// another shipper of the host published meanwhile.
var errRaced = errors.New("another shipper of this host published first")

// resume asks the stream for the subject's last message and positions
// the follower after the record it holds; it sends the key when the
// subject does not end with this key's messages.
func (sh *Shipper) resume() error {
	var err error
	for try := 0; try < 3; try++ {
		// Another shipper of the host may send its key first: then start
		// again from its message.
		if err = sh.resumeOnce(); !errors.Is(err, errRaced) {
			return err
		}
	}
	return err
}

func (sh *Shipper) resumeOnce() error {
	ctx, cancel := sh.s.ctx()
	defer cancel()
	m, err := sh.s.ledger.GetLastMsgForSubject(ctx, sh.subject)
	var seq int64
	var hash string
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		sh.lastMsg, sh.keySent = 0, false
	case err != nil:
		return fmt.Errorf("last ledger message of %s: %w", sh.s.opts.Host, offline(err))
	default:
		sh.lastMsg = m.Sequence
		sh.keySent = m.Header.Get(ledgerKeyHeader) == sh.key.ID()
		if seq, hash, err = lastRecord(m); err != nil {
			return fmt.Errorf("ledger message %d of %s: %w", m.Sequence, sh.s.opts.Host, err)
		}
	}
	if err := sh.fol.After(seq, hash); err != nil {
		return fmt.Errorf("the store holds this host's ledger up to seq %d (hash %s): %w", seq, hash, err)
	}
	sh.shipped.Store(seq)
	if !sh.keySent {
		return sh.publishKey(seq, hash)
	}
	return nil
}

// lastRecord returns the seq and hash of the last record a message of
// the subject holds or, for a key message, follows.
func lastRecord(m *jetstream.RawStreamMsg) (int64, string, error) {
	if m.Header.Get(ledgerHeader) == ledgerKindKey {
		seqText, hash, _ := strings.Cut(m.Header.Get(ledgerAfterHeader), " ")
		seq, err := strconv.ParseInt(seqText, 10, 64)
		if err != nil || seq < 0 {
			return 0, "", fmt.Errorf("key message: bad %s header", ledgerAfterHeader)
		}
		return seq, hash, nil
	}
	data, ok := bytes.CutSuffix(m.Data, []byte("\n"))
	if !ok {
		return 0, "", errors.New("records message does not end with a newline")
	}
	line := data[bytes.LastIndexByte(data, '\n')+1:]
	var r struct {
		Seq  int64  `json:"seq"`
		Hash string `json:"hash"`
	}
	if err := json.Unmarshal(line, &r); err != nil || r.Seq < 1 {
		return 0, "", fmt.Errorf("its last line is not a ledger record: %v", err)
	}
	return r.Seq, r.Hash, nil
}

func (sh *Shipper) publishKey(seq int64, hash string) error {
	msg := &nats.Msg{Subject: sh.subject, Data: sh.keyText, Header: nats.Header{}}
	msg.Header.Set(ledgerHeader, ledgerKindKey)
	msg.Header.Set(ledgerAfterHeader, fmt.Sprintf("%d %s", seq, hash))
	msg.Header.Set(hostHeader, sh.s.opts.Host)
	if err := sh.publish(msg, fmt.Sprintf("%s-ledger-key-%s-%d", sh.s.opts.Host, sh.key.ID(), seq)); err != nil {
		return fmt.Errorf("publish the ledger key: %w", err)
	}
	sh.keySent = true
	return nil
}

func (sh *Shipper) publishRecords(lines []ledger.Line) error {
	var data []byte
	for _, l := range lines {
		data = append(data, l.Data...)
	}
	msg := &nats.Msg{Subject: sh.subject, Data: data, Header: nats.Header{}}
	msg.Header.Set(ledgerHeader, ledgerKindRecords)
	msg.Header.Set(hostHeader, sh.s.opts.Host)
	first := lines[0]
	if err := sh.publish(msg, fmt.Sprintf("%s-ledger-%d-%.16s", sh.s.opts.Host, first.Seq, first.Hash)); err != nil {
		return fmt.Errorf("publish ledger seq %d–%d: %w", first.Seq, lines[len(lines)-1].Seq, err)
	}
	sh.shipped.Store(lines[len(lines)-1].Seq)
	return nil
}

// publish sends msg on condition that the subject still ends with the
// message this shipper last saw.
func (sh *Shipper) publish(msg *nats.Msg, id string) error {
	msg.Header.Set(ledgerKeyHeader, sh.key.ID())
	ctx, cancel := sh.s.ctx()
	defer cancel()
	ack, err := sh.s.js.PublishMsg(ctx, msg,
		jetstream.WithExpectLastSequencePerSubject(sh.lastMsg), jetstream.WithMsgID(id))
	if err != nil {
		if isWrongLast(err) {
			return fmt.Errorf("%w: %v", errRaced, err)
		}
		return offline(err)
	}
	sh.lastMsg = ack.Sequence
	return nil
}

// HostLedger is one host's ledger as downloaded from the store.
type HostLedger struct {
	Host string
	// Path is the ledger file in the download directory; sealed segments
	// are beside it, as on the host.
	Path string
	// Keys are the public keys the host published, oldest first; the
	// newest is also in ledger.pub beside Path.
	Keys []ledger.PublicKey
	// Records counts the record lines downloaded.
	Records int64
	// Head: the copy carries a head file (ledger.HeadPath(Path)), the
	// last signed checkpoint the store held. Only written when the ledger stream
	// refuses deletes and purges (a setting no one can take back), so that
	// the store could not have lost the records after it: the copy, kept
	// with --download and verified later, then shows a cut from its end
	// as the host's own ledger would.
	Head bool
}

// FetchLedgers downloads every host's ledger into dir, one directory per
// host named after it, each holding communication_ledger.jsonl (split
// into segments where the host's ledger was) and the keys the host
// published (ledger.pub, the newest, and ledger.<key id>.pub). dir should
// be private and empty. Messages the stream takes after the download
// starts are left out. The stream's content is not trusted: verify the
// files.
func (s *Store) FetchLedgers(ctx context.Context, dir string) ([]HostLedger, error) {
	if err := s.Check(); err != nil {
		return nil, err
	}
	ictx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	info, err := s.ledger.Info(ictx, jetstream.WithSubjectFilter(s.ledgerSubject("*")))
	cancel()
	if err != nil {
		return nil, fmt.Errorf("ledger stream of %s: %w", s.opts.Collab, offline(err))
	}
	prefix := s.ledgerSubject("")
	var hosts []string
	for subj := range info.State.Subjects {
		h, ok := strings.CutPrefix(subj, prefix)
		if !ok || !validName(h) {
			slog.Warn("store: ledger subject with no valid host name skipped", "subject", subj)
			continue
		}
		hosts = append(hosts, h)
	}
	slices.Sort(hosts)
	appendOnly := info.Config.DenyDelete && info.Config.DenyPurge
	out := make([]HostLedger, 0, len(hosts))
	for _, h := range hosts {
		hl, err := s.fetchLedger(ctx, dir, h, info.State.Subjects[s.ledgerSubject(h)], info.State.LastSeq, appendOnly)
		if err != nil {
			return nil, fmt.Errorf("ledger of host %s: %w", h, err)
		}
		out = append(out, hl)
	}
	return out, nil
}

// fetchLedger downloads the first count messages of host's subject, none
// after the stream's message last, and with head the copy's head file.
func (s *Store) fetchLedger(ctx context.Context, dir, host string, count, last uint64, head bool) (HostLedger, error) {
	hdir := filepath.Join(dir, host)
	if err := os.Mkdir(hdir, 0o700); err != nil {
		return HostLedger{}, err
	}
	hl := HostLedger{Host: host, Path: filepath.Join(hdir, "communication_ledger.jsonl")}
	out := &segmentWriter{path: hl.Path}
	defer out.close()
	c, err := s.ledger.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{s.ledgerSubject(host)},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return hl, fmt.Errorf("ledger consumer: %w", offline(err))
	}
	for got := uint64(0); got < count; {
		// A message holds up to maxShipMessage bytes: 64 of them are
		// 16 MiB in flight.
		batch, err := c.Fetch(int(min(count-got, 64)), jetstream.FetchMaxWait(s.opts.Timeout))
		if err != nil {
			return hl, fmt.Errorf("ledger fetch: %w", offline(err))
		}
		n := 0
		for m := range batch.Messages() {
			n++
			meta, err := m.Metadata()
			if err != nil {
				return hl, fmt.Errorf("ledger fetch: %w", err)
			}
			if meta.Sequence.Stream > last {
				continue
			}
			got++
			if m.Headers().Get(ledgerHeader) == ledgerKindKey {
				k, err := saveKey(hdir, m.Data())
				if err != nil {
					return hl, fmt.Errorf("key message %d: %w", meta.Sequence.Stream, err)
				}
				if !slices.ContainsFunc(hl.Keys, func(p ledger.PublicKey) bool { return p.ID() == k.ID() }) {
					hl.Keys = append(hl.Keys, k)
				}
				continue
			}
			lines, err := out.write(m.Data())
			if err != nil {
				return hl, err
			}
			hl.Records += lines
		}
		if err := batch.Error(); err != nil {
			return hl, fmt.Errorf("ledger fetch: %w", offline(err))
		}
		if n == 0 {
			return hl, fmt.Errorf("ledger fetch: %w: %d of %d messages", ErrOffline, got, count)
		}
	}
	if err := out.close(); err != nil {
		return hl, err
	}
	if head && out.signedCheckpoint != nil {
		if err := atomicfile.WriteFile(ledger.HeadPath(hl.Path), out.signedCheckpoint, 0o600); err != nil {
			return hl, fmt.Errorf("download ledger: head: %w", err)
		}
		hl.Head = true
	}
	if len(hl.Keys) > 0 {
		newest := filepath.Join(hdir, "ledger."+hl.Keys[len(hl.Keys)-1].ID()+".pub")
		b, err := os.ReadFile(newest)
		if err != nil {
			return hl, err
		}
		if err := atomicfile.WriteFile(filepath.Join(hdir, ledger.PublicKeyFile), b, 0o600); err != nil {
			return hl, err
		}
	}
	return hl, nil
}

// saveKey checks a key message and keeps it as ledger.<id>.pub in dir.
func saveKey(dir string, data []byte) (ledger.PublicKey, error) {
	if len(data) > maxKeyMessage {
		return ledger.PublicKey{}, fmt.Errorf("%d bytes: not a ledger public key", len(data))
	}
	k, err := ledger.ParsePublicKey(data)
	if err != nil {
		return ledger.PublicKey{}, fmt.Errorf("ledger public key message: %w", err)
	}
	return k, atomicfile.WriteFile(filepath.Join(dir, "ledger."+k.ID()+".pub"), data, 0o600)
}

// segmentWriter writes downloaded record lines into a ledger file,
// sealing it into a segment after each segment_end record as the host's
// writer did, so that verify checks the boundaries as it would there.
type segmentWriter struct {
	path  string
	f     *os.File
	first int64 // seq of the current file's first record (0: unknown)
	lines int64
	// signedCheckpoint is the last signed checkpoint line written, for
	// the head.
	signedCheckpoint []byte
}

func (w *segmentWriter) write(data []byte) (int64, error) {
	var n int64
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line = data[:i+1]
		}
		data = data[len(line):]
		if w.f == nil {
			f, err := os.OpenFile(w.path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|noFollow, 0o600)
			if err != nil {
				return n, fmt.Errorf("download ledger: %w", err)
			}
			w.f, w.lines = f, 0
		}
		if _, err := w.f.Write(line); err != nil {
			return n, fmt.Errorf("download ledger: %w", err)
		}
		n++
		w.lines++
		var r struct {
			Seq  int64       `json:"seq"`
			Kind ledger.Kind `json:"kind"`
		}
		if json.Unmarshal(line, &r) != nil {
			// Not a record: verify reports it where it stands.
			continue
		}
		if w.lines == 1 {
			w.first = r.Seq
		}
		if r.Kind == ledger.KindSignedCheckpoint && bytes.HasSuffix(line, []byte("\n")) {
			w.signedCheckpoint = append(w.signedCheckpoint[:0], line...)
		}
		if r.Kind == ledger.KindSegmentEnd && w.first > 0 {
			if err := w.seal(); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// seal closes the current file under its segment's name. A name already
// taken (a stream whose seqs repeat) leaves the lines where they are, for
// verify to report.
func (w *segmentWriter) seal() error {
	seg := ledger.SegmentName(w.path, w.first)
	if _, err := os.Lstat(seg); err == nil {
		return nil
	}
	if err := w.close(); err != nil {
		return err
	}
	if err := os.Rename(w.path, seg); err != nil {
		return fmt.Errorf("download ledger: %w", err)
	}
	return nil
}

func (w *segmentWriter) close() error {
	if w.f == nil {
		return nil
	}
	err := w.f.Close()
	w.f = nil
	if err != nil {
		return fmt.Errorf("download ledger: %w", err)
	}
	return nil
}
