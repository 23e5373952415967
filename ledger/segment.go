package ledger

import (
	"errors"
	"fmt"
	"log/slog"

	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/internal/atomicfile"
)

// defaultSegmentBytes is the size at which a writer seals the ledger's
// file and starts a new one: big enough that rotation is rare, small
// enough that a segment can be copied, archived or verified on its own.
const defaultSegmentBytes = 128 << 20

// rotate seals the current file with a signed segment_end record, keeps
// it under its segment name, and continues in a new file at the ledger's
// name that starts with a signed segment_start record. Called with the
// file lock held and the tail in sync. Each step can be interrupted: the
// next writer finishes a rotation whose segment_end is written
// (finishRotation).
func (w *Writer) rotate() error {
	first, err := w.firstSeq()
	if err != nil {
		return err
	}
	end := Record{Kind: KindSegmentEnd, Detail: "sealed as " + SegmentName(w.dir.base, first)}
	if n := w.sealAndWrite([]*request{{rec: end}}, func(err error) int { w.rotErr = err; return 0 }); n == 0 {
		return fmt.Errorf("seal segment: %w", w.rotErr)
	}
	return w.finishRotation(first)
}

// finishRotation does the steps of a rotation after its segment_end.
func (w *Writer) finishRotation(first int64) error {
	if err := w.f.Sync(); err != nil {
		return fmt.Errorf("seal segment: fsync: %w", err)
	}
	seg := SegmentName(w.dir.base, first)
	if err := unix.Linkat(w.fd, "", w.dir.fd, seg, unix.AT_EMPTY_PATH); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("keep segment %s: %w", seg, err)
	}
	// The next file is written under a temporary name and installed by
	// the one rule of internal/atomicfile, kept open: it is the ledger.
	tmp, err := atomicfile.At(w.dir.fd).NewTempOpen(w.dir.base, unix.O_RDWR|unix.O_APPEND)
	if err != nil {
		return fmt.Errorf("start segment: %w", err)
	}
	nf := tmp.File()
	nfd := int(nf.Fd())
	if err := lockFile(nfd); err != nil {
		tmp.Discard()
		return fmt.Errorf("start segment: lock: %w", err)
	}
	old, oldLine, oldVersion, oldCtx := w.f, w.lastLine, w.version, w.ctx
	w.syncMu.Lock()
	w.f, w.fd, w.size = nf, nfd, 0
	w.syncMu.Unlock()
	// A new file is in the writer's format, whatever the last one's.
	w.version, w.ctx = w.opts.version, lineCtx{}
	start := Record{Kind: KindSegmentStart, Detail: "follows " + seg}
	// undo keeps the old file as the ledger; the next append tries again.
	undo := func(err error) error {
		w.syncMu.Lock()
		w.f, w.fd, w.lastLine = old, int(old.Fd()), oldLine
		w.version, w.ctx = oldVersion, oldCtx
		w.syncMu.Unlock()
		tmp.Discard()
		w.size = -1
		return fmt.Errorf("start segment: %w", err)
	}
	if n := w.sealAndWrite([]*request{{rec: start}}, func(err error) int { w.rotErr = err; return 0 }); n == 0 {
		return undo(w.rotErr)
	}
	if err := tmp.InstallOpen(w.dir.base); err != nil {
		if !tmp.Renamed() {
			return undo(err)
		}
		// Renamed: only the directory's fsync failed. The new file
		// is the ledger; the next fsync of the directory covers it.
		slog.Warn("ledger: fsync of the directory after a rotation", "err", err)
	}
	_ = old.Close() // releases its lock; writers waiting on it follow the rotation
	slog.Info("ledger: sealed a segment", "segment", seg, "next seq", w.seq+1)
	return nil
}

// firstSeq reads the seq of the current file's first record.
func (w *Writer) firstSeq() (int64, error) {
	line, err := readLineAt(w.f, 0, w.size)
	if err != nil || line == nil {
		return 0, fmt.Errorf("read the first record: %v", err)
	}
	r, err := decodeLine(line)
	if err != nil {
		return 0, fmt.Errorf("read the first record: %w", err)
	}
	return r.Seq, nil
}

// followRotation reports whether the name's change is a rotation by
// another writer: this writer's file ends with a sealed segment_end, and
// the file now at the name continues the chain from it. It then switches
// to that file.
func (w *Writer) followRotation() bool {
	size, err := fstatSize(w.fd)
	if err != nil {
		return false
	}
	t, err := readTail(w.f, size)
	if err != nil || t.cut != nil || t.last.Kind != KindSegmentEnd || !w.key.Public().checkSig(w.enc, &t.last) {
		return false
	}
	if !w.adopt() {
		return false
	}
	nsize, err := fstatSize(w.fd)
	if err != nil {
		return false
	}
	line, err := readLineAt(w.f, 0, nsize)
	if err != nil || line == nil {
		return false
	}
	if err := checkVersion(w.path, line, &fastLine{}, false); err != nil {
		// A newer acpfs started the next segment: this writer stops
		// rather than append records of its version to it.
		w.formatErr = fmt.Errorf("append to ledger: %w", err)
		return false
	}
	first, err := decodeLine(line)
	if err != nil || first.Kind != KindSegmentStart || first.Prev != t.hash || first.Seq != t.seq+1 || !w.key.Public().checkSig(w.enc, &first) {
		return false
	}
	w.seq, w.hash, w.size, w.lastLine = t.seq, t.hash, 0, nil
	w.version, w.ctx = fileVersion(line, &fastLine{}, false), lineCtx{}
	// Read the rest (others may have appended already) as appends of
	// another writer.
	return true
}

// finishInterrupted completes a rotation whose segment_end is the last
// record of the file at the ledger's name.
func (w *Writer) finishInterrupted() error {
	first, err := w.firstSeq()
	if err != nil {
		return err
	}
	slog.Warn("ledger: finishing an interrupted rotation", "path", w.path)
	return w.finishRotation(first)
}
