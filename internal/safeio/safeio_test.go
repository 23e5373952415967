package safeio

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// tree makes a folder with one of each kind of entry, and a file outside
// it that links point at.
func tree(t *testing.T) (folder, outside string) {
	t.Helper()
	base := t.TempDir()
	folder, outside = filepath.Join(base, "folder"), filepath.Join(base, "secret")
	require.NoError(t, os.WriteFile(outside, []byte("secret"), 0o600))
	require.NoError(t, os.MkdirAll(filepath.Join(folder, "d"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(folder, "f"), []byte("hello"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(folder, "d", "g"), []byte("deep"), 0o644))
	require.NoError(t, os.Symlink(outside, filepath.Join(folder, "link")))
	require.NoError(t, os.Symlink(filepath.Dir(outside), filepath.Join(folder, "dirlink")))
	require.NoError(t, os.Link(outside, filepath.Join(folder, "hard")))
	require.NoError(t, unix.Mkfifo(filepath.Join(folder, "fifo"), 0o644))
	return folder, outside
}

func TestValid(t *testing.T) {
	tests := []struct {
		rel string
		ok  bool
	}{
		{"a", true}, {"a/b.md", true}, {".hidden/x", true},
		{"", false}, {".", false}, {"/a", false}, {"a/../b", false}, {"..", false},
		{"a//b", false}, {"a/", false}, {"./a", false}, {"a/./b", false}, {"a\x00b", false},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.ok, Valid(tt.rel), "%q", tt.rel)
	}
}

func TestReadFile(t *testing.T) {
	folder, _ := tree(t)
	r, err := OpenRoot(folder)
	require.NoError(t, err)
	defer r.Close()
	tests := []struct {
		rel   string
		want  string
		isErr error
	}{
		{"f", "hello", nil},
		{"d/g", "deep", nil},
		{"link", "", ErrNotRegular},
		{"dirlink/secret", "", fs.ErrNotExist},
		{"hard", "", ErrNotRegular},
		{"fifo", "", ErrNotRegular},
		{"d", "", ErrNotRegular},
		{"missing", "", fs.ErrNotExist},
		{"../secret", "", unix.EINVAL},
	}
	for _, tt := range tests {
		t.Run(tt.rel, func(t *testing.T) {
			got, _, err := r.ReadFile(tt.rel, 1<<20)
			if tt.isErr != nil {
				require.ErrorIs(t, err, tt.isErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, string(got))
		})
	}
	_, _, err = r.ReadFile("f", 2)
	require.ErrorIs(t, err, ErrTooLarge)
}

func TestReplace(t *testing.T) {
	tests := []struct {
		rel     string
		old     string // content handed back; "" for none
		oldKind uint32 // 0: nothing was there
		isErr   error
	}{
		{rel: "new.md"},
		{rel: "sub/dir/new.md"},
		{rel: "f", old: "hello", oldKind: unix.S_IFREG},
		{rel: "link", oldKind: unix.S_IFLNK},
		{rel: "hard", oldKind: unix.S_IFREG},
		{rel: "d", isErr: ErrNotRegular},
		{rel: "dirlink/secret", isErr: fs.ErrNotExist},
		{rel: "link/x", isErr: fs.ErrNotExist},
	}
	for _, tt := range tests {
		t.Run(tt.rel, func(t *testing.T) {
			folder, outside := tree(t)
			r, err := OpenRoot(folder)
			require.NoError(t, err)
			defer r.Close()
			old, err := r.Replace(tt.rel, []byte("new"), 0o640, 1<<20)
			if tt.isErr != nil {
				require.ErrorIs(t, err, tt.isErr)
			} else {
				require.NoError(t, err)
				if tt.oldKind == 0 {
					require.Nil(t, old)
				} else {
					require.NotNil(t, old)
					assert.Equal(t, tt.oldKind, old.Info.Mode&unix.S_IFMT)
					assert.Equal(t, tt.old, string(old.Content))
					require.NoError(t, old.Discard())
				}
				b, err := os.ReadFile(filepath.Join(folder, tt.rel))
				require.NoError(t, err)
				assert.Equal(t, "new", string(b))
				var st unix.Stat_t
				require.NoError(t, unix.Lstat(filepath.Join(folder, tt.rel), &st))
				assert.Equal(t, uint32(unix.S_IFREG|0o640), st.Mode)
			}
			// Nothing outside changed, and no temporary file is left.
			b, err := os.ReadFile(outside)
			require.NoError(t, err)
			assert.Equal(t, "secret", string(b))
			left, _ := filepath.Glob(filepath.Join(folder, "*", TempPrefix+"*"))
			top, _ := filepath.Glob(filepath.Join(folder, TempPrefix+"*"))
			assert.Empty(t, append(left, top...))
			st, err := os.Stat(filepath.Join(folder, "d"))
			require.NoError(t, err)
			assert.True(t, st.IsDir())
		})
	}
}

func TestReplaceModes(t *testing.T) {
	tests := []struct {
		name     string
		perm     uint32
		wantFile uint32
		wantDirs uint32 // of the directories Replace makes
	}{
		{"private", 0o600, 0o600, 0o700},
		{"group readable", 0o640, 0o640, 0o750},
		{"world readable", 0o644, 0o644, 0o755},
		{"executable", 0o750, 0o750, 0o750},
		{"others only", 0o604, 0o604, 0o705},
		{"world writable: directories never are", 0o666, 0o666, 0o755},
		{"set-id and sticky bits dropped", 0o7755, 0o755, 0o755},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old := unix.Umask(0)
			defer unix.Umask(old)
			folder, _ := tree(t)
			r, err := OpenRoot(folder)
			require.NoError(t, err)
			defer r.Close()
			for _, rel := range []string{"new/deep/x.md", "d/y.md"} {
				prev, err := r.Replace(rel, []byte("x"), tt.perm, 1<<20)
				require.NoError(t, err)
				require.Nil(t, prev)
				var st unix.Stat_t
				require.NoError(t, unix.Lstat(filepath.Join(folder, rel), &st))
				assert.Equal(t, unix.S_IFREG|tt.wantFile, st.Mode, "%s: %o", rel, st.Mode)
			}
			for _, dir := range []string{"new", "new/deep"} {
				var st unix.Stat_t
				require.NoError(t, unix.Lstat(filepath.Join(folder, dir), &st))
				assert.Equal(t, unix.S_IFDIR|tt.wantDirs, st.Mode, "%s: %o", dir, st.Mode)
			}
			// A directory that was there keeps its mode.
			var st unix.Stat_t
			require.NoError(t, unix.Lstat(filepath.Join(folder, "d"), &st))
			assert.Equal(t, uint32(unix.S_IFDIR|0o755), st.Mode)
		})
	}
}

