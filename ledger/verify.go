package ledger

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Problem kinds reported by Verify.
const (
	ProblemGarbage      = "garbage"       // the line is not a ledger record
	ProblemHash         = "hash_mismatch" // the record was edited after it was sealed
	ProblemNonCanonical = "non_canonical" // right hash, but not the bytes a writer produces
	ProblemSeq          = "seq_mismatch"  // a record was removed, inserted or moved
	ProblemPrev         = "prev_mismatch" // the record does not follow its predecessor
	ProblemTorn         = "torn_tail"     // the last line has no trailing newline

	// With a public key (see VerifyOptions):
	ProblemForged       = "forged"        // a signature does not match, or a record that must be signed is not
	ProblemUnknownKey   = "unknown_key"   // signed by a key that is not among the public keys
	ProblemUnsignedTail = "unsigned_tail" // records after the last valid signature
	// With a head file (see HeadPath):
	ProblemTruncated = "truncated" // the ledger ends before the checkpoint its head records
	ProblemRewritten = "rewritten" // the record at the head's seq is not the head's checkpoint
	// With sealed segments (see Segments):
	ProblemSegment = "segment_mismatch" // a file boundary that no writer made
)

// alwaysSigned reports whether records of kind must carry a signature.
func alwaysSigned(kind []byte) bool {
	switch Kind(kind) {
	case KindSignedCheckpoint, KindSegmentEnd, KindSegmentStart, KindGap, KindLedgerRecovered:
		return true
	}
	return false
}

// HeadPath returns the head file of the ledger at path: one ledger line, a
// copy of the latest signed checkpoint, kept apart from the ledger so that
// records cut from the end (checkpoints included) are detected. A writer
// replaces it only after the checkpoint is in the ledger.
func HeadPath(path string) string { return path + ".head" }

// Problem is the first break in a ledger's chain.
type Problem struct {
	Seq    int64  `json:"seq"`             // first bad seq: the seq expected at the bad line
	Found  int64  `json:"found,omitempty"` // the seq the bad line carries, when readable
	File   string `json:"file,omitempty"`  // the file of the bad line: a segment, the live file, or the head file
	Line   int64  `json:"line"`            // 1-based line number in File
	Offset int64  `json:"offset"`          // byte offset of the bad line in File
	Kind   string `json:"kind"`            // one of the Problem* constants
	Reason string `json:"reason"`
}

func (p *Problem) Error() string {
	where := fmt.Sprintf("line %d, offset %d", p.Line, p.Offset)
	if p.File != "" {
		where = p.File + " " + where
	}
	return fmt.Sprintf("first bad seq %d (%s): %s: %s", p.Seq, where, p.Kind, p.Reason)
}

// Signer says what one key signed.
type Signer struct {
	Key string `json:"key"` // KeyID
	// FirstSeq and LastSeq bound the records its signatures cover: a
	// signature covers the chain back to the previous valid signature.
	FirstSeq int64 `json:"first_seq"`
	LastSeq  int64 `json:"last_seq"`
	// SignedCheckpoints counts its valid signatures (checkpoint records,
	// and segment, gap and recovery records).
	SignedCheckpoints int `json:"checkpoints"`
}

// VerifyReport is the result of checking a ledger's chain.
type VerifyReport struct {
	Path     string   `json:"path"`
	Files    []string `json:"files,omitempty"` // the files read: sealed segments in order, then Path
	Records  int64    `json:"records"`         // sound records before the first problem
	LastSeq  int64    `json:"last_seq"`        // seq of the last sound record
	LastHash string   `json:"last_hash"`       // its hash: keep it to detect a later rewrite of the tail
	FirstAt  string   `json:"first_at,omitempty"`
	LastAt   string   `json:"last_at,omitempty"`
	Repairs  []Record `json:"repairs,omitempty"` // repair records found in the chain

	// SignaturesChecked is false when no public key was available: the
	// chain was checked, but anyone who can write the file could have
	// written it.
	SignaturesChecked bool     `json:"signatures_checked"`
	Keys              []string `json:"keys,omitempty"` // ids of the public keys checked against
	Signers           []Signer `json:"signers,omitempty"`
	SignedThrough     int64    `json:"signed_through,omitempty"` // seq of the last record with a valid signature
	Unsigned          int64    `json:"unsigned"`                 // sound records after SignedThrough (signatures checked only)
	HeadSeq           int64    `json:"head_seq,omitempty"`       // seq of the checkpoint the head file records

	Warnings []string `json:"warnings,omitempty"`
	Problem  *Problem `json:"problem,omitempty"` // nil when the ledger is sound
}

