package ledger

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// ErrBroken is wrapped by every Append error of a writer that found its
// ledger deleted, replaced, truncated, rewritten or continued by someone
// without the key. Such a writer serves nothing until an operator acts
// (see BrokenFile): it never continues a different chain silently.
var ErrBroken = errors.New("ledger is broken")

// BrokenFile is the suffix of the file a writer leaves beside the ledger
// when it stops: what it found, where its chain ended, and where it kept
// the records it had written.
const BrokenFile = ".broken"

// PreservedSuffix names the hard link a writer makes to its own file when
// the ledger's name was deleted or pointed elsewhere, so that the records
// it wrote survive for `acpfs ledger verify --repair` to put back.
const PreservedSuffix = ".preserved"

// Broken says why a writer stopped. It is also the JSON content of the
// ledger's BrokenFile.
type Broken struct {
	Reason    string `json:"reason"`
	Seq       int64  `json:"seq"`  // the last record this writer knows to be sound
	Hash      string `json:"hash"` // its hash: the chain the ledger must continue
	At        string `json:"at"`
	Preserved string `json:"preserved,omitempty"` // a link to the writer's own file, when its name was lost
}

func (b *Broken) Error() string {
	msg := fmt.Sprintf("%v: %s; the chain ended at seq %d (hash %s)", ErrBroken, b.Reason, b.Seq, short(b.Hash))
	if b.Preserved != "" {
		msg += "; the records written so far are kept in " + b.Preserved
	}
	return msg + "; run `acpfs ledger verify --repair` (see docs/ledger.md)"
}

func (b *Broken) Unwrap() error { return ErrBroken }

// fileID identifies the ledger's inode.
type fileID struct{ dev, ino uint64 }

func fstatID(fd int) (unix.Stat_t, error) {
	var st unix.Stat_t
	for {
		err := unix.Fstat(fd, &st)
		if !errors.Is(err, unix.EINTR) {
			return st, err
		}
	}
}

// checkFile compares the ledger's name and descriptor with what this
// writer last saw. Called with the file lock held; it returns the
// current size, or a reason to stop.
func (w *Writer) checkFile() (size int64, reason string, err error) {
	st, err := fstatID(w.fd)
	if err != nil {
		return 0, "", fmt.Errorf("stat ledger %s: %w", w.path, err)
	}
	var pst unix.Stat_t
	if err := w.dir.lstat(w.dir.base, &pst); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return 0, "the ledger file was deleted (or moved away) while this writer had it open", nil
		}
		return 0, "", fmt.Errorf("stat ledger %s: %w", w.path, err)
	}
	if pst.Mode&unix.S_IFMT != unix.S_IFREG || pst.Dev != st.Dev || pst.Ino != st.Ino {
		what := "another file"
		if pst.Mode&unix.S_IFMT == unix.S_IFLNK {
			what = "a symbolic link"
		}
		return 0, "the ledger's name was replaced by " + what, nil
	}
	if st.Nlink == 0 {
		return 0, "the ledger file was deleted while this writer had it open", nil
	}
	return st.Size, "", nil
}

// breakOff puts the writer in the broken state: it keeps its own records
// reachable, says why beside the ledger and in the log, and refuses
// every later Append until the ledger is back.
func (w *Writer) breakOff(reason string) *Broken {
	b := &Broken{Reason: reason, Seq: w.seq, Hash: w.hash, At: Stamp(w.clock())}
	if p, ok := w.preserve(); ok {
		b.Preserved = p
	}
	if data, err := json.MarshalIndent(b, "", "  "); err == nil {
		if err := w.dir.writeAtomic(w.dir.base+BrokenFile, append(data, '\n')); err != nil {
			slog.Error("ledger: cannot write the broken-ledger note", "path", w.path+BrokenFile, "err", err)
		}
	}
	slog.Error("ledger: stopped writing; recorded operations are refused until an operator repairs the ledger",
		"path", w.path, "reason", reason, "seq", w.seq, "preserved", b.Preserved)
	w.broken.Store(b)
	return b
}

