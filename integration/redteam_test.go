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

// These cases come from an outside attack on a built binary: each was a
// way around the view before it was fixed.

// TestRenamingAnAncestorDoesNotExposeHiddenEntries: paths are what the
// grant judges, so moving a directory would move what it hides to paths
// the grant shows.
func TestRenamingAnAncestorDoesNotExposeHiddenEntries(t *testing.T) {
	c := newCollab(t)
	escPlant(t, c.folder, nil, map[string]string{
		"scratch/alice/notes.md": "ALICE-PRIVATE\n",
		"scratch/mine/a.md":      "mine\n",
	}, nil)
	g := &grants.Grant{GrantID: "G-carol", AgentID: reviewer, Role: "r", Objective: "o",
		MayRead: []string{"**"}, MayWrite: []string{"scratch/**", "events.jsonl"},
		ForbiddenRead: []string{"oracle/**", "scratch/alice/**"}}
	v := c.mountView(g)
	before := escTree(t, c.folder)

	assert.ErrorIs(t, os.Rename(v.path("scratch"), v.path("scratch2")), syscall.EACCES)
	escRequireSameTree(t, before, escTree(t, c.folder))
	c.requireRecord(ledger.KindDenied, "scratch", "rename")

	// A directory whose whole content the grant shows moves freely.
	require.NoError(t, os.Rename(v.path("scratch/mine"), v.path("scratch/mine2")))
	assert.Equal(t, "mine\n", readFile(t, filepath.Join(c.folder, "scratch/mine2/a.md")))
}

// TestSymlinksThroughOtherLinksAreConcealed: "me/../../oracle" means the
// oracle when me is a link to ".", whatever it means lexically, so such a
// target is never judged lexically.
func TestSymlinksThroughOtherLinksAreConcealed(t *testing.T) {
	c := newCollab(t)
	v := c.mountView(sealGrant())
	require.NoError(t, os.MkdirAll(v.path("scratch/rep"), 0o755))
	require.NoError(t, os.Symlink(".", v.path("scratch/rep/me")))
	assert.ErrorIs(t, os.Symlink("me/../../oracle", v.path("scratch/rep/o")), syscall.EACCES)

	require.NoError(t, os.Symlink("me/../../../oracle", filepath.Join(c.folder, "scratch/rep/o2")))
	_, err := os.Lstat(v.path("scratch/rep/o2"))
	assert.ErrorIs(t, err, syscall.ENOENT)
	_, err = os.ReadFile(v.path("scratch/rep/o2/answer.md"))
	assert.ErrorIs(t, err, syscall.ENOENT)
}

// TestRenameWhiteoutIsRefused: RENAME_WHITEOUT would have the daemon make
// a device node in the folder.
func TestRenameWhiteoutIsRefused(t *testing.T) {
	c := newCollab(t)
	v := c.mountView(sealGrant())
	require.NoError(t, os.MkdirAll(v.path("scratch"), 0o755))
	require.NoError(t, os.WriteFile(v.path("scratch/a.md"), []byte("a"), 0o644))
	err := unix.Renameat2(unix.AT_FDCWD, v.path("scratch/a.md"), unix.AT_FDCWD, v.path("scratch/b.md"), unix.RENAME_WHITEOUT)
	assert.ErrorIs(t, err, syscall.EINVAL)
	_, err = os.Lstat(filepath.Join(c.folder, "scratch/a.md"))
	assert.NoError(t, err)
}

// TestALaterVersionReadThroughAnOpenDescriptorIsRecorded: the ledger's
// hash is of what the agent read, even when a writer elsewhere rewrote
// the file under its open descriptor.
func TestALaterVersionReadThroughAnOpenDescriptorIsRecorded(t *testing.T) {
	c := newCollab(t)
	escPlant(t, c.folder, nil, map[string]string{"scratch/doc.md": "first version\n"}, nil)
	v := c.mountView(sealGrant())
	f, err := os.Open(v.path("scratch/doc.md"))
	require.NoError(t, err)
	defer f.Close()
	b := make([]byte, 64)
	n, err := f.ReadAt(b, 0)
	require.Equal(t, "first version\n", string(b[:n]), "%v", err)

	second := "second, longer version\n"
	require.NoError(t, os.WriteFile(filepath.Join(c.folder, "scratch/doc.md"), []byte(second), 0o644))
	eventually(t, func() bool {
		n, _ := f.ReadAt(b, 0)
		return string(b[:n]) == second
	}, "the new version is read")
	found := false
	for _, r := range c.records() {
		if r.Kind == ledger.KindRead && r.Path == "scratch/doc.md" && r.SHA256 == fileSHA(t, filepath.Join(c.folder, "scratch/doc.md")) {
			found = true
		}
	}
	assert.True(t, found, "a read record holds the hash of the version read")
}

// TestGrantAndLedgerInsideTheFolderAreHidden: a grant file and a ledger
// that the coordinator keeps inside the folder are never shown, since the
// agent could otherwise widen its own grant or rewrite the evidence: a
// grant that would show them is refused before anything is mounted (and
// views conceal them by identity besides, see identity_test.go).
func TestGrantAndLedgerInsideTheFolderAreHidden(t *testing.T) {
	c := newCollab(t)
	g := &grants.Grant{GrantID: "G-all", AgentID: reviewer, Role: "r", Objective: "o",
		MayRead: []string{"**"}, MayWrite: []string{"**"}, ForbiddenRead: []string{"oracle/**"}}
	data, err := json.Marshal(g)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Join(c.folder, "grants"), 0o755))
	grantFile := filepath.Join(c.folder, "grants", "G-all.json")
	require.NoError(t, os.WriteFile(grantFile, data, 0o644))
	mnt := filepath.Join(c.root, "mnt-inside")
	require.NoError(t, os.Mkdir(mnt, 0o755))
	outside := filepath.Join(c.root, "G-all.json")
	require.NoError(t, os.WriteFile(outside, data, 0o644))
	evidence := filepath.Join(c.root, "evidence", "ledger.jsonl")
	require.NoError(t, os.MkdirAll(filepath.Dir(evidence), 0o700))
	require.NoError(t, os.MkdirAll(filepath.Join(c.folder, "evidence"), 0o700))
	for _, tt := range []struct{ name, grant, ledger, want string }{
		{"a grant file outside any run directory", grantFile, evidence, "not in a run directory: other views would show it"},
		{"the ledger in a subdirectory", outside, filepath.Join(c.folder, "evidence", "ledger.jsonl"), "evidence lies inside the collaboration folder"},
		{"the ledger in the folder's root", outside, filepath.Join(c.folder, "ledger.jsonl"), "which its views show: no view could hide the ledger"},
		{"the ledger beside the folder", outside, filepath.Join(c.root, "ledger.jsonl"), "which its views show: no view could hide the ledger"},
	} {
		_, stderr, code := sfRun(t, "mount", "--folder", c.folder, "--grant", tt.grant, "--ledger", tt.ledger, mnt)
		assert.Equal(t, 2, code, "%s: %s", tt.name, stderr)
		assert.Contains(t, stderr, tt.want, tt.name)
		sfOneLine(t, stderr)
		assert.Empty(t, sfFSTypesAt(mnt), "%s: nothing may be mounted", tt.name)
	}
}
