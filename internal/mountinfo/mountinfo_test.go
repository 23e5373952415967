package mountinfo

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestUnescape(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`/plain/path`, `/plain/path`},
		{`/tmp/a\040b`, `/tmp/a b`},
		{`tab\011nl\012`, "tab\tnl\n"},
		{`a\134b`, `a\b`},
		{`a\9`, `a\9`},
		{`a\04`, `a\04`},
		{`a\0401`, `a 1`},
	} {
		assert.Equal(t, tc.want, Unescape(tc.in), "Unescape(%q)", tc.in)
	}
}
