package ledger

import (
	"errors"
	"fmt"
	"time"
)

// signedKind reports whether records of this kind always carry an
// Ed25519 signature: they are what a reviewer's trust rests on.
func signedKind(kind Kind) bool {
	switch kind {
	case KindSignedCheckpoint, KindSegmentEnd, KindSegmentStart, KindGap, KindLedgerRecovered:
		return true
	}
	return false
}

// sealAndWrite seals the batch and writes it with one write(2). Called
// with the file lock held and the tail in sync. The last record of the
// batch carries the batch MAC, so that the next writer to take the lock
// can tell the tail was written by one of the ledger's writers; a
// signed checkpoint is added once SignEvery records are unsigned.
func (w *Writer) sealAndWrite(batch []*request, fail func(error) int) int {
	last := refuseKindless(batch)
	if last < 0 {
		return 0
	}
	start := w.size
	s := batchSeal{w: w, pos: w.pos(), signed: w.signedSeq}
	w.buf = w.buf[:0]
	n, err := s.sealBatch(batch, last)
	if err != nil {
		return fail(err)
	}
	if len(w.buf) == 0 {
		return 0
	}
	if err := w.writeSealed(&s, start); err != nil {
		return fail(err)
	}
	w.commitSealed(&s, start)
	return n
}

// refuseKindless fails every request whose record has no kind and returns
// the index of the last one that has, -1 when none has.
func refuseKindless(batch []*request) int {
	last := -1
	for i, q := range batch {
		if q.rec.Kind == "" {
			q.err = errors.New("append to ledger: record has no kind")
			continue
		}
		last = i
	}
	return last
}

// batchSeal is the chain's state while one batch is sealed into w.buf:
// the writer's own state changes only once the batch is on disk.
type batchSeal struct {
	w         *Writer
	pos       chainPos // after the last sealed record
	signed    int64    // the seq the last signature covers
	lineStart int      // where the last line starts in w.buf
	lastKind  Kind
	headLine  []byte // the last signed checkpoint's line, for the head file
}

// sealBatch seals the records of the batch (after a ledger_recovered
// record when writing resumes after a repair, and before a signed
// checkpoint when SignEvery records are unsigned). A request whose record
// cannot be sealed fails alone; the error returned fails the whole batch.
func (s *batchSeal) sealBatch(batch []*request, last int) (int, error) {
	w := s.w
	if b := w.resumed; b != nil {
		r := Record{Kind: KindLedgerRecovered, Detail: fmt.Sprintf("writing resumed after the ledger was repaired; it had stopped at seq %d: %s", b.Seq, b.Reason)}
		if err := s.add(&r, false); err != nil {
			return 0, fmt.Errorf("append seq %d: %w", s.pos.seq+1, err)
		}
	}
	n := 0
	for i, q := range batch {
		if q.rec.Kind == "" {
			continue
		}
		r := q.rec
		if r.Kind == KindSignedCheckpoint && s.pos.seq == s.signed {
			continue // nothing left to cover
		}
		if err := s.add(&r, i == last); err != nil {
			q.err = fmt.Errorf("append seq %d: %w", s.pos.seq+1, err)
			continue
		}
		q.rec, q.written = r, true
		n++
	}
	if n > 0 && s.pos.seq-s.signed >= int64(w.opts.SignEvery) {
		r := Record{Kind: KindSignedCheckpoint}
		if err := s.add(&r, false); err != nil {
			return 0, fmt.Errorf("append checkpoint seq %d: %w", s.pos.seq+1, err)
		}
	}
	return n, nil
}

// add links r to the chain, stamps it, seals it (a signature for the
// signed kinds, the batch MAC when mac is set) and appends its line to
// w.buf.
func (s *batchSeal) add(r *Record, mac bool) error {
	w := s.w
	r.Seq = s.pos.seq + 1
	r.At = Stamp(w.clock())
	sanitize(r)
	sign := signedKind(r.Kind)
	if sign && r.Kind == KindSignedCheckpoint {
		r.Count = r.Seq - 1 - s.signed
	}
	// Every file this writer starts states the format it is in.
	r.Version = 0
	if s.pos.start {
		r.Version = w.version
	}
	n := len(w.buf)
	buf, err := w.enc.encodeNext(w.buf, r, &s.pos, w.version, w.key, sign, mac)
	if err != nil {
		return err
	}
	w.buf, s.lineStart = buf, n
	s.pos.advance(r)
	s.lastKind = r.Kind
	if sign {
		s.signed = r.Seq
		if r.Kind != KindSegmentEnd {
			s.headLine = w.buf[n:]
		}
	}
	return nil
}

// writeSealed writes the sealed batch with one write(2), then the head
// file when the batch holds a signed checkpoint; on failure it cuts the
// file back to start and marks the writer failing.
func (w *Writer) writeSealed(s *batchSeal, start int64) error {
	if _, err := w.f.Write(w.buf); err != nil {
		w.failing.Store(true)
		w.rollback(start)
		return fmt.Errorf("append seq %d..%d to ledger %s: %w", w.seq+1, s.pos.seq, w.path, err)
	}
	if s.headLine != nil {
		// The head must follow every signed checkpoint: one the head does
		// not know of could be cut off without a trace.
		if err := w.writeHead(s.headLine); err != nil {
			w.failing.Store(true)
			w.rollback(start)
			return fmt.Errorf("append seq %d..%d to ledger %s: the head file cannot follow: %w", w.seq+1, s.pos.seq, w.path, err)
		}
	}
	return nil
}

// commitSealed makes the written batch the writer's state, and arms the
// signer when records are left unsigned.
func (w *Writer) commitSealed(s *batchSeal, start int64) {
	w.resumed = nil
	w.failing.Store(false)
	w.size = start + int64(len(w.buf))
	w.seq, w.hash, w.ctx, w.signedSeq, w.lastKind = s.pos.seq, s.pos.hash, s.pos.ctx, s.signed, s.lastKind
	w.lastLine = append(w.lastLine[:0], w.buf[s.lineStart:]...)
	if cap(w.buf) > 1<<20 {
		w.buf = nil // do not keep a huge buffer after a burst
	}
	if w.signedSeq < w.seq {
		w.armSigner()
	}
}

// armSigner makes sure a checkpoint follows within SignAfter, so that no
// record stays without a signature for long, even when the ledger goes
// quiet.
func (w *Writer) armSigner() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.signTimer != nil || w.closed {
		return
	}
	w.signTimer = time.AfterFunc(w.opts.SignAfter, func() {
		w.mu.Lock()
		w.signTimer = nil
		closed := w.closed
		w.mu.Unlock()
		if !closed && w.broken.Load() == nil {
			_, _ = w.append(Record{Kind: KindSignedCheckpoint})
		}
	})
}
