package pycompat

import (
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// flatSeeds are lines ScanFlat must read (ok) or hand to the general path.
var flatSeeds = []struct {
	name, line string
	ok         bool
}{
	{"event", `{"seq":7,"from":"server","event":"decision_proposed","at":"2026-01-02T03:04:05Z","summary":"s","reply_to":6}`, true},
	{"empty object", ` {	} `, true},
	{"spaces and tabs", "{ \"a\" :\t1 , \"b\" : -0.5e+3 }", true},
	{"literals", `{"t":true,"f":false,"n":null}`, true},
	{"escapes", `{"k\"e\\y":"v\"}{\/\b\f\n\r\t","\u0061":"\u00e9\u2028"}`, true},
	{"non-ASCII text", `{"summary":"café, naïve, 日本"}`, true},
	{"duplicate keys", `{"a":1,"a":2}`, true},
	{"nested object", `{"o":{"a":1}}`, false},
	{"array", `{"a":[1]}`, false},
	{"not an object", `[1]`, false},
	{"CR between tokens", "{\"a\":1,\r\"b\":2}", false},
	{"U+2028 raw", "{\"a\":\"x\u2028y\"}", false},
	{"U+0085 raw", "{\"a\":\"x\u0085y\"}", false},
	{"é is C3", `{"a":"é"}`, true},
	{"U+2029 raw", "{\"a\":\"x\u2029y\"}", false},
	{"U+2028 raw in a key", "{\"a\u2028\":1}", false},
	{"U+0085 raw at a string's end", "{\"a\":\"0123456789\u0085\"}", false},
	{"U+2029 after a long run", "{\"a\":\"0123456789abcdef\u2029\"}", false},
	{"em dash is E2 80 94", `{"summary":"done — tests pass"}`, true},
	{"curly quotes", `{"summary":"“quoted” and ‘single’"}`, true},
	{"ellipsis", `{"summary":"wait…"}`, true},
	{"degree sign is C2 B0", `{"summary":"20°C"}`, true},
	{"non-breaking space is C2 A0", "{\"a\":\"x\u00a0y\"}", true},
	{"U+2027 beside the separators", "{\"a\":\"x\u2027y\u202az\"}", true},
	{"U+0084 and U+0086 beside U+0085", "{\"a\":\"x\u0084y\u0086z\"}", true},
	{"C2 then a quote", "{\"a\":\"x\xc2\"}", false},
	{"E2 80 then a quote", "{\"a\":\"x\xe2\x80\"}", false},
	{"E2 cut at the line's end", "{\"a\":\"x\xe2", false},
	{"control character", "{\"a\":\"x\x01\"}", false},
	{"bad escape", `{"a":"\x"}`, false},
	{"short unicode escape", `{"a":"\u12"}`, false},
	{"leading zero", `{"a":01}`, false},
	{"bare minus", `{"a":-}`, false},
	{"dot without digits", `{"a":1.}`, false},
	{"exponent without digits", `{"a":1e+}`, false},
	{"trailing comma", `{"a":1,}`, false},
	{"missing colon", `{"a" 1}`, false},
	{"truncated", `{"a":"x`, false},
	{"trailing garbage", `{"a":1} x`, false},
	{"literal prefix", `{"a":tru}`, false},
	{"literal suffix", `{"a":truex}`, false},
	{"unquoted key", `{a:1}`, false},
	{"empty", ``, false},
	{"invalid UTF-8", "{\"a\":\"abc\xffdef\"}", false},
	{"truncated UTF-8", "{\"a\":\"abcdefgh\xc3\"}", false},
	{"long strings", `{"summary":"a string longer than eight bytes, twice over","k":"0123456789abcdef"}`, true},
	{"quote at each offset", `{"a":"01234567","b":"0123456","c":"012345678"}`, true},
	{"escape after a long run", `{"a":"0123456789abcdef\"ghij"}`, true},
	{"control after a long run", "{\"a\":\"0123456789abcdef\x1fghij\"}", false},
	{"DEL is plain", "{\"a\":\"0123456789\x7f\"}", true},
	{"non-ASCII after a long run", `{"a":"0123456789abcdefé日本語"}`, true},
	{"quote then #", `{"a":"x","#b":1}`, true},
	{"key without value quote", `{"a":x"}`, false},
	{"quote after a number", `{"a":1"b":2}`, false},
	{"unbalanced quotes", `{"a":"b}`, false},
	{"string as key of nothing", `{"a"}`, false},
	{"extra quote after the end", `{"a":1}"`, false},
	{"many members", `{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":"17","r":"18"}`, true},
	{"literals in the fast path", `{"t":true,"f":false,"n":null,"x":-0.5E-7}`, true},
}

// checkFlat is the contract of ScanFlat against the general path.
func checkFlat(t *testing.T, line []byte) bool {
	out, ok := ScanFlat(line, nil)
	if !ok {
		assert.Empty(t, out)
		return false
	}
	require.True(t, utf8.Valid(line), "ScanFlat accepted invalid UTF-8 %q", line)
	require.True(t, json.Valid(line), "ScanFlat accepted invalid JSON %q", line)
	require.Zero(t, LineBreakRune(line), "ScanFlat accepted a line break in %q", line)
	s := NewScanner(line)
	require.True(t, s.Open())
	for i := 0; ; i++ {
		m, more := s.Next()
		if !more {
			require.Len(t, out, i)
			return true
		}
		require.Less(t, i, len(out))
		require.Equal(t, m, out[i], "member %d of %q", i, line)
	}
}

func TestScanFlat(t *testing.T) {
	for _, c := range flatSeeds {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.ok, checkFlat(t, []byte(c.line)))
		})
	}
	t.Run("appends to out", func(t *testing.T) {
		out := []Member{{KeyEnd: 3}}
		out, ok := ScanFlat([]byte(`{"a":1}`), out)
		require.True(t, ok)
		require.Len(t, out, 2)
		out, ok = ScanFlat([]byte(`{"a":1,"b":[]}`), out)
		require.False(t, ok)
		require.Len(t, out, 2, "a refused line leaves out as it was")
	})
}

// FuzzScanFlat checks that whatever ScanFlat accepts is valid JSON
// without a line break and has the members Scanner finds.
func FuzzScanFlat(f *testing.F) {
	for _, c := range flatSeeds {
		f.Add([]byte(c.line))
	}
	f.Fuzz(func(t *testing.T, line []byte) { checkFlat(t, line) })
}
