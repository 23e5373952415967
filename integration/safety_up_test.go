package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/internal/testutil"
	"github.com/acpfs/acpfs/mount"
)

// sfStatus runs `acpfs status --json` and decodes it.
func sfStatus(t *testing.T, runs string) (mount.CoordinatorStatus, string, int) {
	t.Helper()
	out, stderr, code := sfRun(t, "status", "--runs", runs, "--json")
	var st mount.CoordinatorStatus
	require.NoError(t, json.Unmarshal([]byte(out), &st), "status output: %s%s", out, stderr)
	return st, stderr, code
}

// TestSafetyUpOneCoordinatorPerRunDir: a second `acpfs up` on the same run
// directory fails at once, naming the first one's pid, mounts nothing,
// and leaves the first one's status file alone.
func TestSafetyUpOneCoordinatorPerRunDir(t *testing.T) {
	e := newSfEnv(t)
	first := pmUp(t, e.runs, e.folder, e.root, []string{owner, reviewer})

	root2 := filepath.Join(filepath.Dir(e.root), "mnt2")
	_, stderr, code := sfRun(t, "up", "--runs", e.runs, "--folder", e.folder, "--root", root2)
	assert.Equal(t, 2, code, stderr)
	assert.Contains(t, stderr, fmt.Sprintf("pid %d", first.PID()))
	assert.Contains(t, stderr, "one coordinator per run directory")
	sfOneLine(t, stderr)
	assert.False(t, testutil.Mounted(filepath.Join(root2, owner)))
	assert.False(t, testutil.Mounted(filepath.Join(root2, reviewer)))

	eventually(t, func() bool { return strings.Contains(first.Output(), " view(s) of ") }, "not started: "+first.Output())
	st, stderr, code := sfStatus(t, e.runs)
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, first.PID(), st.PID)
	assert.Equal(t, mount.StateRunning, st.State)
	assert.Len(t, st.Views, 2)
	assert.NotZero(t, st.PIDStart)

	// The status file is replaced atomically: no temporary file stays.
	entries, err := os.ReadDir(e.runs)
	require.NoError(t, err)
	for _, en := range entries {
		assert.False(t, strings.HasSuffix(en.Name(), ".tmp"), "left behind: %s", en.Name())
	}

	// Stopped, the coordinator removes its status file and frees the run
	// directory.
	require.NoError(t, first.Stop(), first.Output())
	_, err = os.Stat(filepath.Join(e.runs, mount.StatusFile))
	assert.ErrorIs(t, err, os.ErrNotExist)
	second := pmUp(t, e.runs, e.folder, root2, []string{owner, reviewer})
	require.NoError(t, second.Stop(), second.Output())
}

// TestSafetyUpRestartsAfterSIGKILL: after a SIGKILL of `acpfs up`,
// `acpfs status` reports the coordinator dead, and a new `acpfs up` on the
// same root starts with no manual cleanup: the dead views are detached
// (one line each) and their directories reused.
func TestSafetyUpRestartsAfterSIGKILL(t *testing.T) {
	e := newSfEnv(t)
	agents := []string{owner, reviewer}
	killed := pmUp(t, e.runs, e.folder, e.root, agents)
	for _, a := range agents {
		// The kernel now keeps each view root's attributes: a stat after
		// the kill is answered from them, so telling a dead view from a
		// live one must ask the daemon.
		_, err := os.Stat(filepath.Join(e.root, a))
		require.NoError(t, err)
	}
	sfKill(t, killed)
	for _, a := range agents {
		require.ErrorIs(t, sfReaches(filepath.Join(e.root, a)), syscall.ENOTCONN, "a dead view answers ENOTCONN")
	}

	st, stderr, code := sfStatus(t, e.runs)
	assert.Equal(t, 2, code, stderr)
	assert.Equal(t, killed.PID(), st.PID)
	assert.Equal(t, mount.StateDead, st.State)
	assert.Contains(t, stderr, "dead")
	out, _, code := sfRun(t, "status", "--runs", e.runs)
	assert.Equal(t, 2, code)
	assert.Contains(t, out, fmt.Sprintf("coordinator pid %d", killed.PID()))
	assert.Contains(t, out, "dead")
	assert.NotContains(t, out, "running")

	// One dead view is cleared by hand first, leaving its empty
	// directory; the other is left dead.
	_, stderr, code = sfRun(t, "umount", filepath.Join(e.root, reviewer))
	require.Equal(t, 0, code, stderr)

	restarted := pmUp(t, e.runs, e.folder, e.root, agents)
	eventually(t, func() bool { return strings.Contains(restarted.Output(), " view(s) of ") }, "not started: "+restarted.Output())
	log := restarted.Output()
	assert.Contains(t, log, "detached the dead view at "+filepath.Join(e.root, owner))
	assert.NotContains(t, log, filepath.Join(e.root, reviewer)+" (left by")
	for _, a := range agents {
		assert.Contains(t, readFile(t, filepath.Join(e.root, a, ".acpfs", "status")), "agent: "+a)
	}
	st, stderr, code = sfStatus(t, e.runs)
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, restarted.PID(), st.PID)
	assert.Equal(t, mount.StateRunning, st.State)
	require.NoError(t, restarted.Stop(), restarted.Output())
	for _, a := range agents {
		assert.False(t, testutil.Mounted(filepath.Join(e.root, a)))
	}
}