// preserve keeps the writer's own records under a new name when the
// ledger's name no longer leads to them: a hard link when the file still
// has one elsewhere, a copy when it was deleted (the kernel does not
// link a file whose last name is gone).
func (w *Writer) preserve() (string, bool) {
	st, err := fstatID(w.fd)
	if err != nil {
		return "", false
	}
	var pst unix.Stat_t
	if w.dir.lstat(w.dir.base, &pst) == nil && pst.Dev == st.Dev && pst.Ino == st.Ino && st.Nlink > 0 {
		return "", false // still reachable by its name
	}
	// A name nobody could have prepared: an existing file never stops
	// the writer from keeping its records.
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	name := fmt.Sprintf("%s%s-%d-%s", w.dir.base, PreservedSuffix, w.seq, hex.EncodeToString(rnd[:]))
	full := filepath.Join(filepath.Dir(w.path), name)
	if st.Nlink > 0 {
		if err := unix.Linkat(w.fd, "", w.dir.fd, name, unix.AT_EMPTY_PATH); err == nil {
			return full, true
		}
	}
	if err := w.copyOut(st.Size, name); err != nil {
		slog.Error("ledger: cannot keep the records of a lost ledger file", "path", full, "err", err)
		return "", false
	}
	return full, true
}

func (w *Writer) copyOut(size int64, name string) error {
	out, err := w.dir.open(name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, cerr := io.Copy(out, io.NewSectionReader(w.f, 0, size))
	serr := out.Sync()
	if err := errors.Join(cerr, serr, out.Close()); err != nil {
		_ = w.dir.remove(name)
		return err
	}
	return nil
}

// resume reports whether a broken writer may carry on: the ledger's name
// leads to this writer's file again, and the file ends where the writer
// stopped or with a signed gap record that names that end. Called with
// the file lock held.
func (w *Writer) resume(b *Broken) bool {
	size, reason, err := w.checkFile()
	if err != nil {
		return false
	}
	if reason != "" {
		// The operator may have put a copy back (the writer's own file
		// had lost its name): continue in it, if it ends where this
		// writer stopped.
		if !w.adopt() {
			return false
		}
		if size, reason, err = w.checkFile(); err != nil || reason != "" {
			return false
		}
	}
	t, err := readTail(w.f, size)
	if err != nil || t.cut != nil {
		return false
	}
	switch {
	case t.seq == b.Seq && t.hash == b.Hash && (len(w.lastLine) == 0 || bytes.Equal(t.line, w.lastLine)):
	case t.last.Kind == KindGap && t.last.SHA256 == b.Hash && w.key.Public().checkSig(w.enc, &t.last):
		// Records lost from the end, acknowledged by the operator.
	case t.last.Seq == b.Seq+1 && t.last.Prev == b.Hash && w.key.Public().checkSig(w.enc, &t.last):
		// An operator's signed repair right after this writer's chain.
	default:
		return false
	}
	w.seq, w.hash, w.size, w.lastLine, w.ctx = t.seq, t.hash, size, t.line, t.ctx
	if t.version != 0 {
		w.version = t.version
	}
	w.broken.Store(nil)
	if err := w.dir.remove(w.dir.base + BrokenFile); err != nil {
		slog.Warn("ledger: cannot remove the broken-ledger note", "err", err)
	}
	slog.Warn("ledger: resumed after repair", "path", w.path, "seq", t.seq)
	return true
}

// tryResume takes the writing role and the file lock to see whether a
// broken writer may carry on; the ledger_recovered record is written with
// the next batch.
func (w *Writer) tryResume() bool {
	b := w.broken.Load()
	if b == nil {
		return true
	}
	w.mu.Lock()
	for w.writing {
		w.cond.Wait()
	}
	if w.closed {
		w.mu.Unlock()
		return false
	}
	w.writing = true
	w.mu.Unlock()
	ok := false
	if lockFile(w.fd) == nil {
		if b := w.broken.Load(); b == nil {
			ok = true
		} else if w.resume(b) {
			w.resumed, ok = b, true
		}
		_ = unlockFile(w.fd)
	}
	w.mu.Lock()
	w.writing = false
	w.cond.Broadcast()
	w.mu.Unlock()
	return ok
}

// adopt switches the writer to the file now at its path, locked. The
// caller then checks that the file continues the writer's chain.
func (w *Writer) adopt() bool {
	f, err := w.dir.open(w.dir.base, unix.O_RDWR|unix.O_APPEND, 0)
	if err != nil {
		return false
	}
	fd := int(f.Fd())
	if st, err := fstatID(fd); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		f.Close()
		return false
	}
	if err := lockFile(fd); err != nil {
		f.Close()
		return false
	}
	old := w.f
	w.syncMu.Lock()
	w.f, w.fd = f, fd
	w.syncMu.Unlock()
	_ = old.Close() // releases its lock
	return true
}

