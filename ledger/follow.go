package ledger

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// A Follower hands out a ledger's records in order as they are written,
// across its sealed segments, so that they can be copied elsewhere (the
// store ships every host's ledger to a stream). It hands out a record only
// once a valid signature covers it: a record appended by someone without
// the key, or a tail a crash left sealed but unsigned, is never copied,
// so a copy cannot hold records that a later repair of the local ledger
// removes, and every copy verifies. A writer signs within a second of
// going quiet, so that is the lag. Records are handed out as the bytes
// the file holds.
//
// A Follower is not safe for concurrent use.
type Follower struct {
	path string
	dir  int // the ledger's directory, held open
	base string
	keys map[string]PublicKey
	enc  *encoder
	fh   *fastHasher
	fl   fastLine

	pos    followPos   // just after the last record handed out
	recent []followPos // earlier hand-out positions, so that After can go back cheaply
	seek   bool        // the next Next must After(pos) first (after an error)

	// The scan runs ahead of pos over records no signature covers yet.
	f       *os.File
	id      fileID
	live    bool  // f was opened at the ledger's name
	off     int64 // offset of the next line in f
	seq     int64 // seq and hash of the last record scanned
	hash    string
	ended   bool    // the last record scanned is a segment_end
	version int64   // the format of f, read from its first line
	ctx     lineCtx // version 3: the context of the last record scanned
	pending []Line
	pendBy  int
	ready   []Line
	readyBy int
}

// Line is one record as the ledger stores it.
type Line struct {
	Seq  int64
	Hash string
	Kind Kind
	// Data is the line as stored, newline included.
	Data []byte

	at followPos // where the ledger continues after it
}

// followPos is a place in the chain: after the record seq (hash), at off
// in the file id.
type followPos struct {
	seq   int64
	hash  string
	id    fileID
	off   int64
	ended bool
	ctx   lineCtx // version 3: what the next record is written against
}

// ErrDiverged says the ledger does not hold the record a Follower was
// asked to continue after: it was truncated, replaced or rewritten since
// that record was copied.
var ErrDiverged = errors.New("the ledger does not continue the copied chain")

// maxPendingBytes bounds the records read ahead of a signature. A writer
// signs every 1,024 records (SignEvery) and lines are short, so only a
// ledger someone else appended to gets there.
const maxPendingBytes = 64 << 20

// recentPositions is how many hand-out positions After can go back to
// without reading the file again.
const recentPositions = 64

// NewFollower returns a Follower of the ledger at path whose signatures
// are checked against keys, positioned at the start of the chain (see
// After).
func NewFollower(path string, keys []PublicKey) (*Follower, error) {
	if len(keys) == 0 {
		return nil, errors.New("follow ledger: no public key: records are handed out only once a signature covers them")
	}
	dir := filepath.Dir(path)
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("follow ledger: open directory %s: %w", dir, err)
	}
	fo := &Follower{path: path, dir: fd, base: filepath.Base(path), keys: map[string]PublicKey{},
		enc: newEncoder(), fh: newFastHasher()}
	for _, k := range keys {
		fo.keys[k.ID()] = k
	}
	return fo, nil
}

// Close releases the files.
func (fo *Follower) Close() error {
	fo.closeFile()
	if fo.dir >= 0 {
		unix.Close(fo.dir)
		fo.dir = -1
	}
	return nil
}

func (fo *Follower) closeFile() {
	if fo.f != nil {
		_ = fo.f.Close()
		fo.f = nil
	}
}

// Position returns the seq and hash of the last record handed out (0 and
// "" before the first).
func (fo *Follower) Position() (seq int64, hash string) { return fo.pos.seq, fo.pos.hash }

// Unsigned returns how many records the Follower has read past the last
// signature: they wait for one. A writer signs within a second of going
// quiet, so records that wait much longer were appended by someone
// without the key, or left by a killed writer (`verify` tells which).
func (fo *Follower) Unsigned() int { return len(fo.pending) }

