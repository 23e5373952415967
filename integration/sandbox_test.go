package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/internal/sandbox"
	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/mount"
)

// The tests of this file drive `acpfs run` as an attacker would, with
// ordinary commands inside the sandbox. Each of the attacks the sandbox
// issue lists comes first, then what an agent must still be able to do.

// TestSandboxProcShowsOnlyItself: a second agent asking for the --uid
// the first one runs as (as an old README example did) is refused, since
// a uid is never shared by two grants; running as its own, it cannot see
// the first one's processes, nor reach its view through /proc/PID/root,
// by any pid the host knows them by. Without root, in the single scheme
// (no --uid to give), both agents are the caller's uid on the host: the
// PID namespaces alone part them, and do.
func TestSandboxProcShowsOnlyItself(t *testing.T) {
	eachMode(t, allModes, func(t *testing.T, m sbxMode) {
		e := newSandboxEnvAs(t, m)
		var flags []string
		uid := strconv.Itoa(62000)
		if m == asRoot {
			uid = strconv.Itoa(freeUID(t))
		}
		if m != asSingle {
			flags = []string{"--uid", uid}
		}
		a := e.startSandbox(sbxRun{grant: "G-alice", flags: flags, script: `cat "$0/oracle/answer.md" >/dev/null || exit 9`})
		hostPids := uidProcs(t, e.hostUID(a.out.String(), atoi(t, uid)))
		require.NotEmpty(t, hostPids, "alice's command is not running: %s", a.out.String())

		var args []string
		for _, p := range hostPids {
			args = append(args, strconv.Itoa(p))
		}
		if m != asSingle {
			_, stderr, code := e.sandbox(sbxRun{grant: "G-bob", flags: flags, script: "true"})
			assert.Equal(t, 3, code, stderr)
			assert.Contains(t, stderr, " is in use by the sandbox of grant G-alice")
		}

		out, stderr, code := e.sandbox(sbxRun{grant: "G-bob", args: args, script: `
F=$0
for p in "$@" /proc/[0-9]*; do p=${p#/proc/}
  cat "/proc/$p/root$F/oracle/answer.md" 2>/dev/null
  cat "/proc/$p/cwd/oracle/answer.md" 2>/dev/null
  ls -l "/proc/$p/fd/" 2>/dev/null | grep -q /dev/fuse && echo FUSE-FD
done
echo PS; ps -e -o pid=,args=`})
		require.Equal(t, 0, code, stderr)
		assert.NotContains(t, out, sbxSecret)
		assert.NotContains(t, out, "FUSE-FD")
		ps := strings.TrimSpace(out[strings.Index(out, "PS")+2:])
		lines := strings.Split(ps, "\n")
		// The sandbox's first process, the shell and ps itself: nothing else.
		assert.LessOrEqual(t, len(lines), 4, "ps inside the sandbox:\n%s", ps)
		for _, l := range lines {
			f := strings.Fields(l)
			require.NotEmpty(t, f)
			assert.Less(t, atoi(t, f[0]), 100, "a pid from outside the sandbox: %s", l)
			assert.NotContains(t, l, "run-daemon")
			assert.NotContains(t, l, "oracle")
		}
		assert.Contains(t, lines[0], "run-init", "pid 1 is the sandbox's own first process")
		_, code = a.finish()
		assert.Equal(t, 0, code)
	})
}

// TestSandboxOtherViewsUnreachable: another agent's view, mounted with
// --allow-other, cannot be reached from inside a sandbox, even when the
// caller shows the directory that holds it.
func TestSandboxOtherViewsUnreachable(t *testing.T) {
	e := newSandboxEnv(t)
	mnt := filepath.Join(e.root, "alice")
	require.NoError(t, os.MkdirAll(mnt, 0o755))
	p := pmStart(t, []string{mnt}, []string{filepath.Join(mnt, ".acpfs", "status")},
		"mount", "--folder", e.folder, "--runs", e.runs, "--grant", "G-alice", "--allow-other", mnt)
	eventually(t, func() bool { return strings.Contains(p.Output(), "mounted") }, "not started: "+p.Output())
	require.Contains(t, readFile(t, filepath.Join(mnt, "oracle/answer.md")), sbxSecret)

	for _, flags := range [][]string{nil, {"--ro", e.root}, {"--rw", e.root}} {
		out, stderr, code := e.sandbox(sbxRun{grant: "G-bob", flags: flags, args: []string{mnt}, script: `
cat "$1/oracle/answer.md"; ls -A "$1"; cat "$1/proposal.md" >/dev/null && echo LISTED
grep -c fuse /proc/self/mountinfo`})
		assert.NotContains(t, out, sbxSecret, "flags %v", flags)
		assert.NotContains(t, out, "LISTED")
		assert.True(t, strings.HasSuffix(out, "1\n"), "the view must be the one FUSE mount (flags %v): %s%s", flags, out, stderr)
		assert.Equal(t, 0, code, stderr)
	}
}

