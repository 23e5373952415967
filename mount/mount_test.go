package mount

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/internal/fsid"
	"github.com/acpfs/acpfs/internal/mountinfo"
	"github.com/acpfs/acpfs/internal/procstat"
)

// TestRelHidden: what no view may show is found inside the folder by
// identity, whatever spelling led to it.
func TestRelHidden(t *testing.T) {
	d := t.TempDir()
	folder := filepath.Join(d, "collab")
	for _, p := range []string{"agent_runs/context_grants", "a/b", "..x"} {
		require.NoError(t, os.MkdirAll(filepath.Join(folder, p), 0o755))
	}
	require.NoError(t, os.MkdirAll(filepath.Join(d, "agent_runs"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(folder, "agent_runs", "ledger.jsonl"), nil, 0o600))
	require.NoError(t, os.Symlink(filepath.Join(folder, "agent_runs"), filepath.Join(d, "link")))
	require.NoError(t, os.Symlink(folder, filepath.Join(d, "alias")))
	t.Chdir(folder)

	tests := []struct {
		name   string
		folder string
		paths  []string
		want   []string
	}{
		{"canonical spellings", folder, []string{filepath.Join(folder, "agent_runs"), filepath.Join(d, "agent_runs"), "", filepath.Join(folder, "a/b"), filepath.Join(folder, "..x")}, []string{"agent_runs", "a/b", "..x"}},
		{"a symlink to the run directory", folder, []string{filepath.Join(d, "link")}, []string{"agent_runs"}},
		{"a relative run directory from inside the folder", ".", []string{"agent_runs"}, []string{"agent_runs"}},
		{"dot-dot spellings", folder, []string{"../collab/a/../agent_runs"}, []string{"agent_runs"}},
		{"a file through a symlinked directory", folder, []string{filepath.Join(d, "link", "ledger.jsonl")}, []string{"agent_runs/ledger.jsonl"}},
		{"the folder through a symlink", filepath.Join(d, "alias"), []string{filepath.Join(folder, "a", "b")}, []string{"a/b"}},
		{"a grants directory below", folder, []string{filepath.Join(d, "link", "context_grants")}, []string{"agent_runs/context_grants"}},
		{"a path not made yet is placed by its directory", folder, []string{filepath.Join(d, "link", "ledger-2.jsonl")}, []string{"agent_runs/ledger-2.jsonl"}},
		{"paths under a missing directory are skipped", folder, []string{filepath.Join(folder, "nope", "x")}, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, relHidden(tt.folder, tt.paths))
		})
	}
	found, err := fsid.LocateIn(folder, []string{"."})
	require.NoError(t, err)
	assert.Empty(t, found, "the folder itself is not hidden (what lies in it is, by name)")
}

// TestCheckConcealed: a grant that would show a run directory inside the
// folder is refused before any view starts, with the rule that shows it.
func TestCheckConcealed(t *testing.T) {
	d := t.TempDir()
	folder := filepath.Join(d, "collab")
	require.NoError(t, os.MkdirAll(filepath.Join(folder, "agent_runs"), 0o755))
	require.NoError(t, os.Symlink(filepath.Join(folder, "agent_runs"), filepath.Join(d, "link")))
	all := &grants.Grant{GrantID: "G-a", AgentID: "a", MayRead: []string{"**"}}
	md := &grants.Grant{GrantID: "G-m", AgentID: "m", MayRead: []string{"**/*.md"}}
	owner := &grants.Grant{GrantID: "G-o", AgentID: "o", MayRead: []string{"deliverables/**", "proposal.md"}}
	forbids := &grants.Grant{GrantID: "G-f", AgentID: "f", MayRead: []string{"**"}, ForbiddenRead: []string{"agent_runs"}}
	tests := []struct {
		name  string
		g     *grants.Grant
		paths []string
		err   string
	}{
		{"reads everything, symlinked run directory", all, []string{filepath.Join(d, "link")}, "grant G-a would show it"},
		{"reads every .md", md, []string{filepath.Join(d, "link")}, "grant G-m would show it"},
		{"owner preset does not reach it", owner, []string{filepath.Join(d, "link")}, ""},
		{"forbids it", forbids, []string{filepath.Join(d, "link")}, ""},
		{"outside the folder", all, []string{d}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckConcealed(folder, tt.paths, tt.g)
			if tt.err == "" {
				assert.NoError(t, err)
				return
			}
			assert.ErrorContains(t, err, tt.err)
		})
	}
}

