package integration

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/ledger"
)

// TestEscapeSwappedDirectory: while the agent holds a directory open (a
// descriptor, or a shell's working directory), another process replaces
// that directory on the backing folder with a symlink to a hidden one.
// The view's node keeps its visible path, and the backing path now leads
// through a symlink into the hidden directory: every operation on the
// held node passes the checkpoint, which never follows a symlink, so it
// reaches nothing.
func TestEscapeSwappedDirectory(t *testing.T) {
	c := newCollab(t)
	escPlant(t, c.folder, nil, map[string]string{"scratch/mine.md": "mine\n"}, nil)
	require.NoError(t, unix.Setxattr(filepath.Join(c.folder, "oracle/answer.md"), "user.secret", []byte(escSecret), 0))
	v := c.mountView(escReaderGrant(), withAuditOpens())
	p := v.path
	dirfd, err := unix.Open(p("scratch"), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	t.Cleanup(func() { unix.Close(dirfd) })
	require.NoError(t, os.Rename(filepath.Join(c.folder, "scratch"), filepath.Join(c.folder, "scratch-old")))
	require.NoError(t, os.Symlink("oracle", filepath.Join(c.folder, "scratch")))
	below := fmt.Sprintf("/proc/self/fd/%d/answer.md", dirfd)

	t.Run("the swapped name is hidden from new lookups promptly", func(t *testing.T) {
		// The watcher drops the kernel's cached entry; until it has,
		// lookups below it go to the held node.
		nrec := len(c.records())
		eventually(t, func() bool {
			_, err := os.Lstat(p("scratch"))
			return errors.Is(err, syscall.ENOENT)
		}, "scratch is still a directory in the view")
		recs := c.records()[nrec:]
		assert.True(t, escHasRecord(recs, escRecord{kind: ledger.KindDenied, path: "scratch", op: "lookup"}),
			escFmtRecords(recs))
	})
	t.Run("open below the held directory reads nothing", func(t *testing.T) {
		fd, err := unix.Openat(dirfd, "answer.md", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			b := make([]byte, 64)
			n, _ := unix.Read(fd, b)
			unix.Close(fd)
			t.Fatalf("opened the oracle: %q", b[:max(n, 0)])
		}
	})
	t.Run("getxattr below the held directory", func(t *testing.T) {
		b := make([]byte, 64)
		n, err := unix.Getxattr(below, "user.secret", b)
		assert.Error(t, err, "read %q", b[:max(n, 0)])
	})
	t.Run("fstatat below the held directory", func(t *testing.T) {
		var st unix.Stat_t
		assert.ErrorIs(t, unix.Fstatat(dirfd, "answer.md", &st, 0), syscall.ENOENT)
	})
	t.Run("listing the held directory", func(t *testing.T) {
		d, err := unix.Openat(dirfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return // refusing the listing is fine too
		}
		defer unix.Close(d)
		buf := make([]byte, 8192)
		n, err := unix.Getdents(d, buf)
		if err != nil {
			return
		}
		_, _, names := unix.ParseDirent(buf[:n], -1, nil)
		assert.NotContains(t, names, "answer.md")
	})
}