// TestSandboxPrivateTmp: an agent that may read the oracle cannot leave
// it in /tmp, /var/tmp or /dev/shm for one that may not; nothing reaches
// the host's either.
func TestSandboxPrivateTmp(t *testing.T) {
	eachMode(t, allModes, func(t *testing.T, m sbxMode) { sbxPrivateTmp(t, newSandboxEnvAs(t, m)) })
}

func sbxPrivateTmp(t *testing.T, e *coordEnv) {
	tag := fmt.Sprintf("acpfs-leak-%d", time.Now().UnixNano())
	a := e.startSandbox(sbxRun{grant: "G-alice", args: []string{tag}, script: `
for d in /tmp /var/tmp /dev/shm; do cp "$0/oracle/answer.md" "$d/$1" || exit 9; done`})
	out, stderr, code := e.sandbox(sbxRun{grant: "G-bob", args: []string{tag}, script: `
for d in /tmp /var/tmp /dev/shm; do cat "$d/$1"; ls -A "$d"; done; true`})
	require.Equal(t, 0, code, stderr)
	assert.NotContains(t, out, sbxSecret)
	assert.NotContains(t, out, tag)
	for _, d := range []string{"/tmp", "/var/tmp", "/dev/shm"} {
		assert.NoFileExists(t, filepath.Join(d, tag), "the host's %s got the agent's file", d)
	}
	_, code = a.finish()
	assert.Equal(t, 0, code)
}

// TestSandboxWorkingDirectory: a working directory the sandbox does not
// show (hidden by the grant, the run directory, a directory elsewhere)
// becomes the folder, with a note; it never stays the real directory.
func TestSandboxWorkingDirectory(t *testing.T) {
	eachMode(t, allModes, func(t *testing.T, m sbxMode) { sbxWorkingDirectory(t, newSandboxEnvAs(t, m)) })
}

func sbxWorkingDirectory(t *testing.T, e *coordEnv) {
	elsewhere := e.newDir("elsewhere")
	require.NoError(t, os.WriteFile(filepath.Join(elsewhere, "answer.md"), []byte(sbxSecret), 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(e.folder, "deliverables"), 0o755))
	e.own()
	tests := []struct {
		name, dir, want string
		moved           bool
	}{
		{name: "hidden by the grant", dir: filepath.Join(e.folder, "oracle"), want: e.folder, moved: true},
		{name: "the run directory", dir: e.runs, want: e.folder, moved: true},
		{name: "the grants", dir: filepath.Join(e.runs, "context_grants"), want: e.folder, moved: true},
		{name: "a directory the sandbox does not show", dir: elsewhere, want: e.folder, moved: true},
		{name: "a visible directory of the folder", dir: filepath.Join(e.folder, "deliverables"), want: filepath.Join(e.folder, "deliverables")},
		{name: "the folder's parent, which holds only the folder", dir: filepath.Dir(e.folder), want: filepath.Dir(e.folder)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, stderr, code := e.sandbox(sbxRun{grant: "G-bob", dir: tt.dir, script: `
pwd; cat answer.md communication_ledger.jsonl G-bob.json 2>/dev/null; ls -A; true`})
			require.Equal(t, 0, code, stderr)
			lines := strings.Split(out, "\n")
			assert.Equal(t, tt.want, lines[0])
			assert.NotContains(t, out, sbxSecret)
			assert.NotContains(t, out, `"kind"`)
			assert.NotContains(t, out, `"grant_id"`)
			if tt.moved {
				assert.Contains(t, stderr, "is not in the sandbox")
			} else {
				assert.NotContains(t, stderr, "is not in the sandbox")
			}
			if tt.dir == filepath.Dir(e.folder) {
				assert.Equal(t, filepath.Base(e.folder), strings.TrimSpace(strings.Join(lines[1:], "\n")), "the parent lists the folder alone")
			}
		})
	}
}

