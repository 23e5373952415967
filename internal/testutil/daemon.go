package testutil

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/acpfs/acpfs/internal/mountinfo"
	"github.com/acpfs/acpfs/mount"
)

// Limits of the daemon harness, generous because the machine is shared.
const (
	// startTimeout bounds how long a daemon may take until every ready
	// path answers.
	startTimeout = 60 * time.Second
	// stopTimeout bounds how long a daemon may take to exit on SIGTERM
	// before it is killed.
	stopTimeout = 20 * time.Second
	// killTimeout bounds how long a daemon may take to die on SIGKILL.
	killTimeout = 10 * time.Second
	// readyPoll is the pause between stats of a ready path: short,
	// because the benchmarks time start-up from exec to the answer.
	readyPoll = 200 * time.Microsecond
)

// RequireFUSE skips a test that needs to mount when this machine cannot,
// or fails it instead under ACPFS_REQUIRE_FUSE=1 (as CI sets it), so that
// a broken machine never passes a suite by skipping it.
func RequireFUSE(tb testing.TB) {
	tb.Helper()
	why := ""
	if err := mount.Check().Usable(); err != nil {
		why = fmt.Sprintf("FUSE is not usable here: %v (acpfs doctor explains; set ACPFS_REQUIRE_FUSE=1 to make this fatal)", err)
	} else if os.Geteuid() != 0 {
		why = "the real-mount suites mount directly and need root"
	}
	if why == "" {
		return
	}
	if os.Getenv("ACPFS_REQUIRE_FUSE") == "1" {
		tb.Fatal(why)
	}
	tb.Skip(why)
}

// DaemonSpec is a FUSE daemon to start: an `acpfs mount`, an `acpfs up`
// or the benchmarks' loopback.
type DaemonSpec struct {
	Bin  string
	Args []string
	// Mounts are the mountpoints the daemon owns: once it has stopped,
	// each must be gone, or the test fails and the mount is detached.
	Mounts []string
	// Ready are paths that answer stat once the daemon serves (a view's
	// .acpfs/status, a file of the loopback's folder).
	Ready []string
	// ReadyOutput, when set, must also appear in the daemon's output: a
	// view answers before its daemon has finished mounting (go-fuse's
	// poll probe still holds a file open in it), and a test that
	// unmounts or kills it at once would meet that.
	ReadyOutput string
}

// Daemon is a daemon process a test started. It is stopped at the end of
// the test (SIGTERM, then SIGKILL), and the test fails if it does not
// stop by itself, exits with an error, or leaves a mount behind.
type Daemon struct {
	tb   testing.TB
	spec DaemonSpec
	cmd  *exec.Cmd
	out  SyncBuffer
	done chan struct{}
	err  error // what Wait returned, valid once done is closed
	// conns are the FUSE connections of the mounts, once they answer: a
	// daemon stuck on a request to its own mount has them aborted.
	conns  []string
	closed sync.Once
}

// StartDaemon execs spec and returns once every ready path answers; a
// daemon that exits or does not answer in time fails the test. The child
// starts in this process's working directory, never inside a view.
func StartDaemon(tb testing.TB, spec DaemonSpec) *Daemon {
	tb.Helper()
	d := &Daemon{tb: tb, spec: spec, cmd: exec.Command(spec.Bin, spec.Args...), done: make(chan struct{})}
	d.cmd.Stdout, d.cmd.Stderr = &d.out, &d.out
	// If this process dies without its cleanups (a panic, a test
	// timeout), the daemon is told to unmount and exit.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := d.cmd.Start(); err != nil {
		tb.Fatalf("start %s: %v", d, err)
	}
	go func() { d.err = d.cmd.Wait(); close(d.done) }()
	tb.Cleanup(d.Close)
	if err := d.waitReady(); err != nil {
		tb.Fatalf("%s: %v\n%s", d, err, d.out.String())
	}
	d.conns = fuseConns(spec.Mounts)
	return d
}

// String names the daemon by its command line, for messages.
func (d *Daemon) String() string {
	return strings.TrimSpace(filepath.Base(d.spec.Bin) + " " + strings.Join(d.spec.Args, " "))
}

// PID is the daemon's process id.
func (d *Daemon) PID() int { return d.cmd.Process.Pid }

// Output is what the daemon printed so far, stdout and stderr together.
func (d *Daemon) Output() string { return d.out.String() }

// Exited reports whether the daemon has ended.
func (d *Daemon) Exited() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// Wait waits for the daemon to end and returns what exec.Cmd.Wait said.
func (d *Daemon) Wait() error {
	<-d.done
	return d.err
}

