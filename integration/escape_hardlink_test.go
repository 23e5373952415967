package integration

import (
	"fmt"
	"os"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/ledger"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"path/filepath"
	"slices"
	"time"
)

// escHiddenHardLinkAttempts use hard links of the oracle planted on the backing
// folder, and try to make new ones.
func escHiddenHardLinkAttempts(h *escHidden) []escAttempt {
	v, p, deniedLookup, hiddenSymlink, hardLinked := h.v, h.v.path, escDeniedLookup, escHiddenSymlink, escHardLinkedRec
	return []escAttempt{
		// Hard links. A regular file with a second name is concealed
		// under every name: its other names may be ones the grant hides
		// (here both are names of the oracle). Only the lookup reaches
		// acpfs, which refuses it quietly.
		{name: "planted hard link of the oracle under a readable name", do: escSh(v, "cat hard.md"),
			errno: syscall.ENOENT, record: hardLinked("hard.md")},
		{name: "ln of the readable hard link into scratch", do: escSh(v, "ln hard.md scratch/h1"),
			errno: syscall.ENOENT, record: hardLinked("hard.md")},
		{name: "ln of the readable hard link once its writable alias is known",
			do: escSh(v, "stat scratch/hard-w.md >/dev/null; ln hard.md scratch/h1"), errno: syscall.ENOENT,
			record: hardLinked("hard.md")},
		{name: "planted hard link of the oracle under a writable name", do: escSh(v, "cat scratch/hard-w.md"),
			errno: syscall.ENOENT, record: hardLinked("scratch/hard-w.md")},
		{name: "planted writable hard link opened for writing",
			do: func(*testing.T) error { return escOpen(p("scratch/hard-w.md"), os.O_WRONLY) }, errno: syscall.ENOENT,
			record: hardLinked("scratch/hard-w.md")},
		// The shell opens with O_CREAT: the lookup says ENOENT, so the
		// kernel asks to create the name, which a concealed entry holds.
		{name: "planted writable hard link opened with O_APPEND from the shell",
			do: escSh(v, "echo x >> scratch/hard-w.md"), errno: syscall.EACCES,
			record:  escRecD(ledger.KindDenied, "scratch/hard-w.md", "create", escNameHeld),
			explain: "create scratch/hard-w.md: " + escNameHeld},
		{name: "getxattr through the readable hard link of the oracle", do: func(*testing.T) error {
			b := make([]byte, 256)
			n, err := unix.Getxattr(p("hard.md"), "user.secret", b)
			if err == nil {
				return fmt.Errorf("getxattr read %q", b[:n])
			}
			return err
		}, errno: syscall.ENOENT, record: hardLinked("hard.md")},
		{name: "listxattr through the writable hard link of the oracle", do: func(*testing.T) error {
			b := make([]byte, 256)
			n, err := unix.Listxattr(p("scratch/hard-w.md"), b)
			if err == nil {
				return fmt.Errorf("listxattr read %q", b[:n])
			}
			return err
		}, errno: syscall.ENOENT, record: hardLinked("scratch/hard-w.md")},
		{name: "stat of the readable hard link",
			do:    func(*testing.T) error { var st unix.Stat_t; return unix.Lstat(p("hard.md"), &st) },
			errno: syscall.ENOENT, record: hardLinked("hard.md")},
		// A new name where a concealed entry sits is never EEXIST. Where
		// the grant could write the name it is EACCES; where it cannot
		// (but may write elsewhere in the directory) the new file is
		// private to this view and shadows the concealed entry here
		// only, which stays untouched and unread.
		{name: "O_CREAT|O_EXCL over the writable hard link",
			do:    func(*testing.T) error { return escOpen(p("scratch/hard-w.md"), os.O_CREATE|os.O_EXCL|os.O_WRONLY) },
			errno: syscall.EACCES, record: escRecD(ledger.KindDenied, "scratch/hard-w.md", "create", escNameHeld),
			explain: escNameHeld},
		{name: "O_CREAT|O_EXCL over the readable hard link the grant cannot write",
			do:      func(*testing.T) error { return escOpen(p("hard.md"), os.O_CREATE|os.O_EXCL|os.O_WRONLY) },
			private: "hard.md", record: hardLinked("hard.md")},
		{name: "mkdir over the writable hard link",
			do: func(*testing.T) error { return os.Mkdir(p("scratch/hard-w.md"), 0o755) }, errno: syscall.EACCES,
			record:  escRecD(ledger.KindDenied, "scratch/hard-w.md", "mkdir", escNameHeld),
			explain: "mkdir scratch/hard-w.md: " + escNameHeld},
		{name: "mv of a visible file onto the writable hard link",
			do:    func(*testing.T) error { return os.Rename(p("scratch/mine.md"), p("scratch/hard-w.md")) },
			errno: syscall.EACCES, record: escRecD(ledger.KindDenied, "scratch/hard-w.md", "rename", escNameHeld),
			explain: "rename scratch/hard-w.md: " + escNameHeld},
		{name: "ln -s onto the writable hard link",
			do: func(*testing.T) error { return os.Symlink("mine.md", p("scratch/hard-w.md")) }, errno: syscall.EACCES,
			record:  escRecD(ledger.KindDenied, "scratch/hard-w.md", "symlink", escNameHeld),
			explain: "symlink scratch/hard-w.md: " + escNameHeld},
		{name: "rm of the writable hard link", do: func(*testing.T) error { return os.Remove(p("scratch/hard-w.md")) },
			errno: syscall.ENOENT, record: hardLinked("scratch/hard-w.md")},
		{name: "mv of the writable hard link",
			do:    func(*testing.T) error { return os.Rename(p("scratch/hard-w.md"), p("scratch/moved.md")) },
			errno: syscall.ENOENT, record: hardLinked("scratch/hard-w.md")},
		{name: "ln of a writable file onto a hidden directory name is EACCES, not EEXIST",
			do:    func(*testing.T) error { return unix.Link(p("scratch/mine.md"), p("scratch/private")) },
			errno: syscall.EACCES, record: escRec(ledger.KindDenied, "scratch/private", "link"),
			explain: "link scratch/private: not writable under the grant", echoes: "scratch/private"},
		{name: "ln onto a hidden name that does not exist answers the same",
			do:    func(*testing.T) error { return unix.Link(p("scratch/mine.md"), p("scratch/ghost")) },
			errno: syscall.EACCES, record: escRec(ledger.KindDenied, "scratch/ghost", "link"),
			explain: "link scratch/ghost: not writable under the grant"},
		{name: "ln of the hidden file into scratch", do: escSh(v, "ln oracle/answer.md scratch/h2"),
			errno: syscall.ENOENT, record: deniedLookup("oracle")},
		{name: "ln of a hidden symlink into scratch", do: escSh(v, "ln to-oracle.md scratch/h3"), errno: syscall.ENOENT,
			record: hiddenSymlink("to-oracle.md")},
	}
}

