package ledger

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/bmatcuk/doublestar/v4"
)

// LineError reports a line that is not a ledger record.
type LineError struct {
	Line   int64 // 1-based line number
	Offset int64 // byte offset of the line's start
	Torn   bool  // the last line has no trailing newline
	Err    error
}

func (e *LineError) Error() string {
	if e.Torn {
		return fmt.Sprintf("line %d (offset %d): torn last line (no trailing newline)", e.Line, e.Offset)
	}
	return fmt.Sprintf("line %d (offset %d): %v", e.Line, e.Offset, e.Err)
}

func (e *LineError) Unwrap() error { return e.Err }

// errTorn marks a torn last line inside LineError.
var errTorn = errors.New("torn last line")

// Reader streams records from a ledger file, one line at a time, from its
// start. It decodes strictly (no unknown fields) but does not check the
// chain: Verify does. Records of a version 3 file come out whole: the
// fields their lines leave out (prev, hash, and agent, grant and pid
// equal to the record before's) are put back.
type Reader struct {
	br      *bufio.Reader
	buf     []byte
	line    int64
	offset  int64 // offset of the next line
	fl      fastLine
	version int64
	pos     chainPos    // version 3: the last record read
	enc     *encoder    // version 3
	fh      *fastHasher // version 3
}

// NewReader returns a Reader over r.
func NewReader(r io.Reader) *Reader { return newReaderSize(r, 64<<10) }

// newReaderSize returns a Reader with a read buffer of size bytes: large
// reads are what let verify keep up with SHA-256.
func newReaderSize(r io.Reader, size int) *Reader {
	return &Reader{br: bufio.NewReaderSize(r, size)}
}

// rawLine returns the next line without its newline; complete is false for
// a last line without one. The slice is valid until the next call.
func (r *Reader) rawLine() (line []byte, complete bool, err error) {
	r.buf = r.buf[:0]
	for {
		frag, err := r.br.ReadSlice('\n')
		switch {
		case err == nil:
			if len(r.buf) == 0 {
				return frag[:len(frag)-1], true, nil
			}
			r.buf = append(r.buf, frag...)
			return r.buf[:len(r.buf)-1], true, nil
		case errors.Is(err, bufio.ErrBufferFull):
			r.buf = append(r.buf, frag...)
			if len(r.buf) > MaxLineBytes {
				return nil, false, fmt.Errorf("line longer than %d bytes", MaxLineBytes)
			}
		case errors.Is(err, io.EOF):
			r.buf = append(r.buf, frag...)
			if len(r.buf) == 0 {
				return nil, false, io.EOF
			}
			return r.buf, false, nil
		default:
			return nil, false, err
		}
	}
}

// next returns the next raw line with its position, or io.EOF.
func (r *Reader) next() (line []byte, lineNo, offset int64, complete bool, err error) {
	line, complete, err = r.rawLine()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, 0, 0, false, io.EOF
		}
		return nil, r.line + 1, r.offset, false, &LineError{Line: r.line + 1, Offset: r.offset, Err: err}
	}
	r.line++
	offset = r.offset
	r.offset += int64(len(line))
	if complete {
		r.offset++
	}
	return line, r.line, offset, complete, nil
}

// Next returns the next record, io.EOF at the end, or a *LineError for a
// line that is not a record (including a torn last line).
func (r *Reader) Next() (Record, error) {
	line, n, off, complete, err := r.next()
	if err != nil {
		return Record{}, err
	}
	if !complete {
		return Record{}, &LineError{Line: n, Offset: off, Torn: true, Err: errTorn}
	}
	return r.decode(line, n, off)
}

// decode reads line n of the file, at offset off, as the record after the
// ones before it.
func (r *Reader) decode(line []byte, n, off int64) (Record, error) {
	parsed := parseFast(line, &r.fl, r.version >= Version3 && n > 1)
	if n == 1 {
		if err := checkVersion("", line, &r.fl, parsed); err != nil {
			return Record{}, err
		}
		r.version = fileVersion(line, &r.fl, parsed)
		if r.version >= Version3 {
			r.pos = chainPos{start: true}
			r.pos.ctx.reset()
			parsed = parseFast(line, &r.fl, true)
		}
	}
	if r.version >= Version3 {
		rec, err := r.nextV3(line, parsed)
		if err != nil {
			return Record{}, &LineError{Line: n, Offset: off, Err: fmt.Errorf("not a ledger record: %w", err)}
		}
		return rec, nil
	}
	if parsed {
		// A canonical line decodes to exactly these values.
		return r.fl.record(), nil
	}
	rec, err := decodeLine(line)
	if err != nil {
		return Record{}, &LineError{Line: n, Offset: off, Err: fmt.Errorf("not a ledger record: %w", err)}
	}
	return rec, nil
}

