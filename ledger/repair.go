package ledger

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/acpfs/acpfs/internal/atomicfile"
	"github.com/acpfs/acpfs/internal/digest"
)

// Repair actions, in RepairInfo.Action.
const (
	RepairCutTorn         = "cut_torn"         // a torn last line was cut
	RepairRestored        = "restored"         // a writer's preserved copy was put back at the ledger's name
	RepairGap             = "gap"              // records removed from the end were acknowledged by a signed gap record
	RepairCutForeign      = "cut_foreign"      // records appended without the key were moved aside
	RepairSigned          = "signed"           // a tail sealed by a writer that stopped before signing was signed
	RepairRestoredNewline = "restored_newline" // a sealed record whose line end was lost or replaced got it back
	repairDisplaced       = ".displaced-"      // what stood at the ledger's name before a restore
	repairForeignPart     = ".foreign-"        // records cut because no writer sealed them
)

// Summary says in one line what the repair did.
func (i *RepairInfo) Summary() string {
	switch i.Action {
	case RepairRestored:
		return "restored the records a writer had kept: " + i.Detail
	case RepairGap, RepairCutForeign, RepairSigned, RepairRestoredNewline:
		return fmt.Sprintf("%s; recorded as seq %d", i.Detail, i.Record.Seq)
	}
	return fmt.Sprintf("cut %d torn byte(s) at offset %d (sha256 %s), recorded as seq %d", i.Bytes, i.Offset, short(i.SHA256), i.Record.Seq)
}

// Repair is the operator's way back after a writer stopped or a crash.
// In order, it:
//
//   - puts back the copy a stopped writer kept (see PreservedSuffix) when
//     the ledger's name was deleted or replaced, moving whatever stands at
//     the name aside;
//   - cuts a torn last line and records how many bytes it cut and their
//     SHA-256 (a KindRepair record);
//   - moves records that no writer sealed (appended without the key) into
//     a file beside the ledger and records their SHA-256;
//   - acknowledges records removed from the end (the head file names a
//     later checkpoint) with a signed KindGap record that links both
//     sides: it follows the last record left, and its SHA256 is the hash
//     of the last record lost;
//   - signs a checkpoint over a tail that a writer sealed (batch MAC) but
//     did not sign because it was killed.
//
// It refuses records edited in place: that is for a human to judge, and
// verify shows where. The key must be in the ledger's directory. It
// returns nil when there was nothing to repair.
func Repair(path string) (*RepairInfo, error) {
	if _, err := os.Lstat(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("repair ledger: %w", err)
	}
	d, err := openLedgerDir(filepath.Dir(path), filepath.Base(path))
	if err != nil {
		return nil, fmt.Errorf("repair ledger: %w", err)
	}
	d.close()
	key, err := LoadOrCreateKey(filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("repair ledger: %w", err)
	}
	var note *Broken
	if b, err := os.ReadFile(path + BrokenFile); err == nil {
		note = &Broken{}
		if err := json.Unmarshal(b, note); err != nil {
			return nil, fmt.Errorf("repair ledger: read %s: %w", path+BrokenFile, err)
		}
	}
	if note != nil && note.Preserved != "" {
		if info, err := restore(path, note); info != nil || err != nil {
			return info, err
		}
	}
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("repair ledger: %w", err)
	}
	r := &repairer{path: path, key: key, enc: newEncoder(), note: note}
	return r.run()
}

// restore puts a preserved copy back at the ledger's name.
func restore(path string, note *Broken) (*RepairInfo, error) {
	if _, err := os.Lstat(note.Preserved); err != nil {
		return nil, nil // already put back, or removed by hand
	}
	detail := fmt.Sprintf("%s is the ledger again (it ends at seq %d)", note.Preserved, note.Seq)
	if _, err := os.Lstat(path); err == nil {
		aside := fmt.Sprintf("%s%s%d", path, repairDisplaced, time.Now().Unix())
		if err := os.Rename(path, aside); err != nil {
			return nil, fmt.Errorf("repair ledger: move aside what stands at %s: %w", path, err)
		}
		detail += "; what stood at its name is now " + aside
	}
	if err := os.Rename(note.Preserved, path); err != nil {
		return nil, fmt.Errorf("repair ledger: put back %s: %w", note.Preserved, err)
	}
	syncDir(filepath.Dir(path))
	return &RepairInfo{Action: RepairRestored, Detail: detail}, nil
}

