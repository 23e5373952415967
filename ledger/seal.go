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
	case KindCheckpoint, KindSegmentEnd, KindSegmentStart, KindGap, KindLedgerRecovered:
		return true
	}
	return false
}

// sealAndWrite seals the batch and writes it with one write(2). Called
// with the file lock held and the tail in sync. The last record of the
// batch carries the batch MAC, so that the next writer to take the lock
// can tell the tail was written by one of the ledger's writers; a
// checkpoint is added once SignEvery records are unsigned.
func (w *Writer) sealAndWrite(batch []*request, fail func(error) int) int {
	last := -1
	for i, q := range batch {
		if q.rec.Kind == "" {
			q.err = errors.New("append to ledger: record has no kind")
			continue
		}
		last = i
	}
	if last < 0 {
		return 0
	}
	start := w.size
	seq, prev := w.seq, w.hash
	signed := w.signedSeq
	w.buf = w.buf[:0]
	lineStart := 0
	var lastKind Kind
	var headLine []byte
	add := func(r *Record, mac bool) error {
		r.Seq, r.Prev, r.Hash = seq+1, prev, ""
		r.At = w.clock().UTC().Format(timeLayout)
		sanitize(r)
		sign := signedKind(r.Kind)
		if sign && r.Kind == KindCheckpoint {
			r.Count = r.Seq - 1 - signed
		}
		r.Key, r.MAC, r.Sig = "", "", ""
		// Every file this writer starts states the format it is in.
		r.Version = 0
		if r.Seq == 1 || r.Kind == KindSegmentStart {
			r.Version = CurrentVersion
		}
		if sign || mac {
			if err := w.key.seal(w.enc, r, sign); err != nil {
				return err
			}
		}
		n := len(w.buf)
		buf, err := w.enc.appendLine(w.buf, r)
		if err != nil {
			return err
		}
		w.buf, lineStart = buf, n
		seq, prev, lastKind = r.Seq, r.Hash, r.Kind
		if sign {
			signed = r.Seq
			if r.Kind != KindSegmentEnd {
				headLine = w.buf[n:]
			}
		}
		return nil
	}
	if b := w.resumed; b != nil {
		r := Record{Kind: KindLedgerRecovered, Detail: fmt.Sprintf("writing resumed after the ledger was repaired; it had stopped at seq %d: %s", b.Seq, b.Reason)}
		if err := add(&r, false); err != nil {
			return fail(fmt.Errorf("append seq %d: %w", seq+1, err))
		}
	}
	n := 0
	for i, q := range batch {
		if q.rec.Kind == "" {
			continue
		}
		r := q.rec
		if r.Kind == KindCheckpoint && seq == signed {
			continue // nothing left to cover
		}
		if err := add(&r, i == last); err != nil {
			q.err = fmt.Errorf("append seq %d: %w", seq+1, err)
			continue
		}
		q.rec, q.written = r, true
		n++
	}
	if n > 0 && seq-signed >= int64(w.opts.SignEvery) {
		r := Record{Kind: KindCheckpoint}
		if err := add(&r, false); err != nil {
			return fail(fmt.Errorf("append checkpoint seq %d: %w", seq+1, err))
		}
	}
	if len(w.buf) == 0 {
		return 0
	}
	if _, err := w.f.Write(w.buf); err != nil {
		w.failing.Store(true)
		w.rollback(start)
		return fail(fmt.Errorf("append seq %d..%d to ledger %s: %w", w.seq+1, seq, w.path, err))
	}
	if headLine != nil {
		// The head must follow every checkpoint: a checkpoint the head
		// does not know of could be cut off without a trace.
		if err := w.writeHead(headLine); err != nil {
			w.failing.Store(true)
			w.rollback(start)
			return fail(fmt.Errorf("append seq %d..%d to ledger %s: the head file cannot follow: %w", w.seq+1, seq, w.path, err))
		}
	}
	w.resumed = nil
	w.failing.Store(false)
	w.size = start + int64(len(w.buf))
	w.seq, w.hash, w.signedSeq, w.lastKind = seq, prev, signed, lastKind
	w.lastLine = append(w.lastLine[:0], w.buf[lineStart:]...)
	if cap(w.buf) > 1<<20 {
		w.buf = nil // do not keep a huge buffer after a burst
	}
	if w.signedSeq < w.seq {
		w.armSigner()
	}
	return n
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
			_, _ = w.append(Record{Kind: KindCheckpoint})
		}
	})
}