// escWriteHardLinkAttempts write, change and replace a hard link of README.md
// planted in a writable directory.
func escWriteHardLinkAttempts(w *escWrites) []escAttempt {
	v, p, hardLinked := w.v, w.v.path, escHardLinkedRec
	return []escAttempt{
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
			do: func(*testing.T) error {
				return unix.Setxattr(p("scratch/hard-readme.md"), "user.x", []byte("1"), 0)
			},
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
	}
}

// escWriteLinkAttempts make new hard links and symlinks where the grant
// refuses them.
func escWriteLinkAttempts(w *escWrites) []escAttempt {
	v, p, notWritable, denied, hardLinked := w.v, w.v.path, escNotWritable, escDeniedRec, escHardLinkedRec
	return []escAttempt{
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
	}
}

// escWriteHardLinkChecks: a hard-linked file stays concealed, unchanged, under
// both names, and is shown again once it has one.
func escWriteHardLinkChecks(t *testing.T, w *escWrites) {
	c, v, p, hardLinked := w.c, w.v, w.v.path, escHardLinkedRec
	t.Run("a writable name of a hard-linked file can be neither renamed nor removed", func(t *testing.T) {
		// Through the view the name does not exist: rename and unlink
		// answer ENOENT, quietly, and the backing file keeps both names.
		before := escTree(t, c.folder)
		last := escLastError(t, v)
		nrec := len(c.records())
		assert.ErrorIs(t, os.Rename(p("scratch/hard-readme.md"), p("scratch/hard-renamed.md")), syscall.ENOENT)
		assert.ErrorIs(t, os.Remove(p("scratch/hard-readme.md")), syscall.ENOENT)
		out, code := escShell(t, v.dir,
			"rm -f scratch/hard-readme.md; mv scratch/hard-readme.md scratch/hard-renamed.md")
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

	t.Run("the file is shown again under its remaining name once its other name is removed on the backing folder",
		func(t *testing.T) {
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
}

// escFrozenHardLinkAttempts change the frozen deliverable through a second
// name planted for it, and by its own name while it has two.
func escFrozenHardLinkAttempts(fz *escFrozen) []escAttempt {
	a, p, frozen, why, fromRW := fz.r.alice, fz.r.alice.path, escFrozenRec, escFrozenWhy, fz.fromRW
	link, hardLinked := escFrozenLink, escHardLinkedRec
	return []escAttempt{
		// O_CREAT: the lookup says ENOENT, the create is refused.
		{name: "write through the planted hard link", do: escSh(a, "echo x >> "+link), errno: syscall.EACCES,
			record:  escRecD(ledger.KindDenied, link, "create", escNameHeld),
			explain: "create " + link + ": " + escNameHeld},
		{name: "O_TRUNC open of the planted hard link",
			do: func(*testing.T) error { return escOpen(p(link), os.O_WRONLY|os.O_TRUNC) }, errno: syscall.ENOENT,
			record: hardLinked(link)},
		{name: "O_CREAT|O_EXCL of the planted hard link",
			do:    func(*testing.T) error { return escOpen(p(link), os.O_CREATE|os.O_EXCL|os.O_WRONLY) },
			errno: syscall.EACCES, record: escRecD(ledger.KindDenied, link, "create", escNameHeld),
			explain: escNameHeld},
		{name: "truncate(2) of the planted hard link", do: func(*testing.T) error { return os.Truncate(p(link), 0) },
			errno: syscall.ENOENT, record: hardLinked(link)},
		{name: "chmod of the planted hard link", do: func(*testing.T) error { return os.Chmod(p(link), 0o600) },
			errno: syscall.ENOENT, record: hardLinked(link)},
		{name: "setxattr on the planted hard link",
			do:    func(*testing.T) error { return unix.Setxattr(p(link), "user.x", []byte("1"), 0) },
			errno: syscall.ENOENT, record: hardLinked(link)},
		{name: "rm of the planted hard link", do: func(*testing.T) error { return os.Remove(p(link)) },
			errno: syscall.ENOENT, record: hardLinked(link)},
		{name: "mv of the planted hard link",
			do: func(*testing.T) error { return os.Rename(p(link), p("scratch/moved.md")) }, errno: syscall.ENOENT,
			record: hardLinked(link)},
		{name: "mv another file over the planted hard link",
			do: func(*testing.T) error { return os.Rename(p("deliverables/other.md"), p(link)) }, errno: syscall.EACCES,
			record:  escRecD(ledger.KindDenied, link, "rename", escNameHeld),
			explain: "rename " + link + ": " + escNameHeld},
		{name: "pwrite on the descriptor opened before the freeze, now hard-linked",
			do:    fromRW(func(fd int) error { _, err := unix.Pwrite(fd, []byte("X"), 0); return err }),
			errno: syscall.EROFS, record: frozen("write"), explain: why},
		// The deliverable's own name is frozen, which the agent knows
		// from events.jsonl: a new name there is refused as frozen,
		// whatever the entry holding it.
		{name: "a refusal on the deliverable once its alias is known names the deliverable",
			do: escSh(a, "echo x >> "+primary), errno: syscall.EROFS, record: frozen("create"),
			explain: "create " + primary + ": " + why},
		{name: "truncate(2) of the deliverable while it has a second name",
			do: func(*testing.T) error { return os.Truncate(p(primary), 0) }, errno: syscall.ENOENT,
			record: hardLinked(primary)},
		{name: "rm of the deliverable while it has a second name",
			do: func(*testing.T) error { return os.Remove(p(primary)) }, errno: syscall.ENOENT,
			record: hardLinked(primary)},
		{name: "reading the deliverable while it has a second name",
			do: func(*testing.T) error { return escReadErr(p(primary)) }, errno: syscall.ENOENT,
			record: hardLinked(primary)},
		{name: "reading the planted hard link", do: func(*testing.T) error { return escReadErr(p(link)) },
			errno: syscall.ENOENT, record: hardLinked(link)},
	}
}
