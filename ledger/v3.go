package ledger

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/acpfs/acpfs/internal/digest"
)

// Format version 3 stores less of each record and proves the same.
//
// A signed record (one with a sig: checkpoints, segment boundaries, gaps,
// recoveries, an operator's repairs) is written exactly as in version 2:
// every field, with key, sig, prev and hash. Every other record:
//
//   - carries no prev and no hash: the hash of a record is still the
//     SHA-256 of its line with `"prev":"<the previous record's hash>",
//     "hash":""` as its last fields (version 2's rule), and every reader
//     puts those fields back before hashing, so a signature over a record
//     covers everything before it exactly as before;
//   - carries no key: only a writer checks a batch seal, and it checks it
//     with its own key;
//   - is sealed, when it ends a batch, with a mac of 22 characters: the
//     first 128 bits of the HMAC-SHA256 of "acpfs-ledger-v3\0" followed
//     by the record's hash input without the mac, in unpadded base64url;
//   - leaves out agent, grant and pid when they are the previous record's
//     in the same file (and writes them, empty if need be, when they are
//     not). A signed record and the first record of a file are written
//     against nothing: they state every one they have.
//
// So a record's line, the previous record's hash and the values of the
// previous record in the file decide everything about it, and a signed
// record needs nothing but itself (the head file holds one).

// Version3 is the format that leaves out what every reader can derive.
const Version3 = 3

// macPrefixV3 starts the message a version 3 batch seal covers.
const macPrefixV3 = "acpfs-ledger-v3\x00"

// macBytesV3 is how much of the HMAC-SHA256 a version 3 seal keeps: 128
// bits, half the output, the least RFC 2104 advises.
const macBytesV3 = 16

var (
	prevIntro     = []byte(`,"prev":"`)
	emptyHashTail = []byte(`","hash":""}`)
	macIntro      = []byte(`,"mac":"`)
)

// macFieldLen is the length of the mac field a version 3 writer adds
// before the closing brace: `,"mac":"` and 22 characters and `"`.
const macFieldLen = 8 + 22 + 1

// lineCtx is what a version 3 record leaves out when it is the same: the
// agent, grant and pid of the record before it in the file. The zero
// value is nothing, which a file's first record and every signed record
// are written against.
type lineCtx struct {
	agent, grant []byte
	pid          uint32
}

// A lineCtx's slices are never written to once set (a change gets new
// ones), so that a copy of it stays what it was: followers keep one with
// each position.

// reset makes the context nothing.
func (c *lineCtx) reset() { *c = lineCtx{} }

// setRecord makes r's values the context.
func (c *lineCtx) setRecord(r *Record) {
	if string(c.agent) != r.Agent {
		c.agent = []byte(r.Agent)
	}
	if string(c.grant) != r.Grant {
		c.grant = []byte(r.Grant)
	}
	c.pid = r.PID
}

// setLine makes the values of a parsed line (the record's own, the
// context put in) the context.
func (c *lineCtx) setLine(fl *fastLine) {
	if !bytes.Equal(c.agent, fl.str[fAgent]) {
		c.agent = bytes.Clone(fl.str[fAgent])
	}
	if !bytes.Equal(c.grant, fl.str[fGrant]) {
		c.grant = bytes.Clone(fl.str[fGrant])
	}
	c.pid = uint32(fl.num[fPID])
}

// same reports whether field i of r has the context's value.
func (c *lineCtx) same(i int, r *Record) bool {
	switch i {
	case fAgent:
		return string(c.agent) == r.Agent
	case fGrant:
		return string(c.grant) == r.Grant
	case fPID:
		return c.pid == r.PID
	}
	return false
}

// canonical reports whether the context fields an unsigned line writes
// all differ from the context: a writer leaves out the ones that do not.
func (c *lineCtx) canonical(fl *fastLine) bool {
	if fl.has(fAgent) && bytes.Equal(fl.str[fAgent], c.agent) {
		return false
	}
	if fl.has(fGrant) && bytes.Equal(fl.str[fGrant], c.grant) {
		return false
	}
	return !fl.has(fPID) || uint32(fl.num[fPID]) != c.pid
}

// fill puts the context's values in the fields an unsigned line leaves
// out. The slices point into the context until it changes.
func (c *lineCtx) fill(fl *fastLine) {
	if !fl.has(fAgent) {
		fl.str[fAgent] = c.agent
	}
	if !fl.has(fGrant) {
		fl.str[fGrant] = c.grant
	}
	if !fl.has(fPID) {
		fl.num[fPID] = uint64(c.pid)
	}
}

