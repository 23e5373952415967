package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/grants"
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

// dlMovedAway tries every way of moving the deliverable at rel (a view
// path, recorded as rec) away through v: each is refused with EPERM and
// a denied record, and the file stays.
func dlMovedAway(t *testing.T, c *collab, v *view, rel, rec, other, onDisk string) {
	t.Helper()
	p := v.path
	for _, tc := range []struct {
		name string
		do   func() error
	}{
		{"rename within its directory (move_file)", func() error { return os.Rename(p(rel), p(filepath.Join(filepath.Dir(rel), "old.md"))) }},
		{"rename elsewhere", func() error { return os.Rename(p(rel), p(other)) }},
		{"unlink", func() error { return os.Remove(p(rel)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.ErrorIs(t, tc.do(), syscall.EPERM)
			assert.FileExists(t, onDisk)
		})
	}
	var seen bool
	for _, r := range c.records() {
		if r.Kind == ledger.KindDenied && r.Path == rec {
			seen = true
		}
	}
	assert.True(t, seen, "no denied record for %s", rec)
}

// TestSupportingDeliverableCannotBeMovedAway: a supporting deliverable
// protocol.json names is kept like the primary one: edited and saved
// over, never removed or renamed away.
func TestSupportingDeliverableCannotBeMovedAway(t *testing.T) {
	c := newCollab(t)
	require.NoError(t, os.MkdirAll(filepath.Join(c.folder, "scratch"), 0o755))
	const support = "deliverables/api-notes.md"
	require.NoError(t, os.WriteFile(filepath.Join(c.folder, support), []byte("# API notes\n"), 0o644))
	pj := filepath.Join(c.folder, "protocol.json")
	var proto map[string]any
	require.NoError(t, json.Unmarshal([]byte(readFile(t, pj)), &proto))
	proto["deliverables"].(map[string]any)["supporting"] = []any{map[string]any{"type": "custom", "file": "api-notes.md", "checklist": []any{}}}
	data, err := json.MarshalIndent(proto, "", "  ")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(pj, data, 0o644))
	v := c.mountView(ownerGrant())

	dlMovedAway(t, c, v, support, support, "scratch/api-notes.md", filepath.Join(c.folder, support))
	require.NoError(t, os.WriteFile(v.path("deliverables/.api-notes.md.swp"), []byte("# API notes, v2\n"), 0o644))
	require.NoError(t, os.Rename(v.path("deliverables/.api-notes.md.swp"), v.path(support)), "saved over")
	assert.Equal(t, "# API notes, v2\n", readFile(t, filepath.Join(c.folder, support)))
	require.NoError(t, os.WriteFile(v.path("deliverables/other.md"), []byte("x\n"), 0o644))
	require.NoError(t, os.Rename(v.path("deliverables/other.md"), v.path("scratch/other.md")), "a file protocol.json does not name moves")
}

// TestExternalDeliverableCannotBeMovedAway: under --view-root repo, the
// external primary deliverable beside the folder cannot be renamed or
// removed through the view either, and is recorded by its name there.
func TestExternalDeliverableCannotBeMovedAway(t *testing.T) {
	c, repo := newExternalCollab(t)
	alice := c.mountAtRepo(&grants.Grant{GrantID: "G-owner", AgentID: owner, Role: "proposal owner", Objective: "Write the design",
		MayRead: []string{"**", "../deliverables/**", "../src/**"}, ForbiddenRead: []string{"../secret/**"},
		MayWrite: []string{"events.jsonl", "protocol.json", "../deliverables/**", "../src/**"},
	}, repo)
	spec := filepath.Join(repo, "deliverables", "design-spec.md")
	require.NoError(t, os.WriteFile(alice.path("deliverables/design-spec.md"), []byte(designSpec("Draft")), 0o644))
	dlMovedAway(t, c, alice, "deliverables/design-spec.md", extPrimary, "src/design-spec.md", spec)
	require.NoError(t, os.WriteFile(alice.path("deliverables/.spec.swp"), []byte(designSpec("In Review")), 0o644))
	require.NoError(t, os.Rename(alice.path("deliverables/.spec.swp"), alice.path("deliverables/design-spec.md")), "saved over")
	assert.Contains(t, readFile(t, spec), "Status: In Review")
}
