package integration

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/ledger"
)

// The escape suite: an agent with ordinary tools and raw system calls
// tries to read what its grant hides, write outside may_write, change a
// frozen deliverable and forge protocol state. Attempts are grouped by
// family, one collaboration per family; escRun checks each one (refusal,
// ledger record, last-error, untouched backing folder).

const (
	escNFC      = "r\u00e9ponse" // a hidden directory with a non-ASCII name
	escNFD      = "re\u0301ponse"
	escCyrillic = "or\u0430cle" // "oracle" with a Cyrillic a
)

// escReaderGrant may read everything except the oracle, a private
// scratch directory and escNFC, and write in scratch/.
func escReaderGrant() *grants.Grant {
	return &grants.Grant{
		GrantID: "G-esc-read", AgentID: reviewer, Role: "reviewer", Objective: "Review the design",
		MayRead:       []string{"**"},
		ForbiddenRead: []string{"oracle/**", "scratch/private/**", "scratch/ghost/**", escNFC + "/**"},
		MayWrite:      []string{"events.jsonl", "protocol.json", "review.md", "scratch/**"},
	}
}

// escWriterGrant reads the protocol documents and writes only review.md,
// the protocol files and scratch/.
func escWriterGrant() *grants.Grant {
	return &grants.Grant{
		GrantID: "G-esc-write", AgentID: reviewer, Role: "reviewer", Objective: "Review the design",
		MayRead:       append([]string{"scratch/**"}, protocolDocs...),
		ForbiddenRead: []string{"oracle/**", "scratch/private/**", "scratch/ghost/**"},
		MayWrite:      []string{"events.jsonl", "protocol.json", "review.md", "scratch/**"},
	}
}

