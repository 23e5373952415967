package ledger

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"math"
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

// Indexes of the string fields in fastLine.str, in declaration order.
const (
	fAt = iota
	fKind
	fAgent
	fGrant
	fPath
	fOp
	fSHA256
	fFirst
	fLast
	fDetail
	fKey
	fMAC
	fSig
	fPrev
	fHash
	fNumStr
)

// fastLine holds the values of a canonical line; the slices point into
// the line and are valid as long as it is.
type fastLine struct {
	seq   int64
	pid   uint32
	count int64
	str   [fNumStr][]byte
}

type fastValue uint8

const (
	vStr fastValue = iota
	vInt64
	vUint32
)

// fastFields lists the fields in the order Record declares them, each with
// the exact bytes that introduce it (its opening quote included for
// strings).
var fastFields = [...]struct {
	intro    string
	value    fastValue
	required bool // written even when empty (no omitempty)
	slot     int  // index in fastLine.str, or -1 for numbers
}{
	{`{"seq":`, vInt64, true, -1},
	{`,"at":"`, vStr, true, fAt},
	{`,"kind":"`, vStr, true, fKind},
	{`,"agent":"`, vStr, false, fAgent},
	{`,"grant":"`, vStr, false, fGrant},
	{`,"path":"`, vStr, false, fPath},
	{`,"op":"`, vStr, false, fOp},
	{`,"pid":`, vUint32, false, -1},
	{`,"sha256":"`, vStr, false, fSHA256},
	{`,"count":`, vInt64, false, -1},
	{`,"first":"`, vStr, false, fFirst},
	{`,"last":"`, vStr, false, fLast},
	{`,"detail":"`, vStr, false, fDetail},
	{`,"key":"`, vStr, false, fKey},
	{`,"mac":"`, vStr, false, fMAC},
	{`,"sig":"`, vStr, false, fSig},
	{`,"prev":"`, vStr, true, fPrev},
	{`,"hash":"`, vStr, true, fHash},
}

// parseFast reads line (without its newline) into fl when it is in the
// plain canonical form described above. It does not check the hash.
func parseFast(line []byte, fl *fastLine) bool {
	*fl = fastLine{}
	p := 0
	for i := range fastFields {
		f := &fastFields[i]
		if len(line)-p < len(f.intro) || string(line[p:p+len(f.intro)]) != f.intro {
			if f.required {
				return false
			}
			continue
		}
		p += len(f.intro)
		switch f.value {
		case vStr:
			end, ok := plainString(line, p)
			if !ok || (end == p && !f.required) {
				// An empty optional string is left out by a writer.
				return false
			}
			fl.str[f.slot] = line[p:end]
			p = end + 1
		default:
			v, n := plainUint(line[p:])
			if n == 0 || (v == 0 && !f.required) {
				return false
			}
			p += n
			switch {
			case i == 0:
				fl.seq = int64(v)
			case f.value == vUint32:
				if v > math.MaxUint32 {
					return false
				}
				fl.pid = uint32(v)
			default:
				fl.count = int64(v)
			}
		}
	}
	return p == len(line)-1 && line[p] == '}'
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

// record returns the Record the line encodes.
func (fl *fastLine) record() Record {
	s := func(i int) string { return string(fl.str[i]) }
	return Record{
		Seq: fl.seq, At: s(fAt), Kind: s(fKind), Agent: s(fAgent), Grant: s(fGrant), Path: s(fPath),
		Op: s(fOp), PID: fl.pid, SHA256: s(fSHA256), Count: fl.count, First: s(fFirst), Last: s(fLast),
		Detail: s(fDetail), Key: s(fKey), MAC: s(fMAC), Sig: s(fSig), Prev: s(fPrev), Hash: s(fHash),
	}
}

// fromRecord points fl at r's values, for lines only the slow path could
// read, so that the verifier handles both alike.
func (fl *fastLine) fromRecord(r *Record) {
	*fl = fastLine{seq: r.Seq, pid: r.PID, count: r.Count}
	for i, v := range [fNumStr]string{r.At, r.Kind, r.Agent, r.Grant, r.Path, r.Op, r.SHA256, r.First, r.Last,
		r.Detail, r.Key, r.MAC, r.Sig, r.Prev, r.Hash} {
		fl.str[i] = []byte(v)
	}
}
