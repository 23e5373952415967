package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/internal/testutil"
)

// Hosts start in any order: a host whose folder is empty, started before
// the first host has published the collaboration, waits for it (saying
// so) and comes up once it is there, instead of stopping on a missing
// protocol.json.
func TestMultiHostSecondHostStartsBeforeTheFirstPublishes(t *testing.T) {
	e := newMHEnv(t, "alice", "bob")
	srv := mhServer(t, -1, filepath.Join(e.dir, "nats"))
	a, b := e.host("ha", srv.url()), e.host("hb", srv.url())
	a.grant("alice", "alice")
	b.grant("bob", "bob")
	writeSpec(t, a)

	mounts, ready, args := b.upArgs()
	// Started without waiting for its views: they come after host a.
	b.proc = testutil.StartDaemon(t, testutil.DaemonSpec{Bin: acpfsBin, Args: args, Mounts: mounts})
	eventually(t, func() bool {
		return strings.Contains(b.proc.Output(), "waiting for collaboration mh in the store: no protocol.json and no history (events.jsonl) yet") ||
			b.proc.Exited()
	}, "host b says it waits for the store")
	require.False(t, b.proc.Exited(), "host b stopped instead of waiting:\n%s", b.proc.Output())
	_, err := os.Stat(ready[0])
	require.Error(t, err, "host b serves a view before anything was published")

	a.up()
	eventually(t, func() bool {
		_, err := os.Stat(ready[0])
		return (err == nil && strings.Contains(b.proc.Output(), " view(s) of ")) || b.proc.Exited()
	}, "host b comes up once host a has published")
	require.False(t, b.proc.Exited(), "host b stopped:\n%s", b.proc.Output())

	// One collaboration: b's copy has a's documents and history, and
	// takes part in it.
	spec, err := os.ReadFile(filepath.Join(b.view("bob"), primary))
	require.NoError(t, err)
	require.Equal(t, designSpec("Draft"), string(spec))
	require.Zero(t, drafted(a.view("alice"), "after b came up"), lastError(a.view("alice")))
	waitLines(t, 2, a, b)
	eventually(t, func() bool {
		st, err := os.ReadFile(filepath.Join(b.view("bob"), ".acpfs", "status"))
		return err == nil && strings.Contains(string(st), "last seq: 2")
	}, "bob's view on host b shows seq 2")
	require.Equal(t, string(a.events()), string(b.events()))
}

// Nothing is ever published: the host waits as long as --store-wait
// says, with progress on stderr, then fails with an error naming what is
// missing and mounts nothing.
func TestMultiHostNothingPublishedFailsAfterTheBound(t *testing.T) {
	e := newMHEnv(t, "alice", "bob")
	srv := mhServer(t, -1, filepath.Join(e.dir, "nats"))
	b := e.host("ha", srv.url()) // the first host's directories, emptied: nobody holds the collaboration
	require.NoError(t, os.RemoveAll(b.folder))
	require.NoError(t, os.MkdirAll(b.folder, 0o755))
	b.grant("bob", "bob")

	mounts, _, args := b.upArgs()
	_, stderr, code := acpfs(t, append(args, "--store-wait", "2s")...)
	require.Equal(t, 2, code, stderr) // as any start failure (README, exit codes)
	require.Contains(t, stderr, "acpfs up: waiting for collaboration mh in the store: no protocol.json and no history (events.jsonl) yet (0s of 2s)")
	require.Contains(t, stderr, "collaboration mh: no protocol.json and no history (events.jsonl) in the store after waiting 2s")
	require.Contains(t, stderr, "--store-wait")
	for _, m := range mounts {
		require.False(t, testutil.Mounted(m), "%s mounted", m)
	}
}