func TestEscapeHiddenReads(t *testing.T) {
	c := newCollab(t)
	escPlant(t, c.folder,
		map[string]string{
			"to-oracle.md":               "oracle/answer.md",
			"to-oracle-dir":              "oracle",
			"Oracle":                     "oracle", // a case variant pointing at the hidden directory
			"deliverables/up-oracle.md":  "../oracle/answer.md",
			"to-oracle-abs":              filepath.Join(c.folder, "oracle/answer.md"),
			"to-passwd":                  "/etc/passwd",
			"to-ledger":                  "../agent_runs/communication_ledger.jsonl",
			"scratch/to-private-notes":   "private/notes.md",
			"scratch/via-parent-oracle":  "../../folder/oracle/answer.md",
			"deliverables/to-deliverabl": "design-spec.md", // a harmless link stays usable
		},
		map[string]string{
			"scratch/mine.md":          "mine\n",
			"scratch/private/notes.md": escSecret + " (private notes)\n",
			escNFC + "/secret.md":      escSecret + " (accented)\n",
		},
		map[string]string{
			"hard.md":           "oracle/answer.md", // a readable name for the oracle's inode
			"scratch/hard-w.md": "oracle/answer.md", // a writable one
		})
	// The oracle carries an xattr; its hard links must not read it.
	require.NoError(t, unix.Setxattr(filepath.Join(c.folder, "oracle/answer.md"), "user.secret", []byte(escSecret), 0))
	e := escMount(c, escReaderGrant())
	v := e.v
	p := v.path
	mnt := filepath.Base(v.dir)
	long := strings.Repeat("a", 255)
	var oracleIno uint64
	{
		var st unix.Stat_t
		require.NoError(t, unix.Stat(filepath.Join(c.folder, "oracle/answer.md"), &st))
		oracleIno = st.Ino
	}
	deniedLookup := func(path string) *escRecord { return escRec(ledger.KindDenied, path, "lookup") }
	// Planted symlinks are judged at every lookup from where they are:
	// one leading to a hidden path or out of the folder is concealed.
	hiddenSymlink := func(path string) *escRecord { return escConcealed(path, escSymlinkHidden) }
	// A regular file with a second name is concealed under every name.
	hardLinked := func(path string) *escRecord { return escConcealed(path, escHardLinked) }
	runIn := func(script string) func(t *testing.T) error {
		// acpfs run binds the view over the folder's own path, so `..`
		// and absolute paths lead back into the view, never to the files.
		return func(t *testing.T) error {
			out, stderr, code := acpfs(t, "run", "--folder", c.folder, "--runs", c.runs, "--grant", "G-esc-read", "--",
				"bash", "-c", script, c.folder)
			require.NotContains(t, out+stderr, escSecret)
			if code != 0 {
				return &escShellError{script: script, out: out + stderr, code: code}
			}
			return nil
		}
	}

	// A symlink the agent makes where it is harmless (from scratch/a/b,
	// ../oracle/answer.md is scratch/a/oracle/answer.md, a visible name)
	// and then moves one level below scratch, where the same target
	// names the oracle. It is judged from where it is now.
	require.NoError(t, os.MkdirAll(p("scratch/a/b"), 0o755))
	require.NoError(t, os.Symlink("../oracle/answer.md", p("scratch/a/b/l")))
	require.NoError(t, os.Rename(p("scratch/a/b/l"), p("scratch/l")))
	movedLink, err := os.Readlink(filepath.Join(c.folder, "scratch/l"))
	require.NoError(t, err)
	require.Equal(t, "../oracle/answer.md", movedLink)
	// The kernel may still hold the entry the rename gave it: the refusal
	// comes from the lookup or from the readlink, both judged afresh.
	movedSymlink := escRecD(ledger.KindDenied, "scratch/l", "", escSymlinkHidden)

	escRun(t, e, []escAttempt{
		// Plain names, relative and absolute paths.
		{name: "cat oracle/answer.md", do: escSh(v, "cat oracle/answer.md"), errno: syscall.ENOENT, record: deniedLookup("oracle")},
		{name: "stat of the hidden directory is ENOENT, not EACCES", do: escSh(v, "stat oracle"), errno: syscall.ENOENT, record: deniedLookup("oracle")},
		{name: "ls of the hidden directory", do: escSh(v, "ls oracle"), errno: syscall.ENOENT, record: deniedLookup("oracle")},
		{name: "cd into the hidden directory", do: escSh(v, "cd oracle"), errno: syscall.ENOENT, record: deniedLookup("oracle")},
		{name: "access(F_OK) of the hidden file", do: func(*testing.T) error { return unix.Access(p("oracle/answer.md"), unix.F_OK) }, errno: syscall.ENOENT, record: deniedLookup("oracle")},
		{name: "statx of the hidden file", do: func(*testing.T) error {
			var sx unix.Statx_t
			return unix.Statx(unix.AT_FDCWD, p("oracle/answer.md"), 0, unix.STATX_ALL, &sx)
		}, errno: syscall.ENOENT, record: deniedLookup("oracle")},
		{name: "dot-dot from a subdirectory of the view", do: escSh(v, "cd deliverables && cat ../oracle/answer.md"), errno: syscall.ENOENT, record: deniedLookup("oracle")},
		{name: "dot-dot through the control directory", do: escSh(v, "cat .acpfs/../oracle/answer.md"), errno: syscall.ENOENT, record: deniedLookup("oracle")},
		{name: "the view's own absolute path", do: func(*testing.T) error { return escReadErr(filepath.Join(v.dir, "oracle/answer.md")) }, errno: syscall.ENOENT, record: deniedLookup("oracle")},
		{name: "absolute path leaving and re-entering the view", do: escSh(v, "cat ../"+mnt+"/./oracle//answer.md"), errno: syscall.ENOENT, record: deniedLookup("oracle")},
		{name: "acpfs run: cat ../folder/oracle/answer.md from inside the folder", do: runIn(`cd "$0" && cat ../folder/oracle/answer.md`), errno: syscall.ENOENT, record: deniedLookup("oracle")},
		{name: "acpfs run: ../../folder from a subdirectory", do: runIn(`cd "$0/deliverables" && cat ../../folder/oracle/answer.md`), errno: syscall.ENOENT, record: deniedLookup("oracle")},
		{name: "acpfs run: the ledger beside the folder is masked", do: runIn(`cd "$0" && cat ../agent_runs/communication_ledger.jsonl`), errno: syscall.ENOENT},

		// Symlinks planted on the backing folder.
		{name: "planted symlink to the hidden file", do: escSh(v, "cat to-oracle.md"), errno: syscall.ENOENT, record: hiddenSymlink("to-oracle.md")},
		{name: "planted symlink to the hidden directory", do: escSh(v, "cat to-oracle-dir/answer.md"), errno: syscall.ENOENT, record: hiddenSymlink("to-oracle-dir")},
		{name: "planted dot-dot symlink in a subdirectory", do: escSh(v, "cat deliverables/up-oracle.md"), errno: syscall.ENOENT, record: hiddenSymlink("deliverables/up-oracle.md")},
		{name: "planted absolute symlink into the folder", do: escSh(v, "cat to-oracle-abs"), errno: syscall.ENOENT, record: hiddenSymlink("to-oracle-abs")},
		{name: "planted symlink to /etc/passwd", do: escSh(v, "cat to-passwd"), errno: syscall.ENOENT, record: hiddenSymlink("to-passwd")},
		{name: "planted symlink climbing to the run directory", do: escSh(v, "cat to-ledger"), errno: syscall.ENOENT, record: hiddenSymlink("to-ledger")},
		{name: "planted symlink to a hidden sibling directory", do: escSh(v, "cat scratch/to-private-notes"), errno: syscall.ENOENT, record: hiddenSymlink("scratch/to-private-notes")},
		{name: "planted symlink out of the folder and back in by its real path", do: escSh(v, "cat scratch/via-parent-oracle"), errno: syscall.ENOENT, record: hiddenSymlink("scratch/via-parent-oracle")},
		{name: "readlink of a hidden symlink", do: func(*testing.T) error { _, err := os.Readlink(p("to-oracle.md")); return err }, errno: syscall.ENOENT, record: hiddenSymlink("to-oracle.md")},
		{name: "a symlink made harmless and moved to where it leads to the oracle", do: escSh(v, "cat scratch/l"), errno: syscall.ENOENT, record: movedSymlink},
		{name: "readlink of the moved symlink", do: func(*testing.T) error { _, err := os.Readlink(p("scratch/l")); return err }, errno: syscall.ENOENT, record: movedSymlink},

		// Symlinks created through the view.
		{name: "ln -s ../oracle/answer.md", do: escSh(v, "ln -s ../oracle/answer.md scratch/l1"), errno: syscall.EACCES, record: escRec(ledger.KindDenied, "scratch/l1", "symlink"), explain: "symlink target is outside the visible folder"},
		{name: "ln -s /etc/passwd", do: escSh(v, "ln -s /etc/passwd scratch/l2"), errno: syscall.EACCES, record: escRec(ledger.KindDenied, "scratch/l2", "symlink"), explain: "symlink target is outside the visible folder"},
		{name: "ln -s to the backing folder's absolute path", do: func(*testing.T) error { return os.Symlink(filepath.Join(c.folder, "proposal.md"), p("scratch/l3")) }, errno: syscall.EACCES, record: escRec(ledger.KindDenied, "scratch/l3", "symlink"), explain: "symlink target is outside the visible folder"},
		{name: "ln -s climbing out and back in", do: escSh(v, "ln -s ../../folder/proposal.md scratch/l4"), errno: syscall.EACCES, record: escRec(ledger.KindDenied, "scratch/l4", "symlink"), explain: "symlink target is outside the visible folder"},
		{name: "ln -s to a hidden sibling", do: escSh(v, "ln -s private/notes.md scratch/l5"), errno: syscall.EACCES, record: escRec(ledger.KindDenied, "scratch/l5", "symlink"), explain: "symlink target is outside the visible folder"},

		// Hard links. A regular file with a second name is concealed
		// under every name: its other names may be ones the grant hides
		// (here both are names of the oracle). Only the lookup reaches
		// acpfs, which refuses it quietly.
		{name: "planted hard link of the oracle under a readable name", do: escSh(v, "cat hard.md"), errno: syscall.ENOENT, record: hardLinked("hard.md")},
		{name: "ln of the readable hard link into scratch", do: escSh(v, "ln hard.md scratch/h1"), errno: syscall.ENOENT, record: hardLinked("hard.md")},
		{name: "ln of the readable hard link once its writable alias is known", do: escSh(v, "stat scratch/hard-w.md >/dev/null; ln hard.md scratch/h1"), errno: syscall.ENOENT, record: hardLinked("hard.md")},
		{name: "planted hard link of the oracle under a writable name", do: escSh(v, "cat scratch/hard-w.md"), errno: syscall.ENOENT, record: hardLinked("scratch/hard-w.md")},
		{name: "planted writable hard link opened for writing", do: func(*testing.T) error { return escOpen(p("scratch/hard-w.md"), os.O_WRONLY) }, errno: syscall.ENOENT, record: hardLinked("scratch/hard-w.md")},
		// The shell opens with O_CREAT: the lookup says ENOENT, so the
		// kernel asks to create the name, which a concealed entry holds.
		{name: "planted writable hard link opened with O_APPEND from the shell", do: escSh(v, "echo x >> scratch/hard-w.md"), errno: syscall.EACCES, record: escRecD(ledger.KindDenied, "scratch/hard-w.md", "create", escNameHeld), explain: "create scratch/hard-w.md: " + escNameHeld},
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
		{name: "stat of the readable hard link", do: func(*testing.T) error { var st unix.Stat_t; return unix.Lstat(p("hard.md"), &st) }, errno: syscall.ENOENT, record: hardLinked("hard.md")},
		// A new name where a concealed entry sits is never EEXIST. Where
		// the grant could write the name it is EACCES; where it cannot
		// (but may write elsewhere in the directory) the new file is
		// private to this view and shadows the concealed entry here
		// only, which stays untouched and unread.
		{name: "O_CREAT|O_EXCL over the writable hard link", do: func(*testing.T) error { return escOpen(p("scratch/hard-w.md"), os.O_CREATE|os.O_EXCL|os.O_WRONLY) }, errno: syscall.EACCES, record: escRecD(ledger.KindDenied, "scratch/hard-w.md", "create", escNameHeld), explain: escNameHeld},
		{name: "O_CREAT|O_EXCL over the readable hard link the grant cannot write", do: func(*testing.T) error { return escOpen(p("hard.md"), os.O_CREATE|os.O_EXCL|os.O_WRONLY) }, private: "hard.md", record: hardLinked("hard.md")},
		{name: "mkdir over the writable hard link", do: func(*testing.T) error { return os.Mkdir(p("scratch/hard-w.md"), 0o755) }, errno: syscall.EACCES, record: escRecD(ledger.KindDenied, "scratch/hard-w.md", "mkdir", escNameHeld), explain: "mkdir scratch/hard-w.md: " + escNameHeld},
		{name: "mv of a visible file onto the writable hard link", do: func(*testing.T) error { return os.Rename(p("scratch/mine.md"), p("scratch/hard-w.md")) }, errno: syscall.EACCES, record: escRecD(ledger.KindDenied, "scratch/hard-w.md", "rename", escNameHeld), explain: "rename scratch/hard-w.md: " + escNameHeld},
		{name: "ln -s onto the writable hard link", do: func(*testing.T) error { return os.Symlink("mine.md", p("scratch/hard-w.md")) }, errno: syscall.EACCES, record: escRecD(ledger.KindDenied, "scratch/hard-w.md", "symlink", escNameHeld), explain: "symlink scratch/hard-w.md: " + escNameHeld},
		{name: "rm of the writable hard link", do: func(*testing.T) error { return os.Remove(p("scratch/hard-w.md")) }, errno: syscall.ENOENT, record: hardLinked("scratch/hard-w.md")},
		{name: "mv of the writable hard link", do: func(*testing.T) error { return os.Rename(p("scratch/hard-w.md"), p("scratch/moved.md")) }, errno: syscall.ENOENT, record: hardLinked("scratch/hard-w.md")},
		{name: "ln of a writable file onto a hidden directory name is EACCES, not EEXIST", do: func(*testing.T) error { return unix.Link(p("scratch/mine.md"), p("scratch/private")) }, errno: syscall.EACCES, record: escRec(ledger.KindDenied, "scratch/private", "link"), explain: "link scratch/private: not writable under the grant", echoes: "scratch/private"},
		{name: "ln onto a hidden name that does not exist answers the same", do: func(*testing.T) error { return unix.Link(p("scratch/mine.md"), p("scratch/ghost")) }, errno: syscall.EACCES, record: escRec(ledger.KindDenied, "scratch/ghost", "link"), explain: "link scratch/ghost: not writable under the grant"},
		{name: "ln of the hidden file into scratch", do: escSh(v, "ln oracle/answer.md scratch/h2"), errno: syscall.ENOENT, record: deniedLookup("oracle")},
		{name: "ln of a hidden symlink into scratch", do: escSh(v, "ln to-oracle.md scratch/h3"), errno: syscall.ENOENT, record: hiddenSymlink("to-oracle.md")},

		// Renames.
		{name: "mv of the hidden file into view", do: escSh(v, "mv oracle/answer.md scratch/a.md"), errno: syscall.ENOENT, record: deniedLookup("oracle")},
		{name: "mv of a hidden sibling into view", do: escSh(v, "mv scratch/private/notes.md scratch/n.md"), errno: syscall.ENOENT, record: deniedLookup("scratch/private")},
		{name: "mv of a visible file onto a hidden directory name", do: escSh(v, "mv -T scratch/mine.md scratch/private"), errno: syscall.EACCES, record: escRec(ledger.KindDenied, "scratch/private", "rename"), explain: "not writable under the grant", echoes: "scratch/private"},
		{name: "mv of a visible file onto the hidden file", do: escSh(v, "mv scratch/mine.md oracle/answer.md"), errno: syscall.ENOENT, record: deniedLookup("oracle")},
		{name: "RENAME_EXCHANGE with a hidden directory", do: func(*testing.T) error {
			return unix.Renameat2(unix.AT_FDCWD, p("scratch/mine.md"), unix.AT_FDCWD, p("scratch/private"), unix.RENAME_EXCHANGE)
		}, errno: syscall.ENOENT, record: deniedLookup("scratch/private")},
		{name: "mkdir over a hidden directory is EACCES, not EEXIST", do: func(*testing.T) error { return os.Mkdir(p("scratch/private"), 0o755) }, errno: syscall.EACCES, record: escRec(ledger.KindDenied, "scratch/private", "mkdir"), explain: "mkdir scratch/private: not writable under the grant", echoes: "scratch/private"},
		{name: "mkdir over a hidden name that does not exist answers the same", do: func(*testing.T) error { return os.Mkdir(p("scratch/ghost"), 0o755) }, errno: syscall.EACCES, record: escRec(ledger.KindDenied, "scratch/ghost", "mkdir"), explain: "mkdir scratch/ghost: not writable under the grant"},
		// The name is not writable, scratch is: the file is private, and
		// the hidden directory neither answers EEXIST nor changes.
		{name: "O_CREAT|O_EXCL over a hidden directory makes a private file, not EEXIST", do: func(*testing.T) error { return escOpen(p("scratch/private"), os.O_CREATE|os.O_EXCL|os.O_WRONLY) }, private: "scratch/private", record: deniedLookup("scratch/private")},
		// Moving a directory moves what it hides to paths the grant may
		// show.
		{name: "mv of a directory holding a hidden subdirectory", do: func(*testing.T) error { return os.Rename(p("scratch"), p("scratch-moved")) }, errno: syscall.EACCES, record: escRecD(ledger.KindDenied, "scratch", "rename", escDirHoldsHidden), explain: "rename scratch: " + escDirHoldsHidden},
		{name: "RENAME_EXCHANGE of a directory holding a hidden subdirectory", do: func(*testing.T) error {
			return unix.Renameat2(unix.AT_FDCWD, p("scratch"), unix.AT_FDCWD, p("deliverables"), unix.RENAME_EXCHANGE)
		}, errno: syscall.EACCES, record: escRecD(ledger.KindDenied, "scratch", "rename", escDirHoldsHidden), explain: "rename scratch: " + escDirHoldsHidden},

		// File handles and xattrs.
		{name: "name_to_handle_at on the hidden file", do: func(*testing.T) error {
			_, _, err := unix.NameToHandleAt(unix.AT_FDCWD, p("oracle/answer.md"), 0)
			return err
		}, errno: syscall.ENOENT, record: deniedLookup("oracle")},
		{name: "open_by_handle_at with the backing file's own handle", do: func(*testing.T) error {
			h, _, err := unix.NameToHandleAt(unix.AT_FDCWD, filepath.Join(c.folder, "oracle/answer.md"), 0)
			if err != nil {
				return fmt.Errorf("backing handle: %v", err)
			}
			return escOpenByHandle(v.dir, h)
		}, errno: syscall.ESTALE},
		{name: "open_by_handle_at with a forged node id", do: func(t *testing.T) error {
			h, _, err := unix.NameToHandleAt(unix.AT_FDCWD, p("proposal.md"), 0)
			require.NoError(t, err)
			return escOpenByHandle(v.dir, escHandle(oracleIno, binary.LittleEndian.Uint32(h.Bytes()[8:])))
		}, errno: syscall.ESTALE},
		{name: "getxattr on the hidden file", do: func(*testing.T) error {
			_, err := unix.Getxattr(p("oracle/answer.md"), "user.x", make([]byte, 64))
			return err
		}, errno: syscall.ENOENT, record: deniedLookup("oracle")},
		{name: "listxattr on the hidden directory", do: func(*testing.T) error { _, err := unix.Listxattr(p("oracle"), make([]byte, 256)); return err }, errno: syscall.ENOENT, record: deniedLookup("oracle")},

		// Long names.
		{name: "255-byte name below the hidden directory", do: func(*testing.T) error { return escReadErr(p("oracle/" + long)) }, errno: syscall.ENOENT, record: deniedLookup("oracle")},
		{name: "256-byte name", do: func(*testing.T) error { return escReadErr(p("oracle" + long[6:] + "x")) }, errno: syscall.ENAMETOOLONG},
		{name: "path longer than PATH_MAX", do: func(*testing.T) error {
			return escReadErr(v.dir + "/" + strings.Repeat("./", 2100) + "oracle/answer.md")
		}, errno: syscall.ENAMETOOLONG},

		// Look-alike and case-variant names.
		{name: "Cyrillic look-alike of the hidden directory", do: escSh(v, "cat "+escCyrillic+"/answer.md"), errno: syscall.ENOENT},
		{name: "zero-width joiner in the hidden name", do: escSh(v, "cat or\u200dacle/answer.md"), errno: syscall.ENOENT},
		{name: "NFD spelling of an NFC hidden name", do: escSh(v, "cat "+escNFD+"/secret.md"), errno: syscall.ENOENT},
		{name: "NFC hidden name itself", do: escSh(v, "cat "+escNFC+"/secret.md"), errno: syscall.ENOENT, record: deniedLookup(escNFC)},
		{name: "case variant Oracle/answer.md (a planted alias)", do: escSh(v, "cat Oracle/answer.md"), errno: syscall.ENOENT, record: hiddenSymlink("Oracle")},
		{name: "case variant ORACLE/answer.md", do: escSh(v, "cat ORACLE/answer.md"), errno: syscall.ENOENT},
		{name: "case variant oracle/ANSWER.md", do: escSh(v, "cat oracle/ANSWER.md"), errno: syscall.ENOENT, record: deniedLookup("oracle")},
		{name: "trailing dot", do: escSh(v, "cat oracle./answer.md"), errno: syscall.ENOENT},
	})

	t.Run("listings never show hidden names", func(t *testing.T) {
		hidden := []string{"oracle", "Oracle", "to-oracle", "up-oracle", "to-passwd", "to-ledger", "private", "via-parent", "réponse", escNFC, escNFD, "secret",
			"hard.md", "hard-w.md"}
		nrec := len(c.records())
		var outs []string
		for _, script := range []string{"ls -a", "ls -aR", "ls -la scratch deliverables", "find .", "du -a ."} {
			out, code := escShell(t, v.dir, script)
			require.Equal(t, 0, code, "%s: %s", script, out)
			outs = append(outs, out)
		}
		for _, dir := range []string{"", "scratch", "deliverables"} {
			names := escGetdents(t, p(dir))
			// The moved symlink is concealed where it is now.
			assert.NotContains(t, names, "l", "listing of %q", dir)
			outs = append(outs, strings.Join(names, "\n"))
		}
		// grep reads every readable file. The hard links of the oracle are
		// not listed, so grep never tries them: no "Permission denied",
		// no name.
		out, _ := escShell(t, v.dir, "grep -rI secret . 2>&1")
		assert.NotContains(t, out, "Permission denied")
		outs = append(outs, out)
		all := strings.Join(outs, "\n")
		for _, h := range hidden {
			assert.NotContains(t, all, h)
		}
		assert.Contains(t, all, "to-deliverabl", "a harmless symlink is listed")
		assert.Contains(t, all, "mine.md")
		for _, r := range c.records()[nrec:] {
			assert.False(t, r.Kind == ledger.KindRead && (strings.Contains(r.Path, "oracle") || strings.Contains(r.Path, "hard")), "read of %s", r.Path)
		}
		c.requireRecord(ledger.KindList, "scratch", "readdir")
	})

	t.Run("directory link counts do not reveal hidden subdirectories", func(t *testing.T) {
		// The backing root has 4 subdirectories, scratch 1, both hidden
		// from this grant: every directory says 1 ("unknown").
		for _, dir := range []string{"", "scratch", "deliverables"} {
			var st unix.Stat_t
			require.NoError(t, unix.Stat(p(dir), &st))
			assert.EqualValues(t, 1, st.Nlink, "stat nlink of %q", dir)
			var sx unix.Statx_t
			require.NoError(t, unix.Statx(unix.AT_FDCWD, p(dir), 0, unix.STATX_NLINK, &sx))
			assert.EqualValues(t, 1, sx.Nlink, "statx nlink of %q", dir)
			out, code := escShell(t, v.dir, "stat -c %h ./"+dir)
			require.Zero(t, code, out)
			assert.Equal(t, "1\n", out, "stat(1) of %q", dir)
		}
		var st unix.Stat_t
		require.NoError(t, unix.Stat(filepath.Join(c.folder, "scratch"), &st))
		require.Greater(t, uint64(st.Nlink), uint64(2), "the backing scratch has a subdirectory")
	})

	// newestShown is the newest mtime or ctime among the entries the view
	// lists in dir, as stat'ed by stat (on the backing folder or through
	// the view).
	nano := func(ts unix.Timespec) int64 { return ts.Nano() }
	// Only files, symlinks and subdirectories the grant shows entirely
	// count: a subdirectory's own times move with what it hides.
	shown, err := grants.Compile(escReaderGrant(), grants.MatcherOptions{})
	require.NoError(t, err)
	newestShown := func(t *testing.T, dir string, stat func(p string, st *unix.Stat_t) error, root string) int64 {
		var newest int64
		for _, name := range escGetdents(t, p(dir)) {
			if name == "." || name == ".." {
				continue
			}
			var st unix.Stat_t
			require.NoError(t, stat(filepath.Join(root, dir, name), &st))
			rel := strings.TrimPrefix(dir+"/"+name, "/")
			if st.Mode&unix.S_IFMT == unix.S_IFDIR && !shown.ShowsAll(rel) {
				continue
			}
			newest = max(newest, nano(st.Mtim), nano(st.Ctim))
		}
		return newest
	}

	t.Run("directory size and times come from visible entries only", func(t *testing.T) {
		// The root and scratch hold names the grant hides, so their size,
		// blocks and times are the view's own: a fixed size, and as times
		// the newest change among the entries the view lists. A name the
		// view conceals (here a hard link of the oracle made at the root
		// on the backing folder) moves the backing directory, not the
		// view's.
		newest := func(dir string) int64 { return newestShown(t, dir, unix.Lstat, c.folder) }
		dirs := []string{"", "scratch"}
		seen := map[string]unix.Stat_t{}
		check := func(when string) {
			for _, dir := range dirs {
				var st unix.Stat_t
				require.NoError(t, unix.Stat(p(dir), &st))
				want := newest(dir)
				assert.Equal(t, want, nano(st.Mtim), "%s: mtime of %q", when, dir)
				assert.Equal(t, want, nano(st.Ctim), "%s: ctime of %q", when, dir)
				if before, ok := seen[dir]; ok {
					assert.Equal(t, before.Size, st.Size, "%s: size of %q", when, dir)
					assert.Equal(t, before.Blocks, st.Blocks, "%s: blocks of %q", when, dir)
					assert.Equal(t, nano(before.Mtim), nano(st.Mtim), "%s: mtime of %q", when, dir)
				}
				seen[dir] = st
			}
		}
		check("before")
		require.NoError(t, os.Link(filepath.Join(c.folder, "oracle/answer.md"), filepath.Join(c.folder, "hard2.md")))
		t.Cleanup(func() { os.Remove(filepath.Join(c.folder, "hard2.md")) })
		for _, dir := range dirs {
			// scratch moved when the agent renamed its (concealed)
			// symlink into it; the root when hard2.md was made.
			var backing unix.Stat_t
			require.NoError(t, unix.Stat(filepath.Join(c.folder, dir), &backing))
			require.Greater(t, nano(backing.Mtim), newest(dir), "the backing %q changed after its visible entries", dir)
		}
		check("after a concealed name was made at the root")
	})

	t.Run("a hidden change inside a listed directory does not move its parent's times", func(t *testing.T) {
		// Made on the backing folder: hidden by the grant, directly in
		// scratch, so scratch's backing mtime moves.
		require.NoError(t, os.Mkdir(filepath.Join(c.folder, "scratch/ghost"), 0o755))
		t.Cleanup(func() { os.Remove(filepath.Join(c.folder, "scratch/ghost")) })
		// Through the view, a listed directory shows its view times: the
		// root's must be the newest of what the view shows in it.
		eventually(t, func() bool {
			var st unix.Stat_t
			require.NoError(t, unix.Stat(p(""), &st))
			return nano(st.Mtim) == newestShown(t, "", unix.Lstat, v.dir)
		}, "the root's times in the view follow the backing times of scratch, which move with hidden names")
	})

	t.Run("control files never name hidden paths", func(t *testing.T) {
		for _, f := range []string{".acpfs/last-error", ".acpfs/grant.md", ".acpfs/status"} {
			text := readFile(t, p(f))
			for _, w := range []string{"oracle", "answer.md", escNFC} {
				assert.NotContains(t, text, w, f)
			}
		}
	})
}

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
		{name: "echo > (O_TRUNC open)", do: escSh(v, "echo x > proposal.md"), errno: syscall.EACCES, record: denied("proposal.md", "open"), explain: "open proposal.md: " + notWritable + " (EACCES)"},
		{name: "echo >> (O_APPEND open)", do: escSh(v, "echo x >> proposal.md"), errno: syscall.EACCES, record: denied("proposal.md", "open"), explain: notWritable},
		{name: "O_WRONLY|O_TRUNC", do: func(*testing.T) error { return escOpen(p("proposal.md"), os.O_WRONLY|os.O_TRUNC) }, errno: syscall.EACCES, record: denied("proposal.md", "open"), explain: notWritable},
		{name: "O_RDONLY|O_TRUNC", do: func(*testing.T) error { return escOpen(p("proposal.md"), os.O_RDONLY|os.O_TRUNC) }, errno: syscall.EACCES, record: denied("proposal.md", "open"), explain: notWritable},
		{name: "O_RDWR", do: func(*testing.T) error { return escOpen(p("proposal.md"), os.O_RDWR) }, errno: syscall.EACCES, record: denied("proposal.md", "open"), explain: notWritable},
		{name: "reopen a read-only descriptor for writing via /proc/self/fd", do: escSh(v, "exec 3<proposal.md && echo x > /proc/self/fd/3"), errno: syscall.EACCES, record: denied("proposal.md", "open"), explain: notWritable},
		{name: "write through a planted symlink in a writable directory", do: escSh(v, "echo x > scratch/to-proposal"), errno: syscall.EACCES, record: denied("proposal.md", "open"), explain: notWritable},
		// A planted hard link: the file has two names, so it is concealed
		// under both (README.md too, though the grant may read it). Every
		// attempt on the name is a refused lookup, quietly; making a new
		// name there is EACCES.
		{name: "write through a planted hard link in a writable directory", do: escSh(v, "echo x > scratch/hard-readme.md"), errno: syscall.EACCES, record: escRecD(ledger.KindDenied, "scratch/hard-readme.md", "create", escNameHeld), explain: "create scratch/hard-readme.md: " + escNameHeld},
		{name: "read through a planted hard link (its other name is readable, but acpfs cannot know)", do: escSh(v, "cat scratch/hard-readme.md"), errno: syscall.ENOENT, record: hardLinked("scratch/hard-readme.md")},
		{name: "read the hard-linked file under its readable name", do: func(*testing.T) error { return escReadErr(p("README.md")) }, errno: syscall.ENOENT, record: hardLinked("README.md")},
		{name: "O_CREAT open of the planted hard link", do: func(*testing.T) error { return escOpen(p("scratch/hard-readme.md"), os.O_CREATE|os.O_WRONLY) }, errno: syscall.EACCES, record: escRecD(ledger.KindDenied, "scratch/hard-readme.md", "create", escNameHeld), explain: escNameHeld},
		{name: "O_CREAT|O_EXCL of the planted hard link", do: func(*testing.T) error { return escOpen(p("scratch/hard-readme.md"), os.O_CREATE|os.O_EXCL|os.O_WRONLY) }, errno: syscall.EACCES, record: escRecD(ledger.KindDenied, "scratch/hard-readme.md", "create", escNameHeld), explain: escNameHeld},
		// README.md is not writable, but the root is writable somewhere:
		// a private file of this view shadows the concealed name here.
		{name: "O_CREAT|O_EXCL of the hard-linked name the grant cannot write", do: func(*testing.T) error { return escOpen(p("README.md"), os.O_CREATE|os.O_EXCL|os.O_WRONLY) }, private: "README.md", record: hardLinked("README.md")},
		{name: "O_WRONLY open of the planted hard link", do: func(*testing.T) error { return escOpen(p("scratch/hard-readme.md"), os.O_WRONLY) }, errno: syscall.ENOENT, record: hardLinked("scratch/hard-readme.md")},
		{name: "truncate(2) of the planted hard link", do: func(*testing.T) error { return os.Truncate(p("scratch/hard-readme.md"), 0) }, errno: syscall.ENOENT, record: hardLinked("scratch/hard-readme.md")},
		{name: "chmod of the planted hard link", do: func(*testing.T) error { return os.Chmod(p("scratch/hard-readme.md"), 0o600) }, errno: syscall.ENOENT, record: hardLinked("scratch/hard-readme.md")},
		// touch opens with O_CREAT first, and reports that refusal.
		{name: "touch of the planted hard link", do: escSh(v, "touch -d 2001-01-01 scratch/hard-readme.md"), errno: syscall.EACCES, record: escRecD(ledger.KindDenied, "scratch/hard-readme.md", "create", escNameHeld), explain: escNameHeld},
		{name: "utimes of the planted hard link", do: func(*testing.T) error {
			return os.Chtimes(p("scratch/hard-readme.md"), time.Unix(0, 0), time.Unix(0, 0))
		}, errno: syscall.ENOENT, record: hardLinked("scratch/hard-readme.md")},
		{name: "chown of the planted hard link", do: func(*testing.T) error { return os.Chown(p("scratch/hard-readme.md"), 65534, 65534) }, errno: syscall.ENOENT, record: hardLinked("scratch/hard-readme.md")},
		{name: "setxattr on the planted hard link", do: func(*testing.T) error { return unix.Setxattr(p("scratch/hard-readme.md"), "user.x", []byte("1"), 0) }, errno: syscall.ENOENT, record: hardLinked("scratch/hard-readme.md")},
		{name: "removexattr on the planted hard link", do: func(*testing.T) error { return unix.Removexattr(p("scratch/hard-readme.md"), "user.x") }, errno: syscall.ENOENT, record: hardLinked("scratch/hard-readme.md")},
		{name: "mkdir over the planted hard link", do: func(*testing.T) error { return os.Mkdir(p("scratch/hard-readme.md"), 0o755) }, errno: syscall.EACCES, record: escRecD(ledger.KindDenied, "scratch/hard-readme.md", "mkdir", escNameHeld), explain: "mkdir scratch/hard-readme.md: " + escNameHeld},
		{name: "mv a writable file onto the planted hard link", do: func(*testing.T) error { return os.Rename(p("scratch/mine.md"), p("scratch/hard-readme.md")) }, errno: syscall.EACCES, record: escRecD(ledger.KindDenied, "scratch/hard-readme.md", "rename", escNameHeld), explain: "rename scratch/hard-readme.md: " + escNameHeld},
		{name: "ln -s onto the planted hard link", do: escSh(v, "ln -s mine.md scratch/hard-readme.md"), errno: syscall.EACCES, record: escRecD(ledger.KindDenied, "scratch/hard-readme.md", "symlink", escNameHeld), explain: "symlink scratch/hard-readme.md: " + escNameHeld},
		{name: "truncate(2)", do: func(*testing.T) error { return os.Truncate(p("proposal.md"), 0) }, errno: syscall.EACCES, record: denied("proposal.md", "setattr"), explain: "setattr proposal.md: " + notWritable},
		{name: "truncate -s 0", do: escSh(v, "truncate -s 0 proposal.md"), errno: syscall.EACCES, record: denied("proposal.md", "open"), explain: notWritable},
		{name: "ftruncate on a read-only descriptor", do: withRO(func(fd int) error { return unix.Ftruncate(fd, 0) }), errno: syscall.EINVAL},
		{name: "fallocate on a read-only descriptor", do: withRO(func(fd int) error { return unix.Fallocate(fd, 0, 0, 1<<20) }), errno: syscall.EBADF},
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
		{name: "ioctl FS_IOC_SETFLAGS (immutable) on a read-only handle", do: withRO(func(fd int) error { return unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, 0x10) }), errno: syscall.ENOTTY},
		{name: "ioctl FS_IOC_GETFLAGS on a read-only handle", do: withRO(func(fd int) error { _, err := unix.IoctlGetInt(fd, unix.FS_IOC_GETFLAGS); return err }), errno: syscall.ENOTTY},
		{name: "chmod", do: func(*testing.T) error { return os.Chmod(p("proposal.md"), 0o600) }, errno: syscall.EACCES, record: denied("proposal.md", "setattr"), explain: notWritable},
		{name: "utimes", do: func(*testing.T) error { return os.Chtimes(p("proposal.md"), time.Unix(0, 0), time.Unix(0, 0)) }, errno: syscall.EACCES, record: denied("proposal.md", "setattr"), explain: notWritable},
		{name: "chown", do: func(*testing.T) error { return os.Chown(p("proposal.md"), 65534, 65534) }, errno: syscall.EACCES, record: denied("proposal.md", "setattr"), explain: notWritable},
		{name: "setxattr user.x", do: func(*testing.T) error { return unix.Setxattr(p("proposal.md"), "user.x", []byte("1"), 0) }, errno: syscall.EACCES, record: denied("proposal.md", "setxattr"), explain: notWritable},
		{name: "removexattr", do: func(*testing.T) error { return unix.Removexattr(p("proposal.md"), "user.x") }, errno: syscall.EACCES, record: denied("proposal.md", "removexattr"), explain: notWritable},
		{name: "rm", do: escSh(v, "rm -f proposal.md"), errno: syscall.EACCES, record: denied("proposal.md", "unlink"), explain: notWritable},
		{name: "rmdir of a directory the grant cannot write", do: func(*testing.T) error { return unix.Rmdir(p("deliverables")) }, errno: syscall.EACCES, record: denied("deliverables", "rmdir"), explain: notWritable},
		{name: "mv a read-only file into scratch", do: escSh(v, "mv proposal.md scratch/p.md"), errno: syscall.EACCES, record: denied("proposal.md", "rename"), explain: notWritable},
		{name: "mv a writable file over a read-only one", do: func(*testing.T) error { return os.Rename(p("scratch/mine.md"), p("proposal.md")) }, errno: syscall.EACCES, record: denied("proposal.md", "rename"), explain: notWritable},
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
		{name: "ln a writable file into a read-only directory", do: escSh(v, "ln scratch/mine.md deliverables/l.md"), errno: syscall.EACCES, record: denied("deliverables/l.md", "link"), explain: notWritable},
		{name: "ln a read-only file into scratch (a writable second name)", do: escSh(v, "ln proposal.md scratch/p-link.md"), errno: syscall.EACCES, record: denied("scratch/p-link.md", "link"), explain: "link scratch/p-link.md: " + escNoLinks},
		{name: "ln a writable file to a writable name", do: func(*testing.T) error { return os.Link(p("scratch/mine.md"), p("scratch/mine-link.md")) }, errno: syscall.EACCES, record: denied("scratch/mine-link.md", "link"), explain: escNoLinks},
		{name: "ln of the planted hard link to a third name", do: func(*testing.T) error { return os.Link(p("scratch/hard-readme.md"), p("scratch/h3.md")) }, errno: syscall.ENOENT, record: hardLinked("scratch/hard-readme.md")},
		{name: "linkat through /proc/self/fd (AT_SYMLINK_FOLLOW)", do: escSh(v, "exec 3<scratch/mine.md && ln -L /proc/self/fd/3 scratch/via-proc.md"), errno: syscall.EACCES, record: denied("scratch/via-proc.md", "link"), explain: escNoLinks},
		{name: "ln -s in a read-only directory", do: escSh(v, "ln -s design-spec.md deliverables/s.md"), errno: syscall.EACCES, record: denied("deliverables/s.md", "symlink"), explain: notWritable},
		// A new name the grant cannot write, where it may write others:
		// private to this view, never in the folder.
		{name: "create at the root", do: escSh(v, "touch new.md"), private: "new.md"},
		{name: "cp over a read-only file", do: escSh(v, "cp review.md proposal.md"), errno: syscall.EACCES, record: denied("proposal.md", "open"), explain: notWritable},
		// sed writes its temporary file privately; renaming it over the
		// read-only file is the refused step.
		{name: "sed -i on a read-only file", do: escSh(v, "sed -i s/Proposal/Hacked/ proposal.md"), errno: syscall.EACCES, record: escRecD(ledger.KindDenied, "proposal.md", "rename", notWritable), explain: "rename proposal.md: " + notWritable, privateTemp: "sed"},
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
		{name: "mkdir in a read-only directory", do: func(*testing.T) error { return os.Mkdir(p("deliverables/x"), 0o755) }, errno: syscall.EACCES, record: denied("deliverables/x", "mkdir"), explain: notWritable},
		{name: "mkfifo where writing is allowed", do: func(*testing.T) error { return unix.Mkfifo(p("scratch/fifo"), 0o644) }, errno: syscall.EPERM, record: denied("scratch/fifo", "mknod"), explain: "only regular files"},
		{name: "mknod at the root", do: func(*testing.T) error { return unix.Mknod(p("node"), unix.S_IFREG|0o644, 0) }, errno: syscall.EACCES, record: escRec(ledger.KindDenied, "node", ""), explain: notWritable},
		{name: "255-byte name at the root", do: func(*testing.T) error { return escOpen(p(long), os.O_CREATE|os.O_WRONLY) }, private: long},
		{name: "256-byte name in scratch", do: func(*testing.T) error { return escOpen(p("scratch/"+long+"x"), os.O_CREATE|os.O_WRONLY) }, errno: syscall.ENAMETOOLONG},
		{name: "create below a hidden directory", do: func(*testing.T) error { return escOpen(p("scratch/private/new.md"), os.O_CREATE|os.O_WRONLY) }, errno: syscall.ENOENT, record: escRec(ledger.KindDenied, "scratch/private", "lookup")},
		{name: "create below the oracle", do: escSh(v, "echo x > oracle/new.md"), errno: syscall.ENOENT, record: escRec(ledger.KindDenied, "oracle", "lookup")},
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

