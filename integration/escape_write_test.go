package integration

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/ledger"
)

func TestEscapeWritesOutsideGrant(t *testing.T) {
	c := newCollab(t)
	escPlant(t, c.folder,
		map[string]string{"scratch/to-proposal": "../proposal.md"},
		map[string]string{"scratch/mine.md": "mine\n", "scratch/private/notes.md": "private\n"},
		map[string]string{"scratch/hard-readme.md": "README.md"})
	e := escMount(c, escWriterGrant())
	v := e.v
	p := v.path
	long := strings.Repeat("n", 255)
	notWritable := "not writable under the grant"
	denied := func(path, op string) *escRecord { return escRec(ledger.KindDenied, path, op) }
	hardLinked := func(path string) *escRecord { return escConcealed(path, escHardLinked) }
	// withPrivate makes a private file of the view at name (a name the
	// grant cannot write), runs fn, and removes the file again through
	// the view whatever fn did, so that the staging directory ends as it
	// began.
	withPrivate := func(name string, fn func() error) func(*testing.T) error {
		return func(t *testing.T) error {
			require.NoError(t, os.WriteFile(p(name), []byte(escPrivateMarker), 0o644))
			_, err := os.Lstat(filepath.Join(c.folder, name))
			require.ErrorIs(t, err, os.ErrNotExist, "the private file is in the folder")
			ferr := fn()
			require.NoError(t, os.Remove(p(name)), "the private file stays the view's own after a refused change")
			return ferr
		}
	}
	// withRO runs fn on a read-only descriptor of proposal.md.
	withRO := func(fn func(fd int) error) func(*testing.T) error {
		return func(t *testing.T) error {
			fd, err := unix.Open(p("proposal.md"), unix.O_RDONLY, 0)
			require.NoError(t, err)
			defer unix.Close(fd)
			return fn(fd)
		}
	}

	escRun(t, e, []escAttempt{
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
		// A planted hard link: the file has two names, so it is concealed
		// under both (README.md too, though the grant may read it). Every
		// attempt on the name is a refused lookup, quietly; making a new
		// name there is EACCES.
		{name: "write through a planted hard link in a writable directory",
			do: escSh(v, "echo x > scratch/hard-readme.md"), errno: syscall.EACCES,
			record:  escRecD(ledger.KindDenied, "scratch/hard-readme.md", "create", escNameHeld),
			explain: "create scratch/hard-readme.md: " + escNameHeld},
		{name: "read through a planted hard link (its other name is readable, but acpfs cannot know)",
			do: escSh(v, "cat scratch/hard-readme.md"), errno: syscall.ENOENT,
			record: hardLinked("scratch/hard-readme.md")},
		{name: "read the hard-linked file under its readable name",
			do: func(*testing.T) error { return escReadErr(p("README.md")) }, errno: syscall.ENOENT,
			record: hardLinked("README.md")},
		{name: "O_CREAT open of the planted hard link",
			do:    func(*testing.T) error { return escOpen(p("scratch/hard-readme.md"), os.O_CREATE|os.O_WRONLY) },
			errno: syscall.EACCES, record: escRecD(ledger.KindDenied, "scratch/hard-readme.md", "create", escNameHeld),
			explain: escNameHeld},
		{name: "O_CREAT|O_EXCL of the planted hard link",
			do: func(*testing.T) error {
				return escOpen(p("scratch/hard-readme.md"), os.O_CREATE|os.O_EXCL|os.O_WRONLY)
			}, errno: syscall.EACCES,
			record: escRecD(ledger.KindDenied, "scratch/hard-readme.md", "create", escNameHeld), explain: escNameHeld},
		// README.md is not writable, but the root is writable somewhere:
		// a private file of this view shadows the concealed name here.
		{name: "O_CREAT|O_EXCL of the hard-linked name the grant cannot write",
			do:      func(*testing.T) error { return escOpen(p("README.md"), os.O_CREATE|os.O_EXCL|os.O_WRONLY) },
			private: "README.md", record: hardLinked("README.md")},
		{name: "O_WRONLY open of the planted hard link",
			do:    func(*testing.T) error { return escOpen(p("scratch/hard-readme.md"), os.O_WRONLY) },
			errno: syscall.ENOENT, record: hardLinked("scratch/hard-readme.md")},
		{name: "truncate(2) of the planted hard link",
			do: func(*testing.T) error { return os.Truncate(p("scratch/hard-readme.md"), 0) }, errno: syscall.ENOENT,
			record: hardLinked("scratch/hard-readme.md")},
		{name: "chmod of the planted hard link",
			do: func(*testing.T) error { return os.Chmod(p("scratch/hard-readme.md"), 0o600) }, errno: syscall.ENOENT,
			record: hardLinked("scratch/hard-readme.md")},
		// touch opens with O_CREAT first, and reports that refusal.
		{name: "touch of the planted hard link", do: escSh(v, "touch -d 2001-01-01 scratch/hard-readme.md"),
			errno: syscall.EACCES, record: escRecD(ledger.KindDenied, "scratch/hard-readme.md", "create", escNameHeld),
			explain: escNameHeld},
		{name: "utimes of the planted hard link", do: func(*testing.T) error {
			return os.Chtimes(p("scratch/hard-readme.md"), time.Unix(0, 0), time.Unix(0, 0))
		}, errno: syscall.ENOENT, record: hardLinked("scratch/hard-readme.md")},
		{name: "chown of the planted hard link",
			do:    func(*testing.T) error { return os.Chown(p("scratch/hard-readme.md"), 65534, 65534) },
			errno: syscall.ENOENT, record: hardLinked("scratch/hard-readme.md")},
		{name: "setxattr on the planted hard link",
			do:    func(*testing.T) error { return unix.Setxattr(p("scratch/hard-readme.md"), "user.x", []byte("1"), 0) },
			errno: syscall.ENOENT, record: hardLinked("scratch/hard-readme.md")},
		{name: "removexattr on the planted hard link",
			do:    func(*testing.T) error { return unix.Removexattr(p("scratch/hard-readme.md"), "user.x") },
			errno: syscall.ENOENT, record: hardLinked("scratch/hard-readme.md")},
		{name: "mkdir over the planted hard link",
			do: func(*testing.T) error { return os.Mkdir(p("scratch/hard-readme.md"), 0o755) }, errno: syscall.EACCES,
			record:  escRecD(ledger.KindDenied, "scratch/hard-readme.md", "mkdir", escNameHeld),
			explain: "mkdir scratch/hard-readme.md: " + escNameHeld},
		{name: "mv a writable file onto the planted hard link",
			do:    func(*testing.T) error { return os.Rename(p("scratch/mine.md"), p("scratch/hard-readme.md")) },
			errno: syscall.EACCES, record: escRecD(ledger.KindDenied, "scratch/hard-readme.md", "rename", escNameHeld),
			explain: "rename scratch/hard-readme.md: " + escNameHeld},
		{name: "ln -s onto the planted hard link", do: escSh(v, "ln -s mine.md scratch/hard-readme.md"),
			errno: syscall.EACCES, record: escRecD(ledger.KindDenied, "scratch/hard-readme.md", "symlink", escNameHeld),
			explain: "symlink scratch/hard-readme.md: " + escNameHeld},
		{name: "truncate(2)", do: func(*testing.T) error { return os.Truncate(p("proposal.md"), 0) },
			errno: syscall.EACCES, record: denied("proposal.md", "setattr"),
			explain: "setattr proposal.md: " + notWritable},
		{name: "truncate -s 0", do: escSh(v, "truncate -s 0 proposal.md"), errno: syscall.EACCES,
			record: denied("proposal.md", "open"), explain: notWritable},
		{name: "ftruncate on a read-only descriptor", do: withRO(func(fd int) error { return unix.Ftruncate(fd, 0) }),
			errno: syscall.EINVAL},
		{name: "fallocate on a read-only descriptor",
			do: withRO(func(fd int) error { return unix.Fallocate(fd, 0, 0, 1<<20) }), errno: syscall.EBADF},
		{name: "copy_file_range into a read-only descriptor", do: withRO(func(fd int) error {
			src, err := unix.Open(p("review.md"), unix.O_RDONLY, 0)
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
		{name: "rm", do: escSh(v, "rm -f proposal.md"), errno: syscall.EACCES, record: denied("proposal.md", "unlink"),
			explain: notWritable},
		{name: "rmdir of a directory the grant cannot write",
			do: func(*testing.T) error { return unix.Rmdir(p("deliverables")) }, errno: syscall.EACCES,
			record: denied("deliverables", "rmdir"), explain: notWritable},
		{name: "mv a read-only file into scratch", do: escSh(v, "mv proposal.md scratch/p.md"), errno: syscall.EACCES,
			record: denied("proposal.md", "rename"), explain: notWritable},
		{name: "mv a writable file over a read-only one",
			do:    func(*testing.T) error { return os.Rename(p("scratch/mine.md"), p("proposal.md")) },
			errno: syscall.EACCES, record: denied("proposal.md", "rename"), explain: notWritable},
		// review.md is a required document: exchanging it away is
		// refused before the read-only name is judged.
		{name: "RENAME_EXCHANGE of writable and read-only files", do: func(*testing.T) error {
			return unix.Renameat2(unix.AT_FDCWD, p("review.md"), unix.AT_FDCWD, p("proposal.md"), unix.RENAME_EXCHANGE)
		}, errno: syscall.EPERM, record: escRecD(ledger.KindDenied, "review.md", "rename", escRequiredDoc), explain: "rename review.md: " + escRequiredDoc},
		{name: "RENAME_EXCHANGE of a writable scratch file and a read-only file", do: func(*testing.T) error {
			return unix.Renameat2(unix.AT_FDCWD, p("scratch/mine.md"), unix.AT_FDCWD, p("proposal.md"), unix.RENAME_EXCHANGE)
		}, errno: syscall.EACCES, record: escRecD(ledger.KindDenied, "proposal.md", "rename", notWritable), explain: "rename proposal.md: " + notWritable},
		{name: "RENAME_WHITEOUT of a writable file", do: func(*testing.T) error {
			return unix.Renameat2(unix.AT_FDCWD, p("scratch/mine.md"), unix.AT_FDCWD, p("scratch/w.md"), unix.RENAME_WHITEOUT)
		}, errno: syscall.EINVAL},
		{name: "RENAME_NOREPLACE into a read-only directory", do: func(*testing.T) error {
			return unix.Renameat2(unix.AT_FDCWD, p("scratch/mine.md"), unix.AT_FDCWD, p("deliverables/new.md"), unix.RENAME_NOREPLACE)
		}, errno: syscall.EACCES, record: denied("deliverables/new.md", "rename"), explain: notWritable},
		{name: "ln a writable file into a read-only directory", do: escSh(v, "ln scratch/mine.md deliverables/l.md"),
			errno: syscall.EACCES, record: denied("deliverables/l.md", "link"), explain: notWritable},
		{name: "ln a read-only file into scratch (a writable second name)",
			do: escSh(v, "ln proposal.md scratch/p-link.md"), errno: syscall.EACCES,
			record: denied("scratch/p-link.md", "link"), explain: "link scratch/p-link.md: " + escNoLinks},
		{name: "ln a writable file to a writable name",
			do:    func(*testing.T) error { return os.Link(p("scratch/mine.md"), p("scratch/mine-link.md")) },
			errno: syscall.EACCES, record: denied("scratch/mine-link.md", "link"), explain: escNoLinks},
		{name: "ln of the planted hard link to a third name",
			do:    func(*testing.T) error { return os.Link(p("scratch/hard-readme.md"), p("scratch/h3.md")) },
			errno: syscall.ENOENT, record: hardLinked("scratch/hard-readme.md")},
		{name: "linkat through /proc/self/fd (AT_SYMLINK_FOLLOW)",
			do: escSh(v, "exec 3<scratch/mine.md && ln -L /proc/self/fd/3 scratch/via-proc.md"), errno: syscall.EACCES,
			record: denied("scratch/via-proc.md", "link"), explain: escNoLinks},
		{name: "ln -s in a read-only directory", do: escSh(v, "ln -s design-spec.md deliverables/s.md"),
			errno: syscall.EACCES, record: denied("deliverables/s.md", "symlink"), explain: notWritable},
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
		}), errno: syscall.EACCES, record: escRecD(ledger.KindDenied, "scratch/hard-readme.md", "rename", escNameHeld), explain: "rename scratch/hard-readme.md: " + escNameHeld},
		{name: "a private file renamed over a read-only file", do: withPrivate("draft.tmp", func() error {
			return os.Rename(p("draft.tmp"), p("proposal.md"))
		}), errno: syscall.EACCES, record: escRecD(ledger.KindDenied, "proposal.md", "rename", notWritable), explain: "rename proposal.md: " + notWritable},
		{name: "RENAME_EXCHANGE of a private file with a read-only file", do: withPrivate("draft.tmp", func() error {
			return unix.Renameat2(unix.AT_FDCWD, p("draft.tmp"), unix.AT_FDCWD, p("proposal.md"), unix.RENAME_EXCHANGE)
		}), errno: syscall.EACCES, record: escRecD(ledger.KindDenied, "draft.tmp", "rename", "a temporary file of this view cannot be exchanged with a file of the folder"),
			explain: "rename draft.tmp: a temporary file of this view cannot be exchanged"},
		{name: "ln of a private file into a writable directory", do: withPrivate("draft.tmp", func() error {
			return os.Link(p("draft.tmp"), p("scratch/draft-link.md"))
		}), errno: syscall.EACCES, record: escRecD(ledger.KindDenied, "scratch/draft-link.md", "link", escNoLinks), explain: escNoLinks},
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
	})

	t.Run("a writable name of a hard-linked file can be neither renamed nor removed", func(t *testing.T) {
		// Through the view the name does not exist: rename and unlink
		// answer ENOENT, quietly, and the backing file keeps both names.
		before := escTree(t, c.folder)
		last := escLastError(t, v)
		nrec := len(c.records())
		assert.ErrorIs(t, os.Rename(p("scratch/hard-readme.md"), p("scratch/hard-renamed.md")), syscall.ENOENT)
		assert.ErrorIs(t, os.Remove(p("scratch/hard-readme.md")), syscall.ENOENT)
		out, code := escShell(t, v.dir, "rm -f scratch/hard-readme.md; mv scratch/hard-readme.md scratch/hard-renamed.md")
		assert.NotZero(t, code, out)
		assert.Contains(t, out, "No such file or directory")
		escRequireSameTree(t, before, escTree(t, c.folder))
		recs := c.records()[nrec:]
		assert.True(t, escHasRecord(recs, *hardLinked("scratch/hard-readme.md")), escFmtRecords(recs))
		for _, r := range recs {
			assert.NotEqual(t, ledger.KindWrite, r.Kind, "a change was recorded: %+v", r)
		}
		assert.Equal(t, last, escLastError(t, v), "hidden names are refused silently")
		var st unix.Stat_t
		require.NoError(t, unix.Stat(filepath.Join(c.folder, "README.md"), &st))
		assert.EqualValues(t, 2, st.Nlink)
		_, err := os.Stat(filepath.Join(c.folder, "scratch/hard-renamed.md"))
		assert.ErrorIs(t, err, os.ErrNotExist)
		// Neither name is listed.
		assert.NotContains(t, escGetdents(t, p("scratch")), "hard-readme.md")
		assert.NotContains(t, escGetdents(t, p("")), "README.md")
	})

	t.Run("the file is shown again under its remaining name once its other name is removed on the backing folder", func(t *testing.T) {
		require.NoError(t, os.Remove(filepath.Join(c.folder, "scratch/hard-readme.md")))
		want := readFile(t, filepath.Join(c.folder, "README.md"))
		// A lookup finds it at once; the listing the kernel keeps shows
		// it once the watcher has seen the removal.
		eventually(t, func() bool {
			b, err := os.ReadFile(p("README.md"))
			return err == nil && string(b) == want && slices.Contains(escGetdents(t, p("")), "README.md")
		}, "README.md stays concealed with a single name")
		c.requireRecord(ledger.KindRead, "README.md", "open")
	})

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
