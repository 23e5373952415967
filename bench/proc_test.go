package bench

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/internal/testutil"
)

// gate skips unless the harness is enabled and this machine can mount.
// Every test and benchmark calls it first, so nothing mounts by accident.
func gate(tb testing.TB) {
	tb.Helper()
	if !enabled {
		tb.Skip("benchmarks mount real views and take minutes: set ACPFS_BENCH=1 (scripts/bench.sh does)")
	}
	testutil.RequireFUSE(tb)
}

// newDir makes a directory under tmpRoot, removed at cleanup (after the
// mounts in it, since cleanups run last-in first-out).
func newDir(tb testing.TB, name string) string {
	tb.Helper()
	d, err := os.MkdirTemp(tmpRoot, name+"-")
	require.NoError(tb, err)
	tb.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// daemon is a FUSE server process the harness started: a loopback, an
// `acpfs mount` or an `acpfs up`.
type daemon struct {
	*testutil.Daemon
	// ledger is the ledger of an acpfs daemon, when the harness chose it.
	ledger string
}

// startDaemon execs bin and returns once every probe path answers a
// stat (the mount is served). mounts are the mountpoints the process
// owns; when it stops they must all be gone (see testutil.StartDaemon).
func startDaemon(tb testing.TB, mounts, probes []string, bin string, args ...string) *daemon {
	tb.Helper()
	return &daemon{Daemon: testutil.StartDaemon(tb, testutil.DaemonSpec{Bin: bin, Args: args, Mounts: mounts, Ready: probes})}
}
