package ledger

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strconv"
	"unicode/utf8"
)

// tailWindow is the first amount read back from the end of the file; it
// doubles while the needed line boundaries are not in view.
const tailWindow = 64 << 10

// tailInfo is what a writer needs to know about the end of the file.
type tailInfo struct {
	seq  int64  // seq of the last complete record (0 for none)
	hash string // its hash ("" for none)
	end  int64  // offset just after the last complete line
	cut  []byte // bytes after end when the file does not end with "\n"; nil otherwise
	last Record // the last complete record, whole (see Reader)
	line []byte // its line, newline included

	version int64   // the file's format (0: no complete line)
	prev    string  // the hash of the record before the last
	ctx     lineCtx // version 3: the last record's context
}

// pos is where the chain stands after the last complete record.
func (t *tailInfo) pos() chainPos {
	return chainPos{seq: t.seq, hash: t.hash, ctx: t.ctx, start: t.seq == 0 && t.end == 0}
}

// authentic reports whether the last complete record was sealed or
// signed with k: a writer holding k may continue after it.
func (t *tailInfo) authentic(e *encoder, k *Key) bool {
	if t.version >= Version3 {
		return k.authenticV3(e, bytes.TrimSuffix(t.line, []byte("\n")), t.prev)
	}
	return k.authentic(e, &t.last)
}

// readTail reads the last complete line of a file of the given size by
// reading backwards from the end, so that its cost depends on the length
// of the last lines, not of the ledger. A torn last line (no trailing
// newline) is returned in cut; an unreadable last complete line is an
// error. In a version 3 file, where most lines carry no hash, it reads
// forward from the last line that does (a signed record, at most a
// checkpoint's worth of records back) or from the file's start.
func readTail(f io.ReaderAt, size int64) (tailInfo, error) {
	if size == 0 {
		return tailInfo{}, nil
	}
	first, err := readLineAt(f, 0, size)
	if err != nil {
		return tailInfo{}, fmt.Errorf("read the first record: %w", err)
	}
	var version int64
	if first != nil {
		version = fileVersion(first, &fastLine{}, false)
	}
	t, err := readLastLine(f, size)
	if err != nil || t.seq == 0 {
		t.version = version
		return t, err
	}
	t.version = version
	if version < Version3 {
		return t, nil
	}
	if t.last.Sig != "" {
		t.prev = t.last.Prev
		t.ctx.setRecord(&t.last)
		return t, nil
	}
	return readTailV3(f, t)
}

// readLastLine is readTail for the last line alone, read as a whole
// record (every version 1 and 2 record, and every signed one, is).
func readLastLine(f io.ReaderAt, size int64) (tailInfo, error) {
	limit := int64(2*MaxLineBytes + 2)
	for window := int64(tailWindow); ; window *= 2 {
		lo := max(size-window, 0)
		buf := make([]byte, size-lo)
		if _, err := f.ReadAt(buf, lo); err != nil && !errors.Is(err, io.EOF) {
			return tailInfo{}, fmt.Errorf("read tail: %w", err)
		}
		t, ok, err := parseTail(buf, lo)
		if err != nil || ok {
			return t, err
		}
		if lo == 0 {
			// parseTail always concludes when it sees the whole file.
			return tailInfo{}, errors.New("read tail: no line boundary found")
		}
		if window >= limit {
			return tailInfo{}, fmt.Errorf("no line boundary in the last %d bytes: not a ledger", window)
		}
	}
}

// parseTail looks for the last complete line in buf, the bytes of the file
// from offset lo to its end. ok is false when buf does not reach back far
// enough to be sure.
func parseTail(buf []byte, lo int64) (t tailInfo, ok bool, err error) {
	lastNL := bytes.LastIndexByte(buf, '\n')
	if lastNL < 0 {
		if lo > 0 {
			return tailInfo{}, false, nil
		}
		// Only a torn first line.
		return tailInfo{end: 0, cut: bytes.Clone(buf)}, true, nil
	}
	if lastNL != len(buf)-1 {
		t.cut = bytes.Clone(buf[lastNL+1:])
	}
	t.end = lo + int64(lastNL) + 1
	startNL := bytes.LastIndexByte(buf[:lastNL], '\n')
	if startNL < 0 && lo > 0 {
		return tailInfo{}, false, nil
	}
	line := buf[startNL+1 : lastNL]
	r, derr := decodeLine(line)
	if derr != nil {
		return tailInfo{}, true, fmt.Errorf("the last complete record (ending at byte %d) is unreadable: %v", t.end, derr)
	}
	if r.Seq < 1 || (r.Hash != "" && !isHexHash(r.Hash)) {
		return tailInfo{}, true, fmt.Errorf("the last complete record (ending at byte %d) has no valid seq and hash", t.end)
	}
	if r.Seq == math.MaxInt64 {
		// No honest ledger gets there; appending would wrap the seq.
		return tailInfo{}, true, fmt.Errorf("the last complete record (ending at byte %d) has the largest possible seq; the ledger cannot continue", t.end)
	}
	if want, herr := HashRecord(r); herr == nil && r.Hash != "" && want != r.Hash {
		// The chain continues from the stored hash; verify will report
		// the edited record.
		slog.Warn("ledger: the last record does not match its hash", "seq", r.Seq)
	}
	t.seq, t.hash, t.last = r.Seq, r.Hash, r
	t.line = bytes.Clone(buf[startNL+1 : lastNL+1])
	return t, true, nil
}