func TestDetachRestore(t *testing.T) {
	folder, _ := tree(t)
	r, err := OpenRoot(folder)
	require.NoError(t, err)
	defer r.Close()
	d, err := r.Detach("f", 1<<20)
	require.NoError(t, err)
	assert.Equal(t, "hello", string(d.Content))
	_, err = os.Stat(filepath.Join(folder, "f"))
	require.ErrorIs(t, err, fs.ErrNotExist)
	require.NoError(t, d.Restore())
	b, err := os.ReadFile(filepath.Join(folder, "f"))
	require.NoError(t, err)
	assert.Equal(t, "hello", string(b))

	// The name was taken meanwhile: the detached entry stays out.
	d, err = r.Detach("f", 1<<20)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(folder, "f"), []byte("other"), 0o644))
	require.ErrorIs(t, d.Restore(), fs.ErrExist)
	require.NoError(t, d.Discard())
	b, err = os.ReadFile(filepath.Join(folder, "f"))
	require.NoError(t, err)
	assert.Equal(t, "other", string(b))

	_, err = r.Detach("d", 1<<20)
	require.ErrorIs(t, err, ErrNotRegular)
	_, err = r.Detach("missing", 1<<20)
	require.ErrorIs(t, err, fs.ErrNotExist)
}

func TestOpenBeneath(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "a/b"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a/b/f"), []byte("x"), 0o644))
	require.NoError(t, os.Symlink("b", filepath.Join(dir, "a/link")))
	require.NoError(t, os.Symlink("f", filepath.Join(dir, "a/b/flink")))
	root, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	defer unix.Close(root)
	for _, tc := range []struct {
		name  string
		path  string
		flags int
		mode  uint32
		want  error
	}{
		{"a file", "a/b/f", unix.O_RDONLY, 0, nil},
		{"the root itself", "", unix.O_PATH | unix.O_DIRECTORY, 0, nil},
		{"dot", ".", unix.O_PATH | unix.O_DIRECTORY, 0, nil},
		{"a symlinked directory on the way", "a/link/f", unix.O_RDONLY, 0, unix.ELOOP},
		{"a final symlink", "a/b/flink", unix.O_RDONLY, 0, unix.ELOOP},
		{"a final symlink as itself", "a/b/flink", unix.O_PATH, 0, nil},
		{"above the root", "../x", unix.O_RDONLY, 0, unix.EXDEV},
		{"an absolute path", "/etc/passwd", unix.O_RDONLY, 0, unix.EXDEV},
		{"a magic link", "/proc/self/root", unix.O_PATH, 0, unix.EXDEV},
		{"create with a mode", "a/new", unix.O_WRONLY | unix.O_CREAT | unix.O_EXCL, 0o640, nil},
		{"create through a symlink", "a/link/new", unix.O_WRONLY | unix.O_CREAT, 0o600, unix.ELOOP},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fd, err := OpenBeneath(root, tc.path, tc.flags, tc.mode)
			if tc.want != nil {
				require.ErrorIs(t, err, tc.want)
				return
			}
			require.NoError(t, err)
			defer unix.Close(fd)
			if tc.flags&unix.O_CREAT != 0 {
				var st unix.Stat_t
				require.NoError(t, unix.Fstat(fd, &st))
				old := unix.Umask(0)
				unix.Umask(old)
				assert.Equal(t, tc.mode&^uint32(old), st.Mode&0o777)
			}
			flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
			require.NoError(t, err)
			assert.NotZero(t, flags&unix.FD_CLOEXEC, "close-on-exec is always set")
		})
	}
}