func TestEscapeFrozenDeliverable(t *testing.T) {
	r := newRun(t)
	a := r.alice
	r.toReadinessCheck()
	require.NoError(t, os.WriteFile(a.path(primary), []byte(designSpec("Frozen")), 0o644))
	require.NoError(t, os.WriteFile(a.path("deliverables/other.md"), []byte("other\n"), 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(r.c.folder, "scratch"), 0o755))
	// Descriptors opened for writing before the freeze, and a shared
	// writable mapping: the freeze must still stop every write.
	rw, err := unix.Open(a.path(primary), unix.O_RDWR, 0)
	require.NoError(t, err)
	t.Cleanup(func() { unix.Close(rw) })
	mapping := escMapFile(t, a.path(primary))
	r.must(a, owner, "deliverable_frozen", map[string]any{"doc": primary, "role": "primary", "sha256": fileSHA(t, a.path(primary))})

	e := escEnv{c: r.c, v: a, other: r.bob}
	p := a.path
	frozen := func(op string) *escRecord { return escRec(ledger.KindFrozenRefused, primary, op) }
	why := "frozen deliverable (EROFS)"
	fromRW := func(fn func(fd int) error) func(*testing.T) error { return func(*testing.T) error { return fn(rw) } }

	escRun(t, e, []escAttempt{
		{name: "echo > (O_TRUNC open)", do: escSh(a, "echo x > "+primary), errno: syscall.EROFS, record: frozen("open"), explain: "open " + primary + ": " + why},
		{name: "echo >>", do: escSh(a, "echo x >> "+primary), errno: syscall.EROFS, record: frozen("open"), explain: why},
		{name: "O_RDWR", do: func(*testing.T) error { return escOpen(p(primary), os.O_RDWR) }, errno: syscall.EROFS, record: frozen("open"), explain: why},
		{name: "O_RDONLY|O_TRUNC", do: func(*testing.T) error { return escOpen(p(primary), os.O_RDONLY|os.O_TRUNC) }, errno: syscall.EROFS, record: frozen("open"), explain: why},
		{name: "cp over it", do: escSh(a, "cp deliverables/other.md "+primary), errno: syscall.EROFS, record: frozen("open"), explain: why},
		{name: "truncate(2)", do: func(*testing.T) error { return os.Truncate(p(primary), 0) }, errno: syscall.EROFS, record: frozen("setattr"), explain: why},
		{name: "chmod", do: func(*testing.T) error { return os.Chmod(p(primary), 0o600) }, errno: syscall.EROFS, record: frozen("setattr"), explain: why},
		{name: "utimes", do: func(*testing.T) error { return os.Chtimes(p(primary), time.Unix(0, 0), time.Unix(0, 0)) }, errno: syscall.EROFS, record: frozen("setattr"), explain: why},
		{name: "chown", do: func(*testing.T) error { return os.Chown(p(primary), 65534, 65534) }, errno: syscall.EROFS, record: frozen("setattr"), explain: why},
		{name: "setxattr user.x", do: func(*testing.T) error { return unix.Setxattr(p(primary), "user.x", []byte("1"), 0) }, errno: syscall.EROFS, record: frozen("setxattr"), explain: why},
		{name: "removexattr", do: func(*testing.T) error { return unix.Removexattr(p(primary), "user.x") }, errno: syscall.EROFS, record: frozen("removexattr"), explain: why},
		{name: "rm", do: func(*testing.T) error { return os.Remove(p(primary)) }, errno: syscall.EROFS, record: frozen("unlink"), explain: why},
		{name: "mv it away", do: func(*testing.T) error { return os.Rename(p(primary), p("deliverables/moved.md")) }, errno: syscall.EROFS, record: frozen("rename"), explain: why},
		{name: "mv another file over it", do: func(*testing.T) error { return os.Rename(p("deliverables/other.md"), p(primary)) }, errno: syscall.EROFS, record: frozen("rename"), explain: why},
		{name: "RENAME_EXCHANGE with another file", do: func(*testing.T) error {
			return unix.Renameat2(unix.AT_FDCWD, p("deliverables/other.md"), unix.AT_FDCWD, p(primary), unix.RENAME_EXCHANGE)
		}, errno: syscall.EROFS, record: frozen("rename"), explain: why},
		{name: "mv the deliverables directory away", do: func(*testing.T) error { return os.Rename(p("deliverables"), p("scratch/moved")) }, errno: syscall.EROFS, record: escRec(ledger.KindFrozenRefused, "deliverables", "rename"), explain: why},
		{name: "rmdir the deliverables directory", do: func(*testing.T) error { return unix.Rmdir(p("deliverables")) }, errno: syscall.EROFS, record: escRec(ledger.KindFrozenRefused, "deliverables", "rmdir"), explain: why},
		{name: "ln to a second, writable name", do: func(*testing.T) error { return os.Link(p(primary), p("deliverables/copy.md")) }, errno: syscall.EACCES, record: escRec(ledger.KindDenied, "deliverables/copy.md", "link"), explain: escNoLinks},
		{name: "reopen a read-only descriptor for writing via /proc/self/fd", do: escSh(a, "exec 3<"+primary+" && echo x >> /proc/self/fd/3"), errno: syscall.EROFS, record: frozen("open"), explain: why},
		{name: "pwrite on a descriptor opened before the freeze", do: fromRW(func(fd int) error { _, err := unix.Pwrite(fd, []byte("X"), 0); return err }), errno: syscall.EROFS, record: frozen("write"), explain: "write " + primary + ": " + why},
		{name: "pwritev on a descriptor opened before the freeze", do: fromRW(func(fd int) error { _, err := unix.Pwritev(fd, [][]byte{[]byte("X"), []byte("Y")}, 0); return err }), errno: syscall.EROFS, record: frozen("write"), explain: why},
		{name: "ftruncate on a descriptor opened before the freeze", do: fromRW(func(fd int) error { return unix.Ftruncate(fd, 0) }), errno: syscall.EROFS, record: frozen("setattr"), explain: why},
		{name: "fallocate on a descriptor opened before the freeze", do: fromRW(func(fd int) error { return unix.Fallocate(fd, 0, 0, 1<<20) }), errno: syscall.EROFS, record: frozen("fallocate"), explain: why},
		{name: "fallocate PUNCH_HOLE", do: fromRW(func(fd int) error {
			return unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, 16)
		}), errno: syscall.EROFS, record: frozen("fallocate"), explain: why},
		{name: "copy_file_range into the frozen file", do: fromRW(func(fd int) error {
			src, err := unix.Open(p("deliverables/other.md"), unix.O_RDONLY, 0)
			if err != nil {
				return err
			}
			defer unix.Close(src)
			off := int64(0)
			_, err = unix.CopyFileRange(src, nil, fd, &off, 6, 0)
			return err
		}), errno: syscall.EROFS, record: frozen("write"), explain: why},
		{name: "shared mmap write made before the freeze, synced after", do: func(*testing.T) error {
			return mapping.writeAndSync("MAPPED WRITE")
		}, errno: syscall.EROFS, record: frozen("write"), explain: why},
		{name: "shared writable mmap of a fresh read-only descriptor", do: func(*testing.T) error {
			fd, err := unix.Open(p(primary), unix.O_RDONLY, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			_, err = unix.Mmap(fd, 0, 64, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
			return err
		}, errno: syscall.EACCES},
		{name: "ioctl FS_IOC_SETFLAGS on the writable descriptor", do: fromRW(func(fd int) error { return unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, 0) }), errno: syscall.ENOTTY},
		{name: "deliverable_revised after the freeze", do: func(*testing.T) error {
			return escAppend(a, r.c.event(owner, "deliverable_revised", map[string]any{"doc": primary, "role": "primary"}))
		}, errno: syscall.EPERM, record: escRec(ledger.KindAppendRejected, "events.jsonl", "append"), explain: "append events.jsonl"},
		{name: "a second deliverable_frozen with another hash", do: func(*testing.T) error {
			return escAppend(a, r.c.event(owner, "deliverable_frozen", map[string]any{"doc": primary, "role": "primary", "sha256": strings.Repeat("0", 64)}))
		}, errno: syscall.EPERM, record: escRec(ledger.KindAppendRejected, "events.jsonl", "append"), explain: "append events.jsonl"},
		{name: "the reviewer, who may not write it anyway", as: r.bob, do: escSh(r.bob, "echo x > "+primary), errno: syscall.EACCES, record: escRec(ledger.KindDenied, primary, "open"), explain: "not writable under the grant"},
	})

	// A second name for the deliverable, planted on the backing folder
	// by another process after the freeze. While the file has two names
	// it is concealed under both: every attempt through either name is a
	// lookup refused quietly (ENOENT), and making a new name there is
	// refused. The descriptor opened before the freeze still answers
	// EROFS.
	link := "scratch/design-spec-link.md"
	require.NoError(t, os.Link(filepath.Join(r.c.folder, primary), filepath.Join(r.c.folder, link)))
	hardLinked := func(path string) *escRecord { return escConcealed(path, escHardLinked) }
	{
		// The kernel may still hold the deliverable's entry from the
		// attempts above; once a lookup of it has been refused, every
		// later access looks it up again.
		nrec := len(r.c.records())
		eventually(t, func() bool {
			_, err := os.Stat(p(primary))
			return errors.Is(err, syscall.ENOENT) && escHasRecord(r.c.records()[nrec:], *hardLinked(primary))
		}, "the deliverable is still shown while it has a second name")
	}
	escRun(t, e, []escAttempt{
		// O_CREAT: the lookup says ENOENT, the create is refused.
		{name: "write through the planted hard link", do: escSh(a, "echo x >> "+link), errno: syscall.EACCES, record: escRecD(ledger.KindDenied, link, "create", escNameHeld), explain: "create " + link + ": " + escNameHeld},
		{name: "O_TRUNC open of the planted hard link", do: func(*testing.T) error { return escOpen(p(link), os.O_WRONLY|os.O_TRUNC) }, errno: syscall.ENOENT, record: hardLinked(link)},
		{name: "O_CREAT|O_EXCL of the planted hard link", do: func(*testing.T) error { return escOpen(p(link), os.O_CREATE|os.O_EXCL|os.O_WRONLY) }, errno: syscall.EACCES, record: escRecD(ledger.KindDenied, link, "create", escNameHeld), explain: escNameHeld},
		{name: "truncate(2) of the planted hard link", do: func(*testing.T) error { return os.Truncate(p(link), 0) }, errno: syscall.ENOENT, record: hardLinked(link)},
		{name: "chmod of the planted hard link", do: func(*testing.T) error { return os.Chmod(p(link), 0o600) }, errno: syscall.ENOENT, record: hardLinked(link)},
		{name: "setxattr on the planted hard link", do: func(*testing.T) error { return unix.Setxattr(p(link), "user.x", []byte("1"), 0) }, errno: syscall.ENOENT, record: hardLinked(link)},
		{name: "rm of the planted hard link", do: func(*testing.T) error { return os.Remove(p(link)) }, errno: syscall.ENOENT, record: hardLinked(link)},
		{name: "mv of the planted hard link", do: func(*testing.T) error { return os.Rename(p(link), p("scratch/moved.md")) }, errno: syscall.ENOENT, record: hardLinked(link)},
		{name: "mv another file over the planted hard link", do: func(*testing.T) error { return os.Rename(p("deliverables/other.md"), p(link)) }, errno: syscall.EACCES, record: escRecD(ledger.KindDenied, link, "rename", escNameHeld), explain: "rename " + link + ": " + escNameHeld},
		{name: "pwrite on the descriptor opened before the freeze, now hard-linked", do: fromRW(func(fd int) error { _, err := unix.Pwrite(fd, []byte("X"), 0); return err }), errno: syscall.EROFS, record: frozen("write"), explain: why},
		// The deliverable's own name is frozen, which the agent knows
		// from events.jsonl: a new name there is refused as frozen,
		// whatever the entry holding it.
		{name: "a refusal on the deliverable once its alias is known names the deliverable", do: escSh(a, "echo x >> "+primary), errno: syscall.EROFS, record: frozen("create"), explain: "create " + primary + ": " + why},
		{name: "truncate(2) of the deliverable while it has a second name", do: func(*testing.T) error { return os.Truncate(p(primary), 0) }, errno: syscall.ENOENT, record: hardLinked(primary)},
		{name: "rm of the deliverable while it has a second name", do: func(*testing.T) error { return os.Remove(p(primary)) }, errno: syscall.ENOENT, record: hardLinked(primary)},
		{name: "reading the deliverable while it has a second name", do: func(*testing.T) error { return escReadErr(p(primary)) }, errno: syscall.ENOENT, record: hardLinked(primary)},
		{name: "reading the planted hard link", do: func(*testing.T) error { return escReadErr(p(link)) }, errno: syscall.ENOENT, record: hardLinked(link)},
	})

	t.Run("the deliverable is concealed under both names while it has two", func(t *testing.T) {
		nrec := len(r.c.records())
		for _, name := range []string{primary, link} {
			_, err := os.Lstat(p(name))
			assert.ErrorIs(t, err, syscall.ENOENT, name)
		}
		assert.NotContains(t, escGetdents(t, p("deliverables")), filepath.Base(primary))
		assert.NotContains(t, escGetdents(t, p("scratch")), filepath.Base(link))
		for _, rec := range r.c.records()[nrec:] {
			assert.NotEqual(t, ledger.KindRead, rec.Kind, "read of %s", rec.Path)
		}
	})

	t.Run("the deliverable is shown and opens again once its second name is removed on the backing folder", func(t *testing.T) {
		require.NoError(t, os.Remove(filepath.Join(r.c.folder, link)))
		// A lookup finds it at once; the listing the kernel keeps shows
		// it once the watcher has seen the removal.
		eventually(t, func() bool {
			b, err := os.ReadFile(p(primary))
			return err == nil && string(b) == designSpec("Frozen") && slices.Contains(escGetdents(t, p("deliverables")), filepath.Base(primary))
		}, "the deliverable stays concealed")
		assert.Equal(t, designSpec("Frozen"), readFile(t, filepath.Join(r.c.folder, primary)))
		r.c.requireRecord(ledger.KindRead, primary, "open")
	})

	t.Run("reading the frozen deliverable works again once its second name is gone, and it is still frozen", func(t *testing.T) {
		_, err := os.Lstat(filepath.Join(r.c.folder, link))
		require.ErrorIs(t, err, os.ErrNotExist)
		eventually(t, func() bool {
			b, err := os.ReadFile(p(primary))
			return err == nil && string(b) == designSpec("Frozen")
		}, "the deliverable stays unreadable")
		nrec := len(r.c.records())
		assert.ErrorIs(t, escOpen(p(primary), os.O_WRONLY|os.O_APPEND), syscall.EROFS)
		assert.True(t, escHasRecord(r.c.records()[nrec:], *frozen("open")), escFmtRecords(r.c.records()[nrec:]))
		assert.Equal(t, designSpec("Frozen"), readFile(t, filepath.Join(r.c.folder, primary)))
	})
}