// After positions the Follower just after the record seq whose hash is
// hash, so that Next hands out seq+1 on; seq 0 (hash "") is the start of
// the chain. It fails with ErrDiverged when the ledger does not hold that
// record.
func (fo *Follower) After(seq int64, hash string) error {
	fo.pending, fo.pendBy, fo.ready, fo.readyBy, fo.seek = nil, 0, nil, 0, false
	for i := len(fo.recent) - 1; i >= 0; i-- {
		p := fo.recent[i]
		if p.seq == seq && p.hash == hash && fo.f != nil && p.id == fo.id {
			fo.setPos(p)
			fo.recent = fo.recent[:i+1]
			return nil
		}
	}
	return fo.seekFile(seq, hash)
}

// seekFile is After reading the files again.
func (fo *Follower) seekFile(seq int64, hash string) error {
	fo.pending, fo.pendBy, fo.ready, fo.readyBy = nil, 0, nil, 0
	fo.closeFile()
	fo.recent = nil
	if seq == 0 {
		fo.setPos(followPos{})
		return nil
	}
	name, err := fo.fileFor(seq)
	if err != nil {
		return err
	}
	if err := fo.open(name); err != nil {
		return err
	}
	r := fo.lines()
	q := quickReader{enc: fo.enc, fh: fo.fh}
	for {
		line, err := r.line()
		if err != nil {
			fo.closeFile()
			if errors.Is(err, io.EOF) {
				return fmt.Errorf("%w: %s holds no seq %d", ErrDiverged, name, seq)
			}
			return err
		}
		rec, ok := q.next(line, &fo.fl)
		if q.version != 0 {
			fo.version = q.version
		}
		if !ok || rec.Seq < seq {
			continue
		}
		if rec.Seq > seq || rec.Hash != hash {
			fo.closeFile()
			return fmt.Errorf("%w: seq %d in %s has hash %s, the copy has %s", ErrDiverged, seq, name, short(rec.Hash), short(hash))
		}
		fo.setPos(followPos{seq: seq, hash: hash, id: fo.id, off: r.off, ended: rec.Kind == KindSegmentEnd, ctx: q.pos.ctx})
		return nil
	}
}

// setPos makes p both the hand-out position and the scan's; the file the
// scan has open must be p's.
func (fo *Follower) setPos(p followPos) {
	fo.pos = p
	fo.off, fo.seq, fo.hash, fo.ended, fo.ctx = p.off, p.seq, p.hash, p.ended, p.ctx
}

// Next returns the records after the position that a valid signature
// covers, reading until the ledger's end or until about limit bytes are
// ready, and moves the position after them. It returns nothing when no
// new record is covered yet. An error means the ledger is not a chain the
// Follower may copy (a record edited, forged or out of place) or cannot
// be read; the position stays after the last record handed out (records
// covered before the problem are handed out first, the error comes with
// the next call).
func (fo *Follower) Next(limit int) ([]Line, error) {
	if fo.seek {
		if err := fo.After(fo.pos.seq, fo.pos.hash); err != nil {
			return nil, err
		}
	}
	err := fo.scan(limit)
	if err != nil && len(fo.ready) == 0 && fo.seq > fo.pos.seq {
		// The records read past the last signature may have been cut and
		// others written in their place (an operator's repair of a
		// forged tail): read them again once before calling it a problem.
		if err = fo.seekFile(fo.pos.seq, fo.pos.hash); err == nil {
			err = fo.scan(limit)
		}
	}
	out := fo.ready
	fo.ready, fo.readyBy = nil, 0
	if err != nil {
		// Read again from the position next time; what a signature
		// covered before the problem is still handed out.
		fo.seek = true
		fo.pending, fo.pendBy = nil, 0
		fo.closeFile()
		if len(out) == 0 {
			return nil, err
		}
	}
	if len(out) > 0 {
		fo.pos = out[len(out)-1].at
		fo.recent = append(fo.recent, fo.pos)
		if len(fo.recent) > recentPositions {
			fo.recent = append(fo.recent[:0], fo.recent[len(fo.recent)-recentPositions:]...)
		}
	}
	return out, nil
}