func TestPrepareRoot(t *testing.T) {
	d := t.TempDir()
	var log strings.Builder
	missing := filepath.Join(d, "new")
	require.NoError(t, prepareRoot(missing, "/f", nil, nil, &log))
	assert.DirExists(t, missing)
	require.NoError(t, prepareRoot(missing, "/f", nil, nil, &log))

	// Empty directories named after an agent (what a killed coordinator
	// leaves once its dead views are gone) are reused.
	require.NoError(t, os.Mkdir(filepath.Join(missing, "alice"), 0o755))
	require.NoError(t, prepareRoot(missing, "/f", map[string]bool{"alice": true}, nil, &log))
	// Any other name, or a non-empty agent directory, is refused.
	assert.ErrorContains(t, prepareRoot(missing, "/f", map[string]bool{"bob": true}, nil, &log), "not empty")
	require.NoError(t, os.WriteFile(filepath.Join(missing, "alice", "x"), nil, 0o644))
	assert.ErrorContains(t, prepareRoot(missing, "/f", map[string]bool{"alice": true}, nil, &log), "not empty")
	require.NoError(t, os.Remove(filepath.Join(missing, "alice", "x")))
	require.NoError(t, os.WriteFile(filepath.Join(missing, "x"), nil, 0o644))
	assert.ErrorContains(t, prepareRoot(missing, "/f", map[string]bool{"alice": true, "x": true}, nil, &log), "not empty")
	assert.Empty(t, log.String())
}

func TestCheckRootPlace(t *testing.T) {
	d := t.TempDir()
	cfg := CoordinatorConfig{Folder: filepath.Join(d, "collab"), Runs: grants.NewRunDir(filepath.Join(d, "runs"))}
	for _, bad := range []string{cfg.Folder, filepath.Join(cfg.Folder, "mnt"), filepath.Join(d, "runs", "mnt")} {
		cfg.Root = bad
		assert.Error(t, checkRootPlace(cfg), bad)
	}
	cfg.Root = filepath.Join(d, "mnt")
	assert.NoError(t, checkRootPlace(cfg))
}

func TestCheckParticipant(t *testing.T) {
	g := &grants.Grant{GrantID: "G-x", AgentID: "codex", Participant: "bob"}
	assert.NoError(t, checkParticipant(g, []string{"alice", "bob"}))
	assert.NoError(t, checkParticipant(g, nil))
	err := checkParticipant(g, []string{"alice"})
	assert.ErrorContains(t, err, `participant "bob" is not listed`)
}

func TestCheckMountpoint(t *testing.T) {
	d := t.TempDir()
	assert.NoError(t, CheckMountpoint(d))
	f := filepath.Join(d, "file")
	require.NoError(t, os.WriteFile(f, nil, 0o644))
	err := CheckMountpoint(f)
	assert.ErrorContains(t, err, "not a directory")
	assert.ErrorIs(t, err, ErrMountpoint)
	err = CheckMountpoint(filepath.Join(d, "missing"))
	assert.ErrorContains(t, err, "does not exist")
	assert.ErrorIs(t, err, ErrMountpoint)
	// Not empty.
	err = CheckMountpoint(d)
	assert.ErrorContains(t, err, "not empty")
	assert.ErrorIs(t, err, ErrMountpoint)
	assert.NotContains(t, err.Error(), "\n")
}

func TestCheckMountpointPlace(t *testing.T) {
	d := t.TempDir()
	folder := filepath.Join(d, "collab")
	runs := filepath.Join(d, "runs")
	ledgerDir := filepath.Join(d, "ledgers")
	for _, p := range []string{folder, runs, ledgerDir} {
		require.NoError(t, os.MkdirAll(filepath.Join(p, "sub"), 0o755))
	}
	require.NoError(t, os.Symlink(folder, filepath.Join(d, "alias")))
	hidden := []string{runs, ledgerDir}
	for p, want := range map[string]string{
		folder:                               "collaboration folder itself",
		filepath.Join(folder, "sub"):         "inside the collaboration folder",
		filepath.Join(d, "alias", "sub"):     "inside the collaboration folder",
		filepath.Join(runs, "sub"):           "no view may show",
		runs:                                 "no view may show",
		filepath.Join(ledgerDir, "sub"):      "no view may show",
		filepath.Join(ledgerDir, "sub", "x"): "no view may show",
	} {
		err := CheckMountpointPlace(p, folder, hidden)
		assert.ErrorContains(t, err, want, p)
		assert.ErrorIs(t, err, ErrMountpoint, p)
	}
	assert.NoError(t, CheckMountpointPlace(filepath.Join(d, "mnt"), folder, hidden))
	assert.NoError(t, CheckMountpointPlace(filepath.Join(d, "collab2"), folder, hidden), "a sibling sharing a prefix is not inside")
}

