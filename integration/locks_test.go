package integration

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/mount"
	"github.com/acpfs/acpfs/protocol"
)

// lkDeadline bounds every wait of these tests: an append that hangs
// behind a lock fails the test instead of hanging it.
const lkDeadline = 60 * time.Second

// lkReachable lets other uids traverse the directories from tmpRoot down
// to dir (the tests' directories are 0700), as a folder shared on a host
// is, until the test ends.
func lkReachable(t *testing.T, dir string) {
	t.Helper()
	require.True(t, strings.HasPrefix(dir, tmpRoot+"/"), "only a directory of the test: %s", dir)
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		require.NoError(t, err)
		mode := fi.Mode().Perm()
		require.NoError(t, os.Chmod(d, mode|0o011))
		if d == tmpRoot {
			t.Cleanup(func() { os.Chmod(d, mode) })
			return
		}
	}
}

// lkOutsider is a process of another uid that tries to take an exclusive
// flock on path with flock(1), and holds it until the test ends.
type lkOutsider struct {
	held bool
	out  string
}

func lkHoldAs(t *testing.T, uid int, path string) lkOutsider {
	t.Helper()
	cmd := exec.Command("flock", "--nonblock", "--exclusive", path, "sh", "-c", "echo HELD; exec cat")
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}}}
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() })
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- s
		io.Copy(io.Discard, stdout)
	}()
	select {
	case s := <-line:
		if strings.TrimSpace(s) == "HELD" {
			return lkOutsider{held: true}
		}
	case <-time.After(lkDeadline):
		t.Fatalf("flock as uid %d on %s did not answer", uid, path)
	}
	cmd.Wait()
	return lkOutsider{out: stderr.String()}
}

// lkWithin runs fn and fails the test if it does not return within
// lkDeadline.
func lkWithin[T any](t *testing.T, what string, fn func() T) T {
	t.Helper()
	done := make(chan T, 1)
	go func() { done <- fn() }()
	select {
	case v := <-done:
		return v
	case <-time.After(lkDeadline):
		t.Fatalf("%s hangs", what)
		panic("unreachable")
	}
}

// lkTake takes the appenders' lock held by fd for the test, as a stuck
// writer would: waiting, within the deadline, for a view that holds it
// a moment (the rewrite of protocol.json after an append is written in
// the background, under the lock).
func lkTake(t *testing.T, fd int) {
	t.Helper()
	require.NoError(t, lkWithin(t, "taking the appenders' lock", func() error { return unix.Flock(fd, unix.LOCK_EX) }))
}

// TestLocksOutsiderCannotStallAppends: a process of another uid that can
// read the folder holds an flock on events.jsonl; appends through a view
// and `acpfs append` complete while it holds it, and it cannot open the
// appenders' own lock file at all. The lock file is never shown.
func TestLocksOutsiderCannotStallAppends(t *testing.T) {
	c := newCollab(t)
	v := c.mountView(ownerGrant())
	lkReachable(t, c.folder)

	outsiderUID := freeUID(t) // neither root nor any sandbox's
	o := lkHoldAs(t, outsiderUID, filepath.Join(c.folder, protocol.EventsFile))
	require.True(t, o.held, "the outsider should get its flock on the 0644 events.jsonl: %s", o.out)

	line := c.event(owner, "deliverable_drafted", map[string]any{"doc": primary, "role": "primary", "reply_to": 1})
	errno := lkWithin(t, "an append through the view", func() syscall.Errno { return v.appendEvent(line) })
	require.Equal(t, syscall.Errno(0), errno, readFile(t, v.path(".acpfs/last-error")))

	_, stderr, code := lkWithin(t, "acpfs append", func() cliResult {
		return cliRun(t, "append", "--folder", c.folder, "--participant", owner, "--event", "proposal_submitted", "--summary", "please review", "--reply-to", "2")
	}).unpack()
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, 3, c.snapshot().LastSeq)

	lock := filepath.Join(c.folder, protocol.LockFile)
	var st unix.Stat_t
	require.NoError(t, unix.Lstat(lock, &st))
	assert.Equal(t, uint32(0o600), st.Mode&0o7777)
	assert.Equal(t, uint32(unix.S_IFREG), st.Mode&unix.S_IFMT)
	o2 := lkHoldAs(t, outsiderUID, lock)
	assert.False(t, o2.held, "another uid must not be able to hold the appenders' lock")
	assert.Contains(t, o2.out, "Permission denied")

	// Never shown, never creatable through a view.
	out, code := v.sh("ls -a; cat " + protocol.LockFile)
	assert.NotEqual(t, 0, code)
	assert.NotContains(t, strings.ReplaceAll(out, "cat: "+protocol.LockFile, ""), protocol.LockFile)
	_, err := os.Stat(v.path(protocol.LockFile))
	assert.ErrorIs(t, err, syscall.ENOENT)
}

