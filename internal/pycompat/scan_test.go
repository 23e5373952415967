package pycompat

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func members(line string) (keys []string, kinds []Kind, raws []string) {
	b := []byte(line)
	s := NewScanner(b)
	if !s.Open() {
		return nil, nil, nil
	}
	for {
		m, ok := s.Next()
		if !ok {
			return
		}
		keys = append(keys, DecodeString(m.Key(b)))
		kinds = append(kinds, m.Kind)
		raws = append(raws, string(m.Raw(b)))
	}
}

func TestScanner(t *testing.T) {
	cases := []struct {
		name  string
		line  string
		keys  []string
		kinds []Kind
		raws  []string
	}{
		{"empty object", ` { } `, nil, nil, nil},
		{"not an object", ` [1] `, nil, nil, nil},
		{"every kind", `{"s":"x","n":-1.5e+3,"t":true,"f":false,"z":null,"o":{"a":[1]},"a":[{"b":"]"}]}`,
			[]string{"s", "n", "t", "f", "z", "o", "a"},
			[]Kind{String, Number, True, False, Null, Object, Array},
			[]string{`"x"`, `-1.5e+3`, `true`, `false`, `null`, `{"a":[1]}`, `[{"b":"]"}]`}},
		{"whitespace and CR", "{ \"a\" :\t1 ,\r\n \"b\":2 }", []string{"a", "b"}, []Kind{Number, Number}, []string{"1", "2"}},
		{"escapes in keys and strings", `{"k\"e\\y":"v\"}{","\u0061":"\u00e9"}`,
			[]string{`k"e\y`, "a"}, []Kind{String, String}, []string{`"v\"}{"`, `"\u00e9"`}},
		{"brackets inside strings", `{"x":{"y":"}}]]"},"z":0}`, []string{"x", "z"}, []Kind{Object, Number}, []string{`{"y":"}}]]"}`, "0"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			keys, kinds, raws := members(c.line)
			assert.Equal(t, c.keys, keys)
			assert.Equal(t, c.kinds, kinds)
			assert.Equal(t, c.raws, raws)
		})
	}
}

func TestDecodeString(t *testing.T) {
	cases := []struct{ raw, want string }{
		{`"plain"`, "plain"},
		{`""`, ""},
		{`"a\nb"`, "a\nb"},
		{`"\u00e9\u2028"`, "é\u2028"},
		{`"é"`, "é"},
	}
	for _, c := range cases {
		t.Run(c.raw, func(t *testing.T) { assert.Equal(t, c.want, DecodeString([]byte(c.raw))) })
	}
}
