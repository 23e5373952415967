package integration

import (
	"os"
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
