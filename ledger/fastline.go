package ledger

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"math"
	"reflect"
	"strings"
	"unicode/utf8"
)

// The fast path proves a line canonical without encoding/json, which is
// what keeps verify at hundreds of MB/s. It accepts only the plainest
// form a writer produces: every field in the order Record declares it,
// each optional field present exactly when non-empty, strings without any
// escape (no backslash, no control character, valid UTF-8, no U+2028 or
// U+2029, so that the bytes are the value and re-encode to themselves),
// and integers in shortest decimal form. Whatever it cannot prove goes to
// the slow path (checkLine), which decodes, re-encodes and names the
// problem; so the fast path only has to never accept a line the slow path
// would refuse, and to read the same values from it.

// recordFields is the one list of Record's fields the hand-written paths
// (parseFast, record, fromRecord, sanitize, the version 3 encoder) work
// from, in the order Record declares them. Each entry says where its value
// lives and how format version 3 writes it (v3.go); the field's name and
// whether it is optional come from Record's json tag (init), and init
// refuses to start when the list and Record disagree, so that a field
// added to Record without its entry here is found by the first test run.
var recordFields = [...]recordField{
	{i64: func(r *Record) *int64 { return &r.Seq }},
	{i64: func(r *Record) *int64 { return &r.Version }},
	{str: func(r *Record) *string { return &r.At }},
	{str: func(r *Record) *string { return (*string)(&r.Kind) }},
	{str: func(r *Record) *string { return &r.Agent }, v3: v3Context},
	{str: func(r *Record) *string { return &r.Grant }, v3: v3Context},
	{str: func(r *Record) *string { return &r.Path }},
	{str: func(r *Record) *string { return (*string)(&r.Op) }},
	{u32: func(r *Record) *uint32 { return &r.PID }, v3: v3Context},
	{str: func(r *Record) *string { return &r.SHA256 }},
	{i64: func(r *Record) *int64 { return &r.Count }},
	{str: func(r *Record) *string { return &r.First }},
	{str: func(r *Record) *string { return &r.Last }},
	{str: func(r *Record) *string { return &r.Detail }},
	{str: func(r *Record) *string { return &r.Key }, v3: v3Signed},
	{str: func(r *Record) *string { return &r.MAC }},
	{str: func(r *Record) *string { return &r.Sig }},
	{str: func(r *Record) *string { return &r.Prev }, v3: v3Signed},
	{str: func(r *Record) *string { return &r.Hash }, v3: v3Signed},
}

// numFields is how many fields a Record has.
const numFields = len(recordFields)

// recordField is one of Record's fields: exactly one of str, i64 and u32
// is set, by its type.
type recordField struct {
	str func(*Record) *string
	i64 func(*Record) *int64
	u32 func(*Record) *uint32
	// v3 is how format version 3 writes the field.
	v3 v3Rule

	// Derived from Record's json tag by init.
	name     string
	intro    string // the exact bytes that introduce it, the opening quote of a string included
	required bool   // written even when empty (no omitempty)
}

// v3Rule says how format version 3 writes a field (see v3.go).
type v3Rule uint8

const (
	// v3Plain: as versions 1 and 2 write it.
	v3Plain v3Rule = iota
	// v3Context: left out when equal to the record before in the file,
	// written (even empty) when not; on a signed record and on a file's
	// first record, written when not empty.
	v3Context
	// v3Signed: written on signed records only (and on them always).
	v3Signed
)

// Indexes in recordFields of the fields the verifier and the follower
// look at in every line; set by init from the json names.
var fSeq, fVersion, fAt, fKind, fAgent, fGrant, fPID, fKey, fMAC, fSig, fPrev, fHash int

// Bits of fastLine.present for the fields version 3 may leave out or
// write empty.
var contextBits, signedBits uint32