func TestParseMountInfo(t *testing.T) {
	text := `22 1 0:21 / /proc rw,nosuid shared:5 - proc proc rw
30 22 0:44 / /tmp/a\040b rw,nosuid,nodev,relatime - fuse.acpfs acpfs:/tmp/col\040x rw,user_id=0
31 30 0:45 / /tmp/a\040b rw - tmpfs tmpfs rw
malformed line
40 1 0:46 / /mnt/v rw master:1 propagation:2 - fuse.loopback /src rw
`
	mis := parseMountInfo(text)
	require.Len(t, mis, 4)
	assert.Equal(t, MountInfo{ID: 30, Parent: 22, Dev: "0:44", Mountpoint: "/tmp/a b", FSType: "fuse.acpfs", Source: "acpfs:/tmp/col x"}, mis[1])
	assert.True(t, mis[1].IsView())
	assert.False(t, mis[0].IsView())
	assert.False(t, mis[3].IsView(), "another FUSE filesystem is not a view")
	assert.Equal(t, "fuse.loopback", mis[3].FSType)
	// The tmpfs mounted over the view is the one on top.
	top, ok := topmostAt(mis, "/tmp/a b")
	require.True(t, ok)
	assert.Equal(t, "tmpfs", top.FSType)
	_, ok = topmostAt(mis, "/nowhere")
	assert.False(t, ok)
	assert.Equal(t, `a\b`, mountinfo.Unescape(`a\134b`))
	assert.Equal(t, `a\9`, mountinfo.Unescape(`a\9`))
}

func TestFlockHolder(t *testing.T) {
	locks := `1: POSIX  ADVISORY  WRITE 99 00:2d:5678 0 EOF
2: FLOCK  ADVISORY  WRITE 1234 00:2d:5678 0 EOF
2: -> FLOCK  ADVISORY  WRITE 777 00:2d:5678 0 EOF
3: FLOCK  ADVISORY  WRITE 4321 fd:01:42 0 EOF
`
	assert.Equal(t, 1234, flockHolder(locks, 0, 0x2d, 5678))
	assert.Equal(t, 4321, flockHolder(locks, 0xfd, 1, 42))
	assert.Equal(t, 0, flockHolder(locks, 0, 0x2d, 1))
}

func TestLockRunDir(t *testing.T) {
	d := t.TempDir()
	first, err := lockRunDir(d)
	require.NoError(t, err)
	// flock belongs to the open file, so a second open conflicts even in
	// this process, and names the holder.
	_, err = lockRunDir(d)
	require.ErrorIs(t, err, ErrRunDirBusy)
	assert.Contains(t, err.Error(), fmt.Sprintf("pid %d", os.Getpid()))
	assert.NotContains(t, err.Error(), "\n")
	require.NoError(t, first.Close())
	again, err := lockRunDir(d)
	require.NoError(t, err, "a released lock (a dead holder) is free")
	again.Close()
}

// TestLockRunDirPrivate: the run directory's lock is a 0600 regular file
// of this uid; one left readable by others is replaced by a new inode,
// so that a descriptor someone opened earlier locks nothing; a lock that
// is not this uid's own file is refused.
func TestLockRunDirPrivate(t *testing.T) {
	d := t.TempDir()
	p := filepath.Join(d, LockFile)
	require.NoError(t, os.WriteFile(p, nil, 0o644))
	require.NoError(t, os.Chmod(p, 0o644))
	var old unix.Stat_t
	require.NoError(t, unix.Stat(p, &old))
	earlier, err := os.Open(p) // an outsider's descriptor, opened while it could
	require.NoError(t, err)
	defer earlier.Close()

	f, err := lockRunDir(d)
	require.NoError(t, err)
	var now unix.Stat_t
	require.NoError(t, unix.Stat(p, &now))
	assert.Equal(t, uint32(0o600), now.Mode&0o7777)
	assert.NotEqual(t, old.Ino, now.Ino, "a new inode")
	assert.Equal(t, p, f.Name())
	left, _ := filepath.Glob(filepath.Join(d, ".*.tmp-*"))
	assert.Empty(t, left, "no temporary file left")
	f.Close()
	require.NoError(t, unix.Flock(int(earlier.Fd()), unix.LOCK_EX|unix.LOCK_NB), "the old inode is nobody's lock")
	again, err := lockRunDir(d)
	require.NoError(t, err, "holding the old inode stops nobody")
	again.Close()

	for name, plant := range map[string]func(){
		"symlink":   func() { require.NoError(t, os.Symlink("elsewhere", p)) },
		"hard link": func() { require.NoError(t, os.WriteFile(p+".x", nil, 0o600)); require.NoError(t, os.Link(p+".x", p)) },
		"other uid": func() { require.NoError(t, os.WriteFile(p, nil, 0o600)); require.NoError(t, os.Chown(p, 65533, 65533)) },
	} {
		require.NoError(t, os.RemoveAll(p))
		os.Remove(p + ".x")
		plant()
		_, err := lockRunDir(d)
		assert.Error(t, err, name)
		assert.NotErrorIs(t, err, ErrRunDirBusy, name)
	}
}

