package bench

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestMountEarlySIGTERM sends SIGTERM to `acpfs mount` as soon as its view
// answers, as a supervisor stopping it right after start-up would. The
// daemon must unmount and exit. It runs with ACPFS_BENCH_BUGS=1 until the
// bug below is fixed; remove the skip then.
func TestMountEarlySIGTERM(t *testing.T) {
	gate(t)
	if os.Getenv("ACPFS_BENCH_BUGS") != "1" {
		t.Skip("BUG: acpfs mount installs its SIGTERM handler only after mount.Start returns; a SIGTERM once the view answers kills it with the default action, leaving a dead mount (ENOTCONN) or, during go-fuse's poll hack, a process stuck in D state on its own mount (ACPFS_BENCH_BUGS=1 runs this)")
	}
	h := newHistory(t, newDir(t, "sigterm"), 1_000)
	gp := saveOwnerGrant(t)
	for i := 0; i < 10; i++ {
		mnt := newDir(t, "mnt-sigterm")
		ledger := filepath.Join(newDir(t, "ledger"), "communication_ledger.jsonl")
		d := startDaemon(t, []string{mnt}, []string{filepath.Join(mnt, "events.jsonl")}, acpfsBin,
			"mount", "--folder", h.folder, "--grant", gp, "--ledger", ledger, mnt)
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		if !d.exited(10 * time.Second) {
			t.Errorf("run %d: pid %d still running 10 s after SIGTERM:\n%s", i, d.pid(), d.diagnose())
			_ = d.cmd.Process.Kill()
			if !d.exited(5 * time.Second) {
				abortConns(t, d.conns)
				d.exited(5 * time.Second)
			}
		}
		if isMounted(mnt) {
			t.Errorf("run %d: the mount survived its daemon (pid %d)", i, d.pid())
			_ = syscall.Unmount(mnt, syscall.MNT_DETACH)
		}
	}
}
