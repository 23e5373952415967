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

func TestV1DirsFrom(t *testing.T) {
	own := "9:name=systemd:/\n8:pids:/\n4:memory:/api/abc\n2:cpu,cpuacct:/x\n0::/\n"
	mounts := `30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
31 30 0:28 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
34 30 0:31 /api /sys/fs/cgroup/mem\040ory rw,relatime shared:5 - cgroup cgroup rw,memory
38 30 0:35 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`
	for _, c := range []struct {
		name string
		want []string
		dirs map[string]string
		err  string
	}{
		{"all three", []string{"memory", "pids", "cpu"}, map[string]string{
			"memory": "/sys/fs/cgroup/mem ory/abc", "pids": "/sys/fs/cgroup/pids", "cpu": "/sys/fs/cgroup/cpu,cpuacct/x"}, ""},
		{"one", []string{"pids"}, map[string]string{"pids": "/sys/fs/cgroup/pids"}, ""},
		{"not mounted", []string{"memory", "blkio"}, nil, "found 1 of them"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dirs, err := v1DirsFrom(c.want, own, mounts)
			if c.err != "" {
				require.ErrorContains(t, err, c.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, c.dirs, dirs)
		})
	}
}

// TestNewUnderWritesV2Files makes v2 groups in a directory standing in
// for the hierarchy, whose control files the test creates as the kernel
// would, and checks what each limit writes.
func TestNewUnderWritesV2Files(t *testing.T) {
	for _, c := range []struct {
		name  string
		l     Limits
		ctl   string
		files map[string]string
	}{
		{"all", Limits{Memory: 64 << 20, Pids: 32, CPU: 1.5}, "+cpu +memory +pids",
			map[string]string{"memory.max": "67108864", "pids.max": "32", "cpu.max": "150000 100000"}},
		{"pids only", Limits{Pids: 7}, "+pids", map[string]string{"pids.max": "7", "memory.max": "", "cpu.max": ""}},
		{"none", Limits{}, "", map[string]string{"pids.max": "", "memory.max": "", "cpu.max": ""}},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			old := cgroupRoot
			cgroupRoot = root
			t.Cleanup(func() { cgroupRoot = old })
			group := filepath.Join(root, "user.slice", "run")
			require.NoError(t, os.MkdirAll(group, 0o755))
			for _, d := range []string{root, filepath.Join(root, "user.slice")} {
				require.NoError(t, os.WriteFile(filepath.Join(d, "cgroup.subtree_control"), nil, 0o644))
			}
			for f := range c.files {
				require.NoError(t, os.WriteFile(filepath.Join(group, f), nil, 0o644))
			}
			g, err := NewUnder("/user.slice", "run", c.l)
			require.NoError(t, err)
			assert.Equal(t, group, g.v2)
			for _, d := range []string{root, filepath.Join(root, "user.slice")} {
				b, err := os.ReadFile(filepath.Join(d, "cgroup.subtree_control"))
				require.NoError(t, err)
				assert.Equal(t, c.ctl, string(b), d)
			}
			for f, want := range c.files {
				b, err := os.ReadFile(filepath.Join(group, f))
				require.NoError(t, err)
				assert.Equal(t, want, string(b), f)
			}
		})
	}
	t.Run("refused", func(t *testing.T) {
		for _, c := range []struct {
			parent string
			l      Limits
		}{{"relative", Defaults}, {"/a/../b", Defaults}, {"/a", Limits{SocketMemory: 1}}} {
			_, err := NewUnder(c.parent, "run", c.l)
			assert.Error(t, err, "%+v", c)
		}
	})
}

// v2Mount is a cgroup v2 hierarchy of this machine: /sys/fs/cgroup on a
// unified system, /sys/fs/cgroup/unified on a hybrid one; "" for none.
func v2Mount() string {
	for _, p := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		var st syscall.Statfs_t
		if syscall.Statfs(p, &st) == nil && st.Type == 0x63677270 {
			return p
		}
	}
	return ""
}

// TestV2GroupKillsAndRemoves makes a real cgroup v2 group (without
// limits, which a hybrid system's v2 hierarchy cannot set), puts a
// process in it and deletes it: the process is killed and the group
// removed.
func TestV2GroupKillsAndRemoves(t *testing.T) {
	requireCgroups(t)
	mnt := v2Mount()
	if mnt == "" {
		t.Skip("no cgroup v2 hierarchy on this machine")
	}
	old := cgroupRoot
	cgroupRoot = mnt
	t.Cleanup(func() { cgroupRoot = old })
	own, err := ownV2Group()
	require.NoError(t, err)
	name := fmt.Sprintf("acpfs-limits-v2-%d", os.Getpid())
	g, err := NewUnder(own, name, Limits{})
	require.NoError(t, err)
	removed := false
	t.Cleanup(func() {
		if !removed {
			_ = g.Delete()
		}
	})
	cmd := exec.Command("sleep", "30")
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	require.NoError(t, g.Add(cmd.Process.Pid))
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", cmd.Process.Pid))
	require.NoError(t, err)
	assert.Contains(t, string(b), "0::"+filepath.Join(own, name)+"\n")
	assert.Empty(t, g.Hit())

	require.NoError(t, g.Delete())
	removed = true
	assert.Error(t, <-done, "the process in the group was killed")
	_, err = os.Stat(filepath.Join(mnt, own, name))
	assert.True(t, os.IsNotExist(err), "the group is removed: %v", err)
}

func TestV2Group(t *testing.T) {
	for _, c := range []struct{ self, want string }{
		{"0::/user.slice/a.scope\n", "/user.slice/a.scope"},
		{"0::/\n", "/"},
		{"12:pids:/x\n4:memory:/y\n0::/z", "/z"},
		{"4:memory:/y\n", ""},
		{"", ""},
	} {
		assert.Equal(t, c.want, V2Group([]byte(c.self)), "%q", c.self)
	}
}
