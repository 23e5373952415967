package integration

import (
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

// TestEscapeHiddenReads: with a grant that hides the oracle, a private
// scratch directory and a non-ASCII name, the agent tries every name,
// link, handle and listing it can think of. The attempts are grouped by
// what they use (escape_symlink_test.go, escape_hardlink_test.go,
// escape_rename_test.go, escape_xattr_test.go); they run in one view, in
// this order.
func TestEscapeHiddenReads(t *testing.T) {
	h := newEscHidden(t)
	escRunFamilies(t, h.e,
		escHiddenNameAttempts(h), escHiddenSymlinkAttempts(h), escHiddenHardLinkAttempts(h),
		escHiddenRenameAttempts(h), escHiddenHandleAttempts(h), escHiddenSpellingAttempts(h),
	)
	escHiddenListingChecks(t, h)
	escHiddenDirTimeChecks(t, h)
	p := h.v.path

	t.Run("control files never name hidden paths", func(t *testing.T) {
		for _, f := range []string{".acpfs/last-error", ".acpfs/grant.md", ".acpfs/status"} {
			text := readFile(t, p(f))
			for _, w := range []string{"oracle", "answer.md", escNFC} {
				assert.NotContains(t, text, w, f)
			}
		}
	})
}

// escHidden is the collaboration of TestEscapeHiddenReads: a view with
// escReaderGrant over a folder where links to the oracle were planted.
type escHidden struct {
	c            *collab
	e            escEnv
	v            *view
	oracleIno    uint64 // the oracle's inode on the backing folder
	movedSymlink *escRecord
}

// newEscHidden plants the links and files the attempts use, mounts the
// view, and moves a harmless symlink of the agent to where it leads to
// the oracle.
func newEscHidden(t *testing.T) *escHidden {
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
	h := &escHidden{c: c, e: escMount(c, escReaderGrant())}
	h.v = h.e.v
	p := h.v.path
	var st unix.Stat_t
	require.NoError(t, unix.Stat(filepath.Join(c.folder, "oracle/answer.md"), &st))
	h.oracleIno = st.Ino

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
	h.movedSymlink = escRecD(ledger.KindDenied, "scratch/l", "", escSymlinkHidden)
	return h
}

// runIn runs script in `acpfs run` with the reader grant. acpfs run binds
// the view over the folder's own path, so `..` and absolute paths lead
// back into the view, never to the files.
func (h *escHidden) runIn(script string) func(t *testing.T) error {
	return func(t *testing.T) error {
		out, stderr, code := acpfs(t, "run", "--folder", h.c.folder, "--runs", h.c.runs, "--grant", "G-esc-read", "--",
			"bash", "-c", script, h.c.folder)
		require.NotContains(t, out+stderr, escSecret)
		if code != 0 {
			return &escShellError{script: script, out: out + stderr, code: code}
		}
		return nil
	}
}

// escHiddenNameAttempts reach for the oracle by its plain name, relative and
// absolute paths, and from inside `acpfs run`.
func escHiddenNameAttempts(h *escHidden) []escAttempt {
	v, p, mnt, deniedLookup, runIn := h.v, h.v.path, filepath.Base(h.v.dir), escDeniedLookup, h.runIn
	return []escAttempt{
		// Plain names, relative and absolute paths.
		{name: "cat oracle/answer.md", do: escSh(v, "cat oracle/answer.md"), errno: syscall.ENOENT,
			record: deniedLookup("oracle")},
		{name: "stat of the hidden directory is ENOENT, not EACCES", do: escSh(v, "stat oracle"), errno: syscall.ENOENT,
			record: deniedLookup("oracle")},
		{name: "ls of the hidden directory", do: escSh(v, "ls oracle"), errno: syscall.ENOENT,
			record: deniedLookup("oracle")},
		{name: "cd into the hidden directory", do: escSh(v, "cd oracle"), errno: syscall.ENOENT,
			record: deniedLookup("oracle")},
		{name: "access(F_OK) of the hidden file",
			do: func(*testing.T) error { return unix.Access(p("oracle/answer.md"), unix.F_OK) }, errno: syscall.ENOENT,
			record: deniedLookup("oracle")},
		{name: "statx of the hidden file", do: func(*testing.T) error {
			var sx unix.Statx_t
			return unix.Statx(unix.AT_FDCWD, p("oracle/answer.md"), 0, unix.STATX_ALL, &sx)
		}, errno: syscall.ENOENT, record: deniedLookup("oracle")},
		{name: "dot-dot from a subdirectory of the view", do: escSh(v, "cd deliverables && cat ../oracle/answer.md"),
			errno: syscall.ENOENT, record: deniedLookup("oracle")},
		{name: "dot-dot through the control directory", do: escSh(v, "cat .acpfs/../oracle/answer.md"),
			errno: syscall.ENOENT, record: deniedLookup("oracle")},
		{name: "the view's own absolute path",
			do:    func(*testing.T) error { return escReadErr(filepath.Join(v.dir, "oracle/answer.md")) },
			errno: syscall.ENOENT, record: deniedLookup("oracle")},
		{name: "absolute path leaving and re-entering the view", do: escSh(v, "cat ../"+mnt+"/./oracle//answer.md"),
			errno: syscall.ENOENT, record: deniedLookup("oracle")},
		{name: "acpfs run: cat ../folder/oracle/answer.md from inside the folder",
			do: runIn(`cd "$0" && cat ../folder/oracle/answer.md`), errno: syscall.ENOENT,
			record: deniedLookup("oracle")},
		{name: "acpfs run: ../../folder from a subdirectory",
			do: runIn(`cd "$0/deliverables" && cat ../../folder/oracle/answer.md`), errno: syscall.ENOENT,
			record: deniedLookup("oracle")},
		{name: "acpfs run: the ledger beside the folder is masked",
			do: runIn(`cd "$0" && cat ../agent_runs/communication_ledger.jsonl`), errno: syscall.ENOENT},
	}
}

// escHiddenSpellingAttempts try long names and names that look like, or are
// spelled differently from, the hidden ones.
func escHiddenSpellingAttempts(h *escHidden) []escAttempt {
	v, p, deniedLookup, hiddenSymlink := h.v, h.v.path, escDeniedLookup, escHiddenSymlink
	long := strings.Repeat("a", 255)
	return []escAttempt{
		// Long names.
		{name: "255-byte name below the hidden directory",
			do: func(*testing.T) error { return escReadErr(p("oracle/" + long)) }, errno: syscall.ENOENT,
			record: deniedLookup("oracle")},
		{name: "256-byte name", do: func(*testing.T) error { return escReadErr(p("oracle" + long[6:] + "x")) },
			errno: syscall.ENAMETOOLONG},
		{name: "path longer than PATH_MAX", do: func(*testing.T) error {
			return escReadErr(v.dir + "/" + strings.Repeat("./", 2100) + "oracle/answer.md")
		}, errno: syscall.ENAMETOOLONG},

		// Look-alike and case-variant names.
		{name: "Cyrillic look-alike of the hidden directory", do: escSh(v, "cat "+escCyrillic+"/answer.md"),
			errno: syscall.ENOENT},
		{name: "zero-width joiner in the hidden name", do: escSh(v, "cat or\u200dacle/answer.md"),
			errno: syscall.ENOENT},
		{name: "NFD spelling of an NFC hidden name", do: escSh(v, "cat "+escNFD+"/secret.md"), errno: syscall.ENOENT},
		{name: "NFC hidden name itself", do: escSh(v, "cat "+escNFC+"/secret.md"), errno: syscall.ENOENT,
			record: deniedLookup(escNFC)},
		{name: "case variant Oracle/answer.md (a planted alias)", do: escSh(v, "cat Oracle/answer.md"),
			errno: syscall.ENOENT, record: hiddenSymlink("Oracle")},
		{name: "case variant ORACLE/answer.md", do: escSh(v, "cat ORACLE/answer.md"), errno: syscall.ENOENT},
		{name: "case variant oracle/ANSWER.md", do: escSh(v, "cat oracle/ANSWER.md"), errno: syscall.ENOENT,
			record: deniedLookup("oracle")},
		{name: "trailing dot", do: escSh(v, "cat oracle./answer.md"), errno: syscall.ENOENT},
	}
}

// escHiddenListingChecks: listings and link counts show nothing of what the
// grant hides.
func escHiddenListingChecks(t *testing.T, h *escHidden) {
	c, v, p := h.c, h.v, h.v.path
	t.Run("listings never show hidden names", func(t *testing.T) {
		hidden := []string{"oracle", "Oracle", "to-oracle", "up-oracle", "to-passwd", "to-ledger", "private",
			"via-parent", "réponse", escNFC, escNFD, "secret",
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
			hiddenRead := r.Kind == ledger.KindRead &&
				(strings.Contains(r.Path, "oracle") || strings.Contains(r.Path, "hard"))
			assert.False(t, hiddenRead, "read of %s", r.Path)
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
}

// escHiddenDirTimeChecks: a directory's size and times come from the entries
// the view shows, whatever changes below it that the grant hides.
func escHiddenDirTimeChecks(t *testing.T, h *escHidden) {
	c, v, p := h.c, h.v, h.v.path
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
}
