package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestWriteFile(t *testing.T) {
	tests := []struct {
		name string
		old  string // "" for no file yet
		new  string
		perm os.FileMode
	}{
		{"new file", "", "hello\n", 0o644},
		{"replace", "old content\n", "new\n", 0o600},
		{"empty", "something", "", 0o640},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "f.json")
			if tt.old != "" {
				require.NoError(t, os.WriteFile(p, []byte(tt.old), 0o666))
			}
			require.NoError(t, WriteFile(p, []byte(tt.new), tt.perm))
			b, err := os.ReadFile(p)
			require.NoError(t, err)
			assert.Equal(t, tt.new, string(b))
			st, err := os.Stat(p)
			require.NoError(t, err)
			assert.Equal(t, tt.perm, st.Mode().Perm())
			left, _ := filepath.Glob(filepath.Join(filepath.Dir(p), ".*"))
			assert.Empty(t, left, "no temporary file left")
		})
	}
}

func TestWriteLeavesTheOldFileWhenFillFails(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(p, []byte("old"), 0o644))
	boom := errors.New("boom")
	err := Write(p, 0o644, func(w io.Writer) error {
		_, _ = io.WriteString(w, "half")
		return boom
	})
	require.ErrorIs(t, err, boom)
	b, _ := os.ReadFile(p)
	assert.Equal(t, "old", string(b))
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(p), ".*"))
	assert.Empty(t, left)
	assert.True(t, strings.HasPrefix(TempPrefix("/x/protocol.json"), ".protocol.json.tmp-"))
}

func TestTemp(t *testing.T) {
	tests := []struct {
		name      string
		install   bool   // Install the finished file
		target    string // name to install it as, relative to the directory
		wantErr   bool
		wantFinal string // content at "f" afterwards
	}{
		{name: "installed", install: true, target: "f", wantFinal: "new"},
		{name: "discarded", wantFinal: "old"},
		{name: "installed under a name chosen afterwards", install: true, target: "g", wantFinal: "old"},
		{name: "refused outside its directory", install: true, target: "sub/f", wantErr: true, wantFinal: "old"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, os.Mkdir(filepath.Join(dir, "sub"), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "f"), []byte("old"), 0o644))
			tmp, err := NewTemp(dir, "f")
			require.NoError(t, err)
			assert.True(t, strings.HasPrefix(filepath.Base(tmp.Name()), TempPrefix("f")))
			_, err = io.WriteString(tmp, "new")
			require.NoError(t, err)
			require.NoError(t, tmp.Finish(0o444))
			if tt.install {
				err = tmp.Install(filepath.Join(dir, tt.target))
				if tt.wantErr {
					require.Error(t, err)
				} else {
					require.NoError(t, err)
					st, err := os.Stat(filepath.Join(dir, tt.target))
					require.NoError(t, err)
					assert.Equal(t, os.FileMode(0o444), st.Mode().Perm())
				}
			}
			tmp.Discard()
			tmp.Discard()
			b, err := os.ReadFile(filepath.Join(dir, "f"))
			require.NoError(t, err)
			assert.Equal(t, tt.wantFinal, string(b))
			left, _ := filepath.Glob(filepath.Join(dir, ".*"))
			assert.Empty(t, left, "no temporary file left")
		})
	}
}

func TestPermOf(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "cache.json")
	assert.Equal(t, os.FileMode(0o644), PermOf(p, 0o644), "no file: the default")
	require.NoError(t, WriteFile(p, []byte("v1"), 0o600))
	assert.Equal(t, os.FileMode(0o600), PermOf(p, 0o644), "the file's own mode")
}

