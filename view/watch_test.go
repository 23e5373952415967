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

	"github.com/acpfs/acpfs/protocol"
)

// TestWatcherSurvivesDirectorySwaps: directories exchanged again and
// again (renameat2 RENAME_EXCHANGE, which anyone who can write the folder
// may run) never stop the watcher's goroutine, which would take the
// daemon and every view with it; at worst the watcher degrades.
func TestWatcherSurvivesDirectorySwaps(t *testing.T) {
	folder := t.TempDir()
	for _, d := range []string{"a/x/y", "b/z", "c/w/v", "d"} {
		require.NoError(t, os.MkdirAll(filepath.Join(folder, d), 0o755))
	}
	wt, err := NewWatcher(folder, nil)
	require.NoError(t, err)
	pairs := [][2]string{{"a", "b"}, {"c", "d"}, {"a", "c"}, {"b/z", "d"}}
	for i := 0; i < 4000; i++ {
		p := pairs[i%len(pairs)]
		// A pair may be nested after earlier swaps (EINVAL): skip it.
		_ = unix.Renameat2(unix.AT_FDCWD, filepath.Join(folder, p[0]), unix.AT_FDCWD, filepath.Join(folder, p[1]), unix.RENAME_EXCHANGE)
	}
	// A change after the swaps is still followed, and Close returns once
	// the loop ends: the loop is alive.
	require.NoError(t, os.Mkdir(filepath.Join(folder, "after"), 0o755))
	require.NoError(t, wt.Close())
}

// TestWatcherInvalidatesViews: a change on disk, whoever makes it, drops
// what the kernel keeps of it in every view of the folder, a directory
// moved is followed under its new name, and a second name made for a
// file (which every view then conceals under all its names) drops
// everything.
func TestWatcherInvalidatesViews(t *testing.T) {
	c := newCollab(t)
	f := c.newView(ownerGrant())
	k := newFakeKernel()
	f.Attach(k)
	wt, err := NewWatcher(c.folder, nil)
	require.NoError(t, err)
	defer wt.Close()
	wt.Add(f)
	defer wt.Remove(f)
	ctx := context.Background()
	_, keep, errno := f.Opendir(ctx, "scratch")
	require.Zero(t, errno)
	assert.True(t, keep, "the watcher vouches for the folder")

	tests := []struct {
		name   string
		change func()
		want   string
	}{
		{"a file written", func() { c.write("scratch/new.md", "n") }, "scratch/new.md"},
		{"a directory made", func() { require.NoError(t, os.MkdirAll(c.in("scratch/d1/sub"), 0o755)) }, "scratch/d1"},
		{"the directory moved", func() { require.NoError(t, os.Rename(c.in("scratch/d1"), c.in("scratch/d2"))) }, "scratch/d2"},
		{"a file below it, by its new name", func() { c.write("scratch/d2/sub/x", "x") }, "scratch/d2/sub/x"},
		{"a second name for a file", func() { require.NoError(t, os.Link(c.in("scratch/new.md"), c.in("scratch/new2.md"))) }, dropAll},
		{"the second name gone: the first is shown again", func() {
			_, errno := f.Lookup(ctx, "scratch/new.md")
			require.Equal(t, syscall.ENOENT, errno, "concealed while it has two names")
			require.NoError(t, os.Remove(c.in("scratch/new2.md")))
		}, "scratch/new.md"},
		{"an append rewrites protocol.json", func() {
			_, err := appendVia(f, acpSteps()[0].line(c, 2))
			require.NoError(t, err)
		}, protocol.ProtocolFile},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			gen := f.entryGen.Load()
			tc.change()
			k.waitFor(t, tc.want)
			if tc.want != dropAll {
				assert.Greater(t, f.entryGen.Load(), gen, "names changed: directory summaries are stale")
			}
		})
	}
	_, errno = f.Lookup(ctx, "scratch/new.md")
	assert.Zero(t, errno)
}

// TestInvalidations: what a view asks the kernel to drop, by name, at a
// grant change and when a file concealed for its link count has one name
// left.
func TestInvalidations(t *testing.T) {
	c := newCollab(t)
	snap := filepath.Join(c.root, "a.snap")
	require.NoError(t, os.WriteFile(snap, []byte("snap"), 0o600))
	f := c.newView(ownerGrant())
	k := newFakeKernel("docs/a.md", "scratch", "oracle/answer.md")
	f.Attach(k)

	require.NoError(t, f.SetGrant(narrowed(), map[string]string{"docs/h.md": snap}))
	assert.EqualValues(t, 1, k.rejudged.Load())
	assert.Equal(t, map[string]bool{"docs/a.md": true, "scratch": false, "oracle/answer.md": false}, k.kept)
	require.NoError(t, f.SetGrant(ownerGrant(), nil))
	assert.Equal(t, []string{"docs/h.md", "docs/h.md"}, k.invalidated, "handed over, then no longer")

	c.write("scratch/a", "a")
	require.NoError(t, os.Link(c.in("scratch/a"), c.in("scratch/b")))
	_, errno := f.Lookup(context.Background(), "scratch/a")
	require.Equal(t, syscall.ENOENT, errno)
	f.recheckConcealed()
	assert.Len(t, k.invalidated, 2, "both names still there")
	require.NoError(t, os.Remove(c.in("scratch/b")))
	f.recheckConcealed()
	assert.Equal(t, "scratch/a", k.invalidated[len(k.invalidated)-1])

	// Past what it can remember, it drops everything instead.
	f.links.m = map[string]struct{}{"": {}}
	f.recheckConcealed()
	assert.EqualValues(t, 1, k.drops.Load())
	f.invalidate(protocol.EventsFile, false)
	assert.Equal(t, "scratch/a", k.invalidated[len(k.invalidated)-1], "events.jsonl's content is never cached")
}
