package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

// TestUserNSSubIDs: the agent's host gid sits at its host uid's offset;
// the registry hands out exactly the caller's range, kept below the home
// /etc/passwd gives.
func TestUserNSSubIDs(t *testing.T) {
	u := UserNS{Scheme: SchemeSubUID, CallerUID: 1000, subUID: SubIDRange{100000, 65536}, subGID: SubIDRange{300000, 100}, home: "/home/alice"}
	u.SetAgent(62000, 62001, 100150)
	assert.Equal(t, uint32(300050), u.HostGID)
	assert.True(t, u.OwnsSub(100000))
	assert.True(t, u.OwnsSub(165535))
	assert.False(t, u.OwnsSub(165536))
	assert.False(t, u.OwnsSub(99999))
	r, err := u.Registry()
	require.NoError(t, err)
	assert.Equal(t, &Registry{Dir: "/home/alice/" + UserRegistrySub, Min: 100000, Max: 165535}, r)
	_, err = UserNS{Scheme: SchemeSingle}.Registry()
	assert.Error(t, err)
	u.home = "/"
	_, err = u.Registry()
	assert.ErrorContains(t, err, "no home directory")
}

// TestSubIDMapsFormerOwner: the home's former owner is mapped, in each
// map, to an id inside that neither the caller (0) nor the agent has
// there: newuidmap and newgidmap refuse a map that gives one id twice.
func TestSubIDMapsFormerOwner(t *testing.T) {
	tests := []struct {
		name             string
		inU, inG         uint32
		formerU, formerG uint32 // inside
	}{
		{"the agent at grant ids", 62000, 62000, 1, 1},
		{"--uid 1:2", 1, 2, 2, 1},
		{"--uid 2:1", 2, 1, 1, 2},
		{"--uid 1:1", 1, 1, 2, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := UserNS{Scheme: SchemeSubUID, CallerUID: 1000, CallerGID: 1000, subUID: SubIDRange{100000, 65536}, subGID: SubIDRange{300000, 65536}}
			u.SetAgent(tt.inU, tt.inG, 100150)
			u.FormerUID, u.FormerGID = 100007, u.SubGIDOf(100007)
			maps := u.subIDMaps(4242)
			require.Len(t, maps, 2)
			for i, want := range []struct {
				tool          string
				agent, former uint32
			}{{"newuidmap", tt.inU, tt.formerU}, {"newgidmap", tt.inG, tt.formerG}} {
				m := maps[i]
				assert.Equal(t, want.tool, m[0])
				inside := []string{m[2], m[5], m[8]}
				assert.Equal(t, []string{"0", fmt.Sprint(want.agent), fmt.Sprint(want.former)}, inside, "%v", m)
			}
		})
	}
}

func TestUserNSDescribe(t *testing.T) {
	sub := UserNS{Scheme: SchemeSubUID, CallerUID: 1000, AgentUID: 62000, HostUID: 100816}
	assert.Contains(t, sub.Describe(), "uid scheme subuid: the command runs as uid 62000 (uid 100816 on the host")
	single := UserNS{Scheme: SchemeSingle, CallerUID: 1000, Why: "no ranges"}
	assert.Contains(t, single.Describe(), "uid scheme single: ")
	assert.Contains(t, single.Describe(), "your own uid 1000 on the host (no ranges)")
}

func TestDelegatedIn(t *testing.T) {
	type group struct{ controllers, subtree, procs string }
	tests := []struct {
		name     string
		self     string
		parent   group
		readOnly bool
		want     string // the parent group, or a piece of the error
		ok       bool
	}{
		{"controllers enabled for children", "0::/user.slice/app.slice/term.scope\n", group{"cpu memory pids", "memory pids", "1 2"}, false, "/user.slice/app.slice", true},
		{"enabled on demand in an empty parent", "0::/user.slice/app.slice/term.scope\n", group{"memory pids", "", ""}, false, "/user.slice/app.slice", true},
		{"a parent holding processes cannot enable them", "0::/a/b\n", group{"memory pids", "", "42"}, false, "holds processes", false},
		{"no memory controller", "0::/a/b\n", group{"pids", "pids", ""}, false, "no memory controller", false},
		{"not delegated", "0::/a/b\n", group{"memory pids", "memory pids", ""}, true, "not delegated to uid", false},
		{"v1 lines only", "4:memory:/x\n", group{}, false, "in no cgroup v2 group", false},
		{"the top group", "0::/\n", group{}, false, "the top cgroup v2 group", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mnt := t.TempDir()
			own := ""
			for _, line := range strings.Split(tt.self, "\n") {
				if p, ok := strings.CutPrefix(line, "0::"); ok {
					own = p
				}
			}
			if own != "" && own != "/" {
				dir := filepath.Join(mnt, filepath.Dir(own))
				require.NoError(t, os.MkdirAll(dir, 0o755))
				for name, v := range map[string]string{"cgroup.controllers": tt.parent.controllers, "cgroup.subtree_control": tt.parent.subtree, "cgroup.procs": tt.parent.procs} {
					require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o644))
				}
			}
			got, err := delegatedIn(mnt, []byte(tt.self), func(string) bool { return !tt.readOnly })
			if tt.ok {
				require.NoError(t, err)
				assert.Equal(t, tt.want, got)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}
