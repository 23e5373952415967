package view

import (
	"context"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestOpenCachedChecksWhatItReuses: a read-only open reuses the judgement
// a lookup made only while the grant view, the folder's names and the
// file at the name are the ones judged. The watcher here watches another
// directory: it vouches, and never reports a change of this folder, as a
// watcher whose events are still on their way. What the open checks
// itself must catch every change of the file at the name.
func TestOpenCachedChecksWhatItReuses(t *testing.T) {
	const rel = "docs/a.md"
	tests := []struct {
		name   string
		change func(t *testing.T, c *collab, f *View, n *fakeNode)
		flags  int
		reused bool
	}{
		{name: "nothing changed", reused: true},
		{name: "nothing changed, read with O_NONBLOCK and O_NOATIME", flags: unix.O_NONBLOCK | unix.O_NOATIME, reused: true},
		{name: "opened for writing", flags: unix.O_RDWR},
		{name: "opened with O_TRUNC", flags: unix.O_TRUNC},
		{name: "opened with O_APPEND", flags: unix.O_APPEND},
		{name: "opened with O_DIRECTORY", flags: unix.O_DIRECTORY},
		{name: "replaced by a rename", change: func(t *testing.T, c *collab, _ *View, _ *fakeNode) {
			c.write("docs/b.md", "another file\n")
			require.NoError(t, os.Rename(c.in("docs/b.md"), c.in(rel)))
		}},
		{name: "given a second name", change: func(t *testing.T, c *collab, _ *View, _ *fakeNode) {
			require.NoError(t, os.Link(c.in(rel), c.in("docs/alias.md")))
		}},
		{name: "replaced by a FIFO", change: func(t *testing.T, c *collab, _ *View, _ *fakeNode) {
			require.NoError(t, os.Remove(c.in(rel)))
			require.NoError(t, unix.Mkfifo(c.in(rel), 0o644))
		}},
		{name: "replaced by a symlink", change: func(t *testing.T, c *collab, _ *View, _ *fakeNode) {
			require.NoError(t, os.Remove(c.in(rel)))
			require.NoError(t, os.Symlink("../oracle/answer.md", c.in(rel)))
		}},
		{name: "its directory replaced by a symlink", change: func(t *testing.T, c *collab, _ *View, _ *fakeNode) {
			require.NoError(t, os.Rename(c.in("docs"), c.in("docs.old")))
			require.NoError(t, os.Symlink("docs.old", c.in("docs")))
		}},
		{name: "concealed by identity since (a coordinator's file moved there)", change: func(t *testing.T, c *collab, f *View, _ *fakeNode) {
			require.NoError(t, f.conceal.shared.Hold(c.in(rel)))
		}},
		{name: "a grant applied", change: func(t *testing.T, _ *collab, f *View, _ *fakeNode) {
			require.NoError(t, f.SetGrant(f.Grant(), nil))
		}},
		{name: "a directory moved, made or marked in the folder", change: func(t *testing.T, _ *collab, f *View, _ *fakeNode) {
			f.dirGen.Add(1)
		}},
		{name: "a file's name changed in the folder", change: func(t *testing.T, _ *collab, f *View, _ *fakeNode) {
			f.entryGen.Add(1)
		}, reused: true},
		{name: "the node renamed", change: func(t *testing.T, _ *collab, _ *View, n *fakeNode) {
			vp := "docs/other.md"
			n.vp.Store(&vp)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCollab(t)
			f := c.newView(reviewerGrant())
			wt, err := NewWatcher(t.TempDir(), nil)
			require.NoError(t, err)
			t.Cleanup(func() { wt.Close() })
			wt.Add(f)
			n := newFakeNode(rel)
			e, errno := f.Lookup(context.Background(), rel)
			require.Zero(t, errno)
			n.Seen().Found(&e)
			if tt.change != nil {
				tt.change(t, c, f, n)
			}
			o, ok := f.openCached(n, n.ViewPath(), uint32(unix.O_RDONLY|tt.flags))
			if ok {
				defer unix.Close(o.fd)
				var st unix.Stat_t
				require.NoError(t, unix.Stat(c.in(rel), &st))
				assert.Equal(t, st.Ino, o.st.Ino, "the file at the name")
			}
			assert.Equal(t, tt.reused, ok)
		})
	}
}

// TestOpenCachedNotForProtocolFiles: events.jsonl and protocol.json are
// judged at every open (their handles are the protocol's); other files a
// lookup finds leave a judgement an open may reuse, hidden ones none.
func TestOpenCachedNotForProtocolFiles(t *testing.T) {
	c := newCollab(t)
	c.write("scratch/notes.md", "notes\n")
	f := c.newView(grantOf("bob", []string{"docs/**", "events.jsonl", "protocol.json"}, nil, []string{"scratch/**"}))
	for _, rel := range []string{"events.jsonl", "protocol.json", "docs/a.md", "scratch/notes.md"} {
		e, errno := f.Lookup(context.Background(), rel)
		require.Zero(t, errno, rel)
		assert.Equal(t, !managed(rel), e.open != nil, rel)
	}
	_, errno := f.Lookup(context.Background(), "oracle/answer.md")
	assert.Equal(t, syscall.ENOENT, errno)
}