// TestLocksStuckHolderFailsAppends: a holder of the real lock (a stuck
// writer of the coordinator's own uid, simulated by the test holding it)
// makes an append through a view fail with EBUSY after
// protocol.LockTimeout, with the reason in .acpfs/last-error and an
// append_rejected record, and `acpfs append` exit non-zero with one clear
// line; nothing is written, and both work again once it lets go.
func TestLocksStuckHolderFailsAppends(t *testing.T) {
	c := newCollab(t)
	v := c.mountView(ownerGrant())
	line := c.event(owner, "deliverable_drafted", map[string]any{"doc": primary, "role": "primary", "reply_to": 1})
	before := readFile(t, filepath.Join(c.folder, protocol.EventsFile))

	lock := filepath.Join(c.folder, protocol.LockFile)
	fd, err := unix.Open(lock, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
	require.NoError(t, err)
	defer unix.Close(fd)
	lkTake(t, fd)

	errno := lkWithin(t, "an append behind a stuck holder", func() syscall.Errno { return v.appendEvent(line) })
	assert.Equal(t, syscall.EBUSY, errno)
	assert.Contains(t, readFile(t, v.path(".acpfs/last-error")), protocol.RuleLockBusy)
	rec := c.requireRecord(ledger.KindAppendRejected, protocol.EventsFile, "append")
	assert.Contains(t, rec.Detail, "has held the folder's lock")

	_, stderr, code := lkWithin(t, "acpfs append behind a stuck holder", func() cliResult {
		return cliRun(t, "append", "--folder", c.folder, "--participant", owner, "--event", "blocked", "--summary", "s", "--reply-to", "1")
	}).unpack()
	assert.NotEqual(t, 0, code)
	assert.Contains(t, stderr, "has held the folder's lock "+protocol.LockFile)
	assert.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
	assert.Equal(t, before, readFile(t, filepath.Join(c.folder, protocol.EventsFile)), "nothing written")

	require.NoError(t, unix.Flock(fd, unix.LOCK_UN))
	require.Equal(t, syscall.Errno(0), v.appendEvent(line), readFile(t, v.path(".acpfs/last-error")))
}

// TestLocksInterruptedAppendReturns: a writer signalled while its line
// waits for the lock (held by a stuck writer) gets EINTR at once, as the
// kernel's FUSE_INTERRUPT asks, not EBUSY after protocol.LockTimeout:
// once a request reached the daemon, the kernel keeps its caller until
// the daemon answers, whatever the signal.
func TestLocksInterruptedAppendReturns(t *testing.T) {
	c := newCollab(t)
	v := c.mountView(ownerGrant())
	line := c.event(owner, "deliverable_drafted", map[string]any{"doc": primary, "role": "primary", "reply_to": 1})
	lock := filepath.Join(c.folder, protocol.LockFile)
	fd, err := unix.Open(lock, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
	require.NoError(t, err)
	defer unix.Close(fd)
	lkTake(t, fd)

	// The shell writes with one write(2) from its own process; its trap
	// makes USR1 a signal it survives.
	cmd := exec.Command("bash", "-c", `trap 'echo TRAPPED' USR1; printf '%s\n' "$1" >> "$0/events.jsonl"; echo "rc=$?"`, v.dir, line)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-done })
	stack := fmt.Sprintf("/proc/%d/stack", cmd.Process.Pid)
	sysc := fmt.Sprintf("/proc/%d/syscall", cmd.Process.Pid)
	deadline := time.Now().Add(lkDeadline)
	for {
		b, _ := os.ReadFile(stack)
		sc, _ := os.ReadFile(sysc)
		if strings.Contains(string(b), "request_wait_answer") && strings.HasPrefix(string(sc), fmt.Sprintf("%d ", unix.SYS_WRITE)) {
			break // its write(2), not the open before it, is with the daemon
		}
		require.True(t, time.Now().Before(deadline), "the write never reached the daemon: %s", out.String())
		time.Sleep(time.Millisecond) // polling a condition with a deadline
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGUSR1))
	select {
	case <-done:
	case <-time.After(lkDeadline):
		t.Fatal("the signalled writer hangs")
	}
	assert.Contains(t, out.String(), "Interrupted system call")
	assert.NotContains(t, out.String(), "busy")
	assert.Contains(t, out.String(), "TRAPPED")
	assert.Contains(t, readFile(t, v.path(".acpfs/last-error")), protocol.RuleInterrupted)
	require.NoError(t, unix.Flock(fd, unix.LOCK_UN))
	require.Equal(t, syscall.Errno(0), v.appendEvent(line), "nothing was written: the same line goes in")
}