// waitReady stats the ready paths until each answers.
func (d *Daemon) waitReady() error {
	deadline := time.Now().Add(startTimeout)
	for _, p := range d.spec.Ready {
		for {
			if _, err := os.Stat(p); err == nil {
				break
			}
			if d.Exited() {
				return fmt.Errorf("exited before %s answered: %v", p, d.err)
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s did not answer within %s", p, startTimeout)
			}
			time.Sleep(readyPoll)
		}
	}
	for d.spec.ReadyOutput != "" && !strings.Contains(d.out.String(), d.spec.ReadyOutput) {
		if d.Exited() {
			return fmt.Errorf("exited before saying %q: %v", d.spec.ReadyOutput, d.err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("did not say %q within %s", d.spec.ReadyOutput, startTimeout)
		}
		time.Sleep(readyPoll)
	}
	return nil
}

// Kill sends SIGKILL, as a crash would, and waits for the process to go.
// Its mounts are left dead ("transport endpoint is not connected").
//
// A process killed while it holds a descriptor on its own mount (go-fuse
// opens one for a moment after mounting) blocks in exit, flushing that
// descriptor to a server that is itself: the kernel waits until the
// connection is aborted, as `acpfs umount` does for a dead view. Kill
// does the same after a while, and fails only if the process outlives
// that too.
func (d *Daemon) Kill() {
	d.tb.Helper()
	_ = d.cmd.Process.Signal(syscall.SIGKILL)
	if d.exited(killTimeout / 4) {
		return
	}
	if err := abortConns(d.conns); err != nil {
		d.tb.Logf("%s (pid %d): %v", d, d.PID(), err)
	}
	d.tb.Logf("%s (pid %d) was blocked on its own mount after SIGKILL: connection aborted\n%s", d, d.PID(), d.diagnose())
	if !d.exited(killTimeout) {
		d.tb.Fatalf("%s (pid %d) survived SIGKILL", d, d.PID())
	}
}

// Stop sends SIGTERM and waits for the daemon to exit, returning what
// Wait returned (nil for a clean exit). A daemon that does not stop is
// killed; one stuck in the kernel on a request to its own mount (which
// nobody serves any more) has its FUSE connections aborted. Either way
// the error says where it was blocked.
func (d *Daemon) Stop() error {
	if d.Exited() {
		return d.err
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	if d.exited(stopTimeout) {
		return d.err
	}
	diag := d.diagnose()
	_ = d.cmd.Process.Kill()
	if !d.exited(5 * time.Second) {
		if err := abortConns(d.conns); err != nil {
			diag += err.Error() + "\n"
		}
		d.exited(5 * time.Second)
	}
	return fmt.Errorf("%s (pid %d) did not stop on SIGTERM within %s; killed.\n%s", d, d.PID(), stopTimeout, diag)
}

// Close stops the daemon and fails the test unless it exited cleanly (or
// was killed on purpose) and none of its mounts is left; a mount left
// behind is detached. It runs at the end of the test, or earlier when
// the test calls it; only the first call does anything.
func (d *Daemon) Close() {
	d.closed.Do(func() {
		if err := d.Stop(); err != nil {
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != -1 { // -1: killed by a signal
				d.tb.Errorf("%s: %v\n%s", d, err, d.out.String())
			}
		}
		for _, m := range d.spec.Mounts {
			if Mounted(m) {
				_ = syscall.Unmount(m, syscall.MNT_DETACH)
				d.tb.Errorf("%s (pid %d) left %s mounted; detached", d, d.PID(), m)
			}
		}
	})
}

// exited waits up to limit for the process to end.
func (d *Daemon) exited(limit time.Duration) bool {
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-d.done:
		return true
	case <-t.C:
		return false
	}
}

// diagnose describes where a process that does not stop is blocked.
func (d *Daemon) diagnose() string {
	var b strings.Builder
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", d.PID()))
	for _, t := range tasks {
		st, _ := os.ReadFile(filepath.Join(t, "stat"))
		stack, _ := os.ReadFile(filepath.Join(t, "stack"))
		fmt.Fprintf(&b, "%s: %s\n%s", t, strings.TrimSpace(string(st)), stack)
	}
	return b.String()
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
	for _, e := range mountinfo.ParseAll(string(b)) {
		if !want[e.Point] {
			continue
		}
		if _, minor, ok := strings.Cut(e.Dev, ":"); ok {
			out = append(out, minor)
		}
	}
	return out
}

// AbortMounts aborts the FUSE connections of the given mountpoints: a
// test's last resort when a daemon it killed leaves them hanging, so
// that its callers return and its cleanup can detach them.
func AbortMounts(mounts []string) error { return abortConns(fuseConns(mounts)) }

// abortConns aborts the given FUSE connections through fusectl, mounting
// it for the time needed when it is not mounted.
func abortConns(conns []string) error {
	const ctl = "/sys/fs/fuse/connections"
	if entries, _ := os.ReadDir(ctl); len(entries) == 0 {
		if err := syscall.Mount("none", ctl, "fusectl", 0, ""); err != nil {
			return fmt.Errorf("mount fusectl: %w", err)
		}
		defer syscall.Unmount(ctl, 0)
	}
	var errs []error
	for _, c := range conns {
		if err := os.WriteFile(filepath.Join(ctl, c, "abort"), []byte("1"), 0); err != nil {
			errs = append(errs, fmt.Errorf("abort FUSE connection %s: %w", c, err))
		}
	}
	return errors.Join(errs...)
}