func TestEscapeProtocolForgery(t *testing.T) {
	r := newRun(t)
	c, a, b := r.c, r.alice, r.bob
	require.NoError(t, os.WriteFile(a.path(primary), []byte(designSpec("In Review")), 0o644))
	r.must(a, owner, "deliverable_drafted", map[string]any{"doc": primary, "role": "primary"})
	escPlant(t, c.folder, nil, map[string]string{
		"scratch/fake.jsonl":   c.event(reviewer, "blocked", nil) + "\n",
		"scratch/fake.json":    "{}\n",
		".acpfs/status":        "phase: completed\n", // planted look-alikes of the control files
		".acpfs/planted":       "planted\n",
		"scratch/.acpfs/wait":  "ready\n",
		"scratch/.acpfs/x.txt": "x\n",
	}, nil)
	e := escEnv{c: c, v: a, other: b}
	p := a.path
	drafted := func() string {
		return c.event(owner, "deliverable_drafted", map[string]any{"doc": primary, "role": "primary"})
	}
	// edit changes one field of the next valid event.
	edit := func(field string, value any) func() string {
		return func() string {
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(drafted()), &m))
			if value == nil {
				delete(m, field)
			} else {
				m[field] = value
			}
			out, err := json.Marshal(m)
			require.NoError(t, err)
			return string(out)
		}
	}
	appendAs := func(v *view, line func() string) func(*testing.T) error {
		return func(*testing.T) error { return escAppend(v, line()) }
	}
	rejected := escRec(ledger.KindAppendRejected, "events.jsonl", "append")
	ctlDenied := func(path, op string) *escRecord { return escRec(ledger.KindDenied, path, op) }
	ctlRO := ".acpfs is read-only"
	protoDenied := func(op string) *escRecord { return escRec(ledger.KindDenied, "protocol.json", op) }
	// The policy's refusals of changes to the protocol files other than
	// through their handles (fs/policy.go, managedChange).
	const (
		cannotRemove  = "protocol files cannot be removed"
		cannotReplace = "protocol files cannot be renamed or replaced"
		maintained    = "protocol files are maintained by acpfs"
	)
	evSetattr := escRecD(ledger.KindAppendRejected, "events.jsonl", "setattr", "events.jsonl is append-only")
	protoSetattr := escRecD(ledger.KindDenied, "protocol.json", "setattr", "protocol.json is maintained by acpfs")
	forgedProtocol := func(mutate func(m map[string]any)) []byte {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(readFile(t, filepath.Join(c.folder, "protocol.json"))), &m))
		mutate(m)
		out, err := json.MarshalIndent(m, "", "  ")
		require.NoError(t, err)
		return append(out, '\n')
	}

	escRun(t, e, []escAttempt{
		// Forged events.
		{name: "from another participant", do: appendAs(a, func() string { return c.event(reviewer, "blocked", nil) }), errno: syscall.EPERM, record: rejected, explain: `from is "bob" but this writer is "alice"`},
		{name: "the reviewer writing as the owner", as: b, do: appendAs(b, drafted), errno: syscall.EPERM, record: rejected, explain: `from is "alice" but this writer is "bob"`},
		{name: "from a participant that is not listed", do: appendAs(a, func() string { return c.event("mallory", "blocked", nil) }), errno: syscall.EPERM, record: rejected, explain: "from-mismatch"},
		{name: "seq gap", do: appendAs(a, func() string { return edit("seq", c.snapshot().LastSeq+5)() }), errno: syscall.EPERM, record: rejected, explain: "seq-continuous"},
		{name: "seq replay of initialized", do: appendAs(a, func() string { return strings.SplitN(readFile(t, filepath.Join(c.folder, "events.jsonl")), "\n", 2)[0] }), errno: syscall.EPERM, record: rejected, explain: "seq-continuous"},
		{name: "at earlier than the previous event", do: appendAs(a, edit("at", "2001-01-01T00:00:00Z")), errno: syscall.EPERM, record: rejected, explain: "at-order"},
		{name: "reply_to naming no earlier event", do: appendAs(a, edit("reply_to", 99)), errno: syscall.EPERM, record: rejected, explain: "reply-to-range"},
		{name: "reply_to missing", do: appendAs(a, edit("reply_to", nil)), errno: syscall.EPERM, record: rejected, explain: "reply-to-required"},
		// Unknown fields are kept (other ACP tools write them; see "an
		// extra phase field" below); a field given twice is refused: two
		// readers could take different values.
		{name: "a duplicated seq field", do: appendAs(a, func() string {
			return `{"seq":1,` + strings.TrimPrefix(drafted(), "{")
		}), errno: syscall.EINVAL, record: rejected, explain: `field "seq" appears twice`},
		{name: "invalid UTF-8", do: appendAs(a, func() string { return strings.Replace(drafted(), "by alice", "by \xff\xfe", 1) }), errno: syscall.EINVAL, record: rejected, explain: "UTF-8"},
		{name: "a raw U+2028 inside the line", do: appendAs(a, func() string { return strings.Replace(drafted(), "by alice", "by\u2028alice", 1) }), errno: syscall.EINVAL, record: rejected, explain: "U+2028"},
		{name: "not JSON", do: appendAs(a, func() string { return "phase=completed" }), errno: syscall.EINVAL, record: rejected, explain: "not one JSON value"},
		{name: "completed straight from drafting", do: appendAs(a, func() string { return c.event(owner, "completed", map[string]any{"doc": "conclusion.md"}) }), errno: syscall.EPERM, record: rejected, explain: "readiness-passed-required"},
		{name: "deliverable_frozen in drafting", do: appendAs(a, func() string {
			return c.event(owner, "deliverable_frozen", map[string]any{"doc": primary, "role": "primary", "sha256": fileSHA(t, filepath.Join(c.folder, primary))})
		}), errno: syscall.EPERM, record: rejected, explain: "not allowed in phase drafting"},
		{name: "review_submitted out of turn", as: b, do: appendAs(b, func() string { return c.event(reviewer, "review_submitted", nil) }), errno: syscall.EPERM, record: rejected, explain: "append events.jsonl"},
		{name: "two events, the refused one first", do: func(*testing.T) error {
			return escWriteClose(p("events.jsonl"), os.O_WRONLY|os.O_APPEND, []byte(c.event(reviewer, "blocked", nil)+"\n"+drafted()+"\n"))
		}, errno: syscall.EPERM, record: rejected, explain: "from-mismatch"},
		// A complete event left without its newline is judged at close
		// like any other line (see "an event without its final newline"
		// below); a cut-off one is refused.
		{name: "an unterminated line at close", do: func(*testing.T) error {
			line := drafted()
			return escWriteClose(p("events.jsonl"), os.O_WRONLY|os.O_APPEND, []byte(line[:len(line)-10]))
		}, errno: syscall.EINVAL, record: rejected, explain: "the event was cut off"},
		{name: "an unterminated forged event at close", do: func(*testing.T) error {
			return escWriteClose(p("events.jsonl"), os.O_WRONLY|os.O_APPEND, []byte(c.event(reviewer, "blocked", nil)))
		}, errno: syscall.EPERM, record: rejected, explain: "from-mismatch"},
		{name: "10 MiB line (the writer must see EINVAL)", do: func(*testing.T) error {
			return escWriteClose(p("events.jsonl"), os.O_WRONLY|os.O_APPEND, []byte(`{"summary":"`+strings.Repeat("x", 10<<20)+"\"}\n"))
		}, errno: syscall.EINVAL, record: rejected, explain: "line longer than"},
		{name: "10 MiB line from the shell", do: escSh(a, `head -c 10485760 /dev/zero | tr '\0' x | sed 's/^/{"summary":"/; s/$/"}/' >> events.jsonl`), errno: syscall.EINVAL, record: rejected, explain: "line longer than"},

		// Overwriting, truncating, replacing events.jsonl.
		{name: "pwrite of the first line at offset 0", do: func(*testing.T) error {
			first := strings.SplitN(readFile(t, filepath.Join(c.folder, "events.jsonl")), "\n", 2)[0]
			f, err := os.OpenFile(p("events.jsonl"), os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.WriteAt([]byte(first+"\n"), 0)
			return err
		}, errno: syscall.EPERM, record: rejected, explain: "seq-continuous"},
		{name: "> events.jsonl", do: escSh(a, ": > events.jsonl"), errno: syscall.EPERM, record: escRec(ledger.KindAppendRejected, "events.jsonl", "open"), explain: "O_TRUNC refused"},
		{name: "O_TRUNC open of events.jsonl", do: func(*testing.T) error { return escOpen(p("events.jsonl"), os.O_WRONLY|os.O_TRUNC) }, errno: syscall.EPERM, record: escRec(ledger.KindAppendRejected, "events.jsonl", "open"), explain: "O_TRUNC refused"},
		{name: "truncate events.jsonl", do: func(*testing.T) error { return os.Truncate(p("events.jsonl"), 10) }, errno: syscall.EPERM, record: evSetattr, explain: "append-only"},
		{name: "chmod events.jsonl", do: func(*testing.T) error { return os.Chmod(p("events.jsonl"), 0o600) }, errno: syscall.EPERM, record: evSetattr, explain: "append-only"},
		{name: "utimes events.jsonl", do: func(*testing.T) error { return os.Chtimes(p("events.jsonl"), time.Unix(0, 0), time.Unix(0, 0)) }, errno: syscall.EPERM, record: evSetattr, explain: "append-only"},
		{name: "touch events.jsonl (utimes now)", do: escSh(a, "touch events.jsonl"), errno: syscall.EPERM, record: evSetattr, explain: "append-only"},
		{name: "chown events.jsonl", do: func(*testing.T) error { return os.Chown(p("events.jsonl"), 65534, 65534) }, errno: syscall.EPERM, record: evSetattr, explain: "append-only"},
		{name: "chown events.jsonl to its own owner", do: func(*testing.T) error { return os.Chown(p("events.jsonl"), os.Getuid(), os.Getgid()) }, errno: syscall.EPERM, record: evSetattr, explain: "append-only"},
		{name: "ftruncate on an events.jsonl write handle", do: func(*testing.T) error {
			fd, err := unix.Open(p("events.jsonl"), unix.O_WRONLY|unix.O_APPEND, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			return unix.Ftruncate(fd, 10)
		}, errno: syscall.EPERM, record: evSetattr, explain: "append-only"},
		{name: "ftruncate to its own size on an events.jsonl write handle", do: func(*testing.T) error {
			fd, err := unix.Open(p("events.jsonl"), unix.O_WRONLY|unix.O_APPEND, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			var st unix.Stat_t
			if err := unix.Fstat(fd, &st); err != nil {
				return err
			}
			return unix.Ftruncate(fd, st.Size)
		}, errno: syscall.EPERM, record: evSetattr, explain: "append-only"},
		{name: "setxattr on events.jsonl", do: func(*testing.T) error { return unix.Setxattr(p("events.jsonl"), "user.x", []byte("1"), 0) }, errno: syscall.EPERM, record: escRecD(ledger.KindDenied, "events.jsonl", "setxattr", maintained), explain: "setxattr events.jsonl: protocol files are maintained by acpfs"},
		{name: "removexattr on events.jsonl", do: func(*testing.T) error { return unix.Removexattr(p("events.jsonl"), "user.x") }, errno: syscall.EPERM, record: escRecD(ledger.KindDenied, "events.jsonl", "removexattr", maintained), explain: "maintained by acpfs"},
		{name: "rm events.jsonl", do: escSh(a, "rm -f events.jsonl"), errno: syscall.EPERM, record: escRecD(ledger.KindDenied, "events.jsonl", "unlink", cannotRemove), explain: "cannot be removed"},
		{name: "mv events.jsonl away", do: escSh(a, "mv events.jsonl scratch/e.jsonl"), errno: syscall.EPERM, record: escRecD(ledger.KindDenied, "events.jsonl", "rename", cannotReplace), explain: "cannot be renamed"},
		// The refusal names the protocol file, the name being replaced.
		{name: "mv a forged log over events.jsonl", do: func(*testing.T) error { return os.Rename(p("scratch/fake.jsonl"), p("events.jsonl")) }, errno: syscall.EPERM, record: escRecD(ledger.KindDenied, "events.jsonl", "rename", cannotReplace), explain: "rename events.jsonl: " + cannotReplace},
		{name: "RENAME_NOREPLACE of a forged log onto events.jsonl", do: func(*testing.T) error {
			return unix.Renameat2(unix.AT_FDCWD, p("scratch/fake.jsonl"), unix.AT_FDCWD, p("events.jsonl"), unix.RENAME_NOREPLACE)
		}, errno: syscall.EEXIST},
		{name: "RENAME_EXCHANGE of a forged log with events.jsonl", do: func(*testing.T) error {
			return unix.Renameat2(unix.AT_FDCWD, p("scratch/fake.jsonl"), unix.AT_FDCWD, p("events.jsonl"), unix.RENAME_EXCHANGE)
		}, errno: syscall.EPERM, record: escRecD(ledger.KindDenied, "events.jsonl", "rename", cannotReplace), explain: cannotReplace},
		{name: "ln events.jsonl to a second name", do: func(*testing.T) error { return os.Link(p("events.jsonl"), p("scratch/ev.jsonl")) }, errno: syscall.EACCES, record: escRec(ledger.KindDenied, "scratch/ev.jsonl", "link"), explain: escNoLinks},
		{name: "ln protocol.json to a second name", do: func(*testing.T) error { return os.Link(p("protocol.json"), p("scratch/p.json")) }, errno: syscall.EACCES, record: escRec(ledger.KindDenied, "scratch/p.json", "link"), explain: escNoLinks},
		{name: "fallocate on an events.jsonl handle", do: func(*testing.T) error {
			fd, err := unix.Open(p("events.jsonl"), unix.O_WRONLY|unix.O_APPEND, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			return unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, 64)
		}, errno: syscall.EPERM, record: escRec(ledger.KindAppendRejected, "events.jsonl", "fallocate"), explain: "append-only"},
		{name: "copy_file_range of a forged log into events.jsonl", do: func(*testing.T) error {
			src, err := unix.Open(p("scratch/fake.jsonl"), unix.O_RDONLY, 0)
			if err != nil {
				return err
			}
			defer unix.Close(src)
			dst, err := unix.Open(p("events.jsonl"), unix.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer unix.Close(dst)
			_, err = unix.CopyFileRange(src, nil, dst, nil, 4096, 0)
			return err
		}, errno: syscall.EPERM, record: rejected, explain: "from-mismatch"},
		{name: "shared writable mmap of events.jsonl", do: escMapShared(p("events.jsonl")), errno: syscall.ENODEV},

		// protocol.json.
		{name: "protocol.json with a changed phase", do: func(*testing.T) error {
			return escWriteClose(p("protocol.json"), os.O_WRONLY|os.O_TRUNC, forgedProtocol(func(m map[string]any) { m["currentPhase"] = "completed" }))
		}, errno: syscall.EPERM, record: protoDenied("write"), explain: "write protocol.json"},
		{name: "protocol.json with a changed waitingFor", do: func(*testing.T) error {
			return escWriteClose(p("protocol.json"), os.O_WRONLY|os.O_TRUNC, forgedProtocol(func(m map[string]any) { m["waitingFor"] = []string{reviewer} }))
		}, errno: syscall.EPERM, record: protoDenied("write"), explain: "write protocol.json"},
		{name: "protocol.json patched in place at the phase's offset", do: func(t *testing.T) error {
			cur := readFile(t, filepath.Join(c.folder, "protocol.json"))
			i := strings.Index(cur, `"drafting"`)
			require.Positive(t, i)
			f, err := os.OpenFile(p("protocol.json"), os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			_, werr := f.WriteAt([]byte(`"blocked" `), int64(i))
			if err := f.Close(); werr == nil {
				werr = err
			}
			return werr
		}, errno: syscall.EPERM, record: protoDenied("write"), explain: "write protocol.json"},
		{name: "protocol.json emptied by O_TRUNC", do: func(*testing.T) error { return escWriteClose(p("protocol.json"), os.O_WRONLY|os.O_TRUNC, nil) }, errno: syscall.EPERM, record: protoDenied("write"), explain: "write protocol.json"},
		{name: "truncate protocol.json", do: func(*testing.T) error { return os.Truncate(p("protocol.json"), 0) }, errno: syscall.EPERM, record: protoSetattr, explain: "maintained by acpfs"},
		{name: "chmod protocol.json", do: func(*testing.T) error { return os.Chmod(p("protocol.json"), 0o600) }, errno: syscall.EPERM, record: protoSetattr, explain: "maintained by acpfs"},
		{name: "utimes protocol.json", do: func(*testing.T) error { return os.Chtimes(p("protocol.json"), time.Unix(0, 0), time.Unix(0, 0)) }, errno: syscall.EPERM, record: protoSetattr, explain: "setattr protocol.json: protocol.json is maintained by acpfs"},
		{name: "touch protocol.json", do: escSh(a, "touch protocol.json"), errno: syscall.EPERM, record: protoSetattr, explain: "maintained by acpfs"},
		{name: "chown protocol.json", do: func(*testing.T) error { return os.Chown(p("protocol.json"), 65534, 65534) }, errno: syscall.EPERM, record: protoSetattr, explain: "maintained by acpfs"},
		{name: "fchmod on a protocol.json write handle", do: func(*testing.T) error {
			fd, err := unix.Open(p("protocol.json"), unix.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			return unix.Fchmod(fd, 0o600)
		}, errno: syscall.EPERM, record: protoSetattr, explain: "maintained by acpfs"},
		{name: "futimens on a protocol.json write handle", do: func(*testing.T) error {
			fd, err := unix.Open(p("protocol.json"), unix.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			return unix.UtimesNanoAt(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", fd), []unix.Timespec{{Sec: 0}, {Sec: 0}}, 0)
		}, errno: syscall.EPERM, record: protoSetattr, explain: "maintained by acpfs"},
		{name: "ftruncate on a read-only protocol.json descriptor", do: func(*testing.T) error {
			fd, err := unix.Open(p("protocol.json"), unix.O_RDONLY, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			return unix.Ftruncate(fd, 0)
		}, errno: syscall.EINVAL},
		{name: "ftruncate to 0 on a protocol.json write handle is judged at close", do: func(*testing.T) error {
			f, err := os.OpenFile(p("protocol.json"), os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			terr := f.Truncate(0)
			if cerr := f.Close(); terr == nil {
				terr = cerr
			}
			return terr
		}, errno: syscall.EPERM, record: protoDenied("write"), explain: "write protocol.json"},
		{name: "setxattr on protocol.json", do: func(*testing.T) error { return unix.Setxattr(p("protocol.json"), "user.x", []byte("1"), 0) }, errno: syscall.EPERM, record: escRecD(ledger.KindDenied, "protocol.json", "setxattr", maintained), explain: "setxattr protocol.json: protocol files are maintained by acpfs"},
		{name: "removexattr on protocol.json", do: func(*testing.T) error { return unix.Removexattr(p("protocol.json"), "user.x") }, errno: syscall.EPERM, record: escRecD(ledger.KindDenied, "protocol.json", "removexattr", maintained), explain: "maintained by acpfs"},
		{name: "rm protocol.json", do: func(*testing.T) error { return os.Remove(p("protocol.json")) }, errno: syscall.EPERM, record: escRecD(ledger.KindDenied, "protocol.json", "unlink", cannotRemove), explain: "cannot be removed"},
		{name: "mv a forged protocol.json over it", do: func(*testing.T) error { return os.Rename(p("scratch/fake.json"), p("protocol.json")) }, errno: syscall.EPERM, record: escRecD(ledger.KindDenied, "protocol.json", "rename", cannotReplace), explain: "rename protocol.json: " + cannotReplace},
		{name: "mv protocol.json away", do: func(*testing.T) error { return os.Rename(p("protocol.json"), p("scratch/p.json")) }, errno: syscall.EPERM, record: escRecD(ledger.KindDenied, "protocol.json", "rename", cannotReplace), explain: cannotReplace},
		{name: "shared writable mmap of protocol.json", do: escMapShared(p("protocol.json")), errno: syscall.ENODEV},
		// Look-alike names are ordinary names the grant cannot write: a
		// file made under one is private to this view, where it is an
		// ordinary file, and no other view or reader of the folder sees
		// it.
		{name: "create a look-alike events.jsonl (Cyrillic e)", do: func(*testing.T) error { return escOpen(p("ev\u0435nts.jsonl"), os.O_CREATE|os.O_WRONLY) }, private: "ev\u0435nts.jsonl"},
		{name: "create a case variant Events.jsonl", do: func(*testing.T) error { return escOpen(p("Events.jsonl"), os.O_CREATE|os.O_WRONLY) }, private: "Events.jsonl"},
		{name: "create a case variant PROTOCOL.json", do: func(*testing.T) error { return escOpen(p("PROTOCOL.json"), os.O_CREATE|os.O_WRONLY) }, private: "PROTOCOL.json"},

		// The control directory.
		{name: "write .acpfs/status", do: func(*testing.T) error {
			return escWriteClose(p(".acpfs/status"), os.O_WRONLY, []byte("phase: completed\n"))
		}, errno: syscall.EACCES, record: ctlDenied(".acpfs/status", "open"), explain: "open .acpfs/status: " + ctlRO},
		{name: "forge .acpfs/last-error from the shell", do: escSh(a, "echo all good > .acpfs/last-error"), errno: syscall.EACCES, record: ctlDenied(".acpfs/last-error", "open"), explain: ctlRO},
		{name: "O_RDWR open of .acpfs/grant.md", do: func(*testing.T) error { return escOpen(p(".acpfs/grant.md"), os.O_RDWR) }, errno: syscall.EACCES, record: ctlDenied(".acpfs/grant.md", "open"), explain: ctlRO},
		{name: "O_RDONLY|O_TRUNC open of .acpfs/status", do: func(*testing.T) error { return escOpen(p(".acpfs/status"), os.O_RDONLY|os.O_TRUNC) }, errno: syscall.EACCES, record: ctlDenied(".acpfs/status", "open"), explain: ctlRO},
		{name: "O_CREAT open of the existing .acpfs/status", do: func(*testing.T) error { return escOpen(p(".acpfs/status"), os.O_CREATE|os.O_WRONLY) }, errno: syscall.EACCES, record: ctlDenied(".acpfs/status", "open"), explain: ctlRO},
		{name: "O_CREAT|O_EXCL of the existing .acpfs/status", do: func(*testing.T) error { return escOpen(p(".acpfs/status"), os.O_CREATE|os.O_EXCL|os.O_WRONLY) }, errno: syscall.EEXIST},
		{name: "truncate .acpfs/last-error", do: func(*testing.T) error { return os.Truncate(p(".acpfs/last-error"), 0) }, errno: syscall.EACCES, record: ctlDenied(".acpfs/last-error", "setattr"), explain: "setattr .acpfs/last-error: " + ctlRO},
		{name: "chmod .acpfs/wait", do: func(*testing.T) error { return os.Chmod(p(".acpfs/wait"), 0o666) }, errno: syscall.EACCES, record: ctlDenied(".acpfs/wait", "setattr"), explain: ctlRO},
		{name: "touch .acpfs/status", do: escSh(a, "touch .acpfs/status"), errno: syscall.EACCES, record: ctlDenied(".acpfs/status", "setattr"), explain: ctlRO},
		{name: "chown .acpfs/status", do: func(*testing.T) error { return os.Chown(p(".acpfs/status"), 65534, 65534) }, errno: syscall.EACCES, record: ctlDenied(".acpfs/status", "setattr"), explain: ctlRO},
		{name: "create a file in .acpfs", do: func(*testing.T) error { return escOpen(p(".acpfs/forged"), os.O_CREATE|os.O_WRONLY) }, errno: syscall.EACCES, record: ctlDenied(".acpfs/forged", "create"), explain: "create .acpfs/forged: " + ctlRO},
		{name: "mkdir in .acpfs", do: func(*testing.T) error { return os.Mkdir(p(".acpfs/d"), 0o755) }, errno: syscall.EACCES, record: ctlDenied(".acpfs/d", "mkdir"), explain: ctlRO},
		{name: "mkfifo in .acpfs", do: func(*testing.T) error { return unix.Mkfifo(p(".acpfs/fifo"), 0o644) }, errno: syscall.EACCES, record: ctlDenied(".acpfs/fifo", "mknod"), explain: ctlRO},
		{name: "mknod of a regular file in .acpfs", do: func(*testing.T) error { return unix.Mknod(p(".acpfs/node"), unix.S_IFREG|0o644, 0) }, errno: syscall.EACCES, record: ctlDenied(".acpfs/node", ""), explain: ctlRO},
		{name: "ln -s in .acpfs", do: escSh(a, "ln -s status .acpfs/s"), errno: syscall.EACCES, record: ctlDenied(".acpfs/s", "symlink"), explain: ctlRO},
		{name: "ln of a file into .acpfs", do: func(*testing.T) error { return os.Link(p("scratch/fake.json"), p(".acpfs/fake.json")) }, errno: syscall.EACCES, record: ctlDenied(".acpfs/fake.json", "link"), explain: "link .acpfs/fake.json: " + ctlRO},
		{name: "ln of a control file out of .acpfs", do: func(*testing.T) error { return os.Link(p(".acpfs/status"), p("scratch/status")) }, errno: syscall.EACCES, record: ctlDenied("scratch/status", "link"), explain: escNoLinks},
		{name: "mv a file over .acpfs/status", do: func(*testing.T) error { return os.Rename(p("scratch/fake.json"), p(".acpfs/status")) }, errno: syscall.EACCES, record: ctlDenied(".acpfs/status", "rename"), explain: "not writable under the grant"},
		{name: "mv .acpfs/wait out", do: func(*testing.T) error { return os.Rename(p(".acpfs/wait"), p("scratch/wait")) }, errno: syscall.EACCES, record: ctlDenied(".acpfs/wait", "rename"), explain: "rename .acpfs/wait: " + ctlRO},
		{name: "mv within .acpfs", do: func(*testing.T) error { return os.Rename(p(".acpfs/status"), p(".acpfs/status2")) }, errno: syscall.EACCES, record: ctlDenied(".acpfs/status", "rename"), explain: ctlRO},
		{name: "RENAME_EXCHANGE of two control files", do: func(*testing.T) error {
			return unix.Renameat2(unix.AT_FDCWD, p(".acpfs/status"), unix.AT_FDCWD, p(".acpfs/last-error"), unix.RENAME_EXCHANGE)
		}, errno: syscall.EACCES, record: ctlDenied(".acpfs/status", "rename"), explain: ctlRO},
		{name: "mv .acpfs away", do: func(*testing.T) error { return os.Rename(p(".acpfs"), p("scratch/ctl")) }, errno: syscall.EACCES, record: ctlDenied(".acpfs", "rename"), explain: ".acpfs is reserved"},
		{name: "rmdir .acpfs", do: func(*testing.T) error { return unix.Rmdir(p(".acpfs")) }, errno: syscall.EACCES, record: ctlDenied(".acpfs", "rmdir"), explain: ".acpfs is reserved"},
		{name: "rmdir of a control file is ENOTDIR from the kernel", do: func(*testing.T) error { return unix.Rmdir(p(".acpfs/status")) }, errno: syscall.ENOTDIR},
		{name: "mkdir .acpfs", do: func(*testing.T) error { return os.Mkdir(p(".acpfs"), 0o755) }, errno: syscall.EEXIST},
		{name: "the planted .acpfs/planted stays shadowed", do: func(*testing.T) error { return escReadErr(p(".acpfs/planted")) }, errno: syscall.ENOENT},
		{name: "create .ACPFS", do: func(*testing.T) error { return escOpen(p(".ACPFS"), os.O_CREATE|os.O_WRONLY) }, private: ".ACPFS"},
		{name: "create '.acpfs ' with a trailing space", do: func(*testing.T) error { return escOpen(p(".acpfs "), os.O_CREATE|os.O_WRONLY) }, private: ".acpfs "},
		{name: "mkdir a fullwidth-dot look-alike of .acpfs", do: func(*testing.T) error { return os.Mkdir(p("\uff0eacpfs"), 0o755) }, errno: syscall.EACCES, record: escRec(ledger.KindDenied, "\uff0eacpfs", "mkdir"), explain: "not writable under the grant"},
		{name: "rm .acpfs/grant.md", do: func(*testing.T) error { return os.Remove(p(".acpfs/grant.md")) }, errno: syscall.EACCES, record: ctlDenied(".acpfs/grant.md", "unlink"), explain: "unlink .acpfs/grant.md: " + ctlRO},
		{name: "rm -rf .acpfs", do: escSh(a, "rm -rf .acpfs"), errno: syscall.EACCES, record: ctlDenied("", "unlink"), explain: ctlRO},
		{name: "setxattr on .acpfs/status", do: func(*testing.T) error { return unix.Setxattr(p(".acpfs/status"), "user.x", []byte("1"), 0) }, errno: syscall.EACCES, record: ctlDenied(".acpfs/status", "setxattr"), explain: ctlRO},
		{name: "removexattr on .acpfs/status", do: func(*testing.T) error { return unix.Removexattr(p(".acpfs/status"), "user.x") }, errno: syscall.EACCES, record: ctlDenied(".acpfs/status", "removexattr"), explain: ctlRO},
	})

	t.Run("control files survive every attempt", func(t *testing.T) {
		names, err := os.ReadDir(p(".acpfs"))
		require.NoError(t, err)
		var got []string
		for _, n := range names {
			got = append(got, n.Name())
		}
		assert.Subset(t, got, []string{"grant.md", "last-error", "status"})
		// wait is not listed (its reads block, and globs must not open
		// it), but it is there.
		assert.NotContains(t, got, "wait")
		var st unix.Stat_t
		require.NoError(t, unix.Lstat(p(".acpfs/wait"), &st))
		assert.EqualValues(t, unix.S_IFREG, st.Mode&unix.S_IFMT)
		assert.Contains(t, readFile(t, p(".acpfs/grant.md")), "G-")
		assert.Contains(t, readFile(t, p(".acpfs/last-error")), ctlRO)
	})

	t.Run("the control files are acpfs's own, not the planted ones", func(t *testing.T) {
		st := readFile(t, p(".acpfs/status"))
		assert.Contains(t, st, "phase: drafting")
		assert.Contains(t, st, "agent: alice")
		names, err := os.ReadDir(p(".acpfs"))
		require.NoError(t, err)
		var got []string
		for _, n := range names {
			got = append(got, n.Name())
		}
		assert.NotContains(t, got, "planted")
		// A .acpfs below the root is an ordinary directory.
		assert.Equal(t, "ready\n", readFile(t, p("scratch/.acpfs/wait")))
	})

	t.Run("a shell's echo > protocol.json exits 0 but changes nothing", func(t *testing.T) {
		// bash ignores close(2) errors of redirections, where the
		// protocol.json refusal is reported: the ledger and last-error
		// are the agent's only evidence.
		before := escTree(t, c.folder)
		nrec := len(c.records())
		out, code := escShell(t, a.dir, `echo '{"currentPhase":"completed"}' > protocol.json`)
		assert.Equal(t, 0, code, out)
		escRequireSameTree(t, before, escTree(t, c.folder))
		assert.True(t, escHasRecord(c.records()[nrec:], escRecord{kind: ledger.KindDenied, path: "protocol.json", op: "write"}))
		assert.Contains(t, escLastError(t, a), "write protocol.json")
	})

	// Appends that are (partly) accepted: what the writer sees, and that
	// the accepted event is written exactly once.
	eventsPath := filepath.Join(c.folder, "events.jsonl")
	accepted := func(t *testing.T, withForged bool, fn func(valid, forged string)) {
		t.Helper()
		valid, forged := drafted(), c.event(reviewer, "blocked", nil)
		before := readFile(t, eventsPath)
		seq := c.snapshot().LastSeq
		nrec := len(c.records())
		fn(valid, forged)
		assert.Equal(t, before+valid+"\n", readFile(t, eventsPath), "the valid event must be appended once, the forged one never")
		assert.Equal(t, seq+1, c.snapshot().LastSeq)
		var acc, rej int
		for _, r := range c.records()[nrec:] {
			switch r.Kind {
			case ledger.KindAppendAccepted:
				acc++
				assert.Equal(t, fmt.Sprintf("seq %d deliverable_drafted", seq+1), r.Detail)
			case ledger.KindAppendRejected:
				rej++
				assert.Contains(t, r.Detail, "from-mismatch")
			}
		}
		assert.Equal(t, 1, acc, "append_accepted records")
		if withForged {
			assert.GreaterOrEqual(t, rej, 1, "append_rejected records")
		} else {
			assert.Zero(t, rej, "append_rejected records")
		}
	}
	t.Run("an event split across many small writes is appended once", func(t *testing.T) {
		accepted(t, false, func(valid, _ string) {
			f, err := os.OpenFile(p("events.jsonl"), os.O_WRONLY|os.O_APPEND, 0)
			require.NoError(t, err)
			line := valid + "\n"
			for i := 0; i < len(line); i += 3 {
				_, err := f.Write([]byte(line[i:min(i+3, len(line))]))
				require.NoError(t, err)
			}
			require.NoError(t, f.Close())
		})
	})
	t.Run("an event without its final newline is appended at close", func(t *testing.T) {
		accepted(t, false, func(valid, _ string) {
			require.NoError(t, escWriteClose(p("events.jsonl"), os.O_WRONLY|os.O_APPEND, []byte(valid)))
		})
	})
	t.Run("an extra phase field is kept as other tools write it, and moves no phase", func(t *testing.T) {
		// Forward compatibility: unknown fields are accepted. The phase is
		// the state machine's, never a field of an event.
		line := edit("phase", "completed")()
		before := readFile(t, eventsPath)
		seq := c.snapshot().LastSeq
		require.NoError(t, escAppend(a, line))
		assert.Equal(t, before+line+"\n", readFile(t, eventsPath))
		assert.Equal(t, seq+1, c.snapshot().LastSeq)
		assert.Equal(t, "drafting", c.snapshot().Phase)
		assert.Contains(t, readFile(t, p(".acpfs/status")), "phase: drafting")
		assert.Contains(t, readFile(t, filepath.Join(c.folder, "protocol.json")), `"currentPhase": "drafting"`)
	})
	t.Run("two events in one write: Go sees a short write, then EPERM", func(t *testing.T) {
		accepted(t, true, func(valid, forged string) {
			f, err := os.OpenFile(p("events.jsonl"), os.O_WRONLY|os.O_APPEND, 0)
			require.NoError(t, err)
			n, err := f.Write([]byte(valid + "\n" + forged + "\n"))
			assert.Equal(t, len(valid)+1, n)
			assert.ErrorIs(t, err, syscall.EPERM)
			require.NoError(t, f.Close())
		})
	})
	t.Run("two events in one write: bash echo reports a write error", func(t *testing.T) {
		accepted(t, true, func(valid, forged string) {
			out, code := escShell(t, a.dir, fmt.Sprintf("echo '%s\n%s' >> events.jsonl", valid, forged))
			assert.Equal(t, 1, code)
			assert.Contains(t, out, "write error: Operation not permitted")
		})
	})
	t.Run("two events in one write: Python raises PermissionError", func(t *testing.T) {
		accepted(t, true, func(valid, forged string) {
			out, code := escPython(t, "import sys\nwith open(sys.argv[1], 'a') as f:\n    f.write(sys.argv[2] + '\\n' + sys.argv[3] + '\\n')\n", p("events.jsonl"), valid, forged)
			assert.Equal(t, 1, code, out)
			assert.Contains(t, out, "PermissionError: [Errno 1] Operation not permitted")
		})
	})
	t.Run("two events in one write: unbuffered Python gets a short count and no error", func(t *testing.T) {
		// Documented: os.write semantics. A caller that ignores the count
		// never learns that its second event was refused.
		accepted(t, true, func(valid, forged string) {
			out, code := escPython(t, "import sys\nf = open(sys.argv[1], 'ab', buffering=0)\nprint(f.write((sys.argv[2] + '\\n' + sys.argv[3] + '\\n').encode()))\nf.close()\n", p("events.jsonl"), valid, forged)
			assert.Equal(t, 0, code, out)
			assert.Equal(t, fmt.Sprintf("%d\n", len(valid)+1), out)
		})
	})
	t.Run("a 10 MiB line appends nothing and the daemon keeps working", func(t *testing.T) {
		before := escTree(t, c.folder)
		nrec := len(c.records())
		out, code := escShell(t, a.dir, `set -o pipefail; head -c 10485760 /dev/zero | tr '\0' x | sed 's/^/{"summary":"/; s/$/"}/' >> events.jsonl`)
		assert.NotZero(t, code, "the writer must see the refusal: %s", out)
		escRequireSameTree(t, before, escTree(t, c.folder))
		assert.True(t, escHasRecord(c.records()[nrec:], escRecord{kind: ledger.KindAppendRejected, path: "events.jsonl", op: "append", detail: "line longer than"}), out)
		assert.Contains(t, escLastError(t, a), "line longer than")
		accepted(t, false, func(valid, _ string) { require.NoError(t, escAppend(a, valid)) })
		assert.Contains(t, readFile(t, p(".acpfs/status")), "phase: drafting")
	})
	t.Run("every write of an over-long line fails, up to its newline; the next line is judged afresh", func(t *testing.T) {
		const maxLine = 1 << 20
		before := readFile(t, eventsPath)
		nrec := len(c.records())
		f, err := os.OpenFile(p("events.jsonl"), os.O_WRONLY|os.O_APPEND, 0)
		require.NoError(t, err)
		defer f.Close()
		write := func(b []byte) error { _, err := unix.Write(int(f.Fd()), b); return err }
		head := append([]byte(`{"summary":"`), []byte(strings.Repeat("x", maxLine-64))...)
		require.NoError(t, write(head), "a long line below the limit is buffered")
		assert.ErrorIs(t, write([]byte(strings.Repeat("y", 128))), syscall.EINVAL, "the write crossing the limit")
		assert.ErrorIs(t, write([]byte("zzz")), syscall.EINVAL, "a later write of the same line")
		assert.ErrorIs(t, write([]byte("zz\"}")), syscall.EINVAL, "another")
		assert.ErrorIs(t, write([]byte("z\n")), syscall.EINVAL, "the write holding its newline")
		assert.Equal(t, before, readFile(t, eventsPath), "nothing is appended")
		valid := drafted()
		require.NoError(t, write([]byte(valid+"\n")), "the next line")
		assert.Equal(t, before+valid+"\n", readFile(t, eventsPath))
		var rej, acc int
		for _, r := range c.records()[nrec:] {
			switch r.Kind {
			case ledger.KindAppendRejected:
				rej++
				assert.Contains(t, r.Detail, "line longer than")
			case ledger.KindAppendAccepted:
				acc++
			}
		}
		assert.Equal(t, 1, rej, "one refusal for the over-long line")
		assert.Equal(t, 1, acc)
	})
}

// escLateRead reads through a descriptor opened before a grant change
// and fails the test if it returns bytes written after the change.
func escLateRead(t *testing.T, f *os.File) error {
	t.Helper()
	b := make([]byte, 256)
	n, err := f.ReadAt(b, 0)
	assert.NotContains(t, string(b[:max(n, 0)]), escSecret, "%s: read bytes written after the grant changed", f.Name())
	if err == nil || errors.Is(err, io.EOF) {
		return fmt.Errorf("read %q", b[:max(n, 0)])
	}
	return err
}

// TestEscapeRevokedGrant: what a narrowed, then revoked, grant does to an
// agent that holds open files, mappings, handles and cached names. Every
// read is served by the daemon, which checks the grant in force first: a
// descriptor opened before the change answers EACCES on its next read
// (recorded, op read), a mapping faults again and is refused, and no
// byte written on the backing folder after the change is ever returned.
func TestEscapeRevokedGrant(t *testing.T) {
	c := newCollab(t)
	escPlant(t, c.folder, nil, map[string]string{
		"scratch/mine.md":     "mine\n",
		"scratch/later.md":    "visible before the narrowing\n",
		"scratch/later-rw.md": "visible and writable before the narrowing\n",
	}, nil)
	g := escWriterGrant()
	v := c.mountView(g, withAuditOpens())
	p := v.path
	backing := func(rel string) string { return filepath.Join(c.folder, rel) }
	// noRead fails if any record since nrec is a read of rel.
	noRead := func(t *testing.T, nrec int, rel string) {
		t.Helper()
		for _, r := range c.records()[nrec:] {
			assert.False(t, r.Kind == ledger.KindRead && r.Path == rel, "read of %s recorded after the change: %+v", rel, r)
		}
	}
	// refusedRead expects the next read through f, opened before the
	// grant took rel away, to fail without returning a byte written since
	// and without a read record.
	refusedRead := func(t *testing.T, f *os.File, rel string) {
		t.Helper()
		nrec := len(c.records())
		assert.Error(t, escLateRead(t, f), rel)
		noRead(t, nrec, rel)
	}
	// deniedRead expects that refusal to be EACCES, recorded as a denied
	// read of rel (a full-size read, as cat makes: past the cached size,
	// so the kernel asks for the file's attributes first).
	deniedRead := func(t *testing.T, f *os.File, rel string) {
		t.Helper()
		nrec := len(c.records())
		assert.ErrorIs(t, escLateRead(t, f), syscall.EACCES, rel)
		recs := c.records()[nrec:]
		assert.True(t, escHasRecord(recs, escRecord{kind: ledger.KindDenied, path: rel, op: "read", detail: escNoLongerReadable}), escFmtRecords(recs))
		assert.Contains(t, escLastError(t, v), "read "+rel+": "+escNoLongerReadable)
		noRead(t, nrec, rel)
	}

	ro, err := os.Open(p("proposal.md")) // read-only for this grant
	require.NoError(t, err)
	t.Cleanup(func() { ro.Close() })
	rw, err := os.OpenFile(p("scratch/mine.md"), os.O_RDWR, 0) // writable
	require.NoError(t, err)
	t.Cleanup(func() { rw.Close() })
	// A shared read-only mapping of the read-only file, read once, in
	// another process.
	mapped := escMapFileRO(t, p("proposal.md"))
	b, err := mapped.readMapped()
	require.NoError(t, err)
	require.Equal(t, readFile(t, backing("proposal.md"))[:len(b)], string(b))
	// A handle taken while the file is visible; the open descriptor
	// keeps its inode in the kernel's cache after the revocation.
	handle, _, err := unix.NameToHandleAt(unix.AT_FDCWD, p("proposal.md"), 0)
	require.NoError(t, err)
	out, code := escShell(t, v.dir, "ls -a")
	require.Equal(t, 0, code)
	require.Contains(t, out, "proposal.md")

	// First the grant narrows: scratch/later.md and scratch/later-rw.md,
	// looked up and held open while visible, become hidden.
	later, err := os.Open(p("scratch/later.md"))
	require.NoError(t, err)
	t.Cleanup(func() { later.Close() })
	laterRW, err := os.OpenFile(p("scratch/later-rw.md"), os.O_RDWR, 0)
	require.NoError(t, err)
	t.Cleanup(func() { laterRW.Close() })
	laterHandle, _, err := unix.NameToHandleAt(unix.AT_FDCWD, p("scratch/later.md"), 0)
	require.NoError(t, err)
	g.ForbiddenRead = append(g.ForbiddenRead, "scratch/later.md", "scratch/later-rw.md")
	c.writeGrant(g)
	v.m.ReloadGrant() // the grant watcher does the same; here it is synchronous
	// Written on the backing folder after the change: no descriptor
	// opened before it may return these bytes.
	require.NoError(t, os.WriteFile(backing("scratch/later.md"), []byte(escSecret+" (written after the narrowing)\n"), 0o644))
	require.NoError(t, os.WriteFile(backing("scratch/later-rw.md"), []byte(escSecret+" (written after the narrowing)\n"), 0o644))

	t.Run("a name hidden by a narrowed grant vanishes at once", func(t *testing.T) {
		last := escLastError(t, v)
		nrec := len(c.records())
		_, err := os.Stat(p("scratch/later.md"))
		assert.ErrorIs(t, err, syscall.ENOENT)
		out, code := escShell(t, v.dir, "ls -a scratch")
		require.Equal(t, 0, code, out)
		assert.NotContains(t, out, "later")
		assert.Contains(t, out, "mine.md")
		recs := c.records()[nrec:]
		assert.True(t, escHasRecord(recs, escRecord{kind: ledger.KindDenied, path: "scratch/later.md", op: "lookup"}), escFmtRecords(recs))
		assert.Equal(t, last, escLastError(t, v), "hidden names are refused silently")
	})
	t.Run("reopening the newly hidden file through /proc/self/fd is refused and recorded", func(t *testing.T) {
		last := escLastError(t, v)
		nrec := len(c.records())
		err := escReadErr(fmt.Sprintf("/proc/self/fd/%d", later.Fd()))
		assert.ErrorIs(t, err, syscall.ENOENT)
		recs := c.records()[nrec:]
		assert.True(t, escHasRecord(recs, escRecord{kind: ledger.KindDenied, path: "scratch/later.md", op: "open", detail: "hidden by grant"}), escFmtRecords(recs))
		assert.Equal(t, last, escLastError(t, v), "hidden names are refused silently")
		noRead(t, nrec, "scratch/later.md")
	})
	t.Run("open_by_handle_at of a handle taken before the narrowing is refused, recorded, silently", func(t *testing.T) {
		last := escLastError(t, v)
		nrec := len(c.records())
		assert.ErrorIs(t, escOpenByHandle(v.dir, laterHandle), syscall.ENOENT)
		recs := c.records()[nrec:]
		assert.True(t, escHasRecord(recs, escRecord{kind: ledger.KindDenied, path: "scratch/later.md", op: "open", detail: "hidden by grant"}), escFmtRecords(recs))
		assert.Equal(t, last, escLastError(t, v), "hidden names are refused silently")
		noRead(t, nrec, "scratch/later.md")
	})
	t.Run("a read-only descriptor opened before the narrowing refuses its next reads", func(t *testing.T) {
		refusedRead(t, later, "scratch/later.md")
		refusedRead(t, later, "scratch/later.md")
		n, err := later.Read(make([]byte, 256))
		assert.Error(t, err)
		assert.Zero(t, n)
	})
	t.Run("a read-only descriptor opened before the narrowing answers EACCES, recorded", func(t *testing.T) {
		deniedRead(t, later, "scratch/later.md")
	})
	t.Run("an O_RDWR descriptor opened before the narrowing answers EACCES, recorded", func(t *testing.T) {
		deniedRead(t, laterRW, "scratch/later-rw.md")
	})
	t.Run("an O_RDWR descriptor opened before the narrowing refuses reads and writes", func(t *testing.T) {
		before := escTree(t, c.folder)
		refusedRead(t, laterRW, "scratch/later-rw.md")
		nrec := len(c.records())
		_, err := laterRW.WriteAt([]byte("changed"), 0)
		assert.ErrorIs(t, err, syscall.EACCES)
		escRequireSameTree(t, before, escTree(t, c.folder))
		recs := c.records()[nrec:]
		assert.True(t, escHasRecord(recs, escRecord{kind: ledger.KindDenied, path: "scratch/later-rw.md", op: "write", detail: "not writable under the grant"}), escFmtRecords(recs))
		assert.Contains(t, escLastError(t, v), "write scratch/later-rw.md: not writable under the grant")
	})
	t.Run("other names, descriptors and mappings stay usable", func(t *testing.T) {
		assert.Equal(t, "mine\n", readFile(t, p("scratch/mine.md")))
		b := make([]byte, 64)
		n, err := rw.ReadAt(b, 0)
		if err != nil {
			assert.ErrorIs(t, err, io.EOF)
		}
		assert.Equal(t, "mine\n", string(b[:n]))
		n, err = ro.ReadAt(b, 0)
		if err != nil {
			assert.ErrorIs(t, err, io.EOF)
		}
		assert.Equal(t, readFile(t, backing("proposal.md"))[:n], string(b[:n]))
		m, err := mapped.readMapped()
		require.NoError(t, err)
		assert.Equal(t, readFile(t, backing("proposal.md"))[:len(m)], string(m))
	})

	// Then the grant is revoked, and the files rewritten on the backing
	// folder.
	g.Revoked = true
	c.writeGrant(g)
	v.m.ReloadGrant()
	require.NoError(t, os.WriteFile(backing("proposal.md"), []byte(escSecret+" (proposal rewritten after the revocation)\n"), 0o644))
	require.NoError(t, os.WriteFile(backing("scratch/mine.md"), []byte(escSecret+" (mine rewritten after the revocation)\n"), 0o644))
	before := escTree(t, c.folder)

	t.Run("ls shows nothing at once", func(t *testing.T) {
		out, code := escShell(t, v.dir, "ls -a")
		require.Equal(t, 0, code, out)
		assert.Equal(t, ".\n..\n", out)
	})
	t.Run("new opens answer ENOENT", func(t *testing.T) {
		last := escLastError(t, v)
		for _, name := range []string{"proposal.md", "scratch/mine.md", "events.jsonl", "review.md"} {
			_, err := os.Open(p(name))
			assert.ErrorIs(t, err, syscall.ENOENT, name)
		}
		assert.Equal(t, last, escLastError(t, v), "hidden names are refused silently")
	})
	t.Run("a revoked name vanishes at once and its lookups are recorded", func(t *testing.T) {
		nrec := len(c.records())
		_, err := os.Stat(p("proposal.md"))
		assert.ErrorIs(t, err, syscall.ENOENT)
		_, err = os.Open(p("review.md"))
		assert.ErrorIs(t, err, syscall.ENOENT)
		recs := c.records()[nrec:]
		assert.True(t, escHasRecord(recs, escRecord{kind: ledger.KindDenied, path: "proposal.md", op: "lookup"}), escFmtRecords(recs))
		assert.True(t, escHasRecord(recs, escRecord{kind: ledger.KindDenied, path: "review.md", op: "lookup"}), escFmtRecords(recs))
	})
	t.Run("writes through a descriptor opened before are refused", func(t *testing.T) {
		nrec := len(c.records())
		_, err := rw.WriteAt([]byte("changed"), 0)
		assert.ErrorIs(t, err, syscall.EACCES)
		assert.True(t, escHasRecord(c.records()[nrec:], escRecord{kind: ledger.KindDenied, path: "scratch/mine.md", op: "write"}))
		assert.Contains(t, escLastError(t, v), "write scratch/mine.md: not writable under the grant")
		escRequireSameTree(t, before, escTree(t, c.folder))
	})
	t.Run("reads through a descriptor opened before are refused and return nothing written after the revocation", func(t *testing.T) {
		// The read-only descriptor too: the daemon serves it, and checks
		// the grant in force before each read.
		refusedRead(t, ro, "proposal.md")
		refusedRead(t, rw, "scratch/mine.md")
	})
	t.Run("reads through a descriptor opened before answer EACCES, recorded", func(t *testing.T) {
		deniedRead(t, ro, "proposal.md")
		deniedRead(t, rw, "scratch/mine.md")
	})
	t.Run("a shared mapping made before faults again and is refused", func(t *testing.T) {
		nrec := len(c.records())
		m, err := mapped.readMapped()
		assert.NotContains(t, string(m), escSecret, "the mapping shows bytes written after the revocation")
		// The refused fault is a SIGBUS, which ends the mapping process.
		assert.Error(t, err, "the mapping still reads %q", m)
		noRead(t, nrec, "proposal.md")
	})
	t.Run("open_by_handle_at of a handle taken before is refused", func(t *testing.T) {
		err := escOpenByHandle(v.dir, handle)
		assert.ErrorIs(t, err, syscall.ENOENT)
	})
	t.Run("open_by_handle_at of a handle taken before is recorded, silently", func(t *testing.T) {
		last := escLastError(t, v)
		nrec := len(c.records())
		assert.ErrorIs(t, escOpenByHandle(v.dir, handle), syscall.ENOENT)
		recs := c.records()[nrec:]
		assert.True(t, escHasRecord(recs, escRecord{kind: ledger.KindDenied, path: "proposal.md", op: "open", detail: "hidden by grant"}), escFmtRecords(recs))
		assert.Equal(t, last, escLastError(t, v), "hidden names are refused silently")
		noRead(t, nrec, "proposal.md")
	})
	t.Run("forged handles for every node id open nothing but the root and .acpfs", func(t *testing.T) {
		var root unix.Stat_t
		require.NoError(t, unix.Stat(v.dir, &root))
		gen := binary.LittleEndian.Uint32(handle.Bytes()[8:])
		mfd, err := unix.Open(v.dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		require.NoError(t, err)
		defer unix.Close(mfd)
		for id := uint64(1); id <= 64; id++ {
			fd, err := unix.OpenByHandleAt(mfd, escHandle(id, gen), unix.O_RDONLY)
			if err != nil {
				continue
			}
			var st unix.Stat_t
			require.NoError(t, unix.Fstat(fd, &st))
			unix.Close(fd)
			assert.True(t, st.Ino == root.Ino || st.Ino >= 1<<62, "node %d opened inode %d", id, st.Ino)
		}
	})
	t.Run("the backing folder did not change", func(t *testing.T) {
		escRequireSameTree(t, before, escTree(t, c.folder))
	})
}

// TestEscapeRevokedGrantPassthrough: the same revocation in a view that
// lets the kernel read read-only files straight from the backing folder
// (FUSE passthrough). Such reads never reach the daemon.
func TestEscapeRevokedGrantPassthrough(t *testing.T) {
	c := newCollab(t)
	g := escWriterGrant()
	v := c.mountView(g, escWithPassthrough())
	p := v.path
	ro, err := os.Open(p("proposal.md"))
	require.NoError(t, err)
	t.Cleanup(func() { ro.Close() })
	mapped := escMapFileRO(t, p("proposal.md"))
	_, err = mapped.readMapped()
	require.NoError(t, err)
	nrec := len(c.records())
	g.Revoked = true
	c.writeGrant(g)
	v.m.ReloadGrant()
	require.NoError(t, os.WriteFile(filepath.Join(c.folder, "proposal.md"), []byte(escSecret+" (proposal rewritten after the revocation)\n"), 0o644))

	t.Run("a descriptor the daemon cannot stop is in the ledger at the change", func(t *testing.T) {
		recs := c.records()[nrec:]
		assert.True(t, escHasRecord(recs, escRecord{kind: ledger.KindRead, path: "proposal.md", op: "passthrough"}), escFmtRecords(recs))
	})
	t.Run("new opens answer ENOENT", func(t *testing.T) {
		_, err := os.Open(p("proposal.md"))
		assert.ErrorIs(t, err, syscall.ENOENT)
	})
	t.Run("what a passthrough descriptor reads later is covered by that record", func(t *testing.T) {
		// The documented trade-off of passthrough (docs/threat-model.md):
		// the kernel reads the backing file without the daemon, and
		// nothing the daemon can do stops a descriptor opened earlier.
		// The read record written at the change is what the audit counts.
		b, err := io.ReadAll(io.NewSectionReader(ro, 0, 1<<16))
		require.NoError(t, err)
		if strings.Contains(string(b), escSecret) {
			recs := c.records()[nrec:]
			assert.True(t, escHasRecord(recs, escRecord{kind: ledger.KindRead, path: "proposal.md", op: "passthrough"}))
		}
	})
}

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
	dirfd, err := unix.Open(p("scratch"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
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
		assert.True(t, escHasRecord(recs, escRecord{kind: ledger.KindDenied, path: "scratch", op: "lookup"}), escFmtRecords(recs))
	})
	t.Run("open below the held directory reads nothing", func(t *testing.T) {
		fd, err := unix.Openat(dirfd, "answer.md", unix.O_RDONLY, 0)
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
		d, err := unix.Openat(dirfd, ".", unix.O_RDONLY|unix.O_DIRECTORY, 0)
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