// OK reports whether the whole ledger is a valid chain (and, when
// SignaturesChecked, signed throughout).
func (r *VerifyReport) OK() bool { return r.Problem == nil }

// VerifyOptions configures VerifyWith.
type VerifyOptions struct {
	// Keys are the public keys the ledger may be signed with. When empty,
	// the key in PublicKeyFile beside the ledger is used if there is one.
	Keys []PublicKey
	// AllowUnsignedTail reports records after the last signature as a
	// warning instead of a problem: a running writer signs its latest
	// records within a second, so a live ledger may have a few.
	AllowUnsignedTail bool
}

// Warnings Verify gives.
const (
	WarnNoKey = "signatures not checked: no public key (" + PublicKeyFile + ") found"
)

// Verify checks the ledger at path (VerifyWith with default options).
func Verify(path string) (*VerifyReport, error) { return VerifyWith(path, VerifyOptions{}) }

// VerifyWith checks every record of the ledger at path, across its sealed
// segments: its own hash, its canonical form, its seq and its link to the
// previous record, and with a public key its signature, that the records
// that must be signed are, that nothing follows the last signature, and
// the head file. It stops at the first problem. The error is for I/O
// failures only; a broken ledger is reported in VerifyReport.Problem.
func VerifyWith(path string, opts VerifyOptions) (*VerifyReport, error) {
	return verifyWith(path, opts, false)
}

// verifyWith is VerifyWith; slowOnly turns the fast path off, so that tests
// can compare whole reports.
func verifyWith(path string, opts VerifyOptions, slowOnly bool) (*VerifyReport, error) {
	keys := opts.Keys
	if len(keys) == 0 {
		k, err := LoadPublicKey(filepath.Join(filepath.Dir(path), PublicKeyFile))
		switch {
		case err == nil:
			keys = []PublicKey{k}
		case !errors.Is(err, fs.ErrNotExist):
			return nil, fmt.Errorf("verify ledger %s: %w", path, err)
		}
	}
	v := newVerifier(opts, keys)
	v.slowOnly = slowOnly
	v.rep.Path = path
	// The head first: a writer replaces it only once its checkpoint is in
	// the ledger, so the snapshot taken next holds that checkpoint.
	headProblem, err := v.loadHead(HeadPath(path))
	if err != nil {
		return nil, fmt.Errorf("verify ledger %s: %w", path, err)
	}
	files, err := openLedgerFiles(path)
	if err != nil {
		return nil, err
	}
	defer files.Close()
	for i, f := range files {
		v.rep.Files = append(v.rep.Files, f.name)
		if err := v.file(f, i == 0); err != nil {
			if ve := (*VersionError)(nil); errors.As(err, &ve) {
				return v.rep, ve // names its file: one line says it all
			}
			return v.rep, fmt.Errorf("verify ledger %s: %w", path, err)
		}
		if v.rep.Problem != nil {
			return v.rep, nil
		}
	}
	if headProblem != nil {
		v.rep.Problem = headProblem
		return v.rep, nil
	}
	v.finish(files[len(files)-1])
	return v.rep, nil
}

// VerifyStream checks the chain of the ledger read from src, one file
// without signatures or head (see Verify).
func VerifyStream(src io.Reader) (*VerifyReport, error) { return verifyStream(src, false) }

func verifyStream(src io.Reader, slowOnly bool) (*VerifyReport, error) {
	v := newVerifier(VerifyOptions{}, nil)
	v.slowOnly = slowOnly
	f := ledgerFile{src: src}
	if err := v.file(f, true); err != nil {
		return v.rep, err
	}
	if v.rep.Problem == nil {
		v.finish(f)
	}
	return v.rep, nil
}

