package integration

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSafetyMountRefusesBadMountpoints: `acpfs mount` mounts only on an
// empty directory that is not a mount point already, outside the folder,
// the run directory and the ledger's directory. Each refusal is one line,
// exit 2, and mounts nothing.
func TestSafetyMountRefusesBadMountpoints(t *testing.T) {
	e := newSfEnv(t)
	base := filepath.Dir(e.root)
	mountArgs := func(ledgerPath, mp string) []string {
		return []string{"mount", "--folder", e.folder, "--grant", e.grant[owner], "--ledger", ledgerPath, mp}
	}

	// No mountpoint at all.
	_, stderr, code := sfRun(t, "mount", "--folder", e.folder, "--grant", e.grant[owner], "--ledger", e.ledger)
	assert.Equal(t, 2, code, stderr)
	assert.Equal(t, "error: mount: missing MOUNTPOINT (usage: acpfs mount --folder F --grant G (--ledger L | --runs DIR) MOUNTPOINT)\n", stderr)

	nonEmpty := filepath.Join(base, "full")
	require.NoError(t, os.MkdirAll(nonEmpty, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(nonEmpty, "keep.txt"), []byte("mine\n"), 0o644))
	file := filepath.Join(base, "a-file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	inFolder := filepath.Join(e.folder, "mnt")
	require.NoError(t, os.Mkdir(inFolder, 0o755))
	inRuns := filepath.Join(e.runs, "mnt")
	require.NoError(t, os.Mkdir(inRuns, 0o755))
	ledgerDir := filepath.Join(base, "ledgers")
	inLedgerDir := filepath.Join(ledgerDir, "mnt")
	require.NoError(t, os.MkdirAll(inLedgerDir, 0o755))
	tmpfs := filepath.Join(base, "tmpfs")
	sfTmpfs(t, tmpfs)

	for _, c := range []struct {
		name, mp, ledger, want string
	}{
		{"missing", filepath.Join(base, "missing"), e.ledger, "does not exist"},
		{"not empty", nonEmpty, e.ledger, "not empty"},
		{"a file", file, e.ledger, "not a directory"},
		{"the folder", e.folder, e.ledger, "the collaboration folder itself"},
		{"inside the folder", inFolder, e.ledger, "inside the collaboration folder"},
		{"inside the run directory", inRuns, e.ledger, "no view may show"},
		{"inside the ledger directory", inLedgerDir, filepath.Join(ledgerDir, "ledger.jsonl"), "no view may show"},
		{"a tmpfs mount", tmpfs, e.ledger, "already a mount point"},
	} {
		before := sfFSTypesAt(c.mp)
		_, stderr, code := sfRun(t, mountArgs(c.ledger, c.mp)...)
		assert.Equal(t, 2, code, "%s: %s", c.name, stderr)
		assert.Contains(t, stderr, c.want, c.name)
		sfOneLine(t, stderr)
		assert.Equal(t, before, sfFSTypesAt(c.mp), "%s: nothing may be mounted", c.name)
	}
	assert.Equal(t, "mine\n", readFile(t, filepath.Join(nonEmpty, "keep.txt")))

	// Another view: the second grant must not silently win over the
	// first one's mount.
	viewA := filepath.Join(base, "mnt-alice")
	p := pmMount(t, e.folder, e.grant[owner], e.ledger, viewA)
	_, stderr, code = sfRun(t, "mount", "--folder", e.folder, "--grant", e.grant[reviewer], "--ledger", e.ledger, viewA)
	assert.Equal(t, 2, code, stderr)
	assert.Contains(t, stderr, "already an acpfs view")
	sfOneLine(t, stderr)
	assert.Equal(t, []string{"fuse.acpfs"}, sfFSTypesAt(viewA))
	assert.Contains(t, readFile(t, filepath.Join(viewA, ".acpfs", "status")), "agent: alice", "the first view still serves")
	require.NoError(t, p.Stop(), p.Output())

	// A view of a killed daemon: exit 3 with the command that clears it.
	p = pmMount(t, e.folder, e.grant[owner], e.ledger, viewA)
	sfKill(t, p)
	_, stderr, code = sfRun(t, mountArgs(e.ledger, viewA)...)
	assert.Equal(t, 3, code, stderr)
	assert.Contains(t, stderr, "acpfs umount")
	_, stderr, code = sfRun(t, "umount", viewA)
	require.Equal(t, 0, code, stderr)
}