// syncTail makes seq, hash and size describe the file as it is now, and
// stops the writer when the file is not the chain it wrote. Called with
// the file lock held. It reads at most the first and last lines appended
// since this writer's last look, so its cost does not grow with the
// ledger.
func (w *Writer) syncTail() error {
	size, reason, err := w.checkFile()
	if err != nil {
		return err
	}
	if reason != "" && w.followRotation() {
		size, reason, err = w.checkFile()
		if err != nil {
			return err
		}
	}
	if w.formatErr != nil {
		return w.formatErr
	}
	if reason != "" {
		return w.breakOff(reason)
	}
	switch {
	case w.size < 0:
		return w.loadTail(size, true)
	case size == w.size:
		if !w.tailIntact(size) {
			return w.breakOff(fmt.Sprintf("the last record (seq %d) was rewritten", w.seq))
		}
		return nil
	case size < w.size:
		return w.breakOff(fmt.Sprintf("the ledger was truncated from %d to %d bytes", w.size, size))
	}
	// Another writer appended. Its first line must continue our chain
	// and its last must be sealed with the key.
	first, err := readLineAt(w.f, w.size, size)
	if err != nil {
		return w.breakOff(fmt.Sprintf("after seq %d: %v", w.seq, err))
	}
	if first != nil && w.version >= Version3 {
		// Lines without their hash: link every record appended.
		t, err := linkLines(w.f, w.size, size, w.pos(), true)
		if err != nil || !w.tailIntact(w.size) {
			return w.breakOff(fmt.Sprintf("the records after seq %d do not continue its chain", w.seq))
		}
		t.version = w.version
		return w.takeTail(t, size, false)
	}
	if first != nil {
		r, derr := decodeLine(first)
		if derr != nil || r.Seq != w.seq+1 || r.Prev != w.hash {
			return w.breakOff(fmt.Sprintf("the records after seq %d do not continue its chain", w.seq))
		}
	}
	if !w.tailIntact(w.size) {
		return w.breakOff(fmt.Sprintf("the last record (seq %d) was rewritten", w.seq))
	}
	return w.loadTail(size, false)
}

// loadTail reads the file's last line and requires it to be sealed by a
// writer holding the key (or the file to be empty, or to end with a torn
// line after such a record, which is repaired).
func (w *Writer) loadTail(size int64, opening bool) error {
	t, err := readTail(w.f, size)
	if err != nil {
		w.size = -1
		return fmt.Errorf("ledger %s: %w; run `acpfs ledger verify --ledger %s` to find the damage", w.path, err, w.path)
	}
	return w.takeTail(t, size, opening)
}

// takeTail makes t, the tail of the file of the given size, the writer's
// state, when its last record is sealed by a writer holding the key.
func (w *Writer) takeTail(t tailInfo, size int64, opening bool) error {
	if t.seq > 0 && !t.authentic(w.enc, w.key) {
		if opening {
			// Nothing better is known: name the record found.
			w.seq, w.hash = t.seq, t.hash
		}
		return w.breakOff(fmt.Sprintf("the last record (seq %d) is not sealed with this ledger's key: it was written by someone else", t.seq))
	}
	w.seq, w.hash, w.size, w.lastLine, w.lastKind, w.ctx = t.seq, t.hash, size, t.line, t.last.Kind, t.ctx
	if t.version != 0 {
		w.version = t.version
	}
	if t.last.Sig != "" && w.key.Public().checkSig(w.enc, &t.last) {
		w.signedSeq = t.seq
	}
	if err := w.checkHead(); err != nil {
		return err
	}
	if t.cut != nil {
		return w.repairTail(t)
	}
	return nil
}