// verifier carries the state of one check across the ledger's files.
type verifier struct {
	rep      *VerifyReport
	opts     VerifyOptions
	keys     map[string]PublicKey // nil: signatures are not checked
	enc      *encoder
	fh       *fastHasher
	fl       fastLine
	lastHash []byte
	lastAt   []byte
	head     *Record // the head file's checkpoint, when sound
	slowOnly bool    // tests: every line through checkLine
	version  int64   // the format of the file being read
	ctx      lineCtx // version 3: the last record's context
	// hashedSeq is the last record whose line carries its hash (version
	// 3 writes it on signed records only).
	hashedSeq int64
	signers   map[string]int
	// Where the first record after the last valid signature is.
	unsignedAt struct {
		file       string
		line, offs int64
	}
	// Where the current file ended.
	endLine, endOffset int64
}

func newVerifier(opts VerifyOptions, keys []PublicKey) *verifier {
	v := &verifier{
		rep:      &VerifyReport{},
		opts:     opts,
		enc:      newEncoder(),
		fh:       newFastHasher(),
		lastHash: make([]byte, 0, 64),
		signers:  map[string]int{},
	}
	if len(keys) > 0 {
		v.keys = map[string]PublicKey{}
		for _, k := range keys {
			if _, dup := v.keys[k.ID()]; !dup {
				v.rep.Keys = append(v.rep.Keys, k.ID())
			}
			v.keys[k.ID()] = k
		}
		v.rep.SignaturesChecked = true
	} else {
		v.rep.Warnings = append(v.rep.Warnings, WarnNoKey)
	}
	return v
}

// file checks the records of one file. It returns an error for I/O
// failures only and sets rep.Problem at the first problem.
func (v *verifier) file(f ledgerFile, first bool) error {
	rep := v.rep
	rd := newReaderSize(f.src, 1<<20)
	endsSealed := false // the last record is a segment_end
	v.endLine, v.endOffset = 1, 0
	for {
		want := rep.LastSeq + 1
		line, n, off, complete, err := rd.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			var le *LineError
			if errors.As(err, &le) {
				rep.Problem = &Problem{Seq: want, File: f.name, Line: le.Line, Offset: le.Offset, Kind: ProblemGarbage, Reason: le.Err.Error()}
				return nil
			}
			return err
		}
		v.endLine, v.endOffset = n+1, off+int64(len(line))+1
		at := lineAt{file: f.name, line: n, off: off, want: want}
		if !complete {
			rep.Problem = at.problem(ProblemTorn, 0, "the last line has no trailing newline (%d bytes): a write was cut short; `acpfs ledger verify --repair` cuts it and records the repair", len(line))
			return nil
		}
		p, err := v.record(f, first, line, at)
		if err != nil {
			return err
		}
		if p != nil {
			rep.Problem = p
			return nil
		}
		endsSealed = Kind(v.fl.str[fKind]) == KindSegmentEnd
	}
	rep.LastHash, rep.LastAt = string(v.lastHash), string(v.lastAt)
	if f.sealed && !endsSealed {
		rep.Problem = &Problem{Seq: rep.LastSeq + 1, File: f.name, Line: v.endLine, Offset: v.endOffset, Kind: ProblemSegment,
			Reason: fmt.Sprintf("the sealed segment %s ends at seq %d without a segment_end record: records were removed from its end, or the file was not sealed by a writer", f.name, rep.LastSeq)}
	}
	return nil
}

// lineAt is where a line of a ledger file is, and the seq it should hold.
type lineAt struct {
	file      string
	line, off int64
	want      int64
}

// problem reports a problem of the record on this line.
func (at lineAt) problem(kind string, found int64, format string, args ...any) *Problem {
	return &Problem{Seq: at.want, Found: found, File: at.file, Line: at.line, Offset: at.off, Kind: kind, Reason: fmt.Sprintf(format, args...)}
}

