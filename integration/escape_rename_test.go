package integration

import (
	"os"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/ledger"
)

// escHiddenRenameAttempts move hidden entries into view, and visible ones onto
// hidden names.
func escHiddenRenameAttempts(h *escHidden) []escAttempt {
	v, p, deniedLookup := h.v, h.v.path, escDeniedLookup
	return []escAttempt{
		// Renames.
		{name: "mv of the hidden file into view", do: escSh(v, "mv oracle/answer.md scratch/a.md"),
			errno: syscall.ENOENT, record: deniedLookup("oracle")},
		{name: "mv of a hidden sibling into view", do: escSh(v, "mv scratch/private/notes.md scratch/n.md"),
			errno: syscall.ENOENT, record: deniedLookup("scratch/private")},
		{name: "mv of a visible file onto a hidden directory name",
			do: escSh(v, "mv -T scratch/mine.md scratch/private"), errno: syscall.EACCES,
			record: escRec(ledger.KindDenied, "scratch/private", "rename"), explain: "not writable under the grant",
			echoes: "scratch/private"},
		{name: "mv of a visible file onto the hidden file", do: escSh(v, "mv scratch/mine.md oracle/answer.md"),
			errno: syscall.ENOENT, record: deniedLookup("oracle")},
		{name: "RENAME_EXCHANGE with a hidden directory", do: func(*testing.T) error {
			return unix.Renameat2(unix.AT_FDCWD, p("scratch/mine.md"), unix.AT_FDCWD, p("scratch/private"),
				unix.RENAME_EXCHANGE)
		}, errno: syscall.ENOENT, record: deniedLookup("scratch/private")},
		{name: "mkdir over a hidden directory is EACCES, not EEXIST",
			do: func(*testing.T) error { return os.Mkdir(p("scratch/private"), 0o755) }, errno: syscall.EACCES,
			record:  escRec(ledger.KindDenied, "scratch/private", "mkdir"),
			explain: "mkdir scratch/private: not writable under the grant", echoes: "scratch/private"},
		{name: "mkdir over a hidden name that does not exist answers the same",
			do: func(*testing.T) error { return os.Mkdir(p("scratch/ghost"), 0o755) }, errno: syscall.EACCES,
			record:  escRec(ledger.KindDenied, "scratch/ghost", "mkdir"),
			explain: "mkdir scratch/ghost: not writable under the grant"},
		// The name is not writable, scratch is: the file is private, and
		// the hidden directory neither answers EEXIST nor changes.
		{name: "O_CREAT|O_EXCL over a hidden directory makes a private file, not EEXIST",
			do:      func(*testing.T) error { return escOpen(p("scratch/private"), os.O_CREATE|os.O_EXCL|os.O_WRONLY) },
			private: "scratch/private", record: deniedLookup("scratch/private")},
		// Moving a directory moves what it hides to paths the grant may
		// show.
		{name: "mv of a directory holding a hidden subdirectory",
			do: func(*testing.T) error { return os.Rename(p("scratch"), p("scratch-moved")) }, errno: syscall.EACCES,
			record:  escRecD(ledger.KindDenied, "scratch", "rename", escDirHoldsHidden),
			explain: "rename scratch: " + escDirHoldsHidden},
		{name: "RENAME_EXCHANGE of a directory holding a hidden subdirectory", do: func(*testing.T) error {
			return unix.Renameat2(unix.AT_FDCWD, p("scratch"), unix.AT_FDCWD, p("deliverables"), unix.RENAME_EXCHANGE)
		}, errno: syscall.EACCES, record: escRecD(ledger.KindDenied, "scratch", "rename", escDirHoldsHidden),
			explain: "rename scratch: " + escDirHoldsHidden},
	}
}

// escWriteRenameAttempts remove and rename read-only files, and rename onto
// them.
func escWriteRenameAttempts(w *escWrites) []escAttempt {
	v, p, notWritable, denied := w.v, w.v.path, escNotWritable, escDeniedRec
	return []escAttempt{
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
		}, errno: syscall.EPERM, record: escRecD(ledger.KindDenied, "review.md", "rename", escRequiredDoc),
			explain: "rename review.md: " + escRequiredDoc},
		{name: "RENAME_EXCHANGE of a writable scratch file and a read-only file", do: func(*testing.T) error {
			return unix.Renameat2(unix.AT_FDCWD, p("scratch/mine.md"), unix.AT_FDCWD, p("proposal.md"),
				unix.RENAME_EXCHANGE)
		}, errno: syscall.EACCES, record: escRecD(ledger.KindDenied, "proposal.md", "rename", notWritable),
			explain: "rename proposal.md: " + notWritable},
		{name: "RENAME_WHITEOUT of a writable file", do: func(*testing.T) error {
			return unix.Renameat2(unix.AT_FDCWD, p("scratch/mine.md"), unix.AT_FDCWD, p("scratch/w.md"),
				unix.RENAME_WHITEOUT)
		}, errno: syscall.EINVAL},
		{name: "RENAME_NOREPLACE into a read-only directory", do: func(*testing.T) error {
			return unix.Renameat2(unix.AT_FDCWD, p("scratch/mine.md"), unix.AT_FDCWD, p("deliverables/new.md"),
				unix.RENAME_NOREPLACE)
		}, errno: syscall.EACCES, record: denied("deliverables/new.md", "rename"), explain: notWritable},
	}
}
