package mount

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/internal/procstat"
)

// zombieLeaderEnv makes the test binary a process whose leader thread
// exits alone while its other threads live on: its leader is a zombie
// ('Z') and its pidfd does not fire, as for a daemon killed while one of
// its threads is stuck in the kernel.
const zombieLeaderEnv = "ACPFS_TEST_ZOMBIE_LEADER"

func init() {
	if os.Getenv(zombieLeaderEnv) != "1" {
		return
	}
	runtime.LockOSThread() // the main goroutine on the leader thread
	go func() {
		for {
			time.Sleep(time.Hour)
		}
	}()
	// exit(2), not exit_group(2): only the leader thread ends.
	syscall.RawSyscall(syscall.SYS_EXIT, 0, 0, 0)
}

func TestDyingDecision(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    procInfo
		want bool
	}{
		{"running", procInfo{Leader: 'R'}, false},
		{"sleeping", procInfo{Leader: 'S'}, false},
		{"stopped by SIGSTOP", procInfo{Leader: 'T'}, false},
		{"traced", procInfo{Leader: 't'}, false},
		{"in the kernel, alive", procInfo{Leader: 'D'}, false},
		{"zombie leader, a thread stuck", procInfo{Leader: 'Z'}, true},
		{"dead", procInfo{Leader: 'X'}, true},
		{"SIGKILL pending in a stuck thread", procInfo{Leader: 'D', KillPending: true}, true},
		{"stopped, then SIGKILLed", procInfo{Leader: 'T', KillPending: true}, true},
		{"gone", procInfo{Gone: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) { assert.Equal(t, tc.want, dying(tc.p)) })
	}
}

// TestReadProc reads fake /proc trees as the kernel lays them out.
func TestReadProc(t *testing.T) {
	status := func(sigpnd, shdpnd string) string {
		return "Name:\tacpfs\nState:\tS (sleeping)\nSigQ:\t0/1000\nSigPnd:\t" + sigpnd + "\nShdPnd:\t" + shdpnd + "\nSigBlk:\t0000000000000000\n"
	}
	const none = "0000000000000000"
	for _, tc := range []struct {
		name   string
		leader string            // stat line of the leader, "" for no process
		tasks  map[string]string // tid -> status
		want   procInfo
	}{
		{"running", "42 (acpfs) S 1 42 42 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 2 0 148147 0 0", map[string]string{"42": status(none, none), "43": status(none, none)}, procInfo{Leader: 'S'}},
		{"stopped", "42 (acpfs) T 1 42 42 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 2 0 148147 0 0", map[string]string{"42": status(none, none)}, procInfo{Leader: 'T'}},
		{"zombie leader, thread in D", "42 (acpfs) Z 1 42 42 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 2 0 148147 0 0", map[string]string{"42": status(none, none), "44": status("0000000000000100", none)}, procInfo{Leader: 'Z', KillPending: true}},
		{"group kill pending", "42 (a) b) D 1 42 42 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 2 0 148147 0 0", map[string]string{"42": status(none, "0000000000000100")}, procInfo{Leader: 'D', KillPending: true}},
		{"other signal pending", "42 (acpfs) S 1 42 42 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 2 0 148147 0 0", map[string]string{"42": status("0000000000004000", none)}, procInfo{Leader: 'S'}},
		{"gone", "", nil, procInfo{Gone: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if tc.leader != "" {
				for tid, st := range tc.tasks {
					dir := filepath.Join(root, "42", "task", tid)
					require.NoError(t, os.MkdirAll(dir, 0o755))
					require.NoError(t, os.WriteFile(filepath.Join(dir, "status"), []byte(st), 0o644))
				}
				require.NoError(t, os.WriteFile(filepath.Join(root, "42", "stat"), []byte(tc.leader+"\n"), 0o644))
			}
			p, err := readProc(root, 42)
			require.NoError(t, err)
			assert.Equal(t, tc.want, p)
			assert.Equal(t, tc.want.Gone || tc.want.Leader == 'Z' || tc.want.KillPending, dying(p))
		})
	}
}

// superviseRig runs superviseProcess on a child process, with a plain
// file standing for the fusectl abort file of connection 7.
type superviseRig struct {
	t      *testing.T
	child  *exec.Cmd
	abort  string
	in     *os.File // the daemon's end of the pipe
	states chan procInfo
	done   chan error
}

func newSuperviseRig(t *testing.T, child *exec.Cmd) *superviseRig {
	require.NoError(t, child.Start())
	r := &superviseRig{t: t, child: child, abort: filepath.Join(t.TempDir(), "abort"), states: make(chan procInfo, 1000), done: make(chan error, 1)}
	t.Cleanup(func() {
		_ = child.Process.Kill()
		_ = child.Wait()
	})
	f, err := os.OpenFile(r.abort, os.O_WRONLY|os.O_CREATE, 0o600)
	require.NoError(t, err)
	a := newConnAborter()
	a.files["7"] = f
	pr, pw, err := os.Pipe()
	require.NoError(t, err)
	r.in = pw
	t.Cleanup(func() { pw.Close(); pr.Close() })
	go func() {
		r.done <- superviseProcess(pr, child.Process.Pid, "/proc", a, func(p procInfo) {
			select {
			case r.states <- p:
			default:
			}
		})
	}()
	return r
}