// scan reads records after the scan position into pending and ready.
func (fo *Follower) scan(limit int) error {
	for moves := 0; moves < 4; moves++ {
		if fo.f == nil {
			ok, err := fo.openNext()
			if err != nil || !ok {
				return err
			}
		}
		for {
			grew, err := fo.readFile(limit)
			if err != nil {
				return err
			}
			if !grew || fo.readyBy >= limit {
				break
			}
		}
		if fo.readyBy >= limit {
			return nil
		}
		// At the end of the file: the chain goes on in another file when
		// this one was sealed, or was put in another's place.
		switch {
		case fo.ended:
			fo.closeFile()
		case fo.replaced():
			if len(fo.ready) > 0 {
				return nil
			}
			// An operator put the ledger back (a preserved copy): find
			// the place in the file now at the name.
			if err := fo.seekFile(fo.pos.seq, fo.pos.hash); err != nil {
				return err
			}
		default:
			return nil
		}
	}
	return nil
}

// openNext opens the file that holds the record after the scan position.
// ok is false when there is none yet.
func (fo *Follower) openNext() (ok bool, err error) {
	var name string
	if fo.seq == 0 {
		names, err := Segments(fo.path)
		if err != nil {
			return false, err
		}
		name = names[0]
	} else if name, err = fo.fileFor(fo.seq + 1); err != nil {
		return false, err
	}
	prev := fo.id
	if err := fo.open(name); errors.Is(err, os.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	if fo.seq > 0 && fo.id == prev {
		// The file holding the segment_end still stands at the ledger's
		// name: its writer has not started the next file yet.
		fo.closeFile()
		return false, nil
	}
	if fo.seq > 0 {
		fo.off = 0
	}
	return true, nil
}

// readFile scans the complete lines of the open file after the scan
// position. grew reports whether it read any.
func (fo *Follower) readFile(limit int) (grew bool, err error) {
	size, err := fo.size()
	if err != nil || size <= fo.off {
		return false, err
	}
	r := fo.linesFrom(fo.off, size)
	for fo.readyBy < limit {
		line, err := r.line()
		if errors.Is(err, io.EOF) {
			return grew, nil
		}
		if err != nil {
			return grew, err
		}
		grew = true
		if err := fo.take(line, fo.off == 0); err != nil {
			return grew, err
		}
		fo.off = r.off
	}
	return grew, nil
}

// take checks one line against the chain and queues it.
func (fo *Follower) take(line []byte, first bool) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("ledger %s, seq %d: %s", fo.f.Name(), fo.seq+1, fmt.Sprintf(format, args...))
	}
	fl := &fo.fl
	full, err := fo.check(line, first)
	if err != nil {
		return bad("%v", err)
	}
	if fl.seq != fo.seq+1 {
		return bad("%s: found seq %d", ProblemSeq, fl.seq)
	}
	if string(fl.str[fPrev]) != fo.hash {
		return bad("%s: prev is %s, the record before has %s", ProblemPrev, short(string(fl.str[fPrev])), short(fo.hash))
	}
	kind := Kind(fl.str[fKind])
	if first && fo.seq > 0 && kind != KindSegmentStart {
		return bad("%s: the file starts with a %s record, not segment_start", ProblemSegment, kind)
	}
	signed := false
	if len(fl.str[fSig]) > 0 || alwaysSigned(fl.str[fKind]) {
		if full == nil {
			r := fl.record()
			full = &r
		}
		if full.Sig == "" {
			return bad("%s: a %s record must be signed", ProblemForged, kind)
		}
		k, ok := fo.keys[full.Key]
		if !ok {
			return bad("%s: signed by key %s, not by the key given (%s)", ProblemUnknownKey, full.Key, fo.keyIDs())
		}
		if !k.checkSig(fo.enc, full) {
			return bad("%s: the signature does not match", ProblemForged)
		}
		signed = true
	}
	fo.seq, fo.hash, fo.ended = fl.seq, string(fl.str[fHash]), kind == KindSegmentEnd
	data := make([]byte, len(line)+1)
	copy(data, line)
	data[len(line)] = '\n'
	fo.pending = append(fo.pending, Line{Seq: fo.seq, Hash: fo.hash, Kind: kind, Data: data,
		at: followPos{seq: fo.seq, hash: fo.hash, id: fo.id, off: fo.off + int64(len(data)), ended: fo.ended, ctx: fo.ctx}})
	fo.pendBy += len(data)
	if signed {
		fo.ready = append(fo.ready, fo.pending...)
		fo.readyBy += fo.pendBy
		fo.pending, fo.pendBy = nil, 0
	} else if fo.pendBy > maxPendingBytes {
		return bad("no signature in the %d bytes after seq %d: records were appended without the key", fo.pendBy, fo.pos.seq)
	}
	return nil
}

