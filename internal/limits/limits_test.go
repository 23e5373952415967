package limits

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func requireCgroups(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("ACPFS_REQUIRE_FUSE") == "1" {
			t.Fatal("limits tests need root (ACPFS_REQUIRE_FUSE=1)")
		}
		t.Skip("limits tests need root to make control groups")
	}
}

func TestReadKey(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	require.NoError(t, os.WriteFile(p, []byte("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"), 0o644))
	assert.Equal(t, int64(3), readKey(p, "oom_kill"))
	assert.Equal(t, int64(0), readKey(p, "nope"))
	require.NoError(t, os.WriteFile(p, []byte("7\n"), 0o644))
	assert.Equal(t, int64(7), readKey(p, ""))
	assert.Equal(t, int64(0), readKey(filepath.Join(dir, "missing"), ""))
}

func TestNewRejectsBadNames(t *testing.T) {
	for _, n := range []string{"", "a/b"} {
		_, err := New(n, Defaults)
		require.Error(t, err, "%q", n)
	}
}

// TestPidsLimitStopsAForkLoop runs a shell that tries to start 200
// sleeping children in a group limited to 32 processes.
func TestPidsLimitStopsAForkLoop(t *testing.T) {
	requireCgroups(t)
	g, err := New(fmt.Sprintf("acpfs-limits-test-%d", os.Getpid()), Limits{Pids: 32, Memory: 256 << 20})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, g.Delete()) }) // also ends the sleeps

	// The shell waits on stdin until it is in the group.
	cmd := exec.Command("sh", "-c", `read go; for i in $(seq 200); do sleep 30 </dev/null >/dev/null 2>&1 & done 2>/dev/null; echo started`)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Start())
	require.NoError(t, g.Add(cmd.Process.Pid))
	_, err = stdin.Write([]byte("go\n"))
	require.NoError(t, err)
	require.NoError(t, stdin.Close())
	_ = cmd.Wait()
	assert.Contains(t, g.Hit(), "pids", "the fork refusals are seen: %s", out.String())
}