// TestRunDirBusyNamesOnlyCoordinators: a holder that is not an acpfs up
// is never called one.
func TestRunDirBusyNamesOnlyCoordinators(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	require.NoError(t, cmd.Start())
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	// Start returns once the child's exec has begun; its command line is
	// there once the kernel has set the new program's arguments up.
	execed := func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", cmd.Process.Pid))
		return err == nil && len(b) > 0
	}
	for i := 0; i < 1_000_000 && !execed(); i++ {
		runtime.Gosched()
	}
	err := runDirBusy("/r", "/r/"+LockFile, cmd.Process.Pid)
	require.ErrorIs(t, err, ErrRunDirBusy)
	assert.Contains(t, err.Error(), "which is not an acpfs up")
	assert.Contains(t, err.Error(), `"sleep 60"`)
	assert.NotContains(t, err.Error(), "already runs")
	assert.Contains(t, runDirBusy("/r", "/r/"+LockFile, os.Getpid()).Error(), "already runs")
	assert.False(t, isCoordinator(cmd.Process.Pid))
}

// TestPrepareMountpoint: the directory a view covers is the
// coordinator's, 0500, whoever made it.
func TestPrepareMountpoint(t *testing.T) {
	d := t.TempDir()
	mp := filepath.Join(d, "bob")
	require.NoError(t, prepareMountpoint(mp))
	made, err := os.Stat(mp)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o500), made.Mode().Perm())

	other := filepath.Join(d, "alice")
	require.NoError(t, os.Mkdir(other, 0o777))
	if os.Geteuid() == 0 {
		require.NoError(t, os.Chown(other, 65533, 65533))
	}
	require.NoError(t, prepareMountpoint(other))
	var st unix.Stat_t
	require.NoError(t, unix.Stat(other, &st))
	assert.Equal(t, uint32(0o500), st.Mode&0o7777)
	assert.Equal(t, uint32(os.Geteuid()), st.Uid)

	link := filepath.Join(d, "carol")
	require.NoError(t, os.Symlink(other, link))
	assert.Error(t, prepareMountpoint(link), "a symlink is not a mountpoint")
}

func TestWriteFileAtomic(t *testing.T) {
	d := t.TempDir()
	p := filepath.Join(d, StatusFile)
	require.NoError(t, writeFileAtomic(p, []byte("one\n"), 0o644))
	require.NoError(t, writeFileAtomic(p, []byte("two\n"), 0o644))
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	assert.Equal(t, "two\n", string(b))
	st, err := os.Stat(p)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o644), st.Mode().Perm())
	entries, err := os.ReadDir(d)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary file left behind")
}

func TestStatusLiveness(t *testing.T) {
	self := os.Getpid()
	ps, err := procstat.Read(self)
	require.NoError(t, err)
	start := ps.Start
	require.NotZero(t, start)

	st := CoordinatorStatus{PID: self, PIDStart: start, BootID: bootID()}
	state, _ := st.liveness()
	assert.Equal(t, StateRunning, state)

	// The same pid with another start time: the pid was reused.
	st.PIDStart = start + 1
	state, detail := st.liveness()
	assert.Equal(t, StateStale, state)
	assert.Contains(t, detail, "reused")

	// Another boot.
	st = CoordinatorStatus{PID: self, PIDStart: start, BootID: "not-this-boot"}
	state, _ = st.liveness()
	assert.Equal(t, StateDead, state)

	// A pid that no longer runs.
	cmd := exec.Command("true")
	require.NoError(t, cmd.Run())
	st = CoordinatorStatus{PID: cmd.Process.Pid, PIDStart: 1}
	state, detail = st.liveness()
	assert.Equal(t, StateDead, state)
	assert.Contains(t, detail, "not running")

	st = CoordinatorStatus{}
	state, _ = st.liveness()
	assert.Equal(t, StateDead, state)
}

