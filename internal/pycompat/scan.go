package pycompat

import (
	"bytes"
	"encoding/json"
)

// Kind is the kind of a JSON value, named by the byte it starts with.
type Kind byte

// The kinds Scanner.Value reports.
const (
	String Kind = '"'
	Number Kind = '0'
	True   Kind = 't'
	False  Kind = 'f'
	Null   Kind = 'n'
	Object Kind = '{'
	Array  Kind = '['
)

// Scanner walks the tokens of one JSON text that json.Valid has already
// accepted. It only finds token boundaries, without decoding or
// allocating, so that a history replay can read the few fields of every
// line cheaply and keep unknown ones as raw bytes.
type Scanner struct {
	b []byte
	i int
}

// NewScanner returns a Scanner at the start of b.
func NewScanner(b []byte) *Scanner { return &Scanner{b: b} }

// Peek returns the byte at the position, or 0 at the end.
func (s *Scanner) Peek() byte {
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// Skip moves past one byte (a structural character such as '{', ':' or
// ',').
func (s *Scanner) Skip() { s.i++ }

// SkipWS moves past JSON whitespace.
func (s *Scanner) SkipWS() {
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

// Key returns the raw string (quotes and escapes included) that starts at
// the position, and moves past it.
func (s *Scanner) Key() []byte {
	start := s.i
	s.i = s.strEnd()
	return s.b[start:s.i]
}

// Value moves past one JSON value and returns its kind and raw bytes.
func (s *Scanner) Value() (Kind, []byte) {
	start := s.i
	switch c := s.Peek(); c {
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

// DecodeString returns the text of a raw JSON string (as Key and Value
// return it). Strings without escapes, nearly all of them, are sliced
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
