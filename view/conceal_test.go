package view

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/internal/fsid"
	"github.com/acpfs/acpfs/ledger"
)

// TestConcealedByIdentity: what Options.Conceal names (a mountpoint or a
// run directory inside the folder) is hidden under any name it takes
// later, with everything below it; the folder itself, when listed, is
// not; a path that does not exist yet is left to the matcher.
func TestConcealedByIdentity(t *testing.T) {
	c := newCollab(t)
	require.NoError(t, os.MkdirAll(c.in("scratch/box/mnt/inner"), 0o755))
	c.write("scratch/box/mnt/f.md", "f")
	c.write("scratch/box/mnt/inner/g.md", "g")
	f := c.newView(ownerGrant(), func(o *Options) {
		o.Conceal = []string{c.in("scratch/box/mnt"), c.folder, filepath.Join(c.root, "not-made-yet"), "", filepath.Dir(c.ledgerPath)}
	})
	ctx := context.Background()
	runNameCases(t, c, "alice", []nameCase{
		{"the folder", func() syscall.Errno { _, e := f.Lookup(ctx, ""); return e }, 0, "", "", ""},
		{"the concealed directory", func() syscall.Errno { _, e := f.Lookup(ctx, "scratch/box/mnt"); return e }, syscall.ENOENT, ledger.KindDenied, ledger.OpLookup, "scratch/box/mnt"},
		{"an entry in it", func() syscall.Errno { _, e := f.Lookup(ctx, "scratch/box/mnt/f.md"); return e }, syscall.ENOENT, "", "", "scratch/box/mnt/f.md"},
		{"an entry further below it", func() syscall.Errno { _, e := f.Lookup(ctx, "scratch/box/mnt/inner/g.md"); return e }, syscall.ENOENT, "", "", "scratch/box/mnt/inner/g.md"},
		{"renamed", func() syscall.Errno {
			require.NoError(t, os.Rename(c.in("scratch/box/mnt"), c.in("scratch/box/other")))
			_, e := f.Lookup(ctx, "scratch/box/other")
			return e
		}, syscall.ENOENT, ledger.KindDenied, ledger.OpLookup, "scratch/box/other"},
		{"a directory holding it cannot be renamed", func() syscall.Errno { return f.Rename(ctx, "scratch/box", "scratch/box2", 0) }, syscall.EACCES, ledger.KindDenied, ledger.OpRename, "scratch/box"},
		{"its name cannot be taken over", func() syscall.Errno { _, e := f.Mkdir(ctx, "scratch/box/other", 0o755); return e }, syscall.EACCES, ledger.KindDenied, ledger.OpMkdir, "scratch/box/other"},
	})
	assert.NotContains(t, listing(t, f, "scratch/box"), "other")
	assert.DirExists(t, c.in("scratch/box"), "not renamed")
	rec := recordsOf(c.records(), ledger.KindDenied, "alice", "scratch/box/other", ledger.OpLookup)
	require.NotEmpty(t, rec)
	assert.Equal(t, whyConcealed, rec[0].Detail)
}