// TestSandboxIdentity: each grant runs as its own uid from the
// documented range, the same one every time, and never as root unless
// --allow-root says so.
func TestSandboxIdentity(t *testing.T) {
	e := newSandboxEnv(t)
	id := func(grant string, flags ...string) (string, string, int) {
		return e.sandbox(sbxRun{grant: grant, flags: flags, script: `id -u; id -g; id -G`})
	}
	bob, stderr, code := id("G-bob")
	require.Equal(t, 0, code, stderr)
	alice, stderr, code := id("G-alice")
	require.Equal(t, 0, code, stderr)
	again, _, _ := id("G-bob")
	assert.Equal(t, bob, again, "a grant's uid is stable")
	assert.NotEqual(t, alice, bob, "two grants never share a uid")
	for _, out := range []string{alice, bob} {
		f := strings.Fields(out)
		require.Len(t, f, 3, out)
		u := atoi(t, f[0])
		assert.GreaterOrEqual(t, u, sandbox.UIDMin)
		assert.LessOrEqual(t, u, sandbox.UIDMax)
		assert.Equal(t, f[0], f[1], "gid = uid")
		assert.Equal(t, f[0], f[2], "no supplementary groups")
	}
	var rec struct{ UIDs map[string]int }
	require.NoError(t, json.Unmarshal([]byte(readFile(t, filepath.Join(e.runs, sandbox.UIDFile))), &rec))
	assert.Equal(t, atoi(t, strings.Fields(bob)[0]), rec.UIDs["G-bob"])
	assert.Equal(t, atoi(t, strings.Fields(alice)[0]), rec.UIDs["G-alice"])

	uid, gid := freeUID(t), freeUID(t)
	out, _, _ := id("G-bob", "--uid", fmt.Sprintf("%d:%d", uid, gid))
	assert.Equal(t, fmt.Sprintf("%d\n%d\n%d\n", uid, gid, gid), out)
	_, stderr, code = id("G-bob", "--uid", "0")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "--allow-root")
	out, stderr, code = id("G-bob", "--allow-root")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "0\n0\n0\n", out)
}

// TestSandboxRootCannotUndoIt: with --allow-root the command is root in
// the sandbox, and still cannot unmount the view or the masks, mount
// anything, reach the real folder through /proc, or make a namespace.
func TestSandboxRootCannotUndoIt(t *testing.T) {
	e := newSandboxEnv(t)
	out, stderr, code := e.sandbox(sbxRun{grant: "G-bob", flags: []string{"--allow-root", "--ro", filepath.Dir(e.runs)}, args: []string{e.runs}, script: `
F=$0
umount "$F" && echo UMOUNTED-VIEW
umount -l "$F" && echo UMOUNTED-VIEW
umount "$1" && echo UMOUNTED-MASK
mount -t tmpfs none /mnt 2>/dev/null && echo MOUNTED
unshare -m true && echo UNSHARED
unshare -U true && echo UNSHARED
for p in /proc/[0-9]*; do cat "$p/root$F/oracle/answer.md" 2>/dev/null; ls -l "$p/fd/" 2>/dev/null | grep -q -e /dev/fuse -e "$1" && echo FD; done
cat "$1/communication_ledger.jsonl" 2>/dev/null
ls -A "$1" 2>/dev/null
cat "$F/oracle/answer.md" 2>/dev/null
echo x 2>/dev/null > /proc/1/exe && echo WROTE-INIT
echo x 2>/dev/null > /proc/1/mem && echo WROTE-INIT
echo 1 2>/dev/null > /proc/sys/kernel/sysrq && echo WROTE-SYSCTL
cat /proc/keys /proc/kcore 2>/dev/null | head -c 1 | grep -q . && echo KERNEL
true`})
	require.Equal(t, 0, code, stderr)
	for _, bad := range []string{"UMOUNTED", "MOUNTED", "UNSHARED", "FD", "WROTE", "KERNEL", "context_grants", "communication_ledger", sbxSecret, `"kind"`} {
		assert.NotContains(t, out, bad)
	}
}

