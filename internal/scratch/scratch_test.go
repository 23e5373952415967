package scratch

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/internal/procstat"
)

const prefix = "acpfs-test-"

func TestMkdirNamesItsMaker(t *testing.T) {
	dir := t.TempDir()
	p, err := Mkdir(dir, prefix)
	require.NoError(t, err)
	fi, err := os.Lstat(p)
	require.NoError(t, err)
	assert.True(t, fi.IsDir())
	assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm())
	m, ok := parse(filepath.Base(p), prefix)
	require.True(t, ok, p)
	me, err := self()
	require.NoError(t, err)
	assert.Equal(t, me, m)
	assert.False(t, m.gone())

	removed, err := Sweep(dir, prefix)
	require.NoError(t, err)
	assert.Empty(t, removed, "the caller's own directory is never removed")
	assert.DirExists(t, p)
}

// liveChild is a process that runs until the test ends.
func liveChild(t *testing.T) maker {
	t.Helper()
	c := exec.Command("sleep", "86395")
	require.NoError(t, c.Start())
	t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	st, err := procstat.Read(c.Process.Pid)
	require.NoError(t, err)
	me, err := self()
	require.NoError(t, err)
	return maker{ns: me.ns, pid: c.Process.Pid, start: st.Start}
}

// zombieChild is a process that exited and is not reaped yet.
func zombieChild(t *testing.T) maker {
	t.Helper()
	c := exec.Command("true")
	require.NoError(t, c.Start())
	t.Cleanup(func() { _ = c.Wait() })
	pid := c.Process.Pid
	// Waited for without being reaped: a zombie.
	var info unix.Siginfo
	require.NoError(t, unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil))
	st, err := procstat.Read(pid)
	require.NoError(t, err)
	require.True(t, st.Zombie())
	me, err := self()
	require.NoError(t, err)
	return maker{ns: me.ns, pid: pid, start: st.Start}
}

// deadChild is a process that ran and was reaped.
func deadChild(t *testing.T) maker {
	t.Helper()
	c := exec.Command("true")
	require.NoError(t, c.Start())
	pid := c.Process.Pid
	st, err := procstat.Read(pid)
	require.NoError(t, err)
	require.NoError(t, c.Wait())
	me, err := self()
	require.NoError(t, err)
	return maker{ns: me.ns, pid: pid, start: st.Start}
}

func (m maker) name(suffix string) string {
	return fmt.Sprintf("%s%d-%d-%d-%s", prefix, m.ns, m.pid, m.start, suffix)
}

// TestSweep: what is removed is the caller's directory of a dead maker
// of its pid namespace, with what it holds; nothing else, and nothing
// through a symlink.
func TestSweep(t *testing.T) {
	me, err := self()
	require.NoError(t, err)
	dead := deadChild(t)
	zombie := zombieChild(t)
	reused := maker{ns: me.ns, pid: me.pid, start: me.start + 1} // our pid, another process's start
	otherNS := dead
	otherNS.ns++
	outside := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(outside, "keep"), []byte("x"), 0o600))

	tests := []struct {
		name    string
		plant   func(t *testing.T, dir string) string
		removed bool
	}{
		{"a dead maker's directory, with its content", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, dead.name("1"))
			require.NoError(t, os.MkdirAll(filepath.Join(p, "root", "a"), 0o700))
			require.NoError(t, os.Mkdir(filepath.Join(p, "view"), 0o700))
			require.NoError(t, os.WriteFile(filepath.Join(p, "root", "a", "f"), nil, 0o600))
			require.NoError(t, os.WriteFile(filepath.Join(p, "prompt.md"), nil, 0o644))
			// A symlink inside is removed as itself, its target kept.
			require.NoError(t, os.Symlink(outside, filepath.Join(p, "link")))
			return p
		}, true},
		{"a pid reused by another process", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, reused.name("2"))
			require.NoError(t, os.Mkdir(p, 0o700))
			return p
		}, true},
		{"a zombie's (exited, not reaped)", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, zombie.name("8"))
			require.NoError(t, os.Mkdir(p, 0o700))
			return p
		}, true},
		{"a live maker's", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, liveChild(t).name("3"))
			require.NoError(t, os.Mkdir(p, 0o700))
			return p
		}, false},
		{"another pid namespace's", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, otherNS.name("4"))
			require.NoError(t, os.Mkdir(p, 0o700))
			return p
		}, false},
		{"an older acpfs's name, which names no maker", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, prefix+"123456789")
			require.NoError(t, os.Mkdir(p, 0o700))
			return p
		}, false},
		{"a symlink under a dead maker's name", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, dead.name("5"))
			require.NoError(t, os.Symlink(outside, p))
			return p
		}, false},
		{"a file under a dead maker's name", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, dead.name("6"))
			require.NoError(t, os.WriteFile(p, nil, 0o600))
			return p
		}, false},
		{"too deep to be a scratch directory", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, dead.name("7"))
			require.NoError(t, os.MkdirAll(filepath.Join(p, strings.Repeat("d/", maxDepth+2)), 0o700))
			return p
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			p := tt.plant(t, dir)
			removed, _ := Sweep(dir, prefix)
			if tt.removed {
				assert.Equal(t, []string{filepath.Base(p)}, removed)
				assert.NoFileExists(t, p)
				assert.NoDirExists(t, p)
			} else {
				assert.Empty(t, removed)
				_, err := os.Lstat(p)
				assert.NoError(t, err, "left as it was")
			}
			assert.FileExists(t, filepath.Join(outside, "keep"), "nothing through a symlink")
		})
	}
}

// TestSweepOthersDirectory: a dead maker's directory that is not the
// caller's (another owner) is left alone.
func TestSweepOthersDirectory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving a directory to another uid needs root")
	}
	dir := t.TempDir()
	p := filepath.Join(dir, deadChild(t).name("1"))
	require.NoError(t, os.Mkdir(p, 0o700))
	require.NoError(t, os.Chown(p, 65534, 65534))
	removed, err := Sweep(dir, prefix)
	require.NoError(t, err)
	assert.Empty(t, removed)
	assert.DirExists(t, p)
}

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
		want maker
	}{
		{prefix + "4026531836-42-1234-987", true, maker{ns: 4026531836, pid: 42, start: 1234}},
		{prefix + "4026531836-42-1234", false, maker{}},
		{prefix + "4026531836-42-1234-987-1", false, maker{}},
		{prefix + "x-42-1234-987", false, maker{}},
		{prefix + "1-0-1234-987", false, maker{}},
		{prefix + "1--1-1234-987", false, maker{}},
		{"other-4026531836-42-1234-987", false, maker{}},
	}
	for _, tt := range tests {
		m, ok := parse(tt.name, prefix)
		assert.Equal(t, tt.ok, ok, tt.name)
		if tt.ok {
			assert.Equal(t, tt.want, m, tt.name)
		}
	}
}
