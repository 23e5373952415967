package mount

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/grants"
)

func TestRelHidden(t *testing.T) {
	folder := "/work/collab"
	got := relHidden(folder, []string{"/work/collab/agent_runs", "/work/agent_runs", "", "/work/collab", "/work/collab/a/b", "/work/collab/..x"})
	assert.Equal(t, []string{"agent_runs", "a/b", "..x"}, got)

	// Through a symlink to the folder.
	d := t.TempDir()
	real := filepath.Join(d, "collab")
	require.NoError(t, os.MkdirAll(filepath.Join(real, "runs"), 0o755))
	require.NoError(t, os.Symlink(real, filepath.Join(d, "alias")))
	assert.Equal(t, []string{"runs"}, relHidden(filepath.Join(d, "alias"), []string{filepath.Join(real, "runs")}))
}

func TestRebase(t *testing.T) {
	got := rebase([]string{"/f/runs", "/elsewhere", "/f"}, "/f", "/proc/self/fd/7")
	assert.Equal(t, []string{"/proc/self/fd/7/runs", "/proc/self/fd/7"}, got)
}

func TestCheckEmptyRoot(t *testing.T) {
	d := t.TempDir()
	missing := filepath.Join(d, "new")
	require.NoError(t, checkEmptyRoot(missing))
	assert.DirExists(t, missing)
	require.NoError(t, checkEmptyRoot(missing))
	require.NoError(t, os.WriteFile(filepath.Join(missing, "x"), nil, 0o644))
	assert.ErrorContains(t, checkEmptyRoot(missing), "not empty")
}

func TestCheckParticipant(t *testing.T) {
	g := &grants.Grant{GrantID: "G-x", AgentID: "codex", Participant: "bob"}
	assert.NoError(t, checkParticipant(g, []string{"alice", "bob"}))
	assert.NoError(t, checkParticipant(g, nil))
	err := checkParticipant(g, []string{"alice"})
	assert.ErrorContains(t, err, `participant "bob" is not listed`)
}

func TestCheckMountpoint(t *testing.T) {
	d := t.TempDir()
	assert.NoError(t, CheckMountpoint(d))
	f := filepath.Join(d, "file")
	require.NoError(t, os.WriteFile(f, nil, 0o644))
	assert.ErrorContains(t, CheckMountpoint(f), "not a directory")
	assert.Error(t, CheckMountpoint(filepath.Join(d, "missing")))
}
