package integration

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/ledger"
)

// TestEscapeWritesOutsideGrant: with a grant that writes only review.md,
// the protocol files and scratch/, the agent tries to change everything
// else. The attempts are grouped by what they use (escape_hardlink_test.go,
// escape_rename_test.go); they run in one view, in this order.
func TestEscapeWritesOutsideGrant(t *testing.T) {
	w := newEscWrites(t)
	escRunFamilies(t, w.e,
		escWriteOpenAttempts(w), escWriteHardLinkAttempts(w), escWriteAttrAttempts(w),
		escWriteRenameAttempts(w), escWriteLinkAttempts(w), escWriteNewNameAttempts(w),
	)
	escWriteHardLinkChecks(t, w)

	c, p := w.c, w.v.path
	t.Run("a private writable mapping never reaches the file", func(t *testing.T) {
		before := escTree(t, c.folder)
		// In another process: see escMapper.
		out, code := escPython(t, `import mmap, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
m = mmap.mmap(fd, 16, mmap.MAP_PRIVATE, mmap.PROT_READ | mmap.PROT_WRITE)
m[0:12] = b"PRIVATE COPY"
m.close()
`, p("proposal.md"))
		require.Equal(t, 0, code, out)
		escRequireSameTree(t, before, escTree(t, c.folder))
		assert.NotContains(t, readFile(t, p("proposal.md")), "PRIVATE COPY")
	})
}

// escNotWritable explains a refusal of a name the grant does not let the
// agent write.
const escNotWritable = "not writable under the grant"

// escWrites is the collaboration of TestEscapeWritesOutsideGrant: a view
// with escWriterGrant, a planted symlink to proposal.md and a planted hard
// link of README.md in scratch/.
type escWrites struct {
	c *collab
	e escEnv
	v *view
}

func newEscWrites(t *testing.T) *escWrites {
	c := newCollab(t)
	escPlant(t, c.folder,
		map[string]string{"scratch/to-proposal": "../proposal.md"},
		map[string]string{"scratch/mine.md": "mine\n", "scratch/private/notes.md": "private\n"},
		map[string]string{"scratch/hard-readme.md": "README.md"})
	e := escMount(c, escWriterGrant())
	return &escWrites{c: c, e: e, v: e.v}
}

// withPrivate makes a private file of the view at name (a name the
// grant cannot write), runs fn, and removes the file again through
// the view whatever fn did, so that the staging directory ends as it
// began.
func (w *escWrites) withPrivate(name string, fn func() error) func(*testing.T) error {
	p := w.v.path
	return func(t *testing.T) error {
		require.NoError(t, os.WriteFile(p(name), []byte(escPrivateMarker), 0o644))
		_, err := os.Lstat(filepath.Join(w.c.folder, name))
		require.ErrorIs(t, err, os.ErrNotExist, "the private file is in the folder")
		ferr := fn()
		require.NoError(t, os.Remove(p(name)), "the private file stays the view's own after a refused change")
		return ferr
	}
}

