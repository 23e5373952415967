package pycompat

import (
	"encoding/binary"
	"math/bits"
	"unicode/utf8"
)

// Member is one member of a JSON object, as Scanner.Next returns it:
// where its key (a raw string, quotes and escapes included) and its
// value's raw bytes lie in the line, and the kind of the value. Offsets
// rather than slices: a replay reads millions, and a slice costs more to
// make than the scan of its bytes.
type Member struct {
	KeyStart, KeyEnd, RawStart, RawEnd int32
	Kind                               Kind
}

// Key is the member's key in line, the bytes it was read from.
func (m Member) Key(line []byte) []byte { return line[m.KeyStart:m.KeyEnd] }

// Raw is the member's value in line, the bytes it was read from.
func (m Member) Raw(line []byte) []byte { return line[m.RawStart:m.RawEnd] }

// maxFlat is the longest line ScanFlat reads (offsets are int32).
const maxFlat = 1<<31 - 1

// ScanFlat reads b in one pass when it is the common shape of an event
// line: one JSON object whose values are strings, numbers, true, false
// or null, with only spaces and tabs between tokens, in valid UTF-8
// without the raw characters U+0085, U+2028 and U+2029 (which the
// reference's reader splits lines at). It appends the members to out and
// returns ok; then utf8.Valid(b) and json.Valid(b) hold, LineBreakRune(b)
// is 0 and out holds what Scanner.Next returns, in order. For anything
// else (nested values, a CR, a raw line separator, invalid JSON or UTF-8)
// it returns ok false and out as it was: the caller then takes the
// general path, which decides.
func ScanFlat(b []byte, out []Member) ([]Member, bool) {
	f := flat{b: b}
	n0 := len(out)
	if len(b) > maxFlat {
		return out, false
	}
	out, ok := f.object(out)
	// Only a line with a byte >= 0x80 can be invalid UTF-8.
	if !ok || f.high && !utf8.Valid(b) {
		return out[:n0], false
	}
	return out, true
}

// flat is the state of one ScanFlat.
type flat struct {
	b    []byte
	high bool // a byte >= 0x80 was seen (in a string: anywhere else is invalid)
}

func (f *flat) object(out []Member) ([]Member, bool) {
	b := f.b
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return out, false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return out, skipSpace(b, i+1) == len(b)
	}
	for {
		ks := i
		ke, ok := f.str(i)
		if !ok {
			return out, false
		}
		i = skipSpace(b, ke)
		if i >= len(b) || b[i] != ':' {
			return out, false
		}
		i = skipSpace(b, i+1)
		vs := i
		kind, ve, ok := f.value(i)
		if !ok {
			return out, false
		}
		out = append(out, Member{KeyStart: int32(ks), KeyEnd: int32(ke), RawStart: int32(vs), RawEnd: int32(ve), Kind: kind})
		i = skipSpace(b, ve)
		if i >= len(b) {
			return out, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return out, skipSpace(b, i+1) == len(b)
		default:
			return out, false
		}
	}
}

// skipSpace returns the index of the first byte at or after i that is
// not a space or a tab. CR and LF, JSON whitespace too, split lines for
// the reference's reader: ScanFlat leaves them to the general path.
func skipSpace(b []byte, i int) int {
	// Most tokens follow each other directly: one comparison then.
	for i < len(b) && b[i] <= ' ' && (b[i] == ' ' || b[i] == '\t') {
		i++
	}
	return i
}

// plain marks the bytes a string may hold as they are and that the
// byte loop of str passes: ASCII, not a control character, a quote or a
// backslash.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// Eight bytes at a time: ones has 0x01 in every byte, highs 0x80.
const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// special marks the bytes of x that are not plain with their high bit;
// the lowest mark is exact (a borrow only spreads above a byte that
// matched): a byte below 0x20, a quote, a backslash, a byte >= 0x80.
func special(x uint64) uint64 {
	ctl := (x - 0x20*ones) &^ x
	q := x ^ '"'*ones
	q = (q - ones) &^ q
	bs := x ^ '\\'*ones
	bs = (bs - ones) &^ bs
	return (ctl | q | bs | x) & highs
}

// str returns the index just past the JSON string at b[i], and whether
// it is one that ScanFlat accepts.
func (f *flat) str(i int) (int, bool) {
	b := f.b
	if i >= len(b) || b[i] != '"' {
		return 0, false
	}
	i++
	for {
		for i+8 <= len(b) {
			if m := special(binary.LittleEndian.Uint64(b[i:])); m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				break
			}
			i += 8
		}
		for i < len(b) && plain[b[i]] { // the last bytes of the line
			i++
		}
		if i >= len(b) {
			return 0, false
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1, true
		case c == '\\':
			n := escapeLen(b[i:])
			if n == 0 {
				return 0, false
			}
			i += n
		case c >= 0x80 && !lineSeparatorAt(b, i):
			f.high = true
			i++
		default:
			return 0, false
		}
	}
}

// lineSeparatorAt reports whether b[i:] starts with the UTF-8 of U+0085
// (C2 85), U+2028 (E2 80 A8) or U+2029 (E2 80 A9). Other characters with
// those lead bytes (an em dash, curly quotes, an ellipsis, a degree sign)
// are plain text. In a line ScanFlat accepts, which is valid UTF-8, 0xC2
// and 0xE2 are only ever lead bytes: their next bytes tell the character.
func lineSeparatorAt(b []byte, i int) bool {
	switch b[i] {
	case 0xC2:
		return i+1 < len(b) && b[i+1] == 0x85
	case 0xE2:
		return i+2 < len(b) && b[i+1] == 0x80 && (b[i+2] == 0xA8 || b[i+2] == 0xA9)
	}
	return false
}

// escapeLen is the length of the JSON escape at the start of e, 0 when
// it is not one.
func escapeLen(e []byte) int {
	if len(e) < 2 {
		return 0
	}
	switch e[1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return 2
	case 'u':
		if len(e) >= 6 && isHex(e[2]) && isHex(e[3]) && isHex(e[4]) && isHex(e[5]) {
			return 6
		}
	}
	return 0
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// value returns the kind of the scalar JSON value at b[i] and the
// index just past it; ok is false for an object, an array or anything
// that is not a JSON value.
func (f *flat) value(i int) (Kind, int, bool) {
	b := f.b
	if i >= len(b) {
		return 0, 0, false
	}
	switch c := b[i]; {
	case c == '"':
		end, ok := f.str(i)
		return String, end, ok
	case c == '-' || isDigit(c):
		end, ok := flatNumber(b, i)
		return Number, end, ok
	case c == 't':
		return True, i + 4, hasWord(b, i, "true")
	case c == 'f':
		return False, i + 5, hasWord(b, i, "false")
	case c == 'n':
		return Null, i + 4, hasWord(b, i, "null")
	}
	return 0, 0, false
}

func hasWord(b []byte, i int, w string) bool { return len(b)-i >= len(w) && string(b[i:i+len(w)]) == w }

// flatNumber returns the index just past the JSON number at b[i]:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func flatNumber(b []byte, i int) (int, bool) {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	default:
		return 0, false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || !isDigit(b[i]) {
			return 0, false
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return 0, false
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	return i, true
}