// TestSandboxAgentDoesItsWork: the reviewer writes review.md and appends
// its event as its own uid, with the folder's files root-owned and 0644
// as acpfs init made them: nobody runs chmod. The ledger records both.
func TestSandboxAgentDoesItsWork(t *testing.T) {
	e := newSandboxEnv(t)
	for _, args := range [][]string{
		{"--participant", owner, "--event", "deliverable_drafted", "--summary", "draft", "--doc", primary, "--role", "primary", "--reply-to", "1"},
		{"--participant", owner, "--event", "proposal_submitted", "--summary", "please review", "--reply-to", "2"},
	} {
		_, stderr, code := acpfs(t, append([]string{"append", "--folder", e.folder}, args...)...)
		require.Equal(t, 0, code, stderr)
	}
	var st syscall.Stat_t
	require.NoError(t, syscall.Stat(filepath.Join(e.folder, "review.md"), &st))
	require.Equal(t, uint32(0), st.Uid)
	require.Equal(t, uint32(0o644), st.Mode&0o777)

	out, stderr, code := e.sandbox(sbxRun{grant: "G-bob", script: `
cd "$0" || exit 9
ls -ln review.md events.jsonl | awk '{print $3}'
now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
printf '\n## %s - bob - seq 4\n\nThe design holds.\n' "$now" >> review.md || exit 10
printf '{"seq":4,"from":"bob","event":"review_submitted","at":"%s","summary":"reviewed","reply_to":3}\n' "$now" >> events.jsonl || { cat .acpfs/last-error; exit 11; }
id -u`})
	require.Equal(t, 0, code, "%s%s", out, stderr)
	f := strings.Fields(out)
	require.Len(t, f, 3)
	assert.Equal(t, f[2], f[0], "files appear owned by the agent")
	assert.Equal(t, f[2], f[1])
	assert.Contains(t, readFile(t, filepath.Join(e.folder, "review.md")), "The design holds.")
	assert.Contains(t, readFile(t, filepath.Join(e.folder, "events.jsonl")), `"from":"bob","event":"review_submitted"`)

	recs := ledgerRecords(t, e)
	assert.True(t, hasRecord(recs, ledger.KindAppendAccepted, "events.jsonl", reviewer), "no append_accepted record")
	assert.True(t, hasRecord(recs, ledger.KindWrite, "review.md", reviewer), "no write record for review.md")
}

// TestSandboxTwoAgentsCannotTalk: two agents with different grants, at
// the same time: whatever one leaves in the places they both have
// (temporary directories, shared memory, SysV IPC, abstract, path and
// TCP sockets, its own files, signals) the other cannot reach, with the
// host's network or without. The one file both grants show does pass,
// and the ledger says who wrote it and who read it.
//
// Without root, in the single uid scheme, both agents are the caller's
// uid on the host: the namespaces, Landlock's scopes and the private
// directories alone must keep them apart.
func TestSandboxTwoAgentsCannotTalk(t *testing.T) {
	eachMode(t, allModes, func(t *testing.T, m sbxMode) {
		for _, net := range []string{"none", "host", "allow=api.example.com"} {
			t.Run("net "+net, func(t *testing.T) {
				e := newSandboxEnvAs(t, m)
				sbxNoTalk(t, e, []string{"--net", net})
			})
		}
	})
}