// TestSafetyUpRefusesLiveMountInRoot: the restart cleanup only clears
// dead views of this folder; a live view in the root is refused, not
// unmounted.
func TestSafetyUpRefusesLiveMountInRoot(t *testing.T) {
	e := newSfEnv(t)
	live := filepath.Join(e.root, owner)
	p := pmMount(t, e.folder, e.grant[owner], e.ledger, live)
	_, stderr, code := sfRun(t, "up", "--runs", e.runs, "--folder", e.folder, "--root", e.root)
	assert.NotEqual(t, 0, code, stderr)
	assert.Contains(t, stderr, "mount point")
	assert.Equal(t, []string{"fuse.acpfs"}, sfFSTypesAt(live))
	assert.False(t, testutil.Mounted(filepath.Join(e.root, reviewer)))
	require.NoError(t, sfStat(filepath.Join(live, ".acpfs", "status")))
	require.NoError(t, p.Stop(), p.Output())
}

// TestSafetyStatusDetectsReusedPid: a status file whose pid now belongs to
// another process (here: this test) is reported stale, not running.
func TestSafetyStatusDetectsReusedPid(t *testing.T) {
	testutil.RequireFUSE(t)
	runs := newDir(t, "sf-runs")
	b, err := json.Marshal(mount.CoordinatorStatus{PID: os.Getpid(), PIDStart: 1, Folder: "/nonexistent", Root: "/nonexistent"})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(runs, mount.StatusFile), b, 0o644))
	st, stderr, code := sfStatus(t, runs)
	assert.Equal(t, 2, code, stderr)
	assert.Equal(t, mount.StateStale, st.State)
	assert.Contains(t, stderr, "reused")
	sfOneLine(t, stderr)
}

// TestSafetyUpLogsUnmounts: `acpfs up` says on stderr, one line each,
// when it unmounts a view because its grant was revoked or removed.
func TestSafetyUpLogsUnmounts(t *testing.T) {
	e := newSfEnv(t)
	p := pmUp(t, e.runs, e.folder, e.root, []string{owner, reviewer})

	g := reviewerGrant()
	g.Revoked = true
	pmWriteGrant(t, e.runs, g)
	eventually(t, func() bool { return !testutil.Mounted(filepath.Join(e.root, reviewer)) }, "revoked view still mounted: "+p.Output())
	eventually(t, func() bool {
		return strings.Contains(p.Output(), "unmounted bob's view at "+filepath.Join(e.root, reviewer)+" (grant G-reviewer revoked)")
	}, "no line for the revoked view: "+p.Output())

	require.NoError(t, os.Remove(e.grant[owner]))
	eventually(t, func() bool { return !testutil.Mounted(filepath.Join(e.root, owner)) }, "removed grant's view still mounted: "+p.Output())
	eventually(t, func() bool {
		return strings.Contains(p.Output(), "unmounted alice's view at "+filepath.Join(e.root, owner)+" (grant G-owner removed)")
	}, "no line for the removed grant: "+p.Output())

	// A grant given again is mounted again, and said so.
	pmWriteGrant(t, e.runs, ownerGrant())
	eventually(t, func() bool { return testutil.Mounted(filepath.Join(e.root, owner)) }, "new grant not mounted: "+p.Output())
	eventually(t, func() bool { return strings.Contains(p.Output(), "acpfs up: mounted alice's view at ") }, "no line for the new view: "+p.Output())
	require.NoError(t, p.Stop(), p.Output())
	for _, line := range strings.Split(strings.TrimSpace(p.Output()), "\n") {
		assert.False(t, strings.HasPrefix(line, "time="), "unexpected log line: %s", line)
	}
}
