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
	last Record // the last complete record
	line []byte // its line, newline included
}

// readTail reads the last complete line of a file of the given size by
// reading backwards from the end, so that its cost depends on the length
// of the last lines, not of the ledger. A torn last line (no trailing
// newline) is returned in cut; an unreadable last complete line is an
// error.
func readTail(f io.ReaderAt, size int64) (tailInfo, error) {
	if size == 0 {
		return tailInfo{}, nil
	}
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
	if r.Seq < 1 || !isHexHash(r.Hash) {
		return tailInfo{}, true, fmt.Errorf("the last complete record (ending at byte %d) has no valid seq and hash", t.end)
	}
	if r.Seq == math.MaxInt64 {
		// No honest ledger gets there; appending would wrap the seq.
		return tailInfo{}, true, fmt.Errorf("the last complete record (ending at byte %d) has the largest possible seq; the ledger cannot continue", t.end)
	}
	if want, herr := HashRecord(r); herr == nil && want != r.Hash {
		// The chain continues from the stored hash; verify will report
		// the edited record.
		slog.Warn("ledger: the last record does not match its hash", "seq", r.Seq)
	}
	t.seq, t.hash, t.last = r.Seq, r.Hash, r
	t.line = bytes.Clone(buf[startNL+1 : lastNL+1])
	return t, true, nil
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