func sbxNoTalk(t *testing.T, e *coordEnv, flags []string) {
	a := e.startSandbox(sbxRun{grant: "G-alice", flags: flags, script: `
F=$0
for d in /tmp /var/tmp /dev/shm; do echo "msg-tmp" > "$d/msg" || exit 9; done
ipcmk -M 4096 >/dev/null || exit 10
ipcmk -Q >/dev/null || exit 11
echo msg-own > "$F/scratch/alice/msg.md" || exit 12
echo msg-shared > "$F/scratch/shared/msg.md" || exit 13
/usr/bin/python3 -c '
import socket, sys
keep = []
for fam, addr in ((socket.AF_UNIX, "\0acpfs-sbx-msg"), (socket.AF_UNIX, "/tmp/msg.sock"),
                  (socket.AF_UNIX, sys.argv[1] + "/scratch/shared/msg.sock"), (socket.AF_INET, ("127.0.0.1", 47811))):
    s = socket.socket(fam)
    try:
        s.bind(addr); s.listen(1); keep.append(s)
    except OSError as e:
        print("cannot listen on", addr, e.errno, file=sys.stderr)
print("READY", flush=True)
sys.stdin.read()
' "$F" || exit 14
exit 0`})
	out, stderr, code := e.sandbox(sbxRun{grant: "G-bob", flags: flags, script: `
F=$0
cat /tmp/msg /var/tmp/msg /dev/shm/msg 2>/dev/null
ipcs -m | grep -c 4096
ipcs -q | grep -c 0x
cat "$F/scratch/alice/msg.md" 2>/dev/null
cat "$F/scratch/shared/msg.md"
/usr/bin/python3 -c '
import socket, sys
for fam, addr in ((socket.AF_UNIX, "\0acpfs-sbx-msg"), (socket.AF_UNIX, "/tmp/msg.sock"),
                  (socket.AF_UNIX, sys.argv[1] + "/scratch/shared/msg.sock"), (socket.AF_INET, ("127.0.0.1", 47811))):
    s = socket.socket(fam)
    try:
        s.connect(addr); print("CONNECTED", addr)
    except OSError as e:
        print("refused", e.errno)
' "$F"
for p in $(seq 2 300); do kill -0 $p 2>/dev/null && echo "SIGNAL $p"; done
true`})
	require.Equal(t, 0, code, stderr)
	assert.NotContains(t, out, "msg-tmp")
	assert.NotContains(t, out, "msg-own")
	assert.NotContains(t, out, "CONNECTED")
	assert.Contains(t, out, "msg-shared", "the file both grants show passes")
	assert.Equal(t, 4, strings.Count(out, "refused"), out)
	assert.True(t, strings.HasPrefix(out, "0\n0\n"), "bob sees alice's SysV objects: %s", out)
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "SIGNAL ") {
			// Only its own processes: the shell's children, numbered low.
			assert.Less(t, atoi(t, strings.TrimPrefix(l, "SIGNAL ")), 20, l)
		}
	}
	aout, code := a.finish()
	assert.Equal(t, 0, code, aout)

	recs := ledgerRecords(t, e)
	assert.True(t, hasRecord(recs, ledger.KindWrite, "scratch/shared/msg.md", owner), "alice's write of the shared file is not in the ledger")
	assert.True(t, hasRecord(recs, ledger.KindRead, "scratch/shared/msg.md", reviewer), "bob's read of the shared file is not in the ledger")
}

// TestSandboxNetwork: --net none has no route out (only its own
// loopback); --net host has the host's, but no agent may listen on it.
func TestSandboxNetwork(t *testing.T) {
	eachMode(t, allModes, func(t *testing.T, m sbxMode) { sbxNetwork(t, newSandboxEnvAs(t, m)) })
}

func sbxNetwork(t *testing.T, e *coordEnv) {
	probe := `
/usr/bin/python3 -c '
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    s.connect(("192.0.2.1", 9)); print("ROUTE")
except OSError as e:
    print("noroute", e.errno)
t = socket.socket()
try:
    t.bind(("127.0.0.1", 0)); t.listen(1); print("LISTEN")
except OSError as e:
    print("nolisten", e.errno)
'
awk 'NR>2 {print $1}' /proc/net/dev`
	out, stderr, code := e.sandbox(sbxRun{grant: "G-bob", flags: []string{"--net", "none"}, script: probe})
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, fmt.Sprintf("noroute %d\nLISTEN\nlo:\n", syscall.ENETUNREACH), out)

	out, stderr, code = e.sandbox(sbxRun{grant: "G-bob", script: probe})
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "ROUTE\n")
	assert.Contains(t, out, fmt.Sprintf("nolisten %d\n", syscall.EACCES), "Landlock lets the agent listen on the host's network")
}

