package pycompat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"sort"
	"strconv"
	"strings"
)

// WriteString writes s as a JSON string the way Python's json.dumps does
// with ensure_ascii=False: only '"', '\\' and control characters are
// escaped; everything else, HTML characters included, is written as is.
func WriteString(b *bytes.Buffer, s string) { writeString(b, s, false) }

// WriteLineString is WriteString for the lines of a JSON Lines file, which
// must not carry raw characters that line splitters treat as line breaks
// (see SplitsLine): those are escaped too.
func WriteLineString(b *bytes.Buffer, s string) { writeString(b, s, true) }

func writeString(b *bytes.Buffer, s string, escapeSeparators bool) {
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\b':
			b.WriteString(`\b`)
		case r == '\f':
			b.WriteString(`\f`)
		case r < 0x20 || (escapeSeparators && SplitsLine(r)):
			fmt.Fprintf(b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
}

// MarshalIndent renders a decoded JSON value exactly as Python's
// json.dumps(v, ensure_ascii=False, indent=2, sort_keys=True) followed by
// a newline, so files written by acpfs and by the reference scripts are
// byte-identical.
//
// Objects are map[string]any, arrays []any or []string. Numbers are
// json.Number (as Decode returns them), int or float64. A json.Number is
// written as Python writes the value its json module loads from that
// literal (see FormatNumber). A float64 with an integral value is written
// as an integer: encoding/json decodes every number to float64, so it
// cannot tell 2 from 2.0, and the integers of protocol.json are the
// numbers callers hand in that way.
func MarshalIndent(v any) ([]byte, error) {
	var b bytes.Buffer
	if err := writeValue(&b, v, 0); err != nil {
		return nil, err
	}
	b.WriteByte('\n')
	return b.Bytes(), nil
}

func writeIndent(b *bytes.Buffer, depth int) {
	b.WriteByte('\n')
	for i := 0; i < depth; i++ {
		b.WriteString("  ")
	}
}

func writeValue(b *bytes.Buffer, v any, depth int) error {
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(x))
	case string:
		WriteString(b, x)
	case json.Number:
		s, err := FormatNumber(x)
		if err != nil {
			return err
		}
		b.WriteString(s)
	case int:
		b.WriteString(strconv.Itoa(x))
	case float64:
		if x == math.Trunc(x) && !math.IsInf(x, 0) {
			if x == 0 {
				x = 0 // an int has no negative zero
			}
			b.WriteString(strconv.FormatFloat(x, 'f', 0, 64))
		} else {
			b.WriteString(FormatFloat(x))
		}
	case []string:
		items := make([]any, len(x))
		for i, s := range x {
			items[i] = s
		}
		return writeValue(b, items, depth)
	case []any:
		return writeArray(b, x, depth)
	case map[string]any:
		return writeObject(b, x, depth)
	default:
		return fmt.Errorf("cannot encode %T as JSON", v)
	}
	return nil
}

func writeArray(b *bytes.Buffer, items []any, depth int) error {
	if len(items) == 0 {
		b.WriteString("[]")
		return nil
	}
	b.WriteByte('[')
	for i, item := range items {
		if i > 0 {
			b.WriteByte(',')
		}
		writeIndent(b, depth+1)
		if err := writeValue(b, item, depth+1); err != nil {
			return err
		}
	}
	writeIndent(b, depth)
	b.WriteByte(']')
	return nil
}

func writeObject(b *bytes.Buffer, m map[string]any, depth int) error {
	if len(m) == 0 {
		b.WriteString("{}")
		return nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	// Python sorts str keys by code point; Go compares UTF-8 bytes, which
	// orders code points the same way.
	sort.Strings(keys)
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		writeIndent(b, depth+1)
		WriteString(b, k)
		b.WriteString(": ")
		if err := writeValue(b, m[k], depth+1); err != nil {
			return fmt.Errorf("key %q: %w", k, err)
		}
	}
	writeIndent(b, depth)
	b.WriteByte('}')
	return nil
}

// FormatNumber writes a JSON number literal the way Python's json module
// writes it back after loading it: a literal without fraction or exponent
// is an int and keeps its digits ("-0" becomes "0"); any other literal is
// a float, written as its shortest round-trip repr (FormatFloat), so
// "2.50" becomes "2.5", "1e5" "100000.0" and "1e400" "Infinity".
func FormatNumber(n json.Number) (string, error) {
	s := n.String()
	if !strings.ContainsAny(s, ".eE") {
		if s == "-0" {
			return "0", nil
		}
		return s, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return "", fmt.Errorf("number %q: %w", s, err)
	}
	return FormatFloat(f), nil
}

// FormatFloat is Python's repr of a float as json.dumps writes it: the
// shortest digits that round-trip, in positional notation with at least
// one fractional digit when the decimal exponent is in [-4, 16), else in
// scientific notation with a signed exponent of at least two digits
// ("1e+16", "1e-05"); infinities and NaN as "Infinity", "-Infinity" and
// "NaN".
func FormatFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	sci := strconv.FormatFloat(f, 'e', -1, 64)
	exp, err := strconv.Atoi(sci[strings.IndexByte(sci, 'e')+1:])
	if err == nil && (exp < -4 || exp >= 16) {
		// Go's exponent already has a sign and at least two digits.
		return sci
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s
}

// Decode decodes one JSON value keeping numbers as json.Number, so that
// they can be compared by value and written back as Python would.
func Decode(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		// Callers put the decoder's message in their own sentence.
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("trailing data after the JSON value")
	}
	// A second Decode must hit EOF; More() misses a lone trailing token,
	// and a stray closing bracket fails that Decode with another error.
	var extra any
	if err := dec.Decode(&extra); err != io.EOF {
		return nil, errors.New("trailing data after the JSON value")
	}
	return v, nil
}

// Equal compares decoded JSON values, numbers by exact value (so 2 and
// 2.0 are equal, as they are in Python).
func Equal(a, b any) bool {
	switch x := a.(type) {
	case json.Number:
		y, ok := b.(json.Number)
		return ok && numbersEqual(x, y)
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !Equal(x[i], y[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !Equal(v, w) {
				return false
			}
		}
		return true
	default:
		return a == b
	}
}

func numbersEqual(x, y json.Number) bool {
	rx, ok1 := new(big.Rat).SetString(x.String())
	ry, ok2 := new(big.Rat).SetString(y.String())
	if !ok1 || !ok2 {
		return x == y
	}
	return rx.Cmp(ry) == 0
}