// TestLocksOutsiderCannotStopUp: another uid cannot keep `acpfs up` from
// starting after a coordinator stopped: the run directory acpfs made is
// 0700 and its lock 0600. A lock held by a process that is no
// coordinator (left readable by an older acpfs) is reported as such,
// never as a running acpfs up.
func TestLocksOutsiderCannotStopUp(t *testing.T) {
	e := newCoordEnv(t)
	e.standardGrants()
	first := e.up(owner)
	require.NoError(t, first.Stop(), first.Output())

	fi, err := os.Stat(e.runs)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), "the run directory acpfs created")
	lock := filepath.Join(e.runs, mount.LockFile)
	fi, err = os.Stat(lock)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	lkReachable(t, e.runs)
	outsiderUID := freeUID(t) // neither root nor any sandbox's
	o := lkHoldAs(t, outsiderUID, lock)
	require.False(t, o.held, "another uid must not be able to hold the run directory's lock")
	second := e.up(owner)
	require.NoError(t, second.Stop(), second.Output())

	// A run directory and lock left open to others by an older acpfs,
	// held by a process that is not acpfs up.
	require.NoError(t, os.Chmod(e.runs, 0o755))
	require.NoError(t, os.Chmod(lock, 0o644))
	o = lkHoldAs(t, outsiderUID, lock)
	require.True(t, o.held, o.out)
	_, stderr, code := lkWithin(t, "acpfs up", func() cliResult {
		return cliRun(t, "up", "--runs", e.runs, "--folder", e.folder, "--root", e.root)
	}).unpack()
	assert.Equal(t, 2, code, stderr)
	assert.Contains(t, stderr, "which is not an acpfs up")
	assert.Contains(t, stderr, "held by pid ")
	assert.NotContains(t, stderr, "already runs")
	assert.False(t, e.mounted(owner))
}

// cliResult is what cliRun returns, for lkWithin.
type cliResult struct {
	out, stderr string
	code        int
}

func (r cliResult) unpack() (string, string, int) { return r.out, r.stderr, r.code }

func cliRun(t *testing.T, args ...string) cliResult {
	out, stderr, code := acpfs(t, args...)
	return cliResult{out, stderr, code}
}

// TestLocksOldRunDirectoryMadePrivate: a run directory the caller owns,
// left 0755 by an older acpfs or made by hand, is made 0700 by grant
// create, up, mount and run, each saying so once on stderr; up's lock
// left 0644 is 0600 once up holds it.
func TestLocksOldRunDirectoryMadePrivate(t *testing.T) {
	e := newCoordEnv(t)
	require.NoError(t, os.MkdirAll(e.runs, 0o755))
	require.NoError(t, os.Chmod(e.runs, 0o755))
	open := func() { t.Helper(); require.NoError(t, os.Chmod(e.runs, 0o755)) }
	said := func(t *testing.T, stderr string) {
		t.Helper()
		assert.Equal(t, 1, strings.Count(stderr, "was 0755, open to other uids; made it 0700"), stderr)
		fi, err := os.Stat(e.runs)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm())
	}

	_, stderr, code := acpfs(t, "grant", "create", "--runs", e.runs, "--folder", e.folder, "--agent", owner, "--id", "G-alice", "--preset", "owner")
	require.Equal(t, 0, code, stderr)
	said(t, stderr)
	e.grant("--agent", reviewer, "--id", "G-bob", "--preset", "reviewer", "--forbid", "oracle/**")

	open()
	lock := filepath.Join(e.runs, mount.LockFile)
	require.NoError(t, os.WriteFile(lock, nil, 0o644))
	require.NoError(t, os.Chmod(lock, 0o644))
	up := e.up(owner, reviewer)
	said(t, up.Output())
	fi, err := os.Stat(lock)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "up's lock")
	require.NoError(t, up.Stop(), up.Output())

	open()
	mp := filepath.Join(e.root, "mnt-bob")
	m := pmStart(t, []string{mp}, []string{filepath.Join(mp, ".acpfs", "status")},
		"mount", "--folder", e.folder, "--runs", e.runs, "--grant", "G-bob", mustMkdir(t, mp))
	said(t, m.Output())
	require.NoError(t, m.Stop(), m.Output())

	open()
	out, stderr, code := e.sandbox(sbxRun{grant: "G-bob", script: "echo RAN"})
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "RAN")
	said(t, stderr)
}

