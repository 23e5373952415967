package integration

import (
	"fmt"
	"os"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/ledger"
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