// openPath opens dir as the O_PATH descriptor the ledger and the folder
// code hold.
func openPath(t *testing.T, dir string) int {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

func TestDirWriteFile(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(t *testing.T, dir string) // what stands at "f" before
		target  string
		wantErr error
		want    string // content of "f" afterwards ("" with wantErr: untouched)
	}{
		{name: "new file", target: "f", want: "new"},
		{name: "replaces a file", target: "f", want: "new",
			setup: func(t *testing.T, dir string) {
				require.NoError(t, os.WriteFile(filepath.Join(dir, "f"), []byte("old"), 0o644))
			}},
		{name: "replaces a symlink, never follows it", target: "f", want: "new",
			setup: func(t *testing.T, dir string) {
				require.NoError(t, os.WriteFile(filepath.Join(dir, "outside"), []byte("outside"), 0o644))
				require.NoError(t, os.Symlink("outside", filepath.Join(dir, "f")))
			}},
		{name: "a path is refused", target: "sub/f", wantErr: unix.EINVAL},
		{name: "dot-dot is refused", target: "..", wantErr: unix.EINVAL},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, os.Mkdir(filepath.Join(dir, "sub"), 0o755))
			if tt.setup != nil {
				tt.setup(t, dir)
			}
			d := At(openPath(t, dir))
			err := d.WriteFile(tt.target, []byte("new"), 0o640)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			st, err := os.Lstat(filepath.Join(dir, "f"))
			require.NoError(t, err)
			assert.True(t, st.Mode().IsRegular())
			assert.Equal(t, os.FileMode(0o640), st.Mode().Perm())
			b, err := os.ReadFile(filepath.Join(dir, "f"))
			require.NoError(t, err)
			assert.Equal(t, tt.want, string(b))
			if b, err := os.ReadFile(filepath.Join(dir, "outside")); err == nil {
				assert.Equal(t, "outside", string(b), "the symlink's target is untouched")
			}
			left, _ := filepath.Glob(filepath.Join(dir, ".*"))
			assert.Empty(t, left, "no temporary file left")
		})
	}
}

func TestDirSyncOnPathDescriptor(t *testing.T) {
	// fsync(2) refuses an O_PATH descriptor (EBADF); the rule's
	// directory fsync must work with one all the same.
	dir := t.TempDir()
	fd := openPath(t, dir)
	require.ErrorIs(t, unix.Fsync(fd), unix.EBADF)
	require.NoError(t, At(fd).Sync())
}

func TestTempExchange(t *testing.T) {
	tests := []struct {
		name    string
		old     string // "" for nothing at "f"
		noRepl  bool   // InstallNew instead of Exchange
		wantErr error
		wantOld string // content under the temporary name afterwards
	}{
		{name: "exchange hands back the old entry", old: "old", wantOld: "old"},
		{name: "exchange with nothing there", wantErr: unix.ENOENT},
		{name: "install a new name", noRepl: true},
		{name: "install a taken name", old: "old", noRepl: true, wantErr: unix.EEXIST},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if tt.old != "" {
				require.NoError(t, os.WriteFile(filepath.Join(dir, "f"), []byte(tt.old), 0o644))
			}
			tmp, err := At(openPath(t, dir)).NewTempPrefix(".sync-")
			require.NoError(t, err)
			defer tmp.Discard()
			assert.True(t, strings.HasPrefix(tmp.Name(), ".sync-"))
			_, err = io.WriteString(tmp, "new")
			require.NoError(t, err)
			require.NoError(t, tmp.Finish(0o600))
			if tt.noRepl {
				err = tmp.InstallNew("f")
			} else {
				err = tmp.Exchange("f")
			}
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				tmp.Discard()
				left, _ := filepath.Glob(filepath.Join(dir, ".*"))
				assert.Empty(t, left, "the unused temporary file is removed")
				return
			}
			require.NoError(t, err)
			b, err := os.ReadFile(filepath.Join(dir, "f"))
			require.NoError(t, err)
			assert.Equal(t, "new", string(b))
			tmp.Discard() // the old entry is the caller's now: kept
			if tt.wantOld != "" {
				b, err := os.ReadFile(filepath.Join(dir, tmp.Name()))
				require.NoError(t, err)
				assert.Equal(t, tt.wantOld, string(b))
			}
		})
	}
}

func TestPathTempRefusesExchange(t *testing.T) {
	tmp, err := NewTemp(t.TempDir(), "f")
	require.NoError(t, err)
	defer tmp.Discard()
	require.Error(t, tmp.Exchange("f"))
}

