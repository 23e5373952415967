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

// TestReopenJudgedAgainAfterAChange: a read-only open of a file the view
// opened before may reuse that judgement (grep -r, a build), but only
// while nothing it depended on changed. Each change below is made on the
// backing folder or to the grant right after two opens, without waiting
// for the watcher, and the next open must answer as a first one would:
// the new content, recorded with its hash, or the name refused.
func TestReopenJudgedAgainAfterAChange(t *testing.T) {
	const rel = "scratch/a.md"
	tests := []struct {
		name   string
		change func(t *testing.T, c *collab, v *view, g *grants.Grant)
		// want is the content the next open reads; "" when it must be
		// refused with errno.
		want  string
		errno syscall.Errno
	}{
		{name: "replaced by a rename", want: "second version\n", change: func(t *testing.T, c *collab, _ *view, _ *grants.Grant) {
			tmp := filepath.Join(c.folder, "scratch", ".a.md.new")
			require.NoError(t, os.WriteFile(tmp, []byte("second version\n"), 0o644))
			require.NoError(t, os.Rename(tmp, filepath.Join(c.folder, rel)))
		}},
		{name: "given a second name", errno: syscall.ENOENT, change: func(t *testing.T, c *collab, _ *view, _ *grants.Grant) {
			require.NoError(t, os.Link(filepath.Join(c.folder, rel), filepath.Join(c.folder, "scratch", "alias.md")))
		}},
		{name: "replaced by a FIFO", errno: syscall.ENOENT, change: func(t *testing.T, c *collab, _ *view, _ *grants.Grant) {
			require.NoError(t, os.Remove(filepath.Join(c.folder, rel)))
			require.NoError(t, unix.Mkfifo(filepath.Join(c.folder, rel), 0o644))
		}},
		{name: "replaced by a symlink to the oracle", errno: syscall.ENOENT, change: func(t *testing.T, c *collab, _ *view, _ *grants.Grant) {
			require.NoError(t, os.Remove(filepath.Join(c.folder, rel)))
			require.NoError(t, os.Symlink("../oracle/answer.md", filepath.Join(c.folder, rel)))
		}},
		{name: "its directory swapped for another", errno: syscall.ENOENT, change: func(t *testing.T, c *collab, _ *view, _ *grants.Grant) {
			require.NoError(t, os.Rename(filepath.Join(c.folder, "scratch"), filepath.Join(c.folder, "scratch.old")))
			require.NoError(t, os.Symlink("oracle", filepath.Join(c.folder, "scratch")))
		}},
		{name: "forbidden by the grant", errno: syscall.ENOENT, change: func(t *testing.T, c *collab, v *view, g *grants.Grant) {
			g.ForbiddenRead = append(g.ForbiddenRead, rel)
			c.writeGrant(g)
			v.m.ReloadGrant()
		}},
		{name: "grant revoked", errno: syscall.ENOENT, change: func(t *testing.T, c *collab, v *view, g *grants.Grant) {
			g.Revoked = true
			c.writeGrant(g)
			v.m.ReloadGrant()
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCollab(t)
			writeFiles(t, c.folder, map[string]string{rel: "first version\n", "oracle/a.md": "the secret answer\n"})
			g := reviewerGrant()
			v := c.mountView(g)
			for i := 0; i < 2; i++ {
				assert.Equal(t, "first version\n", readFile(t, v.path(rel)))
			}
			tt.change(t, c, v, g)
			// O_NONBLOCK: a FIFO must not hold the test if it were opened.
			fd, err := unix.Open(v.path(rel), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
			if tt.want == "" {
				if err == nil {
					unix.Close(fd)
				}
				assert.ErrorIs(t, err, tt.errno)
				return
			}
			require.NoError(t, err)
			got := make([]byte, 64)
			n, err := unix.Pread(fd, got, 0)
			unix.Close(fd)
			require.NoError(t, err)
			// The size the kernel holds may still be the old file's until
			// the watcher's invalidation lands: a prefix of the new
			// content, never a byte of the old one.
			require.Positive(t, n)
			assert.True(t, strings.HasPrefix(tt.want, string(got[:n])), "read %q, want (a prefix of) %q", got[:n], tt.want)
			want := fileSHA(t, filepath.Join(c.folder, rel))
			found := false
			for _, r := range c.records() {
				found = found || r.Kind == ledger.KindRead && r.Path == rel && r.SHA256 == want
			}
			assert.True(t, found, "the read of the new content is in the ledger with its hash")
		})
	}
}