type repairer struct {
	path string
	key  *Key
	enc  *encoder
	note *Broken
	f    *os.File
}

func (r *repairer) run() (*RepairInfo, error) {
	f, err := os.OpenFile(r.path, os.O_RDWR|os.O_APPEND|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("repair ledger: %w", err)
	}
	defer f.Close()
	r.f = f
	fd := int(f.Fd())
	if err := lockFile(fd); err != nil {
		return nil, fmt.Errorf("repair ledger: lock: %w", err)
	}
	defer unlockFile(fd)

	size, err := fstatSize(fd)
	if err != nil {
		return nil, fmt.Errorf("repair ledger: %w", err)
	}
	t, err := readTail(f, size)
	if err != nil {
		return nil, fmt.Errorf("repair ledger %s: %w", r.path, err)
	}
	if t.cut != nil {
		// Reuse the writer's own torn-line repair, without its checks
		// (the rest may need repairing too: run again after).
		w := &Writer{writerState{path: r.path, f: f, fd: fd, dir: ledgerDir{fd: -1}, pid: uint32(os.Getpid()), enc: r.enc, key: r.key, clock: time.Now, signRepairs: true}}
		w.seq, w.hash, w.size, w.ctx, w.version = t.seq, t.hash, t.end, t.ctx, t.version
		if w.version == 0 {
			w.version = CurrentVersion
		}
		if err := w.repairTail(t); err != nil {
			return nil, err
		}
		if w.lastRepair.Action == "" {
			w.lastRepair.Action = RepairCutTorn
		}
		return w.lastRepair, nil
	}
	if t.seq > 0 && !t.authentic(r.enc, r.key) {
		return r.cutForeign(size)
	}
	if info, err := r.acknowledgeTruncation(t); info != nil || err != nil {
		return info, err
	}
	if t.seq > 0 && t.last.Sig == "" {
		// A writer that stopped without signing (killed): its batch MAC
		// shows the tail is a writer's, so sign over it now.
		rec := Record{Kind: KindSignedCheckpoint, Detail: fmt.Sprintf("signed by repair: the records up to seq %d carry a writer's seal but no signature (the writer stopped without signing)", t.seq)}
		out, err := r.appendSigned(rec, t.last)
		if err != nil {
			return nil, err
		}
		return &RepairInfo{Action: RepairSigned, Record: out, Detail: rec.Detail}, nil
	}
	return nil, nil
}

// cutForeign moves the records after the last sealed one aside.
func (r *repairer) cutForeign(size int64) (*RepairInfo, error) {
	end, last, err := r.lastSealed(size)
	if err != nil {
		return nil, err
	}
	if r.note != nil && last.Seq < r.note.Seq {
		return nil, fmt.Errorf("repair ledger %s: records up to seq %d were written by a writer but no longer carry its seal: they were edited; run verify to see where, and keep the file as evidence",
			r.path, r.note.Seq)
	}
	cut := make([]byte, size-end)
	if _, err := r.f.ReadAt(cut, end); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("repair ledger: %w", err)
	}
	aside := fmt.Sprintf("%s%s%d", r.path, repairForeignPart, last.Seq+1)
	if err := writeNew(aside, cut); err != nil {
		return nil, fmt.Errorf("repair ledger: keep the unsealed records: %w", err)
	}
	if err := r.f.Truncate(end); err != nil {
		return nil, fmt.Errorf("repair ledger: cut the unsealed records: %w", err)
	}
	n := bytes.Count(cut, []byte("\n"))
	rec := Record{Kind: KindRepair, Op: OpCutForeign, SHA256: digest.Bytes(cut), Count: int64(n),
		Detail: fmt.Sprintf("moved %d record(s) after seq %d that no writer sealed (%d bytes) to %s", n, last.Seq, len(cut), aside)}
	out, err := r.appendSigned(rec, last)
	if err != nil {
		return nil, err
	}
	return &RepairInfo{Action: RepairCutForeign, Offset: end, Bytes: int64(len(cut)), SHA256: rec.SHA256, Record: out, Detail: rec.Detail}, nil
}