// check reads a line of the open file as verify does (its form and own
// hash; in version 3 the fields it leaves out put back), learning the
// file's version from its first line. full is the record when the slow
// path decoded it; fo.fl holds it either way.
func (fo *Follower) check(line []byte, first bool) (*Record, error) {
	fl := &fo.fl
	if first {
		parsed := parseFast(line, fl, false)
		if err := checkVersion(fo.f.Name(), line, fl, parsed); err != nil {
			return nil, err
		}
		fo.version = fileVersion(line, fl, parsed)
	}
	if fo.version >= Version3 {
		full, kind, reason := checkV3(fo.enc, fo.fh, fl, line, &fo.ctx, []byte(fo.hash), first, parseFast(line, fl, true))
		if kind != "" {
			return nil, fmt.Errorf("%s: %s", kind, reason)
		}
		return full, nil
	}
	if parseFast(line, fl, false) && fo.fh.check(line, fl) {
		return nil, nil
	}
	r, kind, reason := fo.enc.checkLine(line)
	if kind != "" {
		return nil, fmt.Errorf("%s: %s", kind, reason)
	}
	fl.fromRecord(&r)
	return &r, nil
}

func (fo *Follower) keyIDs() string {
	ids := make([]string, 0, len(fo.keys))
	for id := range fo.keys {
		ids = append(ids, id)
	}
	return strings.Join(ids, ", ")
}

// replaced reports whether the ledger's name now leads to another file
// than the live file being read.
func (fo *Follower) replaced() bool {
	if !fo.live {
		return false
	}
	var st unix.Stat_t
	if err := unix.Fstatat(fo.dir, fo.base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		// No file at the name: a stopped writer; wait for the operator.
		return false
	}
	return (fileID{dev: uint64(st.Dev), ino: st.Ino}) != fo.id
}

// fileFor returns the file that holds the record seq: the live file when
// its first record is seq or earlier, otherwise the sealed segment with
// the largest first seq not after seq.
func (fo *Follower) fileFor(seq int64) (string, error) {
	names, err := Segments(fo.path)
	if err != nil {
		return "", err
	}
	if first, ok := fo.firstSeq(fo.base); ok && first <= seq {
		return fo.path, nil
	}
	best := ""
	for _, n := range names[:len(names)-1] {
		mid := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(n), segmentStem(fo.path)+"."), ".jsonl")
		first, err := strconv.ParseInt(mid, 10, 64)
		if err == nil && first <= seq {
			best = n
		}
	}
	if best == "" {
		if len(names) == 1 {
			return fo.path, nil
		}
		return "", fmt.Errorf("%w: no file of the ledger %s holds seq %d (a sealed segment archived?)", ErrDiverged, fo.path, seq)
	}
	return best, nil
}