// record checks one complete line of f (its form, its place in the chain,
// its signature) and, when sound, counts it; the record is left in v.fl.
// It returns the problem found, or an error for what stops the check (a
// format version it does not know).
func (v *verifier) record(f ledgerFile, first bool, line []byte, at lineAt) (*Problem, error) {
	fl := &v.fl
	full, p, err := v.parse(f, first, line, at)
	if err != nil || p != nil {
		return p, err
	}
	if p := v.checkLink(f, first, at); p != nil {
		return p, nil
	}
	kind := fl.str[fKind]
	if full == nil && (Kind(kind) == KindRepair || (v.keys != nil && (len(fl.str[fSig]) > 0 || alwaysSigned(kind)))) {
		r := fl.record()
		full = &r
	}
	if v.keys != nil {
		if fl.seq == v.rep.SignedThrough+1 {
			v.unsignedAt.file, v.unsignedAt.line, v.unsignedAt.offs = f.name, at.line, at.off
		}
		if kind, reason := v.checkSig(full, fl.seq); kind != "" {
			return at.problem(kind, fl.seq, "%s", reason), nil
		}
	}
	v.count(full)
	return nil, nil
}

// parse reads the line into v.fl: through the fast path when that proves
// it canonical at a glance, otherwise through the slow path, which decides
// and names the problem. full is the record when the slow path decoded
// it. The first line of a file says which version the file is in.
func (v *verifier) parse(f ledgerFile, first bool, line []byte, at lineAt) (full *Record, p *Problem, err error) {
	fl := &v.fl
	parsed := !v.slowOnly && parseFast(line, fl, v.version >= Version3 && at.line > 1)
	if at.line == 1 {
		if err := checkVersion(at.file, line, fl, parsed); err != nil {
			return nil, nil, err
		}
		v.version = fileVersion(line, fl, parsed)
		if v.version >= Version3 && !v.slowOnly {
			parsed = parseFast(line, fl, true)
		}
	}
	if v.version >= Version3 {
		return v.parseV3(line, at, parsed)
	}
	if !parsed || !v.fh.check(line, fl) {
		r, kind, reason := v.enc.checkLine(line)
		if kind != "" && at.line == 1 && r.Seq > 0 && r.Seq != at.want && r.Hash == "" {
			// A record with no hash at all (version 3 writes them) where
			// the file's first record should be: that record, which
			// states the version, is gone.
			fl.fromRecord(&r)
			if p := v.checkLink(f, first, at); p != nil {
				return nil, p, nil
			}
		}
		if kind != "" {
			return nil, at.problem(kind, r.Seq, "%s", reason), nil
		}
		full = &r
		fl.fromRecord(full)
	}
	return full, nil, nil
}

// parseV3 is parse for a line of a version 3 file (see checkV3), which
// parseFast has read (parsed) or not: the fields the line leaves out are
// put back, so that the rest of the check reads every version alike.
func (v *verifier) parseV3(line []byte, at lineAt, parsed bool) (*Record, *Problem, error) {
	full, kind, reason := checkV3(v.enc, v.fh, &v.fl, line, &v.ctx, v.lastHash, at.line == 1, parsed)
	if kind != "" {
		var seq int64
		if full != nil {
			seq = full.Seq
		}
		return nil, at.problem(kind, seq, "%s", reason), nil
	}
	return full, nil, nil
}

