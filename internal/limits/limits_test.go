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

func TestFormatBytes(t *testing.T) {
	for _, c := range []struct {
		n    int64
		want string
	}{{64 << 20, "64M"}, {4 << 30, "4G"}, {1536 << 20, "1536M"}, {8 << 10, "8K"}, {1000, "1000"}, {0, "0"}} {
		assert.Equal(t, c.want, FormatBytes(c.n), "%d", c.n)
	}
}

func TestV1SocketNote(t *testing.T) {
	for _, c := range []struct {
		name string
		l    Limits
		wmem int64
		want []string
	}{
		{"cap as memory", Limits{Memory: 64 << 20}, 4 << 20, []string{"--memory 64M does not charge socket buffers", "capped separately at 64M", "up to 128M", "at most 8M each (2 x net.core.wmem_max)"}},
		{"own cap", Limits{Memory: 1 << 30, SocketMemory: 16 << 20}, 0, []string{"capped separately at 16M", "up to 1040M", "each held only by its socket's send buffer"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			note := V1SocketNote(c.l, c.wmem)
			for _, w := range c.want {
				assert.Contains(t, note, w)
			}
			assert.NotContains(t, note, "\n", "one line")
		})
	}
}

// TestV1CapsSocketBuffers checks that a v1 group gets the kmem.tcp cap
// that charges TCP and UDP socket buffers, which its memory limit leaves
// out.
func TestV1CapsSocketBuffers(t *testing.T) {
	requireCgroups(t)
	if !V1() {
		t.Skip("cgroup v2 charges socket buffers to memory.max")
	}
	for _, c := range []struct {
		name string
		l    Limits
		want int64
	}{
		{"as memory", Limits{Memory: 64 << 20}, 64 << 20},
		{"own", Limits{Memory: 64 << 20, SocketMemory: 8 << 20}, 8 << 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			g, err := New(fmt.Sprintf("acpfs-limits-sock-%d", os.Getpid()), c.l)
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, g.Delete()) })
			assert.Equal(t, c.want, readKey(filepath.Join(g.dirs["memory"], "memory.kmem.tcp.limit_in_bytes"), ""))
		})
	}
}
