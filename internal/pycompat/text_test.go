package pycompat

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// The expected values of these tests are what CPython 3 returns for the
// corresponding str methods and re searches.

func TestStrip(t *testing.T) {
	cases := []struct{ in, want string }{
		{" \t x \u3000", "x"},
		{"\u00a0a\u2028", "a"},
		{"", ""},
		{"\x1c\x1fb\u0085", "b"},
		{"\u200b x", "\u200b x"}, // a zero-width space is not whitespace
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) { assert.Equal(t, c.want, Strip(c.in)) })
	}
}

func TestIsBlank(t *testing.T) {
	cases := []struct {
		in   string
		want bool
	}{
		{"", true},
		{" \t\v\f", true},
		{"\u3000\u00a0\u2028", true},
		{" x ", false},
		{"\u200b", false},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) { assert.Equal(t, c.want, IsBlank([]byte(c.in))) })
	}
}

func TestText(t *testing.T) {
	cases := []struct{ in, want string }{
		{"a\nb", "a\nb"},
		{"a\r\nb\r\n", "a\nb\n"},
		{"a\rb", "a\nb"},
		{"a\r\r\nb", "a\n\nb"},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) { assert.Equal(t, c.want, Text([]byte(c.in))) })
	}
}

func TestSplitLines(t *testing.T) {
	cases := []struct {
		in   string
		want []string
	}{
		{"a\nb\vc\fd\x1ce\u0085f\u2028g\u2029h", []string{"a", "b", "c", "d", "e", "f", "g", "h"}},
		{"a\n\nb\n", []string{"a", "", "b"}},
		{"x", []string{"x"}},
		{"", nil},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) { assert.Equal(t, c.want, SplitLines(c.in)) })
	}
}

func TestLineBreakRune(t *testing.T) {
	cases := []struct {
		in   string
		want rune
	}{
		{`{"a":"b"}`, 0},
		{"é待\u2027", 0},
		{"a\rb", '\r'},
		{"a\x1eb", 0x1e},
		{"a\u0085b", 0x85},
		{"a\u00a0b\u2029", 0x2029},
		{"a\u2028b\n", 0x2028},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			assert.Equal(t, c.want, LineBreakRune([]byte(c.in)))
			if c.want != 0 {
				assert.True(t, SplitsLine(c.want))
			}
		})
	}
}

func TestContainsWordFold(t *testing.T) {
	words := []string{"TBD", "TODO", "unresolved", "待定"}
	cases := []struct {
		in   string
		want bool
	}{
		{"this is tbd.", true},
		{"TBDs remain", false},
		{"a_TODO", false},
		{"Unresolved!", true},
		{"x待定y", false},
		{"它 待定", true},
		{"é todo", true},
		{"ÉTODO", false},
		{"ΣTODO", false},
		{"todo_", false},
		{"", false},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) { assert.Equal(t, c.want, ContainsWordFold(c.in, words...)) })
	}
}

func TestDecimal(t *testing.T) {
	cases := []struct{ in, want string }{
		{"007", "7"},
		{"0", "0"},
		{"٣", "3"},
		{"१२", "12"},
		{"０", "0"},
		{"𝟗", "9"},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) { assert.Equal(t, c.want, Decimal(c.in)) })
	}
}

func TestRe(t *testing.T) {
	cases := []struct {
		pattern, text string
		want          bool
	}{
		{`^a\sb$`, "a\u3000b", true},
		{`^a\sb$`, "a\u200bb", false},
		{`^a\s+b$`, "a\x1c\u0085b", true},
		{`^a\d$`, "a1", true},
	}
	for _, c := range cases {
		t.Run(c.pattern+" "+c.text, func(t *testing.T) {
			assert.Equal(t, c.want, Re(c.pattern).MatchString(c.text))
			assert.Same(t, Re(c.pattern), Re(c.pattern), "compiled once")
		})
	}
}