// TestConcealedAboveAKeptDirectory: a directory the kernel keeps (an
// agent's working directory) whose path comes to lead through a run
// directory, after renames on the backing side, shows nothing of it,
// however deep; the same path shows the agent's own files again once
// it leads back to them.
func TestConcealedAboveAKeptDirectory(t *testing.T) {
	c := newCollab(t)
	require.NoError(t, os.MkdirAll(c.in("scratch/y/homes/G-bob"), 0o755))
	c.write("scratch/y/homes/G-bob/mine.md", "mine")
	runs := filepath.Join(c.root, "runs")
	require.NoError(t, os.MkdirAll(filepath.Join(runs, "context_grants"), 0o700))
	require.NoError(t, os.MkdirAll(filepath.Join(runs, "homes/G-bob"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(runs, "homes/G-bob/secret.md"), []byte("secret"), 0o600))
	f := c.newView(ownerGrant(), func(o *Options) { o.Conceal = []string{runs} })
	ctx := context.Background()
	_, errno := f.Lookup(ctx, "scratch/y/homes/G-bob/mine.md")
	require.Equal(t, syscall.Errno(0), errno)

	// Swapped on the backing side: scratch/y is now the run directory.
	require.NoError(t, os.Rename(c.in("scratch/y"), c.in("scratch/away")))
	require.NoError(t, os.Rename(runs, c.in("scratch/y")))
	for _, rel := range []string{"scratch/y/homes/G-bob/secret.md", "scratch/y/homes/G-bob", "scratch/y/context_grants"} {
		_, errno := f.Lookup(ctx, rel)
		assert.Equal(t, syscall.ENOENT, errno, rel)
	}
	_, _, errno = f.Open(ctx, nil, "scratch/y/homes/G-bob/secret.md", syscall.O_RDONLY)
	assert.Equal(t, syscall.ENOENT, errno)

	// And back: the agent's own files are shown again.
	require.NoError(t, os.Rename(c.in("scratch/y"), runs))
	require.NoError(t, os.Rename(c.in("scratch/away"), c.in("scratch/y")))
	_, errno = f.Lookup(ctx, "scratch/y/homes/G-bob/mine.md")
	assert.Equal(t, syscall.Errno(0), errno)
}

// TestConcealedKinds: a hard-linked file, a fifo and symlinks that lead
// out of the folder or to what the grant hides are shown under no name,
// and each lookup of one is recorded; a symlink to what the grant shows
// is shown.
func TestConcealedKinds(t *testing.T) {
	c := newCollab(t)
	c.write("scratch/one.md", "1")
	require.NoError(t, os.Link(c.in("scratch/one.md"), c.in("scratch/two.md")))
	require.NoError(t, syscall.Mkfifo(c.in("scratch/fifo"), 0o644))
	for name, target := range map[string]string{"up": "../../outside", "abs": "/etc/passwd", "oracle": "../oracle/answer.md", "ok": "../docs/a.md", "loop": "x/../../docs/a.md"} {
		require.NoError(t, os.Symlink(target, c.in("scratch/"+name)))
	}
	f := c.newView(ownerGrant())
	ctx := context.Background()
	tests := []struct {
		rel   string
		errno syscall.Errno
		why   string
	}{
		{"scratch/one.md", syscall.ENOENT, "hard-linked file"},
		{"scratch/two.md", syscall.ENOENT, "hard-linked file"},
		{"scratch/fifo", syscall.ENOENT, "devices, fifos and sockets"},
		{"scratch/up", syscall.ENOENT, "symlink target hidden or outside the folder"},
		{"scratch/abs", syscall.ENOENT, "symlink target hidden or outside the folder"},
		{"scratch/oracle", syscall.ENOENT, "symlink target hidden or outside the folder"},
		{"scratch/loop", syscall.ENOENT, "symlink target hidden or outside the folder"},
		{"scratch/ok", 0, ""},
	}
	for _, tc := range tests {
		t.Run(tc.rel, func(t *testing.T) {
			seq := c.lastSeq()
			_, errno := f.Lookup(ctx, tc.rel)
			assert.Equal(t, tc.errno, errno)
			recs := recordsOf(c.since(seq), ledger.KindDenied, "alice", tc.rel, ledger.OpLookup)
			if tc.why == "" {
				assert.Empty(t, recs)
				return
			}
			require.Len(t, recs, 1)
			assert.Contains(t, recs[0].Detail, tc.why)
			_, _, errno = f.Open(ctx, nil, tc.rel, syscall.O_RDONLY)
			assert.Equal(t, syscall.ENOENT, errno)
			assert.NotContains(t, listing(t, f, "scratch"), filepath.Base(tc.rel))
		})
	}
	assert.ElementsMatch(t, []string{"ok"}, listing(t, f, "scratch"))
}

// TestViewRootedAtTheRepository: a view rooted at the directory holding
// the folder names what lies beside the folder with leading "..", judges
// it by the grant like the folder's own names, and never lets the folder
// or the directories above it be changed.
func TestViewRootedAtTheRepository(t *testing.T) {
	c := newCollab(t)
	require.NoError(t, os.MkdirAll(filepath.Join(c.root, "docs"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(c.root, "docs", "r.md"), []byte("beside"), 0o644))
	g := ownerGrant()
	g.MayRead = append(g.MayRead, "../docs/**", "../runs/**")
	f := c.newView(g, func(o *Options) {
		o.Folder, o.Within = c.root, "collab"
		o.Conceal = []string{filepath.Dir(c.ledgerPath)}
	})
	ctx := context.Background()
	assert.Equal(t, "collab", f.FolderPath())
	assert.Equal(t, c.root, f.Folder())
	assert.Equal(t, "docs/a.md", f.Name("collab/docs/a.md"))
	assert.Equal(t, "../docs/r.md", f.Name("docs/r.md"))
	assert.Equal(t, "", f.Join("..", "collab"))
	assert.Equal(t, "docs/a.md", f.Join("docs", "a.md"))
	runNameCases(t, c, "alice", []nameCase{
		{"beside the folder", func() syscall.Errno { _, e := f.Lookup(ctx, "../docs/r.md"); return e }, 0, "", "", "../docs/r.md"},
		{"the folder's own", func() syscall.Errno { _, e := f.Lookup(ctx, "docs/a.md"); return e }, 0, "", "", "docs/a.md"},
		{"the run directory beside it, by identity", func() syscall.Errno { _, e := f.Lookup(ctx, "../runs"); return e }, syscall.ENOENT, ledger.KindDenied, ledger.OpLookup, "../runs"},
		{"the view's root", func() syscall.Errno { _, e := f.Lookup(ctx, ".."); return e }, 0, "", "", ".."},
		{"the folder cannot be removed", func() syscall.Errno { return f.Rmdir(ctx, "") }, syscall.EACCES, ledger.KindDenied, ledger.OpRmdir, ""},
		{"nor its parent renamed", func() syscall.Errno { return f.Rename(ctx, "..", "../x", 0) }, syscall.EACCES, ledger.KindDenied, ledger.OpRename, ".."},
	})
	assert.Contains(t, listing(t, f, ".."), "collab")
	assert.NotContains(t, listing(t, f, ".."), "runs")
	_, err := New(Options{Folder: c.root, Within: "../up", Grant: g, Log: f.log, Ledger: c.lw})
	assert.Error(t, err)
}

// TestNewRefusesBadOptions: a view needs an absolute folder, a log, a
// ledger and a grant that compiles.
func TestNewRefusesBadOptions(t *testing.T) {
	c := newCollab(t)
	f := c.newView(ownerGrant())
	tests := []struct {
		name string
		o    Options
	}{
		{"a relative folder", Options{Folder: "collab", Grant: ownerGrant(), Log: f.log, Ledger: c.lw}},
		{"no ledger", Options{Folder: c.folder, Grant: ownerGrant(), Log: f.log}},
		{"a folder that is not there", Options{Folder: c.in("none"), Grant: ownerGrant(), Log: f.log, Ledger: c.lw}},
		{"a grant that does not compile", Options{Folder: c.folder, Grant: &grants.Grant{GrantID: "G-x", AgentID: "x", MayRead: []string{"/abs/**"}}, Log: f.log, Ledger: c.lw}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.o)
			assert.Error(t, err)
		})
	}
}

// TestHidesAboveKeysTheGitSetting: whether a directory above another is
// hidden depends on whether the grant names git directories; an answer
// found for one setting is never given for the other, even at the same
// count of name changes (a grant applied while a lookup ran).
func TestHidesAboveKeysTheGitSetting(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "repo", "objects"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "repo", "sub", "deeper"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "repo", "HEAD"), []byte("ref: refs/heads/main\n"), 0o644))
	c, err := holdConcealed(nil, nil)
	require.NoError(t, err)
	defer c.close()
	var rootSt, st unix.Stat_t
	require.NoError(t, unix.Stat(root, &rootSt))
	fd, err := unix.Open(filepath.Join(root, "repo", "sub", "deeper"), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	defer unix.Close(fd)
	require.NoError(t, unix.Fstat(fd, &st))
	for _, git := range []bool{false, true, false} {
		assert.Equal(t, git, c.hidesAbove(fd, &st, fsid.OfStat(&rootSt), git, 7, true), "git directories hidden: %v", git)
	}
}
