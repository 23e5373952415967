package textsafe

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestEscape(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"docs/a.md", "docs/a.md"},
		{"réessayez — “quoted” … 再試行", "réessayez — “quoted” … 再試行"},
		{"oracle/\u202egpj.md", `oracle/\u{202e}gpj.md`},
		{"a\u200bb\u2066c\u2069", `a\u{200b}b\u{2066}c\u{2069}`},
		{"line\u2028sep\u2029", `line\u{2028}sep\u{2029}`},
		{"bom\ufeff", `bom\u{feff}`},
		{"tab\tand\nnewline", "tab\tand\nnewline"},
	} {
		assert.Equal(t, tt.want, Escape(tt.in), "%q", tt.in)
	}
}