// writeNew writes b to a file that must not exist yet: a name planted
// beside the ledger (a symlink to a file elsewhere, a file of someone
// else's) is refused, never written through.
func writeNew(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// lastSealed finds the end of the last record a writer sealed, reading
// backwards from the end: the unsealed records are only the tail.
func (r *repairer) lastSealed(size int64) (int64, Record, error) {
	end := size
	for end > 0 {
		t, err := readTail(io.NewSectionReader(r.f, 0, end), end)
		if err != nil {
			return 0, Record{}, fmt.Errorf("repair ledger %s: %w", r.path, err)
		}
		if t.seq == 0 {
			break
		}
		if t.authentic(r.enc, r.key) {
			if r.note != nil && r.note.Seq > 0 && t.seq > r.note.Seq {
				// A stopped writer named where its chain ended; never
				// trust a record after that.
				end -= int64(len(t.line))
				continue
			}
			return end, t.last, nil
		}
		end -= int64(len(t.line))
	}
	return 0, Record{}, errors.New("repair ledger: no record in it is sealed with this ledger's key; it cannot be continued")
}

// acknowledgeTruncation writes a signed gap when the ledger ends before
// the last checkpoint its head (or a stopped writer) knew of.
func (r *repairer) acknowledgeTruncation(t tailInfo) (*RepairInfo, error) {
	lostSeq, lostHash := int64(0), ""
	if b, err := os.ReadFile(headPath(r.path)); err == nil {
		if h, err := decodeLine(bytes.TrimSuffix(b, []byte("\n"))); err == nil && r.key.Public().checkSig(r.enc, &h) {
			lostSeq, lostHash = h.Seq, h.Hash
		}
	}
	if r.note != nil && r.note.Seq > lostSeq {
		lostSeq, lostHash = r.note.Seq, r.note.Hash
	}
	if lostSeq < t.seq || (lostSeq == t.seq && lostHash == t.hash) {
		return nil, nil // nothing lost
	}
	if lostSeq == t.seq {
		return nil, fmt.Errorf("repair ledger %s: the record at seq %d is not the one its writer wrote (hash %s, expected %s): records were edited; run verify to see where, and keep the file as evidence",
			r.path, t.seq, short(t.hash), short(lostHash))
	}
	rec := Record{Kind: KindGap, Count: lostSeq - t.seq, SHA256: lostHash,
		Detail: fmt.Sprintf("records %d–%d were removed from the end of the ledger; the last of them had hash %s", t.seq+1, lostSeq, lostHash)}
	out, err := r.appendSigned(rec, t.last)
	if err != nil {
		return nil, err
	}
	return &RepairInfo{Action: RepairGap, Record: out, Detail: rec.Detail}, nil
}

// appendSigned seals rec after prev, writes it, and updates the head.
func (r *repairer) appendSigned(rec Record, prev Record) (Record, error) {
	rec.Seq, rec.Prev = prev.Seq+1, prev.Hash
	rec.At = Stamp(time.Now())
	rec.PID = uint32(os.Getpid())
	sanitize(&rec)
	if err := r.key.seal(r.enc, &rec, true); err != nil {
		return Record{}, err
	}
	line, err := r.enc.appendLine(nil, &rec)
	if err != nil {
		return Record{}, err
	}
	if _, err := r.f.Write(line); err != nil {
		return Record{}, fmt.Errorf("repair ledger: write seq %d: %w", rec.Seq, err)
	}
	if err := r.f.Sync(); err != nil {
		return Record{}, fmt.Errorf("repair ledger: fsync: %w", err)
	}
	if err := atomicfile.WriteFile(headPath(r.path), line, 0o600); err != nil {
		return Record{}, fmt.Errorf("repair ledger: write head: %w", err)
	}
	_ = os.Remove(r.path + BrokenFile)
	return rec, nil
}