func TestReadStatusReportsDeadCoordinator(t *testing.T) {
	d := t.TempDir()
	cmd := exec.Command("true")
	require.NoError(t, cmd.Run())
	b, err := json.Marshal(CoordinatorStatus{PID: cmd.Process.Pid, PIDStart: 12345, BootID: bootID(), Folder: "/f", Root: "/r"})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(d, StatusFile), b, 0o644))
	st, err := ReadStatus(grants.NewRunDir(d))
	require.NoError(t, err)
	assert.Equal(t, StateDead, st.State)
	assert.False(t, st.Running())
}

func TestProcStartTimeOddName(t *testing.T) {
	// A command name with spaces and parentheses does not shift fields.
	dir := t.TempDir()
	exe := filepath.Join(dir, "a) (b c")
	require.NoError(t, os.Symlink("/bin/sleep", exe))
	cmd := exec.Command(exe, "5")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	st, err := procstat.Read(cmd.Process.Pid)
	require.NoError(t, err)
	self, err := procstat.Read(os.Getpid())
	require.NoError(t, err)
	assert.GreaterOrEqual(t, st.Start, self.Start)
}

func TestUnmountViewRefusesPlainDirectory(t *testing.T) {
	d := t.TempDir()
	err := UnmountView(d, false)
	assert.ErrorIs(t, err, ErrNotView)
	assert.ErrorContains(t, err, "not a mount point")
	err = UnmountView(d, true)
	assert.ErrorIs(t, err, ErrNotView, "--force does not widen what umount acts on")
	err = UnmountView(filepath.Join(d, "missing", "x"), false)
	assert.ErrorIs(t, err, ErrNotView)
}

func TestFuseFixMatchesTheError(t *testing.T) {
	tests := []struct {
		err  error
		root bool
		want string
	}{
		{syscall.EACCES, false, "chmod 0666 /dev/fuse"},
		{syscall.EPERM, true, "--device /dev/fuse"},
		{syscall.ENOENT, false, "modprobe fuse"},
		{syscall.ENODEV, true, "modprobe fuse"},
	}
	for _, tc := range tests {
		assert.Contains(t, fuseFix(&os.PathError{Op: "open", Path: "/dev/fuse", Err: tc.err}, tc.root), tc.want)
	}
}

// TestPrepareMountpointCoveredByAMount: a directory bind-mounted over a
// view's mountpoint (the folder, say) is never made the coordinator's.
func TestPrepareMountpointCoveredByAMount(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to bind-mount")
	}
	d := t.TempDir()
	mp, victim := filepath.Join(d, "mp"), filepath.Join(d, "victim")
	require.NoError(t, os.Mkdir(mp, 0o500))
	require.NoError(t, os.Mkdir(victim, 0o777))
	require.NoError(t, os.Chmod(victim, 0o777))
	require.NoError(t, os.Chown(victim, 1234, 1234))
	require.NoError(t, unix.Mount(victim, mp, "", unix.MS_BIND, ""))
	t.Cleanup(func() { _ = unix.Unmount(mp, unix.MNT_DETACH) })
	err := prepareMountpoint(mp)
	require.ErrorContains(t, err, "covered by another mount")
	var st unix.Stat_t
	require.NoError(t, unix.Stat(victim, &st))
	assert.Equal(t, uint32(1234), st.Uid)
	assert.Equal(t, uint32(0o777), st.Mode&0o7777)
}

// TestCoordinatorStoppedIsTold: a coordinator stopped by SIGSTOP still
// has a status that says it runs; Stopped tells it apart.
func TestCoordinatorStoppedIsTold(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	require.NoError(t, cmd.Start())
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	st := CoordinatorStatus{PID: cmd.Process.Pid}
	assert.False(t, st.Stopped())
	require.NoError(t, cmd.Process.Signal(syscall.SIGSTOP))
	var ws syscall.WaitStatus
	_, err := syscall.Wait4(cmd.Process.Pid, &ws, syscall.WUNTRACED, nil)
	require.NoError(t, err)
	require.True(t, ws.Stopped())
	assert.True(t, st.Stopped())
	require.NoError(t, cmd.Process.Signal(syscall.SIGCONT))
}

// TestRemountWait: the first attempts are a second apart, the later ones
// twice as far apart each time, never more than maxRemountWait.
func TestRemountWait(t *testing.T) {
	for attempts, want := range map[int]time.Duration{
		1: remountPause, 2: remountPause, 3: laterRemount, 4: 2 * laterRemount, 5: 4 * laterRemount, 20: maxRemountWait, 1000: maxRemountWait,
	} {
		assert.Equal(t, want, remountWait(attempts), "after %d attempts", attempts)
	}
}
