package sandbox

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPlanRefuses(t *testing.T) {
	root := t.TempDir()
	folder := filepath.Join(root, "collab")
	runs := filepath.Join(root, "agent_runs")
	tools := filepath.Join(root, "tools")
	for _, d := range []string{filepath.Join(folder, "oracle"), filepath.Join(runs, "context_grants"), tools} {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	require.NoError(t, os.Symlink(filepath.Join(folder, "oracle"), filepath.Join(root, "to-oracle")))
	masks := []string{runs, filepath.Join(runs, "communication_ledger.jsonl")}
	tests := []struct {
		name   string
		ro, rw []string
		err    string
	}{
		{name: "a tool directory", ro: []string{tools}},
		{name: "the parent of the folder and of the run directory", ro: []string{root}},
		{name: "below /tmp", rw: []string{tools}},
		{name: "writable, around the run directory", rw: []string{root}, err: "which no agent may change or move"},
		{name: "the root", ro: []string{"/"}, err: "not /"},
		{name: "/tmp itself", rw: []string{"/tmp"}, err: "its own, empty /tmp"},
		{name: "/var/tmp itself", ro: []string{"/var/tmp"}, err: "its own, empty /var/tmp"},
		{name: "the host's /proc", ro: []string{"/proc/1"}, err: "its own /proc"},
		{name: "the host's /dev", ro: []string{"/dev"}, err: "its own /dev"},
		{name: "/sys", ro: []string{"/sys"}, err: "its own /sys"},
		{name: "the folder", rw: []string{folder}, err: "collaboration folder"},
		{name: "inside the folder", ro: []string{filepath.Join(folder, "oracle")}, err: "collaboration folder"},
		{name: "inside the folder through a link", ro: []string{filepath.Join(root, "to-oracle")}, err: "collaboration folder"},
		{name: "the run directory", ro: []string{runs}, err: "no agent may reach"},
		{name: "inside the run directory", ro: []string{filepath.Join(runs, "context_grants")}, err: "no agent may reach"},
		{name: "read-only and writable at once", ro: []string{tools}, rw: []string{tools}, err: "also given to --ro"},
		{name: "a path that does not exist", ro: []string{filepath.Join(root, "nope")}, err: "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			binds, _, err := Plan(PlanOptions{Folder: folder, RO: tt.ro, RW: tt.rw, Masks: masks})
			if tt.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.err)
				return
			}
			require.NoError(t, err)
			for i := 1; i < len(binds); i++ {
				assert.Less(t, binds[i-1].Path, binds[i].Path, "parents before children")
			}
		})
	}
}

func TestPlanRefusesARunDirectoryHoldingTheFolder(t *testing.T) {
	root := t.TempDir()
	folder := filepath.Join(root, "collab")
	require.NoError(t, os.MkdirAll(folder, 0o755))
	// The ledger beside the folder: its directory holds the folder.
	_, _, err := Plan(PlanOptions{Folder: folder, RO: []string{filepath.Dir(root)}, Masks: []string{root, filepath.Join(root, "ledger.jsonl")}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "holds the folder")
	// Not shown by any bind, it is harmless: only the way to the folder is there.
	_, _, err = Plan(PlanOptions{Folder: folder, Masks: []string{root}})
	assert.NoError(t, err)
}

func TestPlanSystemDirectories(t *testing.T) {
	binds, _, err := Plan(PlanOptions{Folder: t.TempDir()})
	require.NoError(t, err)
	byPath := map[string]Bind{}
	for _, b := range binds {
		byPath[b.Path] = b
		assert.False(t, b.Write, "%s is writable", b.Path)
	}
	for _, d := range SystemDirs {
		fi, err := os.Lstat(d)
		if err != nil {
			assert.NotContains(t, byPath, d)
			continue
		}
		b := byPath[d]
		if fi.Mode()&os.ModeSymlink != 0 {
			target, _ := os.Readlink(d)
			assert.Equal(t, target, b.Link, d)
		} else {
			assert.Empty(t, b.Link, d)
		}
	}
}

func TestCheckReach(t *testing.T) {
	root := t.TempDir()
	home := filepath.Join(root, "home")
	folder := filepath.Join(home, "collab")
	require.NoError(t, os.MkdirAll(folder, 0o755))
	require.NoError(t, os.Chmod(home, 0o700))
	var st syscall.Stat_t
	require.NoError(t, syscall.Stat(home, &st))

	// Shown by no bind: the directories above are the sandbox's own.
	assert.NoError(t, CheckReach(folder, nil, 61200, 61200))
	shown := []Bind{{Path: root}}
	err := CheckReach(folder, shown, 61200, 61200)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "cannot enter "+home)
	assert.Contains(t, err.Error(), "--ro "+root)
	assert.NoError(t, CheckReach(folder, shown, 0, 0), "root enters everything")
	assert.NoError(t, CheckReach(folder, shown, st.Uid, st.Gid), "the owner enters")
	require.NoError(t, os.Chmod(home, 0o711))
	assert.NoError(t, CheckReach(folder, shown, 61200, 61200), "search is enough")
	// A bind below the private directory shows nothing above it.
	assert.NoError(t, CheckReach(filepath.Join(folder, "x"), []Bind{{Path: folder}}, 61200, 61200))
}

func TestFreeUIDWraps(t *testing.T) {
	used := map[uint32]bool{UIDMax: true}
	u, ok := freeUID(UIDMax, UIDMin, UIDMax, used)
	require.True(t, ok)
	assert.Equal(t, uint32(UIDMin), u)
	for i := uint32(UIDMin); i <= UIDMax; i++ {
		used[i] = true
	}
	_, ok = freeUID(UIDMin+5, UIDMin, UIDMax, used)
	assert.False(t, ok)
}

func itoa(u uint32) string { return strconv.FormatUint(uint64(u), 10) }

func readString(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	return string(b)
}
