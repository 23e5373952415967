package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// forkLoop forks sleeping children until the kernel refuses, prints how
// many it got, and fails as a fork bomb's victim would.
const forkLoop = `python3 - <<'PY'
import os, sys, time
n = 0
for i in range(200):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    n += 1
print("forked", n)
sys.exit(1)
PY`

// TestRunPidsLimit runs a fork loop under --pids 64 while another agent's
// command does its work at the same time.
func TestRunPidsLimit(t *testing.T) {
	e := newSandboxEnv(t)
	alice := e.startSandbox(sbxRun{grant: "G-alice", script: `echo from-alice > "$0/scratch/alice/note.md"`})

	out, stderr, code := e.sandbox(sbxRun{grant: "G-bob", flags: []string{"--pids", "64"}, script: forkLoop})
	require.Contains(t, out, "forked ", stderr)
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(out), "forked")))
	require.NoError(t, err, out)
	assert.Less(t, n, 64, "at most 64 processes, the loop's own included")
	assert.Equal(t, 6, code, "the exit status says a limit was hit: %s", stderr)
	assert.Contains(t, stderr, "pids limit")

	_, acode := alice.finish()
	assert.Equal(t, 0, acode)
	b, err := os.ReadFile(filepath.Join(e.folder, "scratch", "alice", "note.md"))
	require.NoError(t, err)
	assert.Equal(t, "from-alice\n", string(b), "the other agent's command completed its work")
}

func TestRunRefusesBadLimits(t *testing.T) {
	e := newSandboxEnv(t)
	_, stderr, code := e.sandbox(sbxRun{grant: "G-bob", flags: []string{"--memory", "lots"}, script: "true"})
	assert.NotEqual(t, 0, code)
	assert.Contains(t, stderr, "--memory")
}

// TestSandboxClosesWhatAnAttackerFound covers what a tester found open:
// listening on the host's network without bind, set-ID bits in --rw
// directories, the write quota under run, and a host process that shares
// the agent's uid. Without root, in the subuid scheme, such a process
// makes the run take another subordinate uid (the agent's home follows
// it); in the single scheme every process of the caller's shares the
// agent's uid, as docs/sandbox.md says, and that part does not apply.
func TestSandboxClosesWhatAnAttackerFound(t *testing.T) {
	eachMode(t, allModes, func(t *testing.T, m sbxMode) { sbxClosesWhatAnAttackerFound(t, newSandboxEnvAs(t, m), m) })
}

func sbxClosesWhatAnAttackerFound(t *testing.T, e *coordEnv, m sbxMode) {
	out, stderr, code := e.sandbox(sbxRun{grant: "G-bob", script: `python3 -c '
import socket
s = socket.socket()
try:
    s.listen()
    print("listening", s.getsockname())
except OSError as err:
    print("refused", err.errno)'`})
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "refused", "no listening socket on the host's network")

	rw := e.newDir("rw")
	require.NoError(t, os.Chmod(rw, 0o777))
	_, stderr, code = e.sandbox(sbxRun{grant: "G-bob", flags: []string{"--rw", rw}, script: `cp /usr/bin/id "$1/id" && chmod 4755 "$1/id"`, args: []string{rw}})
	assert.NotEqual(t, 0, code, "chmod to set-uid is refused: %s", stderr)
	if st, err := os.Stat(filepath.Join(rw, "id")); err == nil {
		assert.Zero(t, st.Mode()&os.ModeSetuid)
	}

	_, stderr, code = e.sandbox(sbxRun{grant: "G-bob", flags: []string{"--max-write-bytes", "1000"},
		script: `head -c 5000 /dev/zero >> "$0/review.md"`})
	assert.NotEqual(t, 0, code, "the write quota holds under run")
	assert.Contains(t, stderr, "quota")

	switch m {
	case asSingle:
		return
	case asSubUID:
		_, stderr, code = e.sandbox(sbxRun{grant: "G-bob", script: `echo kept > ~/state`})
		require.Equal(t, 0, code, stderr)
		taken := e.hostUID(stderr, 0)
		hostProcess(t, taken)
		out, stderr, code = e.sandbox(sbxRun{grant: "G-bob", script: `cat ~/state`})
		require.Equal(t, 0, code, stderr)
		assert.NotEqual(t, taken, e.hostUID(stderr, 0), "the run took the uid a host process uses")
		assert.Equal(t, "kept\n", out, "the home followed the grant to its new uid")
		return
	}
	hostUID := freeUID(t)
	hostProcess(t, hostUID)
	_, stderr, code = e.sandbox(sbxRun{grant: "G-bob", flags: []string{"--uid", strconv.Itoa(hostUID)}, script: "true"})
	assert.NotEqual(t, 0, code)
	assert.Contains(t, stderr, "in use on the host")
}

// hostProcess runs a process as uid outside every sandbox until the
// test ends.
func hostProcess(t *testing.T, uid int) {
	t.Helper()
	host := exec.Command("setpriv", "--reuid", strconv.Itoa(uid), "--regid", strconv.Itoa(uid), "--clear-groups", "sleep", "60")
	require.NoError(t, host.Start())
	t.Cleanup(func() { _ = host.Process.Kill(); _ = host.Wait() })
	waitFor(t, func() bool { return len(uidProcs(t, uid)) > 0 }, "the host process runs as uid "+strconv.Itoa(uid))
}
