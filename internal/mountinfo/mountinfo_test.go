package mountinfo

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		want       Entry
		ok         bool
	}{
		{"plain", "22 1 0:21 / /proc rw,nosuid shared:5 - proc proc rw\n",
			Entry{ID: 22, Parent: 1, Dev: "0:21", Root: "/", Point: "/proc", FSType: "proc", Source: "proc", SuperOptions: "rw"}, true},
		{"escaped", `30 22 0:44 /a\040b /tmp/a\040b rw - fuse.acpfs acpfs:/tmp/col\040x rw,user_id=0`,
			Entry{ID: 30, Parent: 22, Dev: "0:44", Root: "/a b", Point: "/tmp/a b", FSType: "fuse.acpfs", Source: "acpfs:/tmp/col x", SuperOptions: "rw,user_id=0"}, true},
		{"optional fields", "40 1 0:46 / /mnt/v rw master:1 propagation:2 - cgroup cgroup rw,memory",
			Entry{ID: 40, Parent: 1, Dev: "0:46", Root: "/", Point: "/mnt/v", FSType: "cgroup", Source: "cgroup", SuperOptions: "rw,memory"}, true},
		{"no source", "41 1 0:47 / /x rw - tmpfs", Entry{ID: 41, Parent: 1, Dev: "0:47", Root: "/", Point: "/x", FSType: "tmpfs"}, true},
		{"no type", "42 1 0:48 / /x rw -", Entry{}, false},
		{"no separator", "43 1 0:49 / /x rw shared:1 tmpfs tmpfs rw", Entry{}, false},
		{"malformed", "malformed line", Entry{}, false},
		{"empty", "", Entry{}, false},
	} {
		got, ok := Parse(tc.line)
		assert.Equal(t, tc.ok, ok, tc.name)
		assert.Equal(t, tc.want, got, tc.name)
	}
}

func TestParseAll(t *testing.T) {
	text := "22 1 0:21 / /proc rw - proc proc rw\nmalformed\n\n31 22 0:45 / /tmp rw - tmpfs tmpfs rw"
	got := ParseAll(text)
	require.Len(t, got, 2)
	assert.Equal(t, "/proc", got[0].Point)
	assert.Equal(t, "/tmp", got[1].Point)
}
