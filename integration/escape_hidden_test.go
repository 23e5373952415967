package integration

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/ledger"
)

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