// lkAppender is a shell that appends one line to a view's events.jsonl
// with one write(2), started and left waiting for the daemon's answer.
type lkAppender struct {
	cmd  *exec.Cmd
	out  strings.Builder
	done chan struct{}
}

// lkStartAppend starts an appender and returns once its write(2), not
// the open before it, is with the daemon.
func lkStartAppend(t *testing.T, view, line string) *lkAppender {
	t.Helper()
	a := &lkAppender{done: make(chan struct{})}
	a.cmd = exec.Command("bash", "-c", `printf '%s\n' "$1" >> "$0/events.jsonl"; echo "rc=$?"`, view, line)
	a.cmd.Stdout, a.cmd.Stderr = &a.out, &a.out
	require.NoError(t, a.cmd.Start())
	go func() { a.cmd.Wait(); close(a.done) }()
	t.Cleanup(func() { a.cmd.Process.Kill(); <-a.done })
	stack := fmt.Sprintf("/proc/%d/stack", a.cmd.Process.Pid)
	sysc := fmt.Sprintf("/proc/%d/syscall", a.cmd.Process.Pid)
	deadline := time.Now().Add(lkDeadline)
	for {
		b, _ := os.ReadFile(stack)
		sc, _ := os.ReadFile(sysc)
		if strings.Contains(string(b), "request_wait_answer") && strings.HasPrefix(string(sc), fmt.Sprintf("%d ", unix.SYS_WRITE)) {
			return a
		}
		require.False(t, a.exited(), "the append returned before it waited: %s", a.out.String())
		require.True(t, time.Now().Before(deadline), "the write never reached the daemon")
		time.Sleep(time.Millisecond) // polling a condition with a deadline
	}
}

func (a *lkAppender) exited() bool {
	select {
	case <-a.done:
		return true
	default:
		return false
	}
}

// TestLocksOtherViewsAnswerWhileAppendsWait: nothing an append waits
// for holds up the other views of the coordinator. While an outsider
// holds an flock on events.jsonl, appends and every view's
// .acpfs/status answer. While a stuck writer of the coordinator's uid
// holds the appenders' lock, appends through two views wait for it (and
// fail after protocol.LockTimeout), and each view's .acpfs/status
// answers before either of them returns: a status read once waited
// behind every append queued before it.
func TestLocksOtherViewsAnswerWhileAppendsWait(t *testing.T) {
	e := newSfEnv(t)
	alice, bob := filepath.Join(e.root, owner), filepath.Join(e.root, reviewer)
	d := pmUp(t, e.runs, e.folder, e.root, []string{owner, reviewer})
	lkReachable(t, e.folder)
	o := lkHoldAs(t, freeUID(t), filepath.Join(e.folder, protocol.EventsFile))
	require.True(t, o.held, o.out)
	line := pmLine(2, owner, "deliverable_drafted", "drafted", time.Now(), map[string]any{"doc": primary, "role": "primary"})
	require.Equal(t, syscall.Errno(0), lkWithin(t, "an append", func() syscall.Errno { return pmAppend(filepath.Join(alice, "events.jsonl"), line) }))
	for _, v := range []string{alice, bob} {
		st := lkWithin(t, "a status read", func() string { return readFile(t, filepath.Join(v, ".acpfs", "status")) })
		assert.Contains(t, st, "last seq: 2", v)
	}

	lock := filepath.Join(e.folder, protocol.LockFile)
	fd, err := unix.Open(lock, unix.O_RDWR|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	defer unix.Close(fd)
	lkTake(t, fd)
	first := lkStartAppend(t, alice, pmLine(3, owner, "proposal_submitted", "ready", time.Now(), nil))
	second := lkStartAppend(t, bob, pmLine(3, reviewer, "blocked", "waiting", time.Now(), nil))
	for _, v := range []string{bob, alice} {
		st := lkWithin(t, "a status read behind waiting appends", func() string { return readFile(t, filepath.Join(v, ".acpfs", "status")) })
		assert.Contains(t, st, "last seq: 2", v)
		assert.False(t, first.exited(), "the status of %s waited for the first append: %s", v, first.out.String())
		assert.False(t, second.exited(), "the status of %s waited for an append: %s", v, second.out.String())
	}
	<-first.done
	<-second.done
	assert.Contains(t, first.out.String(), "busy", "the stuck holder makes the append fail")
	require.NoError(t, unix.Flock(fd, unix.LOCK_UN))
	require.Equal(t, syscall.Errno(0), pmAppend(filepath.Join(alice, "events.jsonl"), pmLine(3, owner, "proposal_submitted", "ready", time.Now(), nil)), d.Output())
}
