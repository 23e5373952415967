package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/internal/testutil"
	"github.com/acpfs/acpfs/mount"
)

// gate skips unless the harness is enabled and this machine can mount.
// Every test and benchmark calls it first, so nothing mounts by accident.
func gate(tb testing.TB) {
	tb.Helper()
	if !enabled {
		tb.Skip("benchmarks mount real views and take minutes: set ACPFS_BENCH=1 (scripts/bench.sh does)")
	}
	if err := mount.Check().Usable(); err != nil {
		tb.Skipf("FUSE is not usable here: %v", err)
	}
	if os.Geteuid() != 0 {
		tb.Skip("the harness mounts directly and needs root")
	}
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
	cmd    *exec.Cmd
	mounts []string
	out    testutil.SyncBuffer
	done   chan struct{}
	// ready is when the process announced on stdout that it serves.
	ready time.Time
	// conns are the FUSE connections of mounts, once they answer.
	conns []string
	// ledger is the ledger of an acpfs daemon, when the harness chose it.
	ledger string
}

// Lines the daemons print once they serve, after their mount calls
// returned.
var readyMarkers = []string{"mounted ", "acpfs up:", "ready"}

// settle is how long a daemon is left alone after it announced itself
// before the harness signals it. Both daemons install their signal
// handler only after mounting and printing; a SIGTERM in between takes
// the default action and leaves the mount behind (see the report).
const settle = 200 * time.Millisecond

// startDaemon execs bin and returns once every probe path answers a
// stat (the mount is served). mounts are the mountpoints the process owns;
// at cleanup it is stopped by PID and they must all be gone. The child
// never starts inside a view: its working directory is this process's.
func startDaemon(tb testing.TB, mounts, probes []string, bin string, args ...string) *daemon {
	tb.Helper()
	d := &daemon{cmd: exec.Command(bin, args...), mounts: mounts, done: make(chan struct{})}
	d.cmd.Stdout, d.cmd.Stderr = &d.out, &d.out
	// If this process dies without its cleanups (a panic, a test
	// timeout), the daemon is told to unmount and exit.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	require.NoError(tb, d.cmd.Start())
	go func() { d.cmd.Wait(); close(d.done) }()
	tb.Cleanup(func() { d.stop(tb) })
	require.NoError(tb, d.waitReady(probes, 60*time.Second))
	d.conns = fuseConns(mounts)
	return d
}

// waitReady polls the probes until each answers. It returns as soon as
// they do; the announcement on stdout is awaited by announced.
func (d *daemon) waitReady(probes []string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for _, p := range probes {
		for {
			if _, err := os.Stat(p); err == nil {
				break
			}
			select {
			case <-d.done:
				return fmt.Errorf("%s exited before %s answered: %s", filepath.Base(d.cmd.Path), p, d.out.String())
			default:
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s did not answer within %s", p, limit)
			}
			time.Sleep(200 * time.Microsecond)
		}
	}
	return nil
}

// announced waits until the daemon printed its ready line.
func (d *daemon) announced(limit time.Duration) error {
	if !d.ready.IsZero() {
		return nil
	}
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		out := d.out.String()
		for _, m := range readyMarkers {
			if strings.Contains(out, m) {
				d.ready = time.Now()
				return nil
			}
		}
		select {
		case <-d.done:
			return fmt.Errorf("%s exited: %s", filepath.Base(d.cmd.Path), d.out.String())
		case <-time.After(time.Millisecond):
		}
	}
	return fmt.Errorf("%s printed no ready line within %s", filepath.Base(d.cmd.Path), limit)
}

func (d *daemon) pid() int { return d.cmd.Process.Pid }

// stop sends SIGTERM to the process, waits for it and checks that its
// mounts are gone. A process that does not stop is killed; one stuck in
// the kernel on a request to its own mount (which nobody serves any more)
// has its FUSE connections aborted, its mounts are detached, and the test
// fails with where it was blocked.
func (d *daemon) stop(tb testing.TB) {
	select {
	case <-d.done:
	default:
		if err := d.announced(30 * time.Second); err != nil {
			tb.Errorf("stopping pid %d: %v", d.pid(), err)
		}
		if wait := settle - time.Since(d.ready); wait > 0 {
			time.Sleep(wait)
		}
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		if !d.exited(20 * time.Second) {
			diag := d.diagnose()
			_ = d.cmd.Process.Kill()
			if !d.exited(5 * time.Second) {
				abortConns(tb, d.conns)
				d.exited(5 * time.Second)
			}
			tb.Errorf("%s (pid %d) did not stop on SIGTERM; killed.\n%s", filepath.Base(d.cmd.Path), d.pid(), diag)
		}
	}
	for _, m := range d.mounts {
		if isMounted(m) {
			_ = syscall.Unmount(m, syscall.MNT_DETACH)
			tb.Errorf("mount %s was left behind by pid %d; detached", m, d.pid())
		}
	}
}

// exited waits up to limit for the process to end.
func (d *daemon) exited(limit time.Duration) bool {
	select {
	case <-d.done:
		return true
	case <-time.After(limit):
		return false
	}
}

// fuseConns returns the FUSE connection numbers (the minor device
// numbers in /proc/self/mountinfo) of the given mountpoints.
func fuseConns(mounts []string) []string {
	want := map[string]bool{}
	for _, m := range mounts {
		want[m] = true
	}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 || !want[f[4]] {
			continue
		}
		if _, minor, ok := strings.Cut(f[2], ":"); ok {
			out = append(out, minor)
		}
	}
	return out
}

// abortConns aborts the given FUSE connections through fusectl, mounting
// it for the time needed when it is not mounted.
func abortConns(tb testing.TB, conns []string) {
	const ctl = "/sys/fs/fuse/connections"
	if entries, _ := os.ReadDir(ctl); len(entries) == 0 {
		if err := syscall.Mount("none", ctl, "fusectl", 0, ""); err != nil {
			tb.Errorf("mount fusectl: %v", err)
			return
		}
		defer syscall.Unmount(ctl, 0)
	}
	for _, c := range conns {
		if err := os.WriteFile(filepath.Join(ctl, c, "abort"), []byte("1"), 0); err != nil {
			tb.Errorf("abort FUSE connection %s: %v", c, err)
		}
	}
}

// diagnose describes where a process that does not stop is blocked.
func (d *daemon) diagnose() string {
	var b strings.Builder
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", d.pid()))
	for _, t := range tasks {
		st, _ := os.ReadFile(filepath.Join(t, "stat"))
		stack, _ := os.ReadFile(filepath.Join(t, "stack"))
		fmt.Fprintf(&b, "%s: %s\n%s", t, strings.TrimSpace(string(st)), stack)
	}
	return b.String()
}
