package pycompat

// Member is one member of a JSON object, as Scanner.Member returns it:
// the key as a raw string (quotes and escapes included), the kind of the
// value and the value's raw bytes.
type Member struct {
	Key  []byte
	Kind Kind
	Raw  []byte
}

// ScanFlat reads b in one pass when it is the common shape of an event
// line: one JSON object whose values are strings, numbers, true, false
// or null, with only spaces and tabs between tokens, and without the
// lead bytes (0xC2, 0xE2) of the characters U+0085, U+2028 and U+2029.
// It appends the members to out and returns ok; then json.Valid(b) holds,
// LineBreakRune(b) is 0 and out holds what Scanner.Member returns, in
// order. For anything else (nested values, a CR, non-ASCII text that may
// hold a line separator, invalid JSON) it returns ok false and out as it
// was: the caller then takes the general path, which decides.
func ScanFlat(b []byte, out []Member) ([]Member, bool) {
	n0 := len(out)
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return out[:n0], false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return out, skipSpace(b, i+1) == len(b)
	}
	for {
		ks := i
		ke, ok := flatString(b, i)
		if !ok {
			return out[:n0], false
		}
		i = skipSpace(b, ke)
		if i >= len(b) || b[i] != ':' {
			return out[:n0], false
		}
		i = skipSpace(b, i+1)
		vs := i
		kind, ve, ok := flatValue(b, i)
		if !ok {
			return out[:n0], false
		}
		out = append(out, Member{Key: b[ks:ke], Kind: kind, Raw: b[vs:ve]})
		i = skipSpace(b, ve)
		if i >= len(b) {
			return out[:n0], false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			if skipSpace(b, i+1) != len(b) {
				return out[:n0], false
			}
			return out, true
		default:
			return out[:n0], false
		}
	}
}

// skipSpace returns the index of the first byte at or after i that is
// not a space or a tab. CR and LF, JSON whitespace too, split lines for
// the reference's reader: ScanFlat leaves them to the general path.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t') {
		i++
	}
	return i
}

// plain marks the bytes a string may hold as they are, in ScanFlat's
// shape: not a control character, a quote, a backslash, or the lead byte
// of U+0085 (0xC2) or U+2028/U+2029 (0xE2).
var plain = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\' && c != 0xC2 && c != 0xE2
	}
	return t
}()

// flatString returns the index just past the JSON string at b[i], and
// whether it is one that ScanFlat accepts.
func flatString(b []byte, i int) (int, bool) {
	if i >= len(b) || b[i] != '"' {
		return 0, false
	}
	i++
	for {
		for i < len(b) && plain[b[i]] {
			i++
		}
		if i >= len(b) {
			return 0, false
		}
		switch b[i] {
		case '"':
			return i + 1, true
		case '\\':
			if i+1 >= len(b) {
				return 0, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) || !isHex(b[i+5]) {
					return 0, false
				}
				i += 6
			default:
				return 0, false
			}
		default:
			return 0, false
		}
	}
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// flatValue returns the kind of the scalar JSON value at b[i] and the
// index just past it; ok is false for an object, an array or anything
// that is not a JSON value.
func flatValue(b []byte, i int) (Kind, int, bool) {
	if i >= len(b) {
		return 0, 0, false
	}
	switch c := b[i]; {
	case c == '"':
		end, ok := flatString(b, i)
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