// TestStatAtIsFstatat: StatAt describes a file, a directory and a
// symlink (not followed) as fstatat does; a mount point's refusal is
// tested through a real bind mount in integration.
func TestStatAtIsFstatat(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o640))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "d"), 0o750))
	require.NoError(t, os.Symlink("f", filepath.Join(dir, "l")))
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	require.NoError(t, err)
	defer unix.Close(fd)
	for _, name := range []string{"f", "d", "l"} {
		var want, got unix.Stat_t
		require.NoError(t, unix.Fstatat(fd, name, &want, unix.AT_SYMLINK_NOFOLLOW))
		require.NoError(t, StatAt(fd, name, &got), name)
		assert.Equal(t, want, got, name)
	}
	var st, self unix.Stat_t
	assert.ErrorIs(t, StatAt(fd, "missing", &st), unix.ENOENT)
	require.NoError(t, unix.Fstat(fd, &self))
	require.NoError(t, StatAt(fd, "", &st), "the directory itself")
	assert.Equal(t, self, st)
}

// TestEmpty: a directory's files and subdirectories go, a symlink goes
// as itself (its target stays), and a tree past the bounds is refused.
func TestEmpty(t *testing.T) {
	outside := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(outside, "kept"), []byte("x"), 0o600))
	tree := func() (string, int) {
		dir := t.TempDir()
		require.NoError(t, os.MkdirAll(filepath.Join(dir, "a", "b"), 0o700))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "a", "b", "f"), []byte("x"), 0o600))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "a", "g"), []byte("x"), 0o600))
		require.NoError(t, os.Symlink(outside, filepath.Join(dir, "link")))
		fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		require.NoError(t, err)
		t.Cleanup(func() { unix.Close(fd) })
		return dir, fd
	}
	_, fd := tree()
	assert.Error(t, Empty(fd, 1, 0), "two levels below")
	_, fd = tree()
	assert.Error(t, Empty(fd, 4, 1), "two entries in a/")
	dir, fd := tree()
	require.NoError(t, Empty(fd, 4, 0))
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, ents)
	assert.FileExists(t, filepath.Join(outside, "kept"))
}
