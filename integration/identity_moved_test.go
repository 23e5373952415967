package integration

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/grants"
	acpview "github.com/acpfs/acpfs/view"
)

// The second line of defence: what no view may show is known by what
// it is, so that it stays concealed in every view when it ends up in
// the folder after the views started, whatever it is called there and
// whatever led it there (a rename on the backing side, a bind mount).

// imNotShown fails unless the view at mp shows nothing at rel: neither
// the name in its directory's listing nor the entry itself.
func imNotShown(t *testing.T, mp, rel string) {
	t.Helper()
	_, err := os.Lstat(filepath.Join(mp, rel))
	assert.ErrorIs(t, err, os.ErrNotExist, "%s is shown at %s", rel, mp)
	ents, err := os.ReadDir(filepath.Join(mp, filepath.Dir(rel)))
	require.NoError(t, err)
	for _, e := range ents {
		assert.NotEqual(t, filepath.Base(rel), e.Name(), "%s is listed at %s", rel, mp)
	}
}

// imBind bind-mounts src at a new directory dst of the backing folder
// until the test ends (or until the returned function is called).
func imBind(t *testing.T, src, dst string) func() {
	t.Helper()
	require.NoError(t, os.Mkdir(dst, 0o755))
	require.NoError(t, unix.Mount(src, dst, "", unix.MS_BIND, ""))
	undo := func() {
		// Detached: the daemon's folder watcher may be walking it.
		if unix.Unmount(dst, unix.MNT_DETACH) == nil {
			os.Remove(dst)
		}
	}
	t.Cleanup(undo)
	return undo
}

// TestIdentityCoordinatorPartsConcealedWhereverTheyGo: under acpfs up,
// with grants that read everything in the folder but the oracle, a view
// bind-mounted into the folder, a view's mountpoint moved into it, the
// staging directory renamed into it and a grant file moved into it are
// shown by no view; nor is a part of the run directory bind-mounted
// there.
func TestIdentityCoordinatorPartsConcealedWhereverTheyGo(t *testing.T) {
	e := newCoordEnv(t)
	scratch := filepath.Join(e.folder, "scratch")
	require.NoError(t, os.MkdirAll(scratch, 0o755))
	reads := func(id, agent, role string, writes ...string) *grants.Grant {
		return &grants.Grant{GrantID: id, AgentID: agent, Role: role, Objective: "o", MayRead: []string{"**"},
			ForbiddenRead: []string{"oracle/**"}, MayWrite: append([]string{"events.jsonl", "protocol.json"}, writes...)}
	}
	pmWriteGrant(t, e.runs, reads("G-alice", owner, "proposal owner", "scratch/*.md"))
	bobGrant := pmWriteGrant(t, e.runs, reads("G-bob", reviewer, "reviewer"))
	d := e.up(owner, reviewer)
	alice, bob := filepath.Join(e.root, owner), filepath.Join(e.root, reviewer)

	t.Run("a view bind-mounted into the folder", func(t *testing.T) {
		undo := imBind(t, bob, filepath.Join(scratch, "bob-view"))
		defer undo()
		imNotShown(t, alice, "scratch/bob-view")
		imNotShown(t, bob, "scratch/bob-view")
	})
	t.Run("the run directory's grants bind-mounted into the folder", func(t *testing.T) {
		undo := imBind(t, filepath.Join(e.runs, "context_grants"), filepath.Join(scratch, "g"))
		defer undo()
		imNotShown(t, alice, "scratch/g")
	})
	t.Run("the staging directory renamed into the folder", func(t *testing.T) {
		// A name alice may not write, in a directory where she may:
		// made privately under the staging directory.
		require.NoError(t, os.WriteFile(filepath.Join(alice, "scratch", ".draft.swp"), []byte("private draft\n"), 0o644))
		moved := filepath.Join(scratch, "st")
		require.NoError(t, os.Rename(filepath.Join(e.folder, acpview.StagingDir), moved))
		t.Cleanup(func() { os.Rename(moved, filepath.Join(e.folder, acpview.StagingDir)) })
		imNotShown(t, bob, "scratch/st")
		imNotShown(t, alice, "scratch/st")
		require.NoError(t, os.Rename(moved, filepath.Join(e.folder, acpview.StagingDir)))
	})
	t.Run("a view's mountpoint moved into the folder", func(t *testing.T) {
		// The coordinator stopped, bob's view unmounted and its bare
		// mountpoint moved into the folder; once it runs again it mounts
		// bob's view anew, and neither view shows the old mountpoint.
		require.NoError(t, syscall.Kill(d.PID(), syscall.SIGSTOP))
		t.Cleanup(func() { syscall.Kill(d.PID(), syscall.SIGCONT) })
		_, stderr, code := sfRun(t, "umount", bob)
		require.Equal(t, 0, code, stderr)
		moved := filepath.Join(scratch, "mp")
		require.NoError(t, os.Rename(bob, moved))
		require.NoError(t, syscall.Kill(d.PID(), syscall.SIGCONT))
		eventually(t, func() bool { return sfReaches(bob) == nil }, "bob's view is not mounted again: "+d.Output())
		imNotShown(t, alice, "scratch/mp")
		imNotShown(t, bob, "scratch/mp")
	})
	t.Run("a grant file moved into the folder", func(t *testing.T) {
		moved := filepath.Join(scratch, "notes.json")
		require.NoError(t, os.Rename(bobGrant, moved))
		eventually(t, func() bool { return sfReaches(bob) != nil }, "bob's view outlived its grant: "+d.Output())
		imNotShown(t, alice, "scratch/notes.json")
		_, err := os.ReadFile(filepath.Join(alice, "scratch", "notes.json"))
		assert.ErrorIs(t, err, os.ErrNotExist)
	})
}