// TestHostileNames plants what a hostile local user could at the names a
// writer uses: a symlink at the temporary name it will draw or at the
// target, a directory at the target, a leftover temporary file. The
// write replaces safely or fails; it never follows a link, and the
// planted entries other than the target are left as they were.
func TestHostileNames(t *testing.T) {
	const drawn = "fixed"
	tmpName := TempPrefix("f") + drawn
	tests := []struct {
		name    string
		plant   func(t *testing.T, dir string)
		write   func(d Dir) error
		wantErr bool
		want    string // content of "f" afterwards when the write succeeds
	}{
		{name: "symlink at the temporary name", want: "new",
			plant: func(t *testing.T, dir string) {
				require.NoError(t, os.Symlink("outside", filepath.Join(dir, tmpName)))
			}},
		{name: "symlink at the target", want: "new",
			plant: func(t *testing.T, dir string) {
				require.NoError(t, os.Symlink("outside", filepath.Join(dir, "f")))
			}},
		{name: "directory at the target", wantErr: true,
			plant: func(t *testing.T, dir string) {
				require.NoError(t, os.Mkdir(filepath.Join(dir, "f"), 0o755))
			}},
		{name: "leftover temporary file", want: "new",
			plant: func(t *testing.T, dir string) {
				require.NoError(t, os.WriteFile(filepath.Join(dir, tmpName), []byte("left"), 0o644))
			}},
		{name: "new name, symlink at the target", wantErr: true,
			write: func(d Dir) error { return d.WriteFileNew("f", []byte("new"), 0o600) },
			plant: func(t *testing.T, dir string) {
				require.NoError(t, os.Symlink("outside", filepath.Join(dir, "f")))
			}},
		{name: "kept open, symlink at the temporary name and the target", want: "new",
			write: func(d Dir) error {
				tmp, err := d.NewTempOpen("f", unix.O_RDWR|unix.O_APPEND)
				if err != nil {
					return err
				}
				defer tmp.Discard()
				if _, err := io.WriteString(tmp.File(), "new"); err != nil {
					return err
				}
				if err := tmp.InstallOpen("f"); err != nil {
					return err
				}
				return tmp.File().Close()
			},
			plant: func(t *testing.T, dir string) {
				require.NoError(t, os.Symlink("outside", filepath.Join(dir, tmpName)))
				require.NoError(t, os.Symlink("outside", filepath.Join(dir, "f")))
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			first := true
			old := randomSuffix
			randomSuffix = func() string {
				if first {
					first = false
					return drawn
				}
				return old()
			}
			t.Cleanup(func() { randomSuffix = old })
			dir := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(dir, "outside"), []byte("outside"), 0o644))
			tt.plant(t, dir)
			before := entries(t, dir)
			write := tt.write
			if write == nil {
				write = func(d Dir) error { return d.WriteFile("f", []byte("new"), 0o600) }
			}
			err := write(At(openPath(t, dir)))
			b, rerr := os.ReadFile(filepath.Join(dir, "outside"))
			require.NoError(t, rerr)
			assert.Equal(t, "outside", string(b), "no link was followed")
			after := entries(t, dir)
			if tt.wantErr {
				require.Error(t, err)
				assert.Equal(t, before, after, "nothing changed, no temporary file left")
				return
			}
			require.NoError(t, err)
			st, err := os.Lstat(filepath.Join(dir, "f"))
			require.NoError(t, err)
			assert.True(t, st.Mode().IsRegular(), "the target is a regular file now")
			b, err = os.ReadFile(filepath.Join(dir, "f"))
			require.NoError(t, err)
			assert.Equal(t, tt.want, string(b))
			delete(before, "f")
			delete(after, "f")
			assert.Equal(t, before, after, "what was planted beside the target is left alone, no temporary file left")
		})
	}
}

// entries maps the names in dir to their types and, for symlinks, their
// targets and, for files, their contents.
func entries(t *testing.T, dir string) map[string]string {
	t.Helper()
	des, err := os.ReadDir(dir)
	require.NoError(t, err)
	m := map[string]string{}
	for _, de := range des {
		p := filepath.Join(dir, de.Name())
		switch {
		case de.Type()&os.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			m[de.Name()] = "symlink " + target
		case de.IsDir():
			m[de.Name()] = "dir"
		default:
			b, _ := os.ReadFile(p)
			m[de.Name()] = "file " + string(b)
		}
	}
	return m
}

// TestPathWriteRefusesADirectory: the path form never replaces a
// directory either.
func TestPathWriteRefusesADirectory(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(dir, "f"), 0o755))
	require.Error(t, WriteFile(filepath.Join(dir, "f"), []byte("new"), 0o600))
	st, err := os.Lstat(filepath.Join(dir, "f"))
	require.NoError(t, err)
	assert.True(t, st.IsDir())
	left, _ := filepath.Glob(filepath.Join(dir, ".*"))
	assert.Empty(t, left, "no temporary file left")
}