// TestSandboxWalls: what the command runs under, seen from inside.
func TestSandboxWalls(t *testing.T) {
	eachMode(t, allModes, func(t *testing.T, m sbxMode) { sbxWalls(t, newSandboxEnvAs(t, m)) })
}

func sbxWalls(t *testing.T, e *coordEnv) {
	out, stderr, code := e.sandbox(sbxRun{grant: "G-bob", script: `
grep -E '^(NoNewPrivs|Seccomp|CapEff|CapBnd):' /proc/self/status | tr -s '\t ' ' '
ls / >/dev/null 2>&1 || echo "root listing refused"
: > /usr/x 2>/dev/null || echo "system read-only"
: > /x 2>/dev/null || echo "root read-only"
ls /dev/fuse 2>/dev/null || echo "no /dev/fuse"
ls /sys 2>/dev/null || echo "no /sys"
/usr/bin/python3 -c 'open("/dev/tty")' 2>/dev/null || echo "no controlling terminal"
/usr/bin/python3 -c '
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
for name, nr in (("keyctl", 250), ("bpf", 321), ("ptrace", 101), ("io_uring_setup", 425), ("open_by_handle_at", 304)):
    r = libc.syscall(nr, 0, 0, 0, 0, 0)
    print(name, "refused" if r == -1 and ctypes.get_errno() == 1 else "ALLOWED")
import socket
try:
    socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
    print("vsock ALLOWED")
except OSError:
    print("vsock refused")
'
echo x > /tmp/x && cat /tmp/x`})
	require.Equal(t, 0, code, stderr)
	for _, want := range []string{"NoNewPrivs: 1", "Seccomp: 2", "CapEff: 0000000000000000", "CapBnd: 0000000000000000", "root listing refused", "system read-only", "root read-only",
		"no /dev/fuse", "no /sys", "no controlling terminal", "keyctl refused", "bpf refused", "ptrace refused",
		"io_uring_setup refused", "open_by_handle_at refused", "vsock refused", "x\n"} {
		assert.Contains(t, out, want)
	}
	assert.NotContains(t, out, "ALLOWED")
}

// TestSandboxPrivateParent: a folder under a directory only root may
// enter works; shown as it is (--ro of that directory), it fails with one
// line before the command starts.
//
// Without root, in the single uid scheme, the agent is the directory's
// owner, so the second half does not apply.
func TestSandboxPrivateParent(t *testing.T) {
	eachMode(t, allModes, func(t *testing.T, m sbxMode) { sbxPrivateParent(t, newSandboxEnvAs(t, m), m) })
}

func sbxPrivateParent(t *testing.T, e *coordEnv, m sbxMode) {
	home := filepath.Dir(e.folder)
	require.NoError(t, os.Chmod(home, 0o700))
	out, stderr, code := e.sandbox(sbxRun{grant: "G-bob", script: `cat "$0/proposal.md" >/dev/null && echo READ`})
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "READ\n", out)
	if m == asSingle {
		return
	}

	outside := e.newDir("tools")
	out, stderr, code = e.sandbox(sbxRun{grant: "G-bob", flags: []string{"--ro", outside, "--ro", home}, script: `echo STARTED`})
	assert.NotEqual(t, 0, code)
	assert.Empty(t, out, "the command must not start")
	assert.Equal(t, 1, strings.Count(strings.TrimSpace(stderr), "\n")+1, "one line: %q", stderr)
	assert.Contains(t, stderr, "cannot enter "+home)
}

// TestSandboxRefusesBadPaths: --ro and --rw that would undo the sandbox
// are refused before anything starts.
func TestSandboxRefusesBadPaths(t *testing.T) {
	eachMode(t, allModes, func(t *testing.T, m sbxMode) { sbxRefusesBadPaths(t, newSandboxEnvAs(t, m)) })
}

