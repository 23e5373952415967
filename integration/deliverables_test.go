package integration

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/ledger"
)

// TestDeliverableCannotBeMovedAway: the primary deliverable protocol.json
// names is kept like the required documents. Its owner edits it and saves
// over it (an editor's rename onto it, sed -i), but cannot remove it or
// rename it away, by itself (the MCP filesystem server's move_file) or
// with its directory; other files beside it are the owner's to remove.
func TestDeliverableCannotBeMovedAway(t *testing.T) {
	c := newCollab(t)
	require.NoError(t, os.MkdirAll(filepath.Join(c.folder, "scratch"), 0o755))
	v := c.mountView(ownerGrant())
	p := v.path
	require.NoError(t, os.WriteFile(p(primary), []byte("# Design\n\nStatus: Draft\n"), 0o644))
	require.NoError(t, os.WriteFile(p("deliverables/notes.md"), []byte("notes\n"), 0o644))

	refused := []struct {
		name, path, op string
		do             func() error
	}{
		{"rename within deliverables (move_file)", primary, "rename",
			func() error { return os.Rename(p(primary), p("deliverables/old-spec.md")) }},
		{"rename into scratch", primary, "rename",
			func() error { return os.Rename(p(primary), p("scratch/spec.md")) }},
		{"unlink", primary, "unlink", func() error { return os.Remove(p(primary)) }},
		{"RENAME_EXCHANGE with another file", primary, "rename", func() error {
			return unix.Renameat2(unix.AT_FDCWD, p(primary), unix.AT_FDCWD, p("deliverables/notes.md"), unix.RENAME_EXCHANGE)
		}},
		{"rename of its directory", "deliverables", "rename",
			func() error { return os.Rename(p("deliverables"), p("scratch/deliverables")) }},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do()
			require.ErrorIs(t, err, syscall.EPERM)
			c.requireRecord(ledger.KindDenied, tc.path, tc.op)
			assert.FileExists(t, filepath.Join(c.folder, primary))
			assert.Contains(t, readFile(t, v.path(".acpfs/last-error")), "deliverable")
		})
	}

	t.Run("saved over by a rename onto it", func(t *testing.T) {
		require.NoError(t, os.WriteFile(p("deliverables/.design-spec.md.swp"), []byte("# Design\n\nStatus: In Review\n"), 0o644))
		require.NoError(t, os.Rename(p("deliverables/.design-spec.md.swp"), p(primary)))
		assert.Equal(t, "# Design\n\nStatus: In Review\n", readFile(t, filepath.Join(c.folder, primary)))
	})
	t.Run("edited in place by sed -i", func(t *testing.T) {
		out, code := v.sh("sed -i 's/In Review/Draft/' " + primary)
		require.Equal(t, 0, code, out)
		assert.Equal(t, "# Design\n\nStatus: Draft\n", readFile(t, filepath.Join(c.folder, primary)))
	})
	t.Run("another file beside it is removed", func(t *testing.T) {
		require.NoError(t, os.Remove(p("deliverables/notes.md")))
		assert.NoFileExists(t, filepath.Join(c.folder, "deliverables/notes.md"))
	})
}
