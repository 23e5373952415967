package pycompat

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMarshalIndent pins json.dumps(json.loads(input), ensure_ascii=False,
// indent=2, sort_keys=True): the literal 2.50 is loaded as a float and
// written as 2.5.
func TestMarshalIndent(t *testing.T) {
	v, err := Decode([]byte(`{"b":[1,{"z":null,"a":true}],"a":{},"c":[],"d":"\u0001\t\u2028<>&","e":2.50}`))
	require.NoError(t, err)
	out, err := MarshalIndent(v)
	require.NoError(t, err)
	want := "{\n  \"a\": {},\n  \"b\": [\n    1,\n    {\n      \"a\": true,\n      \"z\": null\n    }\n  ],\n  \"c\": [],\n  \"d\": \"\\u0001\\t\u2028<>&\",\n  \"e\": 2.5\n}\n"
	assert.Equal(t, want, string(out))
}

func TestMarshalIndentValues(t *testing.T) {
	cases := []struct {
		name string
		in   any
		want string
	}{
		{"null", nil, "null"},
		{"booleans", []any{true, false}, "[\n  true,\n  false\n]"},
		{"int", 42, "42"},
		{"string list", []string{"b", "a"}, "[\n  \"b\",\n  \"a\"\n]"},
		{"keys sorted by code point", map[string]any{"é": 1, "z": 2, "A": 3}, "{\n  \"A\": 3,\n  \"z\": 2,\n  \"é\": 1\n}"},
		{"nested empty", map[string]any{"a": []any{}, "b": map[string]any{}}, "{\n  \"a\": [],\n  \"b\": {}\n}"},
		{"float64 integral", 2.0, "2"},
		{"float64 negative zero", math.Copysign(0, -1), "0"},
		{"float64 fraction", 0.1, "0.1"},
		{"float64 small", 1e-7, "1e-07"},
		{"float64 infinity", math.Inf(1), "Infinity"},
		{"float64 NaN", math.NaN(), "NaN"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := MarshalIndent(c.in)
			require.NoError(t, err)
			assert.Equal(t, c.want+"\n", string(out))
		})
	}
}