func sbxRefusesBadPaths(t *testing.T, e *coordEnv) {
	for _, tt := range []struct{ flag, path, msg string }{
		{"--ro", "/", "not /"},
		{"--rw", "/tmp", "its own, empty /tmp"},
		{"--ro", "/proc", "its own /proc"},
		{"--ro", "/dev/shm", "its own /dev"},
		{"--rw", e.folder, "collaboration folder"},
		{"--ro", filepath.Join(e.folder, "oracle"), "collaboration folder"},
		{"--ro", e.runs, "no agent may reach"},
		{"--ro", filepath.Join(e.runs, "context_grants"), "no agent may reach"},
	} {
		out, stderr, code := e.sandbox(sbxRun{grant: "G-bob", flags: []string{tt.flag, tt.path}, script: "echo STARTED"})
		assert.Equal(t, 2, code, "%s %s", tt.flag, tt.path)
		assert.Empty(t, out)
		assert.Contains(t, stderr, tt.msg, "%s %s", tt.flag, tt.path)
	}
	// Shown from above, the run directory is masked.
	require.NoError(t, os.Chmod(filepath.Dir(e.runs), 0o755))
	out, stderr, code := e.sandbox(sbxRun{grant: "G-bob", flags: []string{"--ro", filepath.Dir(e.runs)}, args: []string{e.runs},
		script: `ls -A "$1"; cat "$1/communication_ledger.jsonl"; ls "$0/.." | sort | tr '\n' ' '`})
	assert.Equal(t, 0, code, stderr)
	assert.Equal(t, "agent_runs collab ", out, "the folder's siblings are shown, the run directory as an empty name")
	assert.NotContains(t, out, `"kind"`)
	assert.NotContains(t, out, "context_grants")
	assert.Contains(t, stderr, "Permission denied")
}

// TestSandboxDiesWithRun: killing acpfs run, even with SIGKILL, ends the
// command and everything it started.
func TestSandboxDiesWithRun(t *testing.T) {
	e := newSandboxEnv(t)
	uid := freeUID(t)
	a := e.startSandbox(sbxRun{grant: "G-bob", flags: []string{"--uid", strconv.Itoa(uid)}, script: `sleep 1000 & sleep 1001 &`})
	require.NotEmpty(t, uidProcs(t, uid))
	require.NoError(t, a.cmd.Process.Kill())
	eventually(t, func() bool { return len(uidProcs(t, uid)) == 0 }, "the sandbox's processes outlived acpfs run")
	eventually(t, func() bool { return len(leftoverMounts()) == 0 }, "the view outlived acpfs run")
}

// TestSandboxOwnerOnly: a view with an owner serves that uid, shows it
// every file as its own, and refuses everyone else, allow_other or not;
// root outside every sandbox is still served.
func TestSandboxOwnerOnly(t *testing.T) {
	c := newCollab(t)
	agentUID, otherUID := freeUID(t), freeUID(t)
	v := c.mountView(reviewerGrant(), func(cfg *mount.Config) { cfg.Owner = &mount.Owner{UID: uint32(agentUID), GID: uint32(agentUID)} })
	// Let every uid reach the mountpoint (search only: tmpRoot stays
	// unlistable), for this test.
	require.NoError(t, os.Chmod(tmpRoot, 0o711))
	t.Cleanup(func() { os.Chmod(tmpRoot, 0o700) })
	require.NoError(t, os.Chmod(c.root, 0o711))

	out, code := asUID(t, agentUID, `cd "$0" && ls -ln proposal.md | awk '{print $1, $3, $4}' && cat proposal.md >/dev/null && echo READ`, v.dir)
	require.Equal(t, 0, code, out)
	assert.Equal(t, fmt.Sprintf("-rw------- %d %d\nREAD\n", agentUID, agentUID), out)

	for _, op := range []string{`stat "$0"`, `ls "$0"`, `cat "$0/proposal.md"`, `stat "$0/proposal.md"`, `echo x >> "$0/review.md"`, `cd "$0"`} {
		out, code := asUID(t, otherUID, op, v.dir)
		assert.NotEqual(t, 0, code, "%s as another uid: %s", op, out)
		if !strings.HasPrefix(op, `stat "$0"`) || strings.Contains(op, "proposal") {
			assert.Contains(t, out, "Permission denied", op)
		}
	}
	assert.Contains(t, readFile(t, v.path("proposal.md")), "#", "root outside every sandbox is served")
	recs := c.records()
	found := false
	for _, r := range recs {
		if r.Kind == ledger.KindDenied && strings.Contains(r.Detail, fmt.Sprintf("uid %d is not the view's owner", otherUID)) {
			found = true
		}
	}
	assert.True(t, found, "the refusal of another uid is not in the ledger")
}