// checkLink checks the record in v.fl against the chain before it: its
// seq and prev, a version only where a file starts, a segment_start at the
// start of every segment but the first file, and the head's signed
// checkpoint where the head says it is.
func (v *verifier) checkLink(f ledgerFile, first bool, at lineAt) *Problem {
	fl, rep, want, n := &v.fl, v.rep, at.want, at.line
	if fl.seq != want {
		if n == 1 && f.sealed && rep.Path != "" && f.name == SegmentName(rep.Path, want) {
			return at.problem(ProblemSeq, fl.seq, "%s is named for seq %d but starts at seq %d: the segments were renamed, or their contents swapped", f.name, want, fl.seq)
		}
		if n == 1 && (!first || fl.seq > want) {
			segment := "the segment holding them"
			if rep.Path != "" && fl.seq > want {
				segment += " (" + filepath.Base(SegmentName(rep.Path, want)) + ")"
			}
			return at.problem(ProblemSeq, fl.seq, "expected seq %d, found %d at the start of %s: the records before it were removed, or %s is missing, or the segments are out of order",
				want, fl.seq, f.name, segment)
		}
		return at.problem(ProblemSeq, fl.seq, "expected seq %d, found %d: a record was removed, inserted or moved", want, fl.seq)
	}
	if !bytes.Equal(fl.str[fPrev], v.lastHash) {
		if v.version >= Version3 && v.hashedSeq < want-1 {
			// The records in between carry no hash of their own: the
			// change is somewhere among them.
			return at.problem(ProblemPrev, fl.seq, "prev is %s but the hash of the chain before it is %s: one of seq %d–%d (the records since the last that carries its hash) was edited, or a record was removed, inserted or moved",
				short(string(fl.str[fPrev])), short(string(v.lastHash)), v.hashedSeq+1, want-1)
		}
		return at.problem(ProblemPrev, fl.seq, "prev is %s but the previous record's hash is %s: a record was removed, inserted or moved", short(string(fl.str[fPrev])), short(string(v.lastHash)))
	}
	if fl.num[fVersion] != 0 && n != 1 {
		return at.problem(ProblemNonCanonical, fl.seq, "the record states a ledger version (%d) but does not start a file: no writer writes that", fl.num[fVersion])
	}
	kind := fl.str[fKind]
	if n == 1 && !first && Kind(kind) != KindSegmentStart {
		return at.problem(ProblemSegment, fl.seq, "%s starts with a %s record, not segment_start: the file was not started by a writer", f.name, kind)
	}
	if v.head != nil && fl.seq == v.head.Seq && string(fl.str[fHash]) != v.head.Hash {
		return at.problem(ProblemRewritten, fl.seq, "the record at seq %d (hash %s) is not the checkpoint the head records (hash %s): the ledger was rewritten from there or earlier",
			fl.seq, short(string(fl.str[fHash])), short(v.head.Hash))
	}
	return nil
}

// count adds the sound record in v.fl to the report and makes it the one
// the next record links to. full is the decoded record, when one was
// needed.
func (v *verifier) count(full *Record) {
	fl, rep := &v.fl, v.rep
	rep.Records++
	rep.LastSeq = fl.seq
	if v.version < Version3 || fl.has(fSig) {
		v.hashedSeq = fl.seq
	}
	v.lastHash = append(v.lastHash[:0], fl.str[fHash]...)
	v.lastAt = append(v.lastAt[:0], fl.str[fAt]...)
	if rep.Records == 1 {
		rep.FirstAt = string(fl.str[fAt])
	}
	if full != nil && full.Kind == KindRepair {
		rep.Repairs = append(rep.Repairs, *full)
	}
}

// checkSig checks the signature of a record and, when valid, records who
// signed it. full is nil for a record that carries no signature and need
// not. It returns the problem kind and reason.
func (v *verifier) checkSig(full *Record, seq int64) (kind, reason string) {
	if full == nil {
		return "", ""
	}
	rep := v.rep
	if kind, reason := v.sigProblem(full, fmt.Sprintf("; seq %d–%d are not covered by a valid signature", rep.SignedThrough+1, seq)); kind != "" {
		return kind, reason
	}
	if full.Sig == "" {
		return "", ""
	}
	i, seen := v.signers[full.Key]
	if !seen {
		i = len(rep.Signers)
		v.signers[full.Key] = i
		rep.Signers = append(rep.Signers, Signer{Key: full.Key, FirstSeq: rep.SignedThrough + 1})
	}
	s := &rep.Signers[i]
	s.LastSeq = seq
	s.SignedCheckpoints++
	rep.SignedThrough = seq
	return "", ""
}

