package integration

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/acpfs/acpfs/ledger"
)

// escHiddenSymlinkAttempts follow symlinks planted on the backing folder and
// make new ones through the view.
func escHiddenSymlinkAttempts(h *escHidden) []escAttempt {
	c, v, p, hiddenSymlink, movedSymlink := h.c, h.v, h.v.path, escHiddenSymlink, h.movedSymlink
	return []escAttempt{
		// Symlinks planted on the backing folder.
		{name: "planted symlink to the hidden file", do: escSh(v, "cat to-oracle.md"), errno: syscall.ENOENT,
			record: hiddenSymlink("to-oracle.md")},
		{name: "planted symlink to the hidden directory", do: escSh(v, "cat to-oracle-dir/answer.md"),
			errno: syscall.ENOENT, record: hiddenSymlink("to-oracle-dir")},
		{name: "planted dot-dot symlink in a subdirectory", do: escSh(v, "cat deliverables/up-oracle.md"),
			errno: syscall.ENOENT, record: hiddenSymlink("deliverables/up-oracle.md")},
		{name: "planted absolute symlink into the folder", do: escSh(v, "cat to-oracle-abs"), errno: syscall.ENOENT,
			record: hiddenSymlink("to-oracle-abs")},
		{name: "planted symlink to /etc/passwd", do: escSh(v, "cat to-passwd"), errno: syscall.ENOENT,
			record: hiddenSymlink("to-passwd")},
		{name: "planted symlink climbing to the run directory", do: escSh(v, "cat to-ledger"), errno: syscall.ENOENT,
			record: hiddenSymlink("to-ledger")},
		{name: "planted symlink to a hidden sibling directory", do: escSh(v, "cat scratch/to-private-notes"),
			errno: syscall.ENOENT, record: hiddenSymlink("scratch/to-private-notes")},
		{name: "planted symlink out of the folder and back in by its real path",
			do: escSh(v, "cat scratch/via-parent-oracle"), errno: syscall.ENOENT,
			record: hiddenSymlink("scratch/via-parent-oracle")},
		{name: "readlink of a hidden symlink",
			do: func(*testing.T) error { _, err := os.Readlink(p("to-oracle.md")); return err }, errno: syscall.ENOENT,
			record: hiddenSymlink("to-oracle.md")},
		{name: "a symlink made harmless and moved to where it leads to the oracle", do: escSh(v, "cat scratch/l"),
			errno: syscall.ENOENT, record: movedSymlink},
		{name: "readlink of the moved symlink",
			do: func(*testing.T) error { _, err := os.Readlink(p("scratch/l")); return err }, errno: syscall.ENOENT,
			record: movedSymlink},

		// Symlinks created through the view.
		{name: "ln -s ../oracle/answer.md", do: escSh(v, "ln -s ../oracle/answer.md scratch/l1"), errno: syscall.EACCES,
			record:  escRec(ledger.KindDenied, "scratch/l1", "symlink"),
			explain: "symlink target is outside the visible folder"},
		{name: "ln -s /etc/passwd", do: escSh(v, "ln -s /etc/passwd scratch/l2"), errno: syscall.EACCES,
			record:  escRec(ledger.KindDenied, "scratch/l2", "symlink"),
			explain: "symlink target is outside the visible folder"},
		{name: "ln -s to the backing folder's absolute path",
			do: func(*testing.T) error {
				return os.Symlink(filepath.Join(c.folder, "proposal.md"),
					p("scratch/l3"))
			},
			errno: syscall.EACCES, record: escRec(ledger.KindDenied, "scratch/l3", "symlink"),
			explain: "symlink target is outside the visible folder"},
		{name: "ln -s climbing out and back in", do: escSh(v, "ln -s ../../folder/proposal.md scratch/l4"),
			errno: syscall.EACCES, record: escRec(ledger.KindDenied, "scratch/l4", "symlink"),
			explain: "symlink target is outside the visible folder"},
		{name: "ln -s to a hidden sibling", do: escSh(v, "ln -s private/notes.md scratch/l5"), errno: syscall.EACCES,
			record:  escRec(ledger.KindDenied, "scratch/l5", "symlink"),
			explain: "symlink target is outside the visible folder"},
	}
}
