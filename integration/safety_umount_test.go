package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/internal/testutil"
	"github.com/acpfs/acpfs/ledger"
)

// TestSafetyUmountRefusesWhatIsNotAView: `acpfs umount` acts only on
// acpfs views. A plain directory and a tmpfs (mounted by the test in its
// own directory) are refused with one line and exit 2, --force or not,
// and the tmpfs stays mounted.
func TestSafetyUmountRefusesWhatIsNotAView(t *testing.T) {
	testutil.RequireFUSE(t)
	d := newDir(t, "sf-umount")

	plain := filepath.Join(d, "plain")
	require.NoError(t, os.Mkdir(plain, 0o755))
	_, stderr, code := sfRun(t, "umount", plain)
	assert.Equal(t, 2, code, stderr)
	assert.Contains(t, stderr, "not a mount point")
	sfOneLine(t, stderr)

	tmpfs := filepath.Join(d, "tmpfs")
	sfTmpfs(t, tmpfs)
	for _, args := range [][]string{{"umount", tmpfs}, {"umount", "--force", tmpfs}, {"umount", tmpfs + "/"}} {
		_, stderr, code = sfRun(t, args...)
		assert.Equal(t, 2, code, "%v: %s", args, stderr)
		assert.Contains(t, stderr, "not an acpfs view", args)
		assert.Contains(t, stderr, "tmpfs", args)
		sfOneLine(t, stderr)
		assert.Equal(t, []string{"tmpfs"}, sfFSTypesAt(tmpfs), "%v: the tmpfs must stay mounted", args)
	}
	// Through a symbolic link to it, too.
	link := filepath.Join(d, "link")
	require.NoError(t, os.Symlink(tmpfs, link))
	_, stderr, code = sfRun(t, "umount", link)
	assert.Equal(t, 2, code, stderr)
	assert.Contains(t, stderr, "not an acpfs view")
	assert.Equal(t, []string{"tmpfs"}, sfFSTypesAt(tmpfs))

	_, stderr, code = sfRun(t, "umount")
	assert.Equal(t, 2, code)
	assert.Equal(t, "error: umount: missing MOUNTPOINT (usage: acpfs umount [--force] MOUNTPOINT)\n", stderr)
}

// TestSafetyUmountLiveView: the daemon of a view unmounted with `acpfs
// umount` exits 0 at once (no fusermount, no retries), recording
// mount_stopped.
func TestSafetyUmountLiveView(t *testing.T) {
	e := newSfEnv(t)
	mnt := filepath.Join(filepath.Dir(e.root), "mnt-alice")
	p := pmMount(t, e.folder, e.grant[owner], e.ledger, mnt)

	_, stderr, code := sfRun(t, "umount", mnt)
	require.Equal(t, 0, code, stderr)
	assert.Empty(t, stderr)
	assert.False(t, testutil.Mounted(mnt))
	t0 := time.Now()
	eventually(t, func() bool { return p.Exited() }, "the daemon did not exit after acpfs umount: "+p.Output())
	t.Logf("daemon exited %s after the unmount", time.Since(t0))
	assert.Equal(t, 0, sfExitCode(t, p), p.Output())
	assert.NotContains(t, p.Output(), "fusermount")

	var stopped bool
	for _, r := range pmLedgerRecords(t, e.ledger) {
		if r.Kind == ledger.KindMountStopped && r.Grant == "G-owner" && r.Path == mnt {
			stopped = true
		}
	}
	assert.True(t, stopped, "no mount_stopped record for %s", mnt)

	// The directory is an ordinary empty directory again: mountable.
	p = pmMount(t, e.folder, e.grant[owner], e.ledger, mnt)
	require.NoError(t, p.Stop(), p.Output())
}

// TestSafetyUmountBusyView: a view in use is not unmounted behind its
// user's back: the plain unmount fails with a line that says why and
// names --force; once released it unmounts; --force detaches a busy view
// at once.
func TestSafetyUmountBusyView(t *testing.T) {
	e := newSfEnv(t)
	mnt := filepath.Join(filepath.Dir(e.root), "mnt-alice")
	p := pmMount(t, e.folder, e.grant[owner], e.ledger, mnt)

	held, err := os.Open(filepath.Join(mnt, "proposal.md"))
	require.NoError(t, err)
	_, stderr, code := sfRun(t, "umount", mnt)
	assert.Equal(t, 3, code, stderr)
	assert.Contains(t, stderr, "busy")
	assert.Contains(t, stderr, "--force")
	sfOneLine(t, stderr)
	assert.True(t, testutil.Mounted(mnt), "a busy view must stay mounted")
	require.NoError(t, sfStat(filepath.Join(mnt, ".acpfs", "status")), "and keep serving")
	assert.False(t, p.Exited())

	require.NoError(t, held.Close())
	_, stderr, code = sfRun(t, "umount", mnt)
	require.Equal(t, 0, code, stderr)
	eventually(t, func() bool { return p.Exited() }, "daemon still running: "+p.Output())
	assert.Equal(t, 0, sfExitCode(t, p), p.Output())

	// --force on a busy view: its connection is aborted, the mount is
	// detached, the open descriptor answers an error, the daemon exits.
	p = pmMount(t, e.folder, e.grant[owner], e.ledger, mnt)
	held, err = os.Open(filepath.Join(mnt, "proposal.md"))
	require.NoError(t, err)
	defer held.Close()
	_, stderr, code = sfRun(t, "umount", "--force", mnt)
	require.Equal(t, 0, code, stderr)
	assert.False(t, testutil.Mounted(mnt))
	_, err = held.Read(make([]byte, 16))
	assert.Error(t, err, "the aborted connection must not keep serving")
	eventually(t, func() bool { return p.Exited() }, "daemon still running after --force: "+p.Output())
	assert.Equal(t, 0, sfExitCode(t, p), p.Output())
}

