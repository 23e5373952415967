package sandbox

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPlanHome(t *testing.T) {
	root := t.TempDir()
	folder := filepath.Join(root, "collab")
	runs := filepath.Join(root, "agent_runs")
	own := filepath.Join(root, "own-home")
	for _, d := range []string{folder, filepath.Join(runs, HomesDir, "G-bob"), own} {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	masks := []string{runs}
	tests := []struct {
		name    string
		dir, at string
		dflt    bool
		binds   []Bind
		wantAt  string
		err     string
	}{
		{name: "the default home, at HOME", dir: DefaultHome(runs, "G-bob"), dflt: true, at: "/root", wantAt: "/root"},
		{name: "HOME unset", dir: own, at: "", wantAt: FallbackHome},
		{name: "HOME is /", dir: own, at: "/", wantAt: FallbackHome},
		{name: "HOME holds the folder", dir: own, at: root, wantAt: root},
		{name: "HOME in the folder", dir: own, at: filepath.Join(folder, "x"), err: "collaboration folder"},
		{name: "HOME in the run directory", dir: own, at: filepath.Join(runs, "x"), err: "run directory"},
		{name: "HOME is /tmp", dir: own, at: "/tmp", err: "private /tmp"},
		{name: "HOME in /proc", dir: own, at: "/proc/self", err: "/proc"},
		{name: "a bind at HOME", dir: own, at: "/srv/u", binds: []Bind{{Path: "/srv/u", Write: true}}, err: "the agent's home is shown there"},
		{name: "--home in the run directory", dir: filepath.Join(runs, HomesDir), at: "/root", err: "no agent may reach"},
		{name: "--home holding the run directory", dir: root, at: "/root", err: "holds it"},
		{name: "--home missing", dir: filepath.Join(root, "nope"), at: "/root", err: "no such file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := PlanHome(HomeOptions{Dir: tc.dir, Default: tc.dflt, At: tc.at, Folder: folder, Masks: masks, Binds: tc.binds})
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.wantAt, b.Path)
			assert.True(t, b.Write)
			assert.NotEmpty(t, b.Source)
		})
	}
}

func TestEnsureHome(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("gives the home to another uid: needs root")
	}
	runs := t.TempDir()
	home := DefaultHome(runs, "G-bob")
	require.NoError(t, EnsureHome(home, 61999, 61999))
	require.NoError(t, os.WriteFile(filepath.Join(home, "state"), nil, 0o600))
	require.NoError(t, os.Lchown(filepath.Join(home, "state"), 61999, 61999))
	var st syscall.Stat_t
	require.NoError(t, syscall.Lstat(home, &st))
	assert.Equal(t, uint32(61999), st.Uid)
	assert.Equal(t, uint32(0o700), st.Mode&0o7777)
	// A new uid for the grant: the whole home is given to it.
	require.NoError(t, EnsureHome(home, 62000, 62000))
	require.NoError(t, syscall.Lstat(filepath.Join(home, "state"), &st))
	assert.Equal(t, uint32(62000), st.Uid)
	// RUNS/homes must stay closed to other uids.
	require.NoError(t, os.Chmod(filepath.Dir(home), 0o755))
	err := EnsureHome(home, 62000, 62000)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "mode 0700")
}

func TestMapWritable(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs directories of several owners")
	}
	root := t.TempDir()
	mine, agents, others, shared := filepath.Join(root, "mine"), filepath.Join(root, "agents"), filepath.Join(root, "others"), filepath.Join(root, "shared")
	for _, d := range []string{mine, agents, others, shared} {
		require.NoError(t, os.Mkdir(d, 0o755))
	}
	require.NoError(t, os.Chmod(shared, 0o1777))
	require.NoError(t, os.Chown(agents, 62001, 62001))
	require.NoError(t, os.Chown(others, 1234, 1234))
	binds := []Bind{{Path: "/usr"}, {Path: mine, Write: true}, {Path: agents, Write: true}, {Path: "/root", Source: mine, Write: true}, {Path: shared, Write: true}}
	require.NoError(t, MapWritable(binds, 0, 62001, 62001))
	assert.Nil(t, binds[0].IDMap, "read-only binds keep their owners")
	assert.Equal(t, &IDMap{UID: 0, GID: 0, ToUID: 62001, ToGID: 62001}, binds[1].IDMap)
	assert.Nil(t, binds[2].IDMap, "the agent's own directory needs no mapping")
	assert.NotNil(t, binds[3].IDMap, "a --home of the caller's is mapped too")
	assert.Nil(t, binds[4].IDMap, "a directory open to everyone needs no mapping")

	// A caller other than root maps only what it owns.
	err := MapWritable([]Bind{{Path: others, Write: true}}, 1000, 62001, 62001)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "owned by uid 1234")
	b := []Bind{{Path: others, Write: true}}
	require.NoError(t, MapWritable(b, 1234, 62001, 62001))
	assert.Equal(t, uint32(1234), b[0].IDMap.UID)
	// Root as the agent needs none.
	b = []Bind{{Path: mine, Write: true}}
	require.NoError(t, MapWritable(b, 0, 0, 0))
	assert.Nil(t, b[0].IDMap)
}