// readTailV3 completes t, whose last line (a version 3 record without its
// hash) was read alone: it finds the last line before it that carries
// its hash, or the file's start, and links the records from there.
func readTailV3(f io.ReaderAt, t tailInfo) (tailInfo, error) {
	lineStart := t.end - int64(len(t.line))
	from, err := hashedLineBefore(f, lineStart)
	if err != nil {
		return tailInfo{}, err
	}
	pos := chainPos{start: from == 0}
	if from > 0 || lineStart > 0 {
		line, err := readLineAt(f, from, t.end)
		if err != nil || line == nil {
			return tailInfo{}, fmt.Errorf("read the record at byte %d: %v", from, err)
		}
		anchor, err := decodeLine(line)
		if err != nil {
			return tailInfo{}, fmt.Errorf("the record at byte %d is unreadable: %v", from, err)
		}
		switch {
		case anchor.Sig != "" && isHexHash(anchor.Hash):
			pos.seq, pos.hash = anchor.Seq-1, anchor.Prev
		case from == 0 && anchor.Seq == 1:
		default:
			return tailInfo{}, fmt.Errorf("the records before byte %d: %w", t.end, errNoAnchor)
		}
	} else if t.last.Seq != 1 {
		return tailInfo{}, fmt.Errorf("the records before byte %d: %w", t.end, errNoAnchor)
	}
	lt, err := linkLines(f, from, t.end, pos, false)
	if err != nil {
		return tailInfo{}, err
	}
	lt.cut, lt.version = t.cut, t.version
	return lt, nil
}

// hashedLineBefore returns the offset of the last line that ends before
// end (a line start) and carries its hash (a signed record of a version
// 3 file), or 0 when there is none: the records are linked from the
// file's start. It reads backwards, each byte once.
func hashedLineBefore(f io.ReaderAt, end int64) (int64, error) {
	var carry []byte // from hi to the start of the lines already looked at
	for hi := end; hi > 0; {
		lo := max(hi-tailWindow, 0)
		data := make([]byte, hi-lo, hi-lo+int64(len(carry)))
		if _, err := f.ReadAt(data, lo); err != nil && !errors.Is(err, io.EOF) {
			return 0, fmt.Errorf("read ledger: %w", err)
		}
		data = append(data, carry...)
		stop := len(data) // data[stop-1] ends a line not looked at yet
		for stop > 0 {
			i := bytes.LastIndexByte(data[:stop-1], '\n')
			if i < 0 && lo > 0 {
				break // the line starts before lo
			}
			if hashed(data[i+1 : stop-1]) {
				return lo + int64(i) + 1, nil
			}
			stop = i + 1
		}
		carry, hi = data[:stop], lo
	}
	return 0, nil
}

// linkLines reads the complete lines of f between from and to as the
// records of a version 3 file that follow pos, and returns the tail they
// end with. With strict, each must continue the chain: the next seq, and
// a signed record's prev the hash before it; otherwise only their hashes
// are computed.
func linkLines(f io.ReaderAt, from, to int64, pos chainPos, strict bool) (tailInfo, error) {
	rd := newReaderSize(io.NewSectionReader(f, from, to-from), 256<<10)
	enc, fh := newEncoder(), newFastHasher()
	var fl fastLine
	t := tailInfo{end: from, seq: pos.seq, hash: pos.hash, ctx: pos.ctx}
	for {
		line, complete, err := rd.rawLine()
		if errors.Is(err, io.EOF) {
			return t, nil
		}
		if err != nil {
			return tailInfo{}, fmt.Errorf("read ledger: %w", err)
		}
		if !complete {
			t.cut = bytes.Clone(line)
			return t, nil
		}
		prev := pos.hash
		rec, err := readV3(enc, fh, &fl, line, &pos, parseFast(line, &fl, true))
		if err != nil {
			return tailInfo{}, fmt.Errorf("the record at byte %d is unreadable: %v", t.end, err)
		}
		if strict && (rec.Seq != t.seq+1 || rec.Prev != prev) {
			return tailInfo{}, fmt.Errorf("the record at byte %d (seq %d) does not continue the chain after seq %d", t.end, rec.Seq, t.seq)
		}
		t.end += int64(len(line)) + 1
		t.seq, t.hash, t.prev, t.last, t.ctx = rec.Seq, rec.Hash, prev, rec, pos.ctx
		t.line = append(bytes.Clone(line), '\n')
	}
}

func isHexHash(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// quotePrefix quotes at most n bytes of b (cut at a rune boundary) for a
// human-readable detail.
func quotePrefix(b []byte, n int) string {
	if len(b) <= n {
		return strconv.Quote(string(b))
	}
	for n > 0 && !utf8.RuneStart(b[n]) {
		n--
	}
	return strconv.Quote(string(b[:n])) + "…"
}