func ledgerRecords(t *testing.T, e *coordEnv) []ledger.Record {
	t.Helper()
	out, stderr, code := e.acpfs("ledger", "show", "--ledger", filepath.Join(e.runs, "communication_ledger.jsonl"), "--json")
	require.Equal(t, 0, code, stderr)
	var recs []ledger.Record
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var r ledger.Record
		if json.Unmarshal([]byte(l), &r) == nil {
			recs = append(recs, r)
		}
	}
	return recs
}

func hasRecord(recs []ledger.Record, kind ledger.Kind, path, agent string) bool {
	for _, r := range recs {
		if r.Kind == kind && r.Path == path && r.Agent == agent {
			return true
		}
	}
	return false
}

// TestSandboxRefusesSecondRoutes: a directory shown with --ro that holds
// another mount of the folder (or of part of it, or of the run
// directory) would lead around the view and the masks: nothing starts.
func TestSandboxRefusesSecondRoutes(t *testing.T) {
	eachMode(t, allModes, func(t *testing.T, m sbxMode) { sbxRefusesSecondRoutes(t, newSandboxEnvAs(t, m)) })
}

func sbxRefusesSecondRoutes(t *testing.T, e *coordEnv) {
	shown := e.newDir("shown")
	for _, src := range []string{e.folder, filepath.Join(e.folder, "oracle"), e.runs} {
		t.Run(filepath.Base(src), func(t *testing.T) {
			alias := filepath.Join(shown, "alias")
			require.NoError(t, os.MkdirAll(alias, 0o755))
			require.NoError(t, syscall.Mount(src, alias, "", syscall.MS_BIND, ""))
			t.Cleanup(func() { require.NoError(t, syscall.Unmount(alias, 0)) })
			out, stderr, code := e.sandbox(sbxRun{grant: "G-bob", flags: []string{"--ro", shown}, script: `echo STARTED; ls -R "$1"`, args: []string{alias}})
			assert.Equal(t, 3, code, stderr)
			assert.Empty(t, out)
			assert.Contains(t, stderr, "refusing to start")
		})
	}
}

// TestSandboxInheritedDescriptors: a descriptor acpfs run inherits from
// whatever started it (a pipe to the outside) reaches neither the
// command nor, for a root command to take, the sandbox's first process.
//
// Without root there is no root command (--allow-root is refused): the
// command's own descriptors are checked, and the first process's where
// the command may read them.
func TestSandboxInheritedDescriptors(t *testing.T) {
	eachMode(t, allModes, func(t *testing.T, m sbxMode) { sbxInheritedDescriptors(t, newSandboxEnvAs(t, m), m) })
}

func sbxInheritedDescriptors(t *testing.T, e *coordEnv, m sbxMode) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	defer w.Close()
	var flags []string
	if m == asRoot {
		flags = []string{"--allow-root"}
	}
	cmd := e.command(sbxRun{grant: "G-bob", flags: flags,
		script: `for p in self 1; do for f in /proc/$p/fd/*; do echo "$p ${f##*/} $(readlink $f)"; done; done`})
	cmd.ExtraFiles = []*os.File{w}
	out, err := cmd.Output()
	require.NoError(t, err)
	assert.Contains(t, string(out), "self 0 ", "the command lists its own descriptors")
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(l)
		if len(f) < 3 || f[0] == "1" && strings.HasPrefix(f[2], "/cpu.") {
			// The shell's own directory descriptor, gone when read; the
			// cgroup CPU files Go's runtime keeps open in the first process.
			continue
		}
		if strings.HasPrefix(f[2], "pipe:") || strings.HasPrefix(f[2], "/") && !strings.HasPrefix(f[2], "/proc/") && !strings.HasPrefix(f[2], "/dev/") {
			assert.Contains(t, []string{"0", "1", "2"}, f[1], "descriptor %s of %s leads out: %s", f[1], f[0], f[2])
		}
	}
	assert.NotContains(t, string(out), "self 3 pipe:")
}