// waitState waits for the supervisor to see the child in state s, and
// requires that it has not ended meanwhile.
func (r *superviseRig) waitState(s byte) {
	r.t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case p := <-r.states:
			if p.Leader == s {
				return
			}
		case err := <-r.done:
			r.t.Fatalf("supervisor ended (%v) while waiting for state %c", err, s)
		case <-deadline:
			r.t.Fatalf("supervisor never saw state %c", s)
		}
	}
}

// waitDone waits for the supervisor to end.
func (r *superviseRig) waitDone() {
	r.t.Helper()
	select {
	case err := <-r.done:
		require.NoError(r.t, err)
	case <-time.After(30 * time.Second):
		r.t.Fatal("the supervisor did not end")
	}
}

func (r *superviseRig) aborted() bool {
	b, err := os.ReadFile(r.abort)
	require.NoError(r.t, err)
	return string(b) == "1"
}

// TestSuperviseStoppedThenKilled: a stopped daemon is left alone (it
// answers once continued); a killed one has its connections aborted.
func TestSuperviseStoppedThenKilled(t *testing.T) {
	r := newSuperviseRig(t, exec.Command("sleep", "1000"))
	r.waitState('S')
	require.NoError(t, r.child.Process.Signal(syscall.SIGSTOP))
	r.waitState('T')
	r.waitState('T') // seen stopped twice, and still supervising
	assert.False(t, r.aborted(), "a stopped daemon must not be aborted")
	require.NoError(t, r.child.Process.Signal(syscall.SIGCONT))
	r.waitState('S')
	require.NoError(t, r.child.Process.Signal(syscall.SIGKILL))
	r.waitDone()
	assert.True(t, r.aborted(), "the connections of a killed daemon are aborted")
}

// TestSuperviseZombieLeader: a process whose leader is a zombie while
// another thread lives (its pidfd does not fire) is taken as dying.
func TestSuperviseZombieLeader(t *testing.T) {
	exe, err := os.Executable()
	require.NoError(t, err)
	c := exec.Command(exe, "-test.run=^$")
	c.Env = append(os.Environ(), zombieLeaderEnv+"=1")
	r := newSuperviseRig(t, c)
	r.waitDone()
	assert.True(t, r.aborted(), "a zombie leader with live threads is a dying daemon")
	// It was alive all along: only its leader thread had ended.
	p, err := readProc("/proc", c.Process.Pid)
	require.NoError(t, err)
	assert.False(t, p.Gone)
	assert.Equal(t, byte('Z'), p.Leader)
	// `acpfs status` takes such a coordinator as dying (its views hang),
	// but not once its pid names another process.
	ps, err := procstat.Read(c.Process.Pid)
	require.NoError(t, err)
	start := ps.Start
	assert.True(t, CoordinatorStatus{PID: c.Process.Pid, PIDStart: start}.DaemonDying())
	assert.False(t, CoordinatorStatus{PID: c.Process.Pid, PIDStart: start + 1}.DaemonDying())
}

// TestDaemonDyingLive: a running or stopped coordinator is not dying.
func TestDaemonDyingLive(t *testing.T) {
	c := exec.Command("sleep", "1000")
	require.NoError(t, c.Start())
	defer func() { _ = c.Process.Kill(); _ = c.Wait() }()
	st := CoordinatorStatus{PID: c.Process.Pid}
	assert.False(t, st.DaemonDying())
	require.NoError(t, c.Process.Signal(syscall.SIGSTOP))
	deadline := time.Now().Add(30 * time.Second)
	for {
		if p, err := readProc("/proc", c.Process.Pid); err == nil && p.Leader == 'T' {
			break
		}
		require.True(t, time.Now().Before(deadline), "never stopped")
		time.Sleep(10 * time.Millisecond)
	}
	assert.False(t, st.DaemonDying(), "a stopped coordinator answers once continued")
}

// TestSuperviseNormalExit: a daemon that unmounted its views ("-7") and
// exited closes the pipe: the supervisor ends and aborts nothing.
func TestSuperviseNormalExit(t *testing.T) {
	r := newSuperviseRig(t, exec.Command("sleep", "1000"))
	r.waitState('S')
	_, err := r.in.WriteString("-7\n")
	require.NoError(t, err)
	require.NoError(t, r.in.Close())
	r.waitDone()
	assert.False(t, r.aborted(), "a connection the daemon ended is not aborted")
}