// fillRecord is fill for a decoded record, given which context fields
// its line writes.
func (c *lineCtx) fillRecord(r *Record, written uint32) {
	if written&(1<<fAgent) == 0 {
		r.Agent = string(c.agent)
	}
	if written&(1<<fGrant) == 0 {
		r.Grant = string(c.grant)
	}
	if written&(1<<fPID) == 0 {
		r.PID = c.pid
	}
}

// appendV3 appends the version 3 line of r, without newline: against
// the context base (nil: nothing) unless signed, and with key, prev and
// hash when signed. Strings are escaped as encoding/json escapes them,
// HTML escaping off, so that a signed record comes out as version 2
// writes it.
func (e *encoder) appendV3(dst []byte, r *Record, base *lineCtx, signed bool) []byte {
	for i := range recordFields {
		f := &recordFields[i]
		switch f.v3 {
		case v3Signed:
			if !signed {
				continue
			}
		case v3Context:
			if signed || base == nil {
				if f.isEmpty(r) {
					continue
				}
			} else if base.same(i, r) {
				continue
			}
		default:
			if !f.required && f.isEmpty(r) {
				continue
			}
		}
		switch {
		case f.str != nil:
			dst = append(dst, f.intro[:len(f.intro)-1]...)
			dst = e.appendString(dst, *f.str(r))
		case f.i64 != nil:
			dst = append(dst, f.intro...)
			dst = strconv.AppendInt(dst, *f.i64(r), 10)
		default:
			dst = append(dst, f.intro...)
			dst = strconv.AppendUint(dst, uint64(*f.u32(r)), 10)
		}
	}
	return append(dst, '}')
}

// isEmpty reports whether r's value of the field is empty.
func (f *recordField) isEmpty(r *Record) bool {
	switch {
	case f.str != nil:
		return *f.str(r) == ""
	case f.i64 != nil:
		return *f.i64(r) == 0
	}
	return *f.u32(r) == 0
}

// appendString appends s as a JSON string: as it is when it needs no
// escape (the common case), otherwise as encoding/json writes it.
func (e *encoder) appendString(dst []byte, s string) []byte {
	if plainValue(s) {
		dst = append(dst, '"')
		dst = append(dst, s...)
		return append(dst, '"')
	}
	e.buf.Reset()
	if err := e.enc.Encode(s); err != nil {
		// A string always encodes.
		panic(err)
	}
	return append(dst, bytes.TrimSuffix(e.buf.Bytes(), []byte("\n"))...)
}

// plainValue reports whether s is written as it is inside quotes: what
// plainString accepts.
func plainValue(s string) bool {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == '"' || c == '\\' {
				return false
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 || r == '\u2028' || r == '\u2029' {
			return false
		}
		i += size
	}
	return true
}

// chainInput appends the bytes a version 3 line's hash is taken of:
// for an unsigned line, the line with `,"prev":"PREV","hash":""` put
// before its closing brace; a signed line holds its prev and hash, and
// is hashed with the hash emptied, as in version 2.
func chainInput(dst, line []byte, prev string) []byte {
	if hashed(line) {
		dst = append(dst, line[:len(line)-2-64]...)
		return append(dst, quoteBrace...)
	}
	dst = append(dst, line[:len(line)-1]...)
	dst = append(dst, prevIntro...)
	dst = append(dst, prev...)
	return append(dst, emptyHashTail...)
}

// hashed reports whether a canonical line carries its hash: it ends with
// a hash field (a string cannot hold an unescaped quote, so only the
// field itself can look like this).
func hashed(line []byte) bool {
	n := len(line)
	return n >= 64+2+9 && string(line[n-64-2-9:n-64-2]) == `,"hash":"` && string(line[n-2:]) == `"}`
}

// macBody returns an unsigned version 3 line without the mac its writer
// added before the closing brace, and the mac; ok is false when the line
// ends with no such field.
func macBody(line []byte) (body, mac []byte, ok bool) {
	n := len(line)
	if n < macFieldLen+1 || line[n-1] != '}' || line[n-2] != '"' || !bytes.Equal(line[n-1-macFieldLen:n-1-macFieldLen+len(macIntro)], macIntro) {
		return nil, nil, false
	}
	body = make([]byte, 0, n-macFieldLen)
	body = append(body, line[:n-1-macFieldLen]...)
	return append(body, '}'), line[n-1-macFieldLen+len(macIntro) : n-2], true
}