func init() {
	t := reflect.TypeFor[Record]()
	if t.NumField() != numFields || numFields > 32 {
		panic(fmt.Sprintf("ledger: Record has %d fields, recordFields lists %d", t.NumField(), numFields))
	}
	for i := range recordFields {
		f, sf := &recordFields[i], t.Field(i)
		var r Record
		var p any
		switch {
		case f.str != nil:
			p = f.str(&r)
		case f.i64 != nil:
			p = f.i64(&r)
		case f.u32 != nil:
			p = f.u32(&r)
		}
		field := reflect.ValueOf(&r).Elem().Field(i)
		if p == nil || reflect.ValueOf(p).Pointer() != field.Addr().Pointer() || reflect.ValueOf(p).Elem().Kind() != sf.Type.Kind() {
			panic(fmt.Sprintf("ledger: recordFields[%d] is not Record.%s", i, sf.Name))
		}
		name, opts, _ := strings.Cut(sf.Tag.Get("json"), ",")
		f.name, f.required = name, opts != "omitempty"
		f.intro = `,"` + name + `":`
		if i == 0 {
			f.intro = f.intro[1:]
		}
		if f.str != nil {
			f.intro += `"`
		}
	}
	if !recordFields[0].required || recordFields[0].i64 == nil || !recordFields[numFields-1].required || recordFields[numFields-1].str == nil {
		panic("ledger: Record must start with a required number and end with a required string (seq ... hash)")
	}
	recordFields[0].intro = "{" + recordFields[0].intro
	for _, x := range []struct {
		i    *int
		name string
	}{{&fSeq, "seq"}, {&fVersion, "version"}, {&fAt, "at"}, {&fKind, "kind"}, {&fAgent, "agent"}, {&fGrant, "grant"},
		{&fPID, "pid"}, {&fKey, "key"}, {&fMAC, "mac"}, {&fSig, "sig"}, {&fPrev, "prev"}, {&fHash, "hash"}} {
		*x.i = fieldIndex(x.name)
	}
	for i := range recordFields {
		switch recordFields[i].v3 {
		case v3Context:
			contextBits |= 1 << i
		case v3Signed:
			signedBits |= 1 << i
		}
	}
	// The version 3 encoder seals an unsigned record by adding its MAC
	// as the last field: nothing a version 3 unsigned record writes may
	// come after it.
	for i := fMAC + 1; i < numFields; i++ {
		if recordFields[i].v3 != v3Signed && i != fSig {
			panic("ledger: only signed fields may follow mac")
		}
	}
}

// fieldIndex returns the index of the field with this json name.
func fieldIndex(name string) int {
	for i := range recordFields {
		if recordFields[i].name == name {
			return i
		}
	}
	panic("ledger: Record has no field " + name)
}

// fastLine holds the values of a canonical line by field index; the
// slices point into the line and are valid as long as it is.
type fastLine struct {
	seq     int64
	str     [numFields][]byte // string fields
	num     [numFields]uint64 // number fields
	present uint32            // bit i: the line writes field i
}

// has reports whether the line writes field i.
func (fl *fastLine) has(i int) bool { return fl.present&(1<<i) != 0 }

// parseFast reads line (without its newline) into fl when it is in the
// plain canonical form described above, in the layout of versions 1 and
// 2, or of version 3 when v3 is set: there the context fields may be
// written empty and the signed fields are written exactly on signed
// records (whether a context field should have been left out depends on
// the record before: see lineCtx.canonical). It does not check the hash.
func parseFast(line []byte, fl *fastLine, v3 bool) bool {
	*fl = fastLine{}
	p := 0
	for i := range recordFields {
		f := &recordFields[i]
		optional := !f.required || (v3 && f.v3 == v3Signed)
		emptyOK := f.required || (v3 && f.v3 == v3Context)
		if len(line)-p < len(f.intro) || string(line[p:p+len(f.intro)]) != f.intro {
			if !optional {
				return false
			}
			continue
		}
		p += len(f.intro)
		fl.present |= 1 << i
		if f.str != nil {
			end, ok := plainString(line, p)
			if !ok || (end == p && !emptyOK) {
				// An empty optional string is left out by a writer.
				return false
			}
			fl.str[i] = line[p:end]
			p = end + 1
			continue
		}
		v, n := plainUint(line[p:])
		if n == 0 || (v == 0 && !emptyOK) || (f.u32 != nil && v > math.MaxUint32) {
			return false
		}
		p += n
		fl.num[i] = v
	}
	fl.seq = int64(fl.num[fSeq])
	if v3 {
		// Key, prev and hash are written exactly on signed records, which
		// are written as in version 2: no context field empty.
		want := uint32(0)
		if fl.has(fSig) {
			want = signedBits
			if !fl.ctxNonEmpty() {
				return false
			}
		}
		if fl.present&signedBits != want {
			return false
		}
	}
	return p == len(line)-1 && line[p] == '}'
}

// ctxNonEmpty reports whether every context field the line writes has a
// value.
func (fl *fastLine) ctxNonEmpty() bool {
	for i := range recordFields {
		if recordFields[i].v3 == v3Context && fl.has(i) && len(fl.str[i]) == 0 && fl.num[i] == 0 {
			return false
		}
	}
	return true
}

