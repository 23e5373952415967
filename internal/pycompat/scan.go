package pycompat

import (
	"bytes"
	"encoding/json"
)

// Kind is the kind of a JSON value, named by the byte it starts with.
type Kind byte

// The kinds of a member's value (Member.Kind).
const (
	String Kind = '"'
	Number Kind = '0'
	True   Kind = 't'
	False  Kind = 'f'
	Null   Kind = 'n'
	Object Kind = '{'
	Array  Kind = '['
)

// Scanner walks the members of one JSON object that json.Valid has
// already accepted. It only finds token boundaries, without decoding or
// allocating, so that a history replay can read the few fields of every
// line cheaply and keep unknown ones as raw bytes.
type Scanner struct {
	b []byte
	i int
}

// NewScanner returns a Scanner at the start of b.
func NewScanner(b []byte) *Scanner { return &Scanner{b: b} }

// Open moves into the object b holds and reports whether b holds an
// object at all (rather than another JSON value).
func (s *Scanner) Open() bool {
	s.skipWS()
	if s.peek() != '{' {
		return false
	}
	s.i++
	return true
}

// Next returns the next member of the object, as offsets in the scanned
// bytes: its key as a raw string (quotes and escapes included, see
// DecodeString), the kind of its value and the value's raw bytes. ok is
// false after the last member.
func (s *Scanner) Next() (Member, bool) {
	s.skipWS()
	switch s.peek() {
	case '}', 0:
		return Member{}, false
	case ',':
		s.i++
		s.skipWS()
	}
	var m Member
	m.KeyStart = int32(s.i)
	s.i = s.strEnd()
	m.KeyEnd = int32(s.i)
	s.skipWS()
	s.i++ // ':'
	s.skipWS()
	m.RawStart = int32(s.i)
	m.Kind, _ = s.value()
	m.RawEnd = int32(s.i)
	return m, true
}

func (s *Scanner) peek() byte {
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

func (s *Scanner) skipWS() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// strEnd returns the index just past the string starting at s.i.
func (s *Scanner) strEnd() int {
	j := s.i + 1
	for j < len(s.b) {
		switch s.b[j] {
		case '\\':
			j += 2
		case '"':
			return j + 1
		default:
			j++
		}
	}
	return j
}

// value moves past one JSON value and returns its kind and raw bytes.
func (s *Scanner) value() (Kind, []byte) {
	start := s.i
	switch c := s.peek(); c {
	case '"':
		s.i = s.strEnd()
		return String, s.b[start:s.i]
	case '{', '[':
		s.skipNested()
		return Kind(c), s.b[start:s.i]
	case 't', 'f', 'n':
		for s.i < len(s.b) && s.b[s.i] >= 'a' && s.b[s.i] <= 'z' {
			s.i++
		}
		return Kind(c), s.b[start:s.i]
	default:
		s.skipNumber()
		return Number, s.b[start:s.i]
	}
}

// skipNested moves past the object or array that starts at the position.
func (s *Scanner) skipNested() {
	depth := 0
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case '"':
			s.i = s.strEnd()
			continue
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		}
		s.i++
		if depth == 0 {
			return
		}
	}
}

func (s *Scanner) skipNumber() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case '-', '+', '.', 'e', 'E', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
			s.i++
		default:
			return
		}
	}
}

// DecodeString returns the text of a raw JSON string (as Member.Key gives
// it). Strings without escapes, nearly all of them, are sliced
// rather than decoded.
func DecodeString(raw []byte) string {
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1])
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return string(raw[1 : len(raw)-1])
	}
	return s
}