// v3Written returns which fields of a line that decodes to a record it
// writes, and whether it is one JSON object (decodeLine decides the
// rest). Only the context and signed fields are asked about.
func v3Written(line []byte) (uint32, error) {
	var probe struct {
		Agent *string `json:"agent"`
		Grant *string `json:"grant"`
		PID   *uint32 `json:"pid"`
		Key   *string `json:"key"`
		Prev  *string `json:"prev"`
		Hash  *string `json:"hash"`
	}
	if err := json.Unmarshal(line, &probe); err != nil {
		return 0, err
	}
	var w uint32
	for _, x := range []struct {
		i   int
		set bool
	}{{fAgent, probe.Agent != nil}, {fGrant, probe.Grant != nil}, {fPID, probe.PID != nil},
		{fKey, probe.Key != nil}, {fPrev, probe.Prev != nil}, {fHash, probe.Hash != nil}} {
		if x.set {
			w |= 1 << x.i
		}
	}
	return w, nil
}

// decodeV3 decodes a version 3 line strictly into the record it stands
// for after a record with hash prev whose context is base (nil for
// nothing: the line starts a file): the fields it leaves out put back,
// Prev and Hash set. It checks neither the canonical form nor the link
// (checkLineV3 does).
func (e *encoder) decodeV3(line []byte, base *lineCtx, prev string) (Record, error) {
	r, err := decodeLine(line)
	if err != nil {
		return Record{}, err
	}
	if r.Sig != "" {
		return r, nil
	}
	written, err := v3Written(line)
	if err != nil {
		return Record{}, err
	}
	if base != nil {
		base.fillRecord(&r, written)
	}
	r.Prev = prev
	r.Hash = digest.Bytes(chainInput(e.scratch[:0], line, prev))
	return r, nil
}

// checkLineV3 is checkLine for a line of a version 3 file: it decodes the
// line as decodeV3 does and checks its own hash (a signed line) and that
// it is the line a writer makes of that record after base. The reason is
// empty when the line is sound.
func (e *encoder) checkLineV3(line []byte, base *lineCtx, prev string) (r Record, problem, reason string) {
	stored, err := decodeLine(line)
	if err != nil {
		return Record{}, ProblemGarbage, fmt.Sprintf("not a ledger record: %v", err)
	}
	if stored.Sig != "" {
		// Written as in version 2.
		return e.checkLine(line)
	}
	r, err = e.decodeV3(line, base, prev)
	if err != nil {
		return stored, ProblemGarbage, fmt.Sprintf("not a ledger record: %v", err)
	}
	if stored.Key != "" || stored.Prev != "" || stored.Hash != "" {
		return r, ProblemNonCanonical, "an unsigned record of a version 3 file carries key, prev or hash: no writer writes that"
	}
	want := e.appendV3(nil, &r, base, false)
	if !bytes.Equal(want, line) {
		return r, ProblemNonCanonical, "the line is not in canonical form (re-encoding differs)"
	}
	return r, "", ""
}

// checkV3 checks a line of a version 3 file the way verify does, as the
// record after the one whose hash is prev and whose context is ctx (first:
// the line starts the file). parsed says parseFast (version 3 layout)
// read it into fl. When the line is sound, fl holds the record whole
// (context, prev and hash put back), ctx becomes its context, and full is
// the record when the slow path decoded it; otherwise problem and reason
// say why, and full (when the line decodes) names its seq.
func checkV3(e *encoder, fh *fastHasher, fl *fastLine, line []byte, ctx *lineCtx, prev []byte, first, parsed bool) (full *Record, problem, reason string) {
	if first {
		ctx.reset()
	}
	switch {
	case !parsed:
	case fl.has(fSig):
		parsed = fh.check(line, fl)
	default:
		parsed = ctx.canonical(fl)
		if parsed {
			ctx.fill(fl)
			fl.str[fPrev] = prev
			fl.str[fHash] = fh.chain(line, prev)
		}
	}
	if !parsed {
		var base *lineCtx
		if !first {
			base = ctx
		}
		r, kind, reason := e.checkLineV3(line, base, string(prev))
		if kind != "" {
			return &r, kind, reason
		}
		full = &r
		fl.fromRecord(full)
	}
	ctx.setLine(fl)
	return full, "", ""
}