// TestIdentityLedgerDirectoryConcealedWhereverItGoes: the ledger's
// directory of acpfs mount, outside the folder at start, is shown by
// neither spelling once it is bind-mounted into the folder or moved
// there, though the grant reads everything there.
func TestIdentityLedgerDirectoryConcealedWhereverItGoes(t *testing.T) {
	c := newCollab(t)
	scratch := filepath.Join(c.folder, "scratch")
	require.NoError(t, os.MkdirAll(scratch, 0o755))
	g := &grants.Grant{GrantID: "G-all", AgentID: reviewer, Role: "reviewer", Objective: "o",
		MayRead: []string{"**"}, ForbiddenRead: []string{"oracle/**"}, MayWrite: []string{"events.jsonl", "protocol.json"}}
	gp := c.writeGrant(g)
	ldir := filepath.Join(c.root, "ledger-dir")
	mp := filepath.Join(c.root, "mnt-all")
	pmMount(t, c.folder, gp, filepath.Join(ldir, "l.jsonl"), mp)
	_, err := os.Stat(filepath.Join(ldir, "ledger.key"))
	require.NoError(t, err, "the ledger's key is beside it")

	undo := imBind(t, ldir, filepath.Join(scratch, "lb"))
	imNotShown(t, mp, "scratch/lb")
	undo()
	moved := filepath.Join(scratch, "old-logs")
	require.NoError(t, os.Rename(ldir, moved))
	t.Cleanup(func() { os.Rename(moved, ldir) })
	imNotShown(t, mp, "scratch/old-logs")
	_, err = os.ReadFile(filepath.Join(mp, "scratch", "old-logs", "ledger.key"))
	assert.ErrorIs(t, err, os.ErrNotExist)
}

// TestBindMountedFileOverAShownNameIsNotServed: a forbidden file
// bind-mounted over a name the grant shows (once read through the view,
// and one never opened before) is a mount point, which no view crosses:
// the name is gone from the view, nothing of the oracle is read, and the
// ledger holds no read of its content.
func TestBindMountedFileOverAShownNameIsNotServed(t *testing.T) {
	c := newCollab(t)
	escPlant(t, c.folder, nil, map[string]string{
		"oracle/answer.md": escSecret, "scratch/pub.md": "public\n", "scratch/fresh.md": "fresh\n",
	}, nil)
	v := c.mountView(sealGrant())
	got, err := os.ReadFile(v.path("scratch/pub.md"))
	require.NoError(t, err)
	require.Equal(t, "public\n", string(got))
	secret := filepath.Join(c.folder, "oracle/answer.md")
	names := []string{"scratch/pub.md", "scratch/fresh.md"}
	for _, name := range names {
		dst := filepath.Join(c.folder, name)
		require.NoError(t, unix.Mount(secret, dst, "", unix.MS_BIND, ""))
		t.Cleanup(func() { _ = unix.Unmount(dst, unix.MNT_DETACH) })
	}
	// No listing of scratch/ was made before the mounts: the kernel
	// keeps none (a mount is no change the folder's watcher sees; a
	// listing kept from before would still name the old file, never
	// serve the mounted one).
	for _, name := range names {
		b, err := os.ReadFile(v.path(name))
		assert.ErrorIs(t, err, os.ErrNotExist, "%s: read %q through a bind mount", name, b)
		imNotShown(t, v.dir, name)
	}
	sum := fileSHA(t, secret)
	for _, r := range c.records() {
		assert.NotEqual(t, sum, r.SHA256, "the oracle's content was read: %+v", r)
	}
}