// withRO runs fn on a read-only descriptor of proposal.md.
func (w *escWrites) withRO(fn func(fd int) error) func(*testing.T) error {
	return func(t *testing.T) error {
		fd, err := unix.Open(w.v.path("proposal.md"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		require.NoError(t, err)
		defer unix.Close(fd)
		return fn(fd)
	}
}

// escWriteOpenAttempts open a read-only file for writing.
func escWriteOpenAttempts(w *escWrites) []escAttempt {
	v, p, notWritable, denied := w.v, w.v.path, escNotWritable, escDeniedRec
	return []escAttempt{
		{name: "echo > (O_TRUNC open)", do: escSh(v, "echo x > proposal.md"), errno: syscall.EACCES,
			record: denied("proposal.md", "open"), explain: "open proposal.md: " + notWritable + " (EACCES)"},
		{name: "echo >> (O_APPEND open)", do: escSh(v, "echo x >> proposal.md"), errno: syscall.EACCES,
			record: denied("proposal.md", "open"), explain: notWritable},
		{name: "O_WRONLY|O_TRUNC",
			do:    func(*testing.T) error { return escOpen(p("proposal.md"), os.O_WRONLY|os.O_TRUNC) },
			errno: syscall.EACCES, record: denied("proposal.md", "open"), explain: notWritable},
		{name: "O_RDONLY|O_TRUNC",
			do:    func(*testing.T) error { return escOpen(p("proposal.md"), os.O_RDONLY|os.O_TRUNC) },
			errno: syscall.EACCES, record: denied("proposal.md", "open"), explain: notWritable},
		{name: "O_RDWR", do: func(*testing.T) error { return escOpen(p("proposal.md"), os.O_RDWR) },
			errno: syscall.EACCES, record: denied("proposal.md", "open"), explain: notWritable},
		{name: "reopen a read-only descriptor for writing via /proc/self/fd",
			do: escSh(v, "exec 3<proposal.md && echo x > /proc/self/fd/3"), errno: syscall.EACCES,
			record: denied("proposal.md", "open"), explain: notWritable},
		{name: "write through a planted symlink in a writable directory", do: escSh(v, "echo x > scratch/to-proposal"),
			errno: syscall.EACCES, record: denied("proposal.md", "open"), explain: notWritable},
	}
}

// escWriteAttrAttempts change a read-only file's size, attributes and
// extended attributes, by name and through read-only descriptors.
func escWriteAttrAttempts(w *escWrites) []escAttempt {
	v, p, notWritable, denied, withRO := w.v, w.v.path, escNotWritable, escDeniedRec, w.withRO
	return []escAttempt{
		{name: "truncate(2)", do: func(*testing.T) error { return os.Truncate(p("proposal.md"), 0) },
			errno: syscall.EACCES, record: denied("proposal.md", "truncate"),
			explain: "truncate proposal.md: " + notWritable},
		{name: "truncate -s 0", do: escSh(v, "truncate -s 0 proposal.md"), errno: syscall.EACCES,
			record: denied("proposal.md", "open"), explain: notWritable},
		{name: "ftruncate on a read-only descriptor", do: withRO(func(fd int) error { return unix.Ftruncate(fd, 0) }),
			errno: syscall.EINVAL},
		{name: "fallocate on a read-only descriptor",
			do: withRO(func(fd int) error { return unix.Fallocate(fd, 0, 0, 1<<20) }), errno: syscall.EBADF},
		{name: "copy_file_range into a read-only descriptor", do: withRO(func(fd int) error {
			src, err := unix.Open(p("review.md"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			defer unix.Close(src)
			_, err = unix.CopyFileRange(src, nil, fd, nil, 64, 0)
			return err
		}), errno: syscall.EBADF},
		{name: "shared writable mmap of a read-only descriptor", do: withRO(func(fd int) error {
			m, err := unix.Mmap(fd, 0, 64, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
			if err == nil {
				unix.Munmap(m)
			}
			return err
		}), errno: syscall.EACCES},
		{name: "ioctl FS_IOC_SETFLAGS (immutable) on a read-only handle",
			do:    withRO(func(fd int) error { return unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, 0x10) }),
			errno: syscall.ENOTTY},
		{name: "ioctl FS_IOC_GETFLAGS on a read-only handle",
			do:    withRO(func(fd int) error { _, err := unix.IoctlGetInt(fd, unix.FS_IOC_GETFLAGS); return err }),
			errno: syscall.ENOTTY},
		{name: "chmod", do: func(*testing.T) error { return os.Chmod(p("proposal.md"), 0o600) }, errno: syscall.EACCES,
			record: denied("proposal.md", "setattr"), explain: notWritable},
		{name: "utimes",
			do:    func(*testing.T) error { return os.Chtimes(p("proposal.md"), time.Unix(0, 0), time.Unix(0, 0)) },
			errno: syscall.EACCES, record: denied("proposal.md", "setattr"), explain: notWritable},
		{name: "chown", do: func(*testing.T) error { return os.Chown(p("proposal.md"), 65534, 65534) },
			errno: syscall.EACCES, record: denied("proposal.md", "setattr"), explain: notWritable},
		{name: "setxattr user.x",
			do:    func(*testing.T) error { return unix.Setxattr(p("proposal.md"), "user.x", []byte("1"), 0) },
			errno: syscall.EACCES, record: denied("proposal.md", "setxattr"), explain: notWritable},
		{name: "removexattr", do: func(*testing.T) error { return unix.Removexattr(p("proposal.md"), "user.x") },
			errno: syscall.EACCES, record: denied("proposal.md", "removexattr"), explain: notWritable},
	}
}

// escWriteNewNameAttempts make new names the grant cannot write: private to
// the view where it may write elsewhere in the directory, refused otherwise.
func escWriteNewNameAttempts(w *escWrites) []escAttempt {
	v, p, long, notWritable, denied := w.v, w.v.path, strings.Repeat("n", 255), escNotWritable, escDeniedRec
	withPrivate := w.withPrivate
	return []escAttempt{
		// A new name the grant cannot write, where it may write others:
		// private to this view, never in the folder.
		{name: "create at the root", do: escSh(v, "touch new.md"), private: "new.md"},
		{name: "cp over a read-only file", do: escSh(v, "cp review.md proposal.md"), errno: syscall.EACCES,
			record: denied("proposal.md", "open"), explain: notWritable},
		// sed writes its temporary file privately; renaming it over the
		// read-only file is the refused step.
		{name: "sed -i on a read-only file", do: escSh(v, "sed -i s/Proposal/Hacked/ proposal.md"),
			errno: syscall.EACCES, record: escRecD(ledger.KindDenied, "proposal.md", "rename", notWritable),
			explain: "rename proposal.md: " + notWritable, privateTemp: "sed"},
		{name: "a private file renamed over the planted hard link", do: withPrivate("draft.tmp", func() error {
			return os.Rename(p("draft.tmp"), p("scratch/hard-readme.md"))
		}), errno: syscall.EACCES, record: escRecD(ledger.KindDenied, "scratch/hard-readme.md", "rename", escNameHeld),
			explain: "rename scratch/hard-readme.md: " + escNameHeld},
		{name: "a private file renamed over a read-only file", do: withPrivate("draft.tmp", func() error {
			return os.Rename(p("draft.tmp"), p("proposal.md"))
		}), errno: syscall.EACCES, record: escRecD(ledger.KindDenied, "proposal.md", "rename", notWritable),
			explain: "rename proposal.md: " + notWritable},
		{name: "RENAME_EXCHANGE of a private file with a read-only file", do: withPrivate("draft.tmp", func() error {
			return unix.Renameat2(unix.AT_FDCWD, p("draft.tmp"), unix.AT_FDCWD, p("proposal.md"), unix.RENAME_EXCHANGE)
		}), errno: syscall.EACCES,
			record: escRecD(ledger.KindDenied, "draft.tmp", "rename",
				"a temporary file of this view cannot be exchanged with a file of the folder"),
			explain: "rename draft.tmp: a temporary file of this view cannot be exchanged"},
		{name: "ln of a private file into a writable directory", do: withPrivate("draft.tmp", func() error {
			return os.Link(p("draft.tmp"), p("scratch/draft-link.md"))
		}), errno: syscall.EACCES, record: escRecD(ledger.KindDenied, "scratch/draft-link.md", "link", escNoLinks),
			explain: escNoLinks},
		{name: "mkdir in a read-only directory",
			do: func(*testing.T) error { return os.Mkdir(p("deliverables/x"), 0o755) }, errno: syscall.EACCES,
			record: denied("deliverables/x", "mkdir"), explain: notWritable},
		{name: "mkfifo where writing is allowed",
			do: func(*testing.T) error { return unix.Mkfifo(p("scratch/fifo"), 0o644) }, errno: syscall.EPERM,
			record: denied("scratch/fifo", "mknod"), explain: "only regular files"},
		{name: "mknod at the root", do: func(*testing.T) error { return unix.Mknod(p("node"), unix.S_IFREG|0o644, 0) },
			errno: syscall.EACCES, record: escRec(ledger.KindDenied, "node", ""), explain: notWritable},
		{name: "255-byte name at the root",
			do: func(*testing.T) error { return escOpen(p(long), os.O_CREATE|os.O_WRONLY) }, private: long},
		{name: "256-byte name in scratch",
			do:    func(*testing.T) error { return escOpen(p("scratch/"+long+"x"), os.O_CREATE|os.O_WRONLY) },
			errno: syscall.ENAMETOOLONG},
		{name: "create below a hidden directory",
			do:    func(*testing.T) error { return escOpen(p("scratch/private/new.md"), os.O_CREATE|os.O_WRONLY) },
			errno: syscall.ENOENT, record: escRec(ledger.KindDenied, "scratch/private", "lookup")},
		{name: "create below the oracle", do: escSh(v, "echo x > oracle/new.md"), errno: syscall.ENOENT,
			record: escRec(ledger.KindDenied, "oracle", "lookup")},
	}
}
