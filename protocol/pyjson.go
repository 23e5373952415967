package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"sort"
	"strconv"
)

const hexDigits = "0123456789abcdef"

// writePyString writes s as a JSON string the way Python's json.dumps does
// with ensure_ascii=False: only '"', '\\' and control characters are
// escaped; everything else, HTML characters included, is written as is.
func writePyString(b *bytes.Buffer, s string) { writeJSONString(b, s, false) }

// writeLineString is writePyString for events.jsonl lines, which must not
// carry raw characters that line splitters treat as line breaks.
func writeLineString(b *bytes.Buffer, s string) { writeJSONString(b, s, true) }

func writeJSONString(b *bytes.Buffer, s string, escapeSeparators bool) {
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
		case r < 0x20 || (escapeSeparators && splitsLine(r)):
			fmt.Fprintf(b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
}

// marshalPyIndent renders a decoded JSON value (objects as map[string]any,
// numbers as json.Number) exactly as Python's
// json.dumps(v, ensure_ascii=False, indent=2, sort_keys=True) followed by
// a newline, so files written by acpfs and by the reference scripts are
// byte-identical.
func marshalPyIndent(v any) ([]byte, error) {
	var b bytes.Buffer
	if err := writePyValue(&b, v, 0); err != nil {
		return nil, err
	}
	b.WriteByte('\n')
	return b.Bytes(), nil
}

func writePyValue(b *bytes.Buffer, v any, depth int) error {
	indent := func(d int) {
		b.WriteByte('\n')
		for i := 0; i < d; i++ {
			b.WriteString("  ")
		}
	}
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		if x {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case string:
		writePyString(b, x)
	case json.Number:
		b.WriteString(x.String())
	case int:
		b.WriteString(strconv.Itoa(x))
	case float64:
		b.WriteString(strconv.FormatFloat(x, 'g', -1, 64))
	case []string:
		items := make([]any, len(x))
		for i, s := range x {
			items[i] = s
		}
		return writePyValue(b, items, depth)
	case []any:
		if len(x) == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		for i, item := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			indent(depth + 1)
			if err := writePyValue(b, item, depth+1); err != nil {
				return err
			}
		}
		indent(depth)
		b.WriteByte(']')
	case map[string]any:
		if len(x) == 0 {
			b.WriteString("{}")
			return nil
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			indent(depth + 1)
			writePyString(b, k)
			b.WriteString(": ")
			if err := writePyValue(b, x[k], depth+1); err != nil {
				return err
			}
		}
		indent(depth)
		b.WriteByte('}')
	default:
		return fmt.Errorf("cannot encode %T", v)
	}
	return nil
}

// decodeJSON decodes data keeping numbers as json.Number.
func decodeJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("trailing data after the JSON value")
	}
	// A second Decode must hit EOF; More() misses a lone trailing token.
	var extra any
	if err := dec.Decode(&extra); err == nil {
		return nil, fmt.Errorf("trailing data after the JSON value")
	}
	return v, nil
}

// jsonEqual compares decoded JSON values, numbers by exact value (so 2
// and 2.0 are equal, as they are in Python).
func jsonEqual(a, b any) bool {
	switch x := a.(type) {
	case json.Number:
		y, ok := b.(json.Number)
		if !ok {
			return false
		}
		rx, ok1 := new(big.Rat).SetString(x.String())
		ry, ok2 := new(big.Rat).SetString(y.String())
		if !ok1 || !ok2 {
			return x == y
		}
		return rx.Cmp(ry) == 0
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !jsonEqual(x[i], y[i]) {
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
			if !ok || !jsonEqual(v, w) {
				return false
			}
		}
		return true
	default:
		return a == b
	}
}