// firstSeq reads the seq of the first record of the file name in the
// ledger's directory.
func (fo *Follower) firstSeq(name string) (int64, bool) {
	fd, err := unix.Openat(fo.dir, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return 0, false
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	br := bufio.NewReaderSize(io.LimitReader(f, MaxLineBytes+1), 4096)
	line, err := br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		// A long first line: the seq comes first in every record.
		err = nil
	}
	if err != nil {
		return 0, false
	}
	return leadingSeq(line)
}

// leadingSeq reads the seq a canonical line starts with.
func leadingSeq(line []byte) (int64, bool) {
	rest, ok := bytes.CutPrefix(line, []byte(`{"seq":`))
	if !ok {
		return 0, false
	}
	end := bytes.IndexByte(rest, ',')
	if end < 0 {
		return 0, false
	}
	n, err := strconv.ParseInt(string(rest[:end]), 10, 64)
	return n, err == nil
}

// open opens a file of the ledger (a path from Segments) for the scan.
// The name is resolved beneath the ledger's directory without following
// a symlink.
func (fo *Follower) open(name string) error {
	fo.closeFile()
	base := filepath.Base(name)
	fd, err := unix.Openat(fo.dir, base, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("open ledger file %s: %w", name, os.ErrNotExist)
		}
		return fmt.Errorf("open ledger file %s: %w", name, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return fmt.Errorf("stat ledger file %s: %w", name, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return fmt.Errorf("ledger file %s is not a regular file", name)
	}
	fo.f = os.NewFile(uintptr(fd), name)
	fo.id = fileID{dev: uint64(st.Dev), ino: st.Ino}
	fo.live = base == fo.base
	return nil
}

// size returns the open file's size at a moment no writer was in the
// middle of a batch.
func (fo *Follower) size() (int64, error) {
	fd := int(fo.f.Fd())
	if fo.live {
		if err := lockFileShared(fd); err != nil {
			return 0, fmt.Errorf("lock ledger %s: %w", fo.f.Name(), err)
		}
		defer unlockFile(fd)
	}
	return fstatSize(fd)
}

// lineReader yields the complete lines of a part of a file.
type lineReader struct {
	r   *Reader
	off int64 // just after the last line returned
}

func (fo *Follower) lines() *lineReader { return &lineReader{r: newReaderSize(fo.f, 256<<10)} }

func (fo *Follower) linesFrom(off, size int64) *lineReader {
	return &lineReader{r: newReaderSize(io.NewSectionReader(fo.f, off, size-off), 256<<10), off: off}
}

// line returns the next complete line without its newline, io.EOF at the
// end or before a line still being written.
func (lr *lineReader) line() ([]byte, error) {
	line, complete, err := lr.r.rawLine()
	if err != nil {
		return nil, err
	}
	if !complete {
		return nil, io.EOF
	}
	lr.off += int64(len(line)) + 1
	return line, nil
}

// quickReader reads the records of a file from its start without
// judging them (the lines it cannot read are skipped), for their seq,
// hash and kind; in a version 3 file it links them as it goes.
type quickReader struct {
	enc     *encoder
	fh      *fastHasher
	version int64
	n       int64
	pos     chainPos
}

// next reads the next line of the file; ok is false when it is not a
// record.
func (q *quickReader) next(line []byte, fl *fastLine) (Record, bool) {
	q.n++
	if q.n == 1 {
		var probe fastLine
		q.version = fileVersion(line, &probe, parseFast(line, &probe, false))
		q.pos = chainPos{start: true}
	}
	if q.version < Version3 {
		if parseFast(line, fl, false) {
			return Record{Seq: fl.seq, Hash: string(fl.str[fHash]), Kind: Kind(fl.str[fKind])}, true
		}
		r, err := decodeLine(line)
		return r, err == nil
	}
	r, err := readV3(q.enc, q.fh, fl, line, &q.pos, parseFast(line, fl, true))
	return r, err == nil
}