func TestMarshalIndentRefusesOtherTypes(t *testing.T) {
	_, err := MarshalIndent(map[string]any{"k": struct{}{}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `key "k"`)
}

func TestWriteString(t *testing.T) {
	cases := []struct {
		name, in, want, line string
	}{
		{"plain", "abc", `"abc"`, `"abc"`},
		{"quote and backslash", `a"b\c`, `"a\"b\\c"`, `"a\"b\\c"`},
		{"short escapes", "\n\r\t\b\f", `"\n\r\t\b\f"`, `"\n\r\t\b\f"`},
		{"other controls", "\x00\x1f\x7f", "\"\\u0000\\u001f\x7f\"", "\"\\u0000\\u001f\x7f\""},
		{"HTML kept", "<&>", `"<&>"`, `"<&>"`},
		{"non-ASCII kept", "é待", `"é待"`, `"é待"`},
		{"separators", "a\u2028b\u2029c\u0085d", "\"a\u2028b\u2029c\u0085d\"", `"a\u2028b\u2029c\u0085d"`},
		{"vertical tab", "\v", `"\u000b"`, `"\u000b"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var b bytes.Buffer
			WriteString(&b, c.in)
			assert.Equal(t, c.want, b.String())
			b.Reset()
			WriteLineString(&b, c.in)
			assert.Equal(t, c.line, b.String())
			var back string
			require.NoError(t, json.Unmarshal(b.Bytes(), &back))
			assert.Equal(t, c.in, back)
		})
	}
}

// The expected strings are what CPython 3 prints for
// json.dumps(json.loads(literal)).
func TestFormatNumber(t *testing.T) {
	cases := []struct{ in, want string }{
		{"2", "2"},
		{"100", "100"},
		{"-0", "0"},
		{"12345678901234567890", "12345678901234567890"},
		{"-12345678901234567890", "-12345678901234567890"},
		{"2.50", "2.5"},
		{"1.0", "1.0"},
		{"100.0", "100.0"},
		{"0.0", "0.0"},
		{"-0.0", "-0.0"},
		{"2e0", "2.0"},
		{"1e5", "100000.0"},
		{"1E5", "100000.0"},
		{"1e15", "1000000000000000.0"},
		{"9999999999999998.0", "9999999999999998.0"},
		{"1e16", "1e+16"},
		{"1e21", "1e+21"},
		{"1e22", "1e+22"},
		{"1.2345678901234568e17", "1.2345678901234568e+17"},
		{"1.5e300", "1.5e+300"},
		{"1.7976931348623157e308", "1.7976931348623157e+308"},
		{"1e-4", "0.0001"},
		{"0.0001", "0.0001"},
		{"1e-5", "1e-05"},
		{"0.00001", "1e-05"},
		{"-2.5e-7", "-2.5e-07"},
		{"5e-324", "5e-324"},
		{"1e-400", "0.0"},
		{"1e400", "Infinity"},
		{"-1e400", "-Infinity"},
		{"0.1", "0.1"},
		{"0.30000000000000004", "0.30000000000000004"},
		{"3.14159265358979323846", "3.141592653589793"},
		{"123456789.5", "123456789.5"},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			got, err := FormatNumber(json.Number(c.in))
			require.NoError(t, err)
			assert.Equal(t, c.want, got)
		})
	}
}

func TestFormatNumberRefusesNonNumbers(t *testing.T) {
	_, err := FormatNumber(json.Number("1.x"))
	require.Error(t, err)
}

func TestFormatFloat(t *testing.T) {
	cases := []struct {
		in   float64
		want string
	}{
		{math.NaN(), "NaN"},
		{math.Inf(1), "Infinity"},
		{math.Inf(-1), "-Infinity"},
		{math.Copysign(0, -1), "-0.0"},
		{1, "1.0"},
		{1e16, "1e+16"},
		{1e-5, "1e-05"},
		{0.0001, "0.0001"},
		{math.MaxFloat64, "1.7976931348623157e+308"},
	}
	for _, c := range cases {
		t.Run(c.want, func(t *testing.T) {
			assert.Equal(t, c.want, FormatFloat(c.in))
		})
	}
}

func TestDecode(t *testing.T) {
	cases := []struct {
		name, in string
		ok       bool
	}{
		{"object", `{"a":1}`, true},
		{"surrounding whitespace", " [1] \n", true},
		{"scalar", `2.50`, true},
		{"two values", `{} {}`, false},
		{"stray closing bracket", `{}]`, false},
		{"stray closing brace", `[1]}`, false},
		{"truncated", `{"a":`, false},
		{"NaN", `NaN`, false},
		{"empty", ``, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Decode([]byte(c.in))
			assert.Equal(t, c.ok, err == nil, "%v", err)
		})
	}
	v, err := Decode([]byte(`{"n":2.50}`))
	require.NoError(t, err)
	assert.Equal(t, json.Number("2.50"), v.(map[string]any)["n"], "numbers keep their literal")
}

func TestEqual(t *testing.T) {
	decode := func(s string) any {
		v, err := Decode([]byte(s))
		require.NoError(t, err)
		return v
	}
	cases := []struct {
		a, b string
		want bool
	}{
		{`2`, `2.0`, true},
		{`2`, `2e0`, true},
		{`0.1`, `1e-1`, true},
		{`2`, `3`, false},
		{`"2"`, `2`, false},
		{`[1,[2]]`, `[1.0,[2.00]]`, true},
		{`[1,2]`, `[1]`, false},
		{`{"a":1,"b":[true]}`, `{"b":[true],"a":1.0}`, true},
		{`{"a":1}`, `{"b":1}`, false},
		{`{"a":1}`, `{"a":1,"b":1}`, false},
		{`null`, `null`, true},
		{`true`, `false`, false},
		{`[]`, `{}`, false},
	}
	for _, c := range cases {
		t.Run(c.a+" "+c.b, func(t *testing.T) {
			assert.Equal(t, c.want, Equal(decode(c.a), decode(c.b)))
			assert.Equal(t, c.want, Equal(decode(c.b), decode(c.a)))
		})
	}
}
