package integration

import (
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sbxUID is the uid a background sandbox printed with `id -u`.
func sbxUID(t *testing.T, p *sbxProc) int {
	t.Helper()
	m := regexp.MustCompile(`(?m)^UID=(\d+)$`).FindStringSubmatch(p.out.String())
	require.NotNil(t, m, p.out.String())
	u, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	return u
}

// inotifyHog opens inotify instances until the kernel refuses, says how
// many it holds, and keeps them until the sandbox ends (its PID
// namespace takes it down).
const inotifyHog = `import ctypes, sys, time
libc = ctypes.CDLL(None, use_errno=True)
n = 0
while libc.inotify_init() >= 0:
    n += 1
print('held', n, flush=True)
while True:
    time.sleep(3600)`

// TestSandboxUIDsAreHostWide runs G-bob of two collaborations (two run
// directories) at once: they get different uids, since the kernel counts
// processes, inotify instances and pipe pages per uid, and one agent
// would spend the other's. A --uid that the other collaboration's
// sandbox holds is refused with one line that names it.
func TestSandboxUIDsAreHostWide(t *testing.T) {
	a, b := newSandboxEnv(t), newSandboxEnv(t)
	// a's agent takes every inotify instance its uid may have, and holds
	// them while b's agent runs.
	pa := a.startSandbox(sbxRun{grant: "G-bob", script: `echo UID=$(id -u)
exec 3< <(python3 -c "` + inotifyHog + `")
read -r line <&3; echo "$line"`})
	require.Contains(t, pa.out.String(), "held ", "a's agent took inotify instances")
	pb := b.startSandbox(sbxRun{grant: "G-bob", script: `echo UID=$(id -u)
python3 -c 'import ctypes; fd = ctypes.CDLL(None, use_errno=True).inotify_init(); print("inotify", "ok" if fd >= 0 else ctypes.get_errno())'`})
	ua, ub := sbxUID(t, pa), sbxUID(t, pb)
	assert.NotEqual(t, ua, ub, "G-bob of two run directories share a uid while both run")
	assert.Contains(t, pb.out.String(), "inotify ok", "b's agent was not left without inotify by a's")

	// The other collaboration's uid, named with --uid, is refused while
	// it runs, and is still kept for it after.
	_, stderr, code := b.sandbox(sbxRun{grant: "G-bob", flags: []string{"--uid", strconv.Itoa(ua)}, script: "id -u"})
	assert.Equal(t, 3, code, stderr)
	assert.Contains(t, stderr, "uid "+strconv.Itoa(ua)+" is reserved for the sandbox of grant G-bob of run directory "+a.runs+" (running now)")

	_, acode := pa.finish()
	assert.Equal(t, 0, acode)
	_, bcode := pb.finish()
	assert.Equal(t, 0, bcode)

	// Each keeps its own uid on its next run, one after the other.
	out, stderr, code := a.sandbox(sbxRun{grant: "G-bob", script: "id -u"})
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, ua, atoi(t, out), "stable per run directory")
	out, stderr, code = b.sandbox(sbxRun{grant: "G-bob", script: "id -u"})
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, ub, atoi(t, out), "stable per run directory")
}