// readV3 reads a line of a version 3 file as the record after pos,
// without judging it (verify does), and makes it pos: the fields the line
// leaves out put back. parsed says parseFast (version 3 layout) read it
// into fl.
func readV3(e *encoder, fh *fastHasher, fl *fastLine, line []byte, pos *chainPos, parsed bool) (Record, error) {
	var rec Record
	switch {
	case parsed && fl.has(fSig):
		rec = fl.record()
	case parsed:
		pos.ctx.fill(fl)
		rec = fl.record()
		rec.Prev = pos.hash
		rec.Hash = string(fh.chain(line, []byte(pos.hash)))
	default:
		var base *lineCtx
		if !pos.start {
			base = &pos.ctx
		}
		var err error
		if rec, err = e.decodeV3(line, base, pos.hash); err != nil {
			return Record{}, err
		}
	}
	pos.advance(&rec)
	return rec, nil
}

// encodeNext appends the line (newline included) of r as the record that
// follows pos in a file of version v, seals it (a signature when sign, a
// batch seal when mac) and sets its Prev and Hash. Signed records, and
// every record of a file of version 1 or 2, are written as version 2
// writes them.
func (e *encoder) encodeNext(dst []byte, r *Record, pos *chainPos, v int64, k *Key, sign, mac bool) ([]byte, error) {
	r.Prev, r.Hash = pos.hash, ""
	r.Key, r.MAC, r.Sig = "", "", ""
	if sign || v < Version3 {
		if sign || mac {
			if err := k.seal(e, r, sign); err != nil {
				return dst, err
			}
		}
		return e.appendLine(dst, r)
	}
	var base *lineCtx
	if !pos.start {
		base = &pos.ctx
	}
	start := len(dst)
	dst = e.appendV3(dst, r, base, false)
	if mac {
		m := k.macV3(e, dst[start:], r.Prev)
		dst = append(dst[:len(dst)-1], macIntro...)
		dst = append(dst, m...)
		dst = append(dst, quoteBrace...)
		r.MAC = m
	}
	r.Hash = digest.Bytes(chainInput(e.scratch[:0], dst[start:], r.Prev))
	return append(dst, '\n'), nil
}

// chainPos is where a file's chain stands after its last record: what
// the next record of the file links to and, in version 3, is written
// against.
type chainPos struct {
	seq   int64
	hash  string
	ctx   lineCtx
	start bool // the file holds no record yet
}

// advance makes r, just written or read, the last record.
func (p *chainPos) advance(r *Record) {
	p.seq, p.hash, p.start = r.Seq, r.Hash, false
	p.ctx.setRecord(r)
}

// errNoAnchor says a version 3 file's records cannot be linked: no
// signed record and no first record of the chain to start from.
var errNoAnchor = errors.New("no signed record and no start of the chain to read the last records from")

// LineEncoder writes records as the lines of one ledger file in a given
// format version, each linked to the record before it, without sealing
// them: Key, MAC and Sig are written as given (a version 3 unsigned
// record carries no key). It makes what someone who can write a ledger
// but not read its key can write; tests and tools build ledgers with it.
type LineEncoder struct {
	enc     *encoder
	version int64
	pos     chainPos
}

// NewLineEncoder returns a LineEncoder at the start of a file of the
// given version (see Record.Version: the caller stamps it on the first
// record).
func NewLineEncoder(version int64) *LineEncoder {
	return &LineEncoder{enc: newEncoder(), version: version, pos: chainPos{start: true}}
}

// After continues the file after r, its last record as Scan or Append
// return it.
func (le *LineEncoder) After(r Record) { le.pos.advance(&r) }

// Encode sets r's Prev (the hash of the record before) and Hash, and
// returns its line, newline included. Seq and Version are written as
// given.
func (le *LineEncoder) Encode(r *Record) ([]byte, error) {
	r.Prev, r.Hash = le.pos.hash, ""
	var line []byte
	var err error
	if le.version < Version3 || r.Sig != "" {
		if line, err = le.enc.appendLine(nil, r); err != nil {
			return nil, err
		}
	} else {
		var base *lineCtx
		if !le.pos.start {
			base = &le.pos.ctx
		}
		r.Key = ""
		line = le.enc.appendV3(nil, r, base, false)
		r.Hash = digest.Bytes(chainInput(nil, line, r.Prev))
		line = append(line, '\n')
	}
	le.pos.advance(r)
	return line, nil
}