// sigProblem says what is wrong with r's signature: missing on a kind
// that must be signed, made with an unknown key, or not matching (then
// the reason names the key, followed by more).
func (v *verifier) sigProblem(r *Record, more string) (kind, reason string) {
	if r.Sig == "" {
		if alwaysSigned([]byte(r.Kind)) {
			return ProblemForged, fmt.Sprintf("a %s record must be signed and carries no signature: it was written without the key, or its signature was removed", r.Kind)
		}
		return "", ""
	}
	if r.Key == "" {
		return ProblemForged, "the record carries a signature but names no key: it was not written by a writer"
	}
	pk, ok := v.keys[r.Key]
	if !ok {
		return ProblemUnknownKey, fmt.Sprintf("signed by key %s, which is not among the public keys checked against (%s): pass its ledger.pub with --pubkey if it is yours",
			r.Key, strings.Join(v.rep.Keys, ", "))
	}
	if !pk.checkSig(v.enc, r) {
		return ProblemForged, fmt.Sprintf("the signature does not match: the record or an earlier one was changed after signing, or it was written without the key (key %s%s)", r.Key, more)
	}
	return "", ""
}

// finish runs the checks that need the whole ledger: the head, and what
// follows the last signature. last is the file read last.
func (v *verifier) finish(last ledgerFile) {
	rep := v.rep
	if v.head != nil && v.head.Seq > rep.LastSeq {
		rep.Problem = &Problem{Seq: rep.LastSeq + 1, Found: v.head.Seq, File: last.name, Line: v.endLine, Offset: v.endOffset, Kind: ProblemTruncated,
			Reason: fmt.Sprintf("the ledger ends at seq %d but its head records a signed checkpoint at seq %d: records were removed from the end", rep.LastSeq, v.head.Seq)}
		return
	}
	if v.keys == nil {
		return
	}
	rep.Unsigned = rep.LastSeq - rep.SignedThrough
	if rep.Unsigned > 0 {
		reason := fmt.Sprintf("the last %d record(s) (seq %d–%d) carry no signature: a running writer signs within a second of writing, and always when it stops; otherwise they were appended by someone without the key",
			rep.Unsigned, rep.SignedThrough+1, rep.LastSeq)
		if v.opts.AllowUnsignedTail {
			rep.Warnings = append(rep.Warnings, reason)
		} else {
			u := v.unsignedAt
			rep.Problem = &Problem{Seq: rep.SignedThrough + 1, Found: rep.SignedThrough + 1, File: u.file, Line: u.line, Offset: u.offs, Kind: ProblemUnsignedTail, Reason: reason}
			return
		}
	}
	if v.head == nil && rep.SignedThrough > 0 && rep.Path != "" {
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("no head file (%s): records cut from the end back to an earlier checkpoint would go unnoticed", HeadPath(rep.Path)))
	}
}

// loadHead reads the head file when there is one. A head that is not a
// sound, signed record is returned as the problem to report if the chain
// itself has none; the error is for I/O failures.
func (v *verifier) loadHead(name string) (*Problem, error) {
	fd, err := unix.Open(name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open head %s: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxLineBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read head %s: %w", name, err)
	}
	bad := func(kind string, seq int64, format string, args ...any) (*Problem, error) {
		return &Problem{Seq: seq, Found: seq, File: name, Line: 1, Kind: kind, Reason: fmt.Sprintf(format, args...)}, nil
	}
	line, ok := bytes.CutSuffix(b, []byte("\n"))
	if !ok || bytes.IndexByte(line, '\n') >= 0 {
		return bad(ProblemGarbage, 0, "the head file is not one ledger line")
	}
	r, kind, reason := v.enc.checkLine(line)
	if kind != "" {
		return bad(kind, r.Seq, "the head file: %s", reason)
	}
	if v.keys != nil {
		if r.Sig == "" {
			return bad(ProblemForged, r.Seq, "the head file's record carries no signature: it was not written by a writer")
		}
		if kind, reason := v.sigProblem(&r, ""); kind != "" {
			return bad(kind, r.Seq, "the head file: %s", reason)
		}
	}
	v.head = &r
	v.rep.HeadSeq = r.Seq
	return nil, nil
}