// plainString returns the index of the quote closing the string that
// starts at line[p], when the string needs no escape in canonical form.
func plainString(line []byte, p int) (int, bool) {
	i := p
	for i < len(line) {
		// Eight plain ASCII bytes at a time: none with the high bit set,
		// below 0x20, '"' or '\\'.
		if i+8 <= len(line) {
			x := binary.LittleEndian.Uint64(line[i:])
			if (x|(x-lsb*0x20)|hasZero(x^(lsb*'"'))|hasZero(x^(lsb*'\\')))&msb == 0 {
				i += 8
				continue
			}
		}
		c := line[i]
		if c < utf8.RuneSelf {
			if c == '"' {
				return i, true
			}
			if c < 0x20 || c == '\\' {
				return 0, false
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(line[i:])
		if (r == utf8.RuneError && size == 1) || r == '\u2028' || r == '\u2029' {
			return 0, false
		}
		i += size
	}
	return 0, false
}

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// hasZero has the high bit of some byte set when x has a zero byte (and
// only then: bits above the first zero byte may be wrong, which does not
// matter for "any").
func hasZero(x uint64) uint64 { return (x - lsb) &^ x }

// plainUint parses a non-negative decimal integer in shortest form ("0" or
// no leading zero) of at most 18 digits, so that it cannot overflow int64.
// n is 0 when b does not start with one.
func plainUint(b []byte) (v uint64, n int) {
	for n < len(b) && b[n] >= '0' && b[n] <= '9' {
		if n == 18 {
			return 0, 0
		}
		v = v*10 + uint64(b[n]-'0')
		n++
	}
	if n > 1 && b[0] == '0' {
		return 0, 0
	}
	return v, n
}

// fastHasher checks the hash of lines parseFast accepted.
type fastHasher struct {
	h   hash.Hash
	sum [sha256.Size]byte
	hex [2 * sha256.Size]byte
}

var quoteBrace = []byte(`"}`)

func newFastHasher() *fastHasher { return &fastHasher{h: sha256.New()} }

// check reports whether fl's hash is the SHA-256 of line up to its hash
// value, followed by `"}`: the canonical encoding with Hash emptied.
func (fh *fastHasher) check(line []byte, fl *fastLine) bool {
	if len(fl.str[fHash]) != len(fh.hex) {
		return false
	}
	hashAt := len(line) - len(fl.str[fHash]) - 2 // before the value and `"}`
	fh.h.Reset()
	fh.h.Write(line[:hashAt])
	fh.h.Write(quoteBrace)
	fh.h.Sum(fh.sum[:0])
	hex.Encode(fh.hex[:], fh.sum[:])
	return bytes.Equal(fh.hex[:], fl.str[fHash])
}

// chain returns the hash of a version 3 line that carries no chain
// fields, prev being the hash of the record before it: the SHA-256 of
// the line with `,"prev":"PREV","hash":""` put back before its closing
// brace (see v3.go). The slice is valid until the next call.
func (fh *fastHasher) chain(line, prev []byte) []byte {
	fh.h.Reset()
	fh.h.Write(line[:len(line)-1])
	fh.h.Write(prevIntro)
	fh.h.Write(prev)
	fh.h.Write(emptyHashTail)
	fh.h.Sum(fh.sum[:0])
	hex.Encode(fh.hex[:], fh.sum[:])
	return fh.hex[:]
}

// record returns the Record the line encodes.
func (fl *fastLine) record() Record {
	var r Record
	for i := range recordFields {
		f := &recordFields[i]
		switch {
		case f.str != nil:
			if v := fl.str[i]; len(v) > 0 {
				*f.str(&r) = string(v)
			}
		case f.i64 != nil:
			*f.i64(&r) = int64(fl.num[i])
		default:
			*f.u32(&r) = uint32(fl.num[i])
		}
	}
	return r
}

// fromRecord points fl at r's values, for lines only the slow path could
// read, so that the verifier handles both alike. A field counts as
// written when it is not empty.
func (fl *fastLine) fromRecord(r *Record) {
	*fl = fastLine{seq: r.Seq}
	for i := range recordFields {
		f := &recordFields[i]
		switch {
		case f.str != nil:
			if v := *f.str(r); v != "" {
				fl.str[i] = []byte(v)
			}
		case f.i64 != nil:
			fl.num[i] = uint64(*f.i64(r))
		default:
			fl.num[i] = uint64(*f.u32(r))
		}
		if !f.isEmpty(r) {
			fl.present |= 1 << i
		}
	}
}