// TestSafetyUmountStaleView: a view whose daemon was killed answers
// ENOTCONN; `acpfs umount` removes it, even while a descriptor opened
// before the crash still holds it.
func TestSafetyUmountStaleView(t *testing.T) {
	e := newSfEnv(t)
	for _, hold := range []bool{false, true} {
		mnt := filepath.Join(filepath.Dir(e.root), "mnt-alice")
		p := pmMount(t, e.folder, e.grant[owner], e.ledger, mnt)
		var held *os.File
		if hold {
			var err error
			held, err = os.Open(filepath.Join(mnt, "proposal.md"))
			require.NoError(t, err)
		}
		sfKill(t, p)
		require.ErrorIs(t, sfReaches(mnt), syscall.ENOTCONN)
		_, stderr, code := sfRun(t, "umount", mnt)
		require.Equal(t, 0, code, "hold=%v: %s", hold, stderr)
		assert.False(t, testutil.Mounted(mnt), "hold=%v", hold)
		if held != nil {
			held.Close()
		}
		require.NoError(t, sfStat(mnt))
	}
}

// TestSafetyUmountViewOfCoordinator: a view of `acpfs up` unmounted from
// outside does not make the coordinator fail or hang when it stops.
func TestSafetyUmountViewOfCoordinator(t *testing.T) {
	e := newSfEnv(t)
	p := pmUp(t, e.runs, e.folder, e.root, []string{owner, reviewer})
	_, stderr, code := sfRun(t, "umount", filepath.Join(e.root, reviewer))
	require.Equal(t, 0, code, stderr)
	assert.False(t, testutil.Mounted(filepath.Join(e.root, reviewer)))
	// Stop fails when the coordinator outlives SIGTERM's grace.
	require.NoError(t, p.Stop(), p.Output())
	assert.NotContains(t, p.Output(), "fusermount")
	assert.False(t, strings.Contains(p.Output(), "error"), p.Output())
}

// TestSafetyUmountForceFreesHungView: a daemon that stops answering
// (SIGSTOP here) hangs its view. A plain `acpfs umount` does not hang
// with it: the view is in use, so it says busy; --force aborts the
// connection, which frees the process waiting in the view.
//
// The processes that use the view are children, never this process: a
// FUSE file open here would be closed by every child this test starts
// (close-on-exec), and that close waits for the stopped daemon forever.
func TestSafetyUmountForceFreesHungView(t *testing.T) {
	e := newSfEnv(t)
	mnt := filepath.Join(filepath.Dir(e.root), "mnt-alice")
	p := pmMount(t, e.folder, e.grant[owner], e.ledger, mnt)
	eventually(t, func() bool { return strings.Contains(p.Output(), "mounted ") }, "not started: "+p.Output())

	// A shell sitting in the view keeps it busy.
	sitter := exec.Command("sh", "-c", "cd \"$0\" && echo in && exec sleep 600", mnt)
	var sitterOut testutil.SyncBuffer
	sitter.Stdout = &sitterOut
	require.NoError(t, sitter.Start())
	t.Cleanup(func() { _ = sitter.Process.Kill(); _ = sitter.Wait() })
	eventually(t, func() bool { return strings.Contains(sitterOut.String(), "in") }, "the shell did not enter the view")

	require.NoError(t, syscall.Kill(p.PID(), syscall.SIGSTOP))
	t.Cleanup(func() { _ = syscall.Kill(p.PID(), syscall.SIGCONT) })

	// A reader blocks in the hung view.
	reader := exec.Command("cat", filepath.Join(mnt, "readiness.md"))
	require.NoError(t, reader.Start())
	readerDone := make(chan error, 1)
	go func() { readerDone <- reader.Wait() }()
	t.Cleanup(func() { _ = reader.Process.Kill(); <-readerDone })

	_, stderr, code := sfRun(t, "umount", mnt)
	assert.Equal(t, 3, code, stderr)
	assert.Contains(t, stderr, "--force")
	assert.True(t, testutil.Mounted(mnt))

	_, stderr, code = sfRun(t, "umount", "--force", mnt)
	require.Equal(t, 0, code, stderr)
	assert.False(t, testutil.Mounted(mnt))
	select {
	case err := <-readerDone:
		readerDone <- err
		assert.Error(t, err, "the blocked reader gets an error once the connection is aborted")
	case <-time.After(10 * time.Second):
		t.Fatal("the reader is still blocked after --force")
	}
	require.NoError(t, syscall.Kill(p.PID(), syscall.SIGCONT))
	eventually(t, func() bool { return p.Exited() }, "daemon still running: "+p.Output())
	assert.Equal(t, 0, sfExitCode(t, p), p.Output())
}
