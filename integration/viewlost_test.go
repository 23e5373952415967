package integration

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/mount"
)

// vlRecord tells whether recs hold a record of kind for agent at path.
func vlRecord(recs []ledger.Record, kind ledger.Kind, agent, path string) bool {
	for _, r := range recs {
		if r.Kind == kind && r.Agent == agent && r.Path == path {
			return true
		}
	}
	return false
}

// TestViewLostIsNoticedAndRemounted: a view that `acpfs up` manages is
// unmounted from outside (`acpfs umount`) while the coordinator cannot
// act (stopped with SIGSTOP, so the uncovered state is observed without
// a race): `acpfs status` exits 2 naming it, and the bare mountpoint,
// which the operator had made for the agent's uid, takes no write from
// that uid. Once the coordinator runs again it says so on stderr, records
// view_lost and view_remounted, and the view serves again.
func TestViewLostIsNoticedAndRemounted(t *testing.T) {
	e := newSfEnv(t)
	agentUID := freeUID(t)
	mp := filepath.Join(e.root, reviewer)
	require.NoError(t, os.MkdirAll(mp, 0o755))
	require.NoError(t, os.Chown(mp, agentUID, agentUID))
	lkReachable(t, e.root)

	d := pmUp(t, e.runs, e.folder, e.root, []string{owner, reviewer})
	sfKill := func(sig syscall.Signal) { require.NoError(t, syscall.Kill(d.PID(), sig)) }
	eventually(t, func() bool { return strings.Contains(d.Output(), " view(s) of ") }, "not started: "+d.Output())
	st, stderr, code := sfStatus(t, e.runs)
	require.Equal(t, 0, code, stderr)
	require.Len(t, st.Views, 2)

	sfKill(syscall.SIGSTOP)
	t.Cleanup(func() { syscall.Kill(d.PID(), syscall.SIGCONT) })
	_, stderr, code = sfRun(t, "umount", mp)
	require.Equal(t, 0, code, stderr)

	st, stderr, code = sfStatus(t, e.runs)
	assert.Equal(t, 2, code, "a missing view makes status fail")
	assert.Contains(t, stderr, "missing")
	assert.Contains(t, stderr, mp)
	for _, v := range st.Views {
		if v.Agent == reviewer {
			assert.NotEmpty(t, v.Lost)
		} else {
			assert.Empty(t, v.Lost, v.Agent)
		}
	}
	out, _, code := sfRun(t, "status", "--runs", e.runs)
	assert.Equal(t, 2, code)
	assert.Contains(t, out, "MISSING")

	// The uncovered mountpoint is the coordinator's, 0500.
	fi, err := os.Stat(mp)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o500), fi.Mode().Perm())
	got, code := asUID(t, agentUID, `echo x > "$0/planted" && echo WROTE`, mp)
	assert.NotEqual(t, 0, code)
	assert.NotContains(t, got, "WROTE")
	assert.Contains(t, got, "Permission denied")
	_, err = os.Lstat(filepath.Join(mp, "planted"))
	assert.ErrorIs(t, err, os.ErrNotExist)

	sfKill(syscall.SIGCONT)
	eventually(t, func() bool { return strings.Contains(d.Output(), "mounted "+reviewer+"'s view at "+mp+" again") }, "not remounted: "+d.Output())
	assert.Contains(t, d.Output(), reviewer+"'s view at "+mp+" went away")
	assert.Contains(t, readFile(t, filepath.Join(mp, ".acpfs", "status")), "agent: "+reviewer, "the view serves again")
	recs := pmLedgerRecords(t, e.ledger)
	assert.True(t, vlRecord(recs, ledger.KindViewLost, reviewer, mp), "no view_lost record")
	assert.True(t, vlRecord(recs, ledger.KindViewRemounted, reviewer, mp), "no view_remounted record")

	st, stderr, code = sfStatus(t, e.runs)
	assert.Equal(t, 0, code, stderr)
	assert.Equal(t, mount.StateRunning, st.State)
	for _, v := range st.Views {
		assert.Empty(t, v.Lost, v.Agent)
	}
}

