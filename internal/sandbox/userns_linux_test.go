package sandbox

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestParseSubIDs(t *testing.T) {
	const file = "# comment\nalice:100000:65536\n1001:300000:1000\nbob:x:1\ncarol:400000:0\nbob:200000:65536\n"
	tests := []struct {
		name  string
		user  string
		id    uint32
		want  SubIDRange
		found bool
	}{
		{"by name", "alice", 1000, SubIDRange{100000, 65536}, true},
		{"by numeric id", "dave", 1001, SubIDRange{300000, 1000}, true},
		{"a malformed line is skipped", "bob", 1002, SubIDRange{200000, 65536}, true},
		{"an empty range is none", "carol", 1003, SubIDRange{}, false},
		{"no name and another id", "", 1000, SubIDRange{}, false},
		{"absent", "erin", 1004, SubIDRange{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := parseSubIDs([]byte(file), tt.user, tt.id)
			assert.Equal(t, tt.found, ok)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestSubIDPick(t *testing.T) {
	r := SubIDRange{Start: 100000, Count: 65536}
	assert.Equal(t, uint32(100000), r.pick(UIDMin))
	assert.Equal(t, uint32(100000+UIDMax-UIDMin), r.pick(UIDMax))
	assert.NotEqual(t, r.pick(UIDSlot("G-alice")), r.pick(UIDSlot("G-bob")), "two grants, two host uids")
	assert.Equal(t, uint32(100000+4242), r.pick(4242), "a --uid outside the grant range")
	small := SubIDRange{Start: 500, Count: 10}
	for _, in := range []uint32{UIDMin, UIDMax, 4242, 1 << 31} {
		got := small.pick(in)
		assert.GreaterOrEqual(t, got, uint32(500))
		assert.Less(t, got, uint32(510), "stays in the range")
	}
}

func TestUserNSDescribe(t *testing.T) {
	sub := UserNS{Scheme: SchemeSubUID, CallerUID: 1000, AgentUID: 62000, HostUID: 100816}
	assert.Contains(t, sub.Describe(), "uid scheme subuid: the command runs as uid 62000 (uid 100816 on the host")
	single := UserNS{Scheme: SchemeSingle, CallerUID: 1000, Why: "no ranges"}
	assert.Contains(t, single.Describe(), "uid scheme single: ")
	assert.Contains(t, single.Describe(), "your own uid 1000 on the host (no ranges)")
}