// tailIntact reports whether the bytes before end still hold the last
// line this writer wrote or checked.
func (w *Writer) tailIntact(end int64) bool {
	n := int64(len(w.lastLine))
	if n == 0 {
		return true
	}
	if end < n {
		return false
	}
	buf := make([]byte, n)
	if _, err := w.f.ReadAt(buf, end-n); err != nil {
		return false
	}
	return bytes.Equal(buf, w.lastLine)
}

// readLineAt returns the complete line starting at off, or nil when the
// bytes up to size hold no newline (a torn line, repaired later).
func readLineAt(f io.ReaderAt, off, size int64) ([]byte, error) {
	var out []byte
	buf := make([]byte, 4096)
	for off < size {
		n, err := f.ReadAt(buf[:min(int64(len(buf)), size-off)], off)
		if i := bytes.IndexByte(buf[:n], '\n'); i >= 0 {
			return append(out, buf[:i]...), nil
		}
		out = append(out, buf[:n]...)
		off += int64(n)
		if len(out) > MaxLineBytes {
			return nil, errors.New("a line longer than any record")
		}
		if err != nil {
			return nil, fmt.Errorf("read ledger: %w", err)
		}
	}
	return nil, nil
}

// headPath is where the latest checkpoint is copied, so that removing
// records from the end is seen even when no writer is running.
func headPath(ledger string) string { return ledger + headSuffix }

const headSuffix = ".head"

// checkHead compares the file's tail with the last checkpoint written to
// the head file: a ledger that ends before it lost records.
func (w *Writer) checkHead() error {
	data, err := w.dir.readFile(w.dir.base + headSuffix)
	if err != nil {
		return nil // no checkpoint yet, or kept elsewhere: verify reports it
	}
	r, err := decodeLine(bytes.TrimSuffix(data, []byte("\n")))
	if err != nil || !w.key.Public().checkSig(w.enc, &r) {
		slog.Warn("ledger: the head file is not a signed checkpoint; ignoring it", "path", headPath(w.path))
		return nil
	}
	if r.Seq > w.seq || (r.Seq == w.seq && r.Hash != w.hash) {
		return w.breakOff(fmt.Sprintf("the ledger ends at seq %d but its head records a signed checkpoint at seq %d: records were removed from the end", w.seq, r.Seq))
	}
	return nil
}

// writeHead copies a checkpoint's line to the head file, durably. The
// ledger file is fsynced first, in every sync mode: a head that survives
// a crash the checkpoint it names did not would report records removed.
func (w *Writer) writeHead(line []byte) error {
	if err := w.f.Sync(); err != nil {
		slog.Error("ledger: cannot fsync the ledger before its head", "path", w.path, "err", err)
		return fmt.Errorf("fsync before the head: %w", err)
	}
	if err := w.dir.writeAtomic(w.dir.base+headSuffix, line); err != nil {
		slog.Error("ledger: cannot write the head file", "path", headPath(w.path), "err", err)
		return err
	}
	return nil
}

// looksWritable is a cheap guess at whether a write would succeed now.
func (w *Writer) looksWritable() bool {
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(w.fd, &sfs); err == nil && int64(sfs.Bavail)*int64(sfs.Bsize) < 64<<10 {
		return false
	}
	var stx unix.Statx_t
	if err := unix.Statx(w.fd, "", unix.AT_EMPTY_PATH, 0, &stx); err == nil &&
		stx.Attributes&stx.Attributes_mask&(unix.STATX_ATTR_IMMUTABLE|unix.STATX_ATTR_APPEND) != 0 {
		return false
	}
	return true
}