// TestViewLostConnectionAbortedIsRemounted: a view whose connection is
// aborted (`acpfs umount --force` of a busy view: its users then get
// ENOTCONN) is noticed while `acpfs up` runs, recorded and mounted again.
func TestViewLostConnectionAbortedIsRemounted(t *testing.T) {
	e := newSfEnv(t)
	mp := filepath.Join(e.root, reviewer)
	d := pmUp(t, e.runs, e.folder, e.root, []string{owner, reviewer})
	eventually(t, func() bool { return strings.Contains(d.Output(), " view(s) of ") }, "not started: "+d.Output())

	busy, err := os.Open(filepath.Join(mp, "proposal.md"))
	require.NoError(t, err)
	defer busy.Close()
	_, stderr, code := sfRun(t, "umount", "--force", mp)
	require.Equal(t, 0, code, stderr)
	busy.Close()

	eventually(t, func() bool { return strings.Contains(d.Output(), "mounted "+reviewer+"'s view at "+mp+" again") }, "not remounted: "+d.Output())
	assert.Contains(t, readFile(t, filepath.Join(mp, ".acpfs", "status")), "agent: "+reviewer, "the view serves again")
	recs := pmLedgerRecords(t, e.ledger)
	assert.True(t, vlRecord(recs, ledger.KindViewLost, reviewer, mp), "no view_lost record")
	assert.True(t, vlRecord(recs, ledger.KindViewRemounted, reviewer, mp), "no view_remounted record")
	st, stderr, code := sfStatus(t, e.runs)
	assert.Equal(t, 0, code, stderr)
	assert.Len(t, st.Views, 2)
}

// TestViewLostGivenUpThenRetried: a lost view that cannot be mounted
// again (its mountpoint no longer empty) is tried three times; then the
// coordinator says so on stderr, records view_remount_failed, `acpfs
// status` exits 2 saying when the next attempt comes, and once the cause
// is gone a later attempt mounts it again without anyone's help.
func TestViewLostGivenUpThenRetried(t *testing.T) {
	e := newSfEnv(t)
	mp := filepath.Join(e.root, reviewer)
	d := pmUp(t, e.runs, e.folder, e.root, []string{owner, reviewer})
	eventually(t, func() bool { return strings.Contains(d.Output(), " view(s) of ") }, "not started: "+d.Output())

	require.NoError(t, syscall.Kill(d.PID(), syscall.SIGSTOP))
	t.Cleanup(func() { syscall.Kill(d.PID(), syscall.SIGCONT) })
	_, stderr, code := sfRun(t, "umount", mp)
	require.Equal(t, 0, code, stderr)
	blocker := filepath.Join(mp, "left-here")
	require.NoError(t, os.WriteFile(blocker, []byte("x"), 0o600))
	t.Cleanup(func() { os.Remove(blocker) })
	require.NoError(t, syscall.Kill(d.PID(), syscall.SIGCONT))

	gaveUp := "could not mount " + reviewer + "'s view at " + mp + " again (3 attempts)"
	waitFor(t, func() bool { return strings.Contains(d.Output(), gaveUp) }, "no give-up line: "+d.Output())
	assert.Contains(t, d.Output(), "tried again in")
	assert.True(t, vlRecord(pmLedgerRecords(t, e.ledger), ledger.KindViewRemountFailed, reviewer, mp), "no view_remount_failed record")
	st, stderr, code := sfStatus(t, e.runs)
	assert.Equal(t, 2, code, "a missing view makes status fail")
	assert.Contains(t, stderr, mp)
	for _, v := range st.Views {
		if v.Agent == reviewer {
			assert.Contains(t, v.Lost, "not mounted again after")
			assert.Contains(t, v.Lost, "next attempt in")
		}
	}

	require.NoError(t, os.Remove(blocker))
	waitFor(t, func() bool { return strings.Contains(d.Output(), "mounted "+reviewer+"'s view at "+mp+" again") }, "not retried: "+d.Output())
	assert.Contains(t, readFile(t, filepath.Join(mp, ".acpfs", "status")), "agent: "+reviewer, "the view serves again")
	assert.True(t, vlRecord(pmLedgerRecords(t, e.ledger), ledger.KindViewRemounted, reviewer, mp), "no view_remounted record")
	_, stderr, code = sfStatus(t, e.runs)
	assert.Equal(t, 0, code, stderr)
}