// nextV3 reads a line of a version 3 file (parsed: parseFast read it)
// as the record after r.pos, and makes it r.pos.
func (r *Reader) nextV3(line []byte, parsed bool) (Record, error) {
	if r.enc == nil {
		r.enc, r.fh = newEncoder(), newFastHasher()
	}
	return readV3(r.enc, r.fh, &r.fl, line, &r.pos, parsed)
}

// LineDecoder decodes the lines of one ledger file that its caller reads
// itself, in order from the file's first (a reader that follows a growing
// file, a line at a time): each comes out as Reader.Next returns it, the
// fields a version 3 line leaves out put back from the lines before.
type LineDecoder struct{ r Reader }

// NewLineDecoder returns a LineDecoder at the start of a file.
func NewLineDecoder() *LineDecoder { return &LineDecoder{} }

// Decode returns the record of the file's next line, given whole and
// without its newline, or a *LineError (or a *VersionError for a first
// line in a format this package does not read). A line that is not a
// record still counts as one of the file's: the records after it are
// read against what came before it.
func (d *LineDecoder) Decode(line []byte) (Record, error) {
	d.r.line++
	off := d.r.offset
	d.r.offset += int64(len(line)) + 1
	return d.r.decode(line, d.r.line, off)
}

// openSnapshot opens a ledger for reading and returns a reader limited to
// its size at a moment when no writer was in the middle of a write (under
// a shared flock), so that a live ledger never shows a half-written line.
func openSnapshot(path string) (*os.File, io.Reader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("open ledger: %w", err)
	}
	fd := int(f.Fd())
	if err := lockFileShared(fd); err != nil {
		_ = f.Close()
		return nil, nil, fmt.Errorf("lock ledger %s: %w", path, err)
	}
	size, err := fstatSize(fd)
	_ = unlockFile(fd)
	if err != nil {
		_ = f.Close()
		return nil, nil, fmt.Errorf("stat ledger %s: %w", path, err)
	}
	return f, io.LimitReader(f, size), nil
}

// Scan streams the records of the ledger at path, its sealed segments
// first (see Segments), that match flt to fn, stopping at fn's first error.
// A line that is not a record ends the scan with an error wrapping a
// *LineError, which names the file and line: callers that judge what
// precedes a broken line (the audit) stop there.
func Scan(path string, flt Filter, fn func(Record) error) error {
	if err := flt.Validate(); err != nil {
		return err
	}
	files, err := openLedgerFiles(path)
	if err != nil {
		return err
	}
	defer files.Close()
	for _, f := range files {
		rd := NewReader(f.src)
		for {
			rec, err := rd.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if ve := (*VersionError)(nil); errors.As(err, &ve) {
				return &VersionError{File: f.name, Version: ve.Version}
			}
			if err != nil {
				return fmt.Errorf("read ledger %s: %w", f.name, err)
			}
			if !flt.Match(rec) {
				continue
			}
			if err := fn(rec); err != nil {
				return err
			}
		}
	}
	return nil
}

// Filter selects records. Zero fields select everything.
type Filter struct {
	Agent string // exact agent id
	Grant string // exact grant id
	Kinds []Kind // any of these kinds
	// Path is a doublestar glob when it contains any of *?[{, otherwise a
	// path prefix: "docs" selects "docs" and everything under "docs/".
	Path  string
	Since time.Time // inclusive
	Until time.Time // exclusive
}

// Validate reports a malformed path glob.
func (f Filter) Validate() error {
	if isGlob(f.Path) && !doublestar.ValidatePattern(f.Path) {
		return fmt.Errorf("invalid path pattern %q", f.Path)
	}
	return nil
}

func isGlob(p string) bool { return strings.ContainsAny(p, "*?[{") }

// Match reports whether r is selected.
func (f Filter) Match(r Record) bool {
	if f.Agent != "" && r.Agent != f.Agent {
		return false
	}
	if f.Grant != "" && r.Grant != f.Grant {
		return false
	}
	if len(f.Kinds) > 0 && !slices.Contains(f.Kinds, r.Kind) {
		return false
	}
	if f.Path != "" && !matchPath(f.Path, r.Path) {
		return false
	}
	if !f.Since.IsZero() || !f.Until.IsZero() {
		at, err := time.Parse(time.RFC3339Nano, r.At)
		if err != nil {
			return false
		}
		if !f.Since.IsZero() && at.Before(f.Since) {
			return false
		}
		if !f.Until.IsZero() && !at.Before(f.Until) {
			return false
		}
	}
	return true
}

func matchPath(pattern, p string) bool {
	if isGlob(pattern) {
		ok, err := doublestar.Match(pattern, p)
		return err == nil && ok
	}
	prefix := strings.TrimSuffix(pattern, "/")
	return p == prefix || strings.HasPrefix(p, prefix+"/") || prefix == "" || prefix == "."
}
