package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/internal/testutil"
)

// The tests of this file run `acpfs run` as an unprivileged user, as on
// a desktop: the test (root) enters a private mount namespace, binds a
// 0666 /dev/fuse over the machine's 0600 one there, and drops to an
// unused uid that owns its home, its collaboration and its run directory.
// Nothing of the host changes: the device node, and for the subuid
// scheme the /etc/passwd, /etc/group, /etc/subuid and /etc/subgid that
// name the user and its subordinate ids, are binds of that namespace.

// rootlessUser is an unprivileged user with a home of its own.
type rootlessUser struct {
	t      *testing.T
	scheme string
	uid    int
	dir    string // root's: the device node, the binary, the /etc copies
	home   string // the user's, mode 0700
	// etc are the files bound over /etc/<name> in the namespace.
	etc map[string]string
	// binds are further binds (source, target) of the namespace, made
	// before the user's command runs: an installation at a recipe's path.
	binds [][2]string
}

// The uid schemes, as the first line of a rootless run names them.
const (
	schemeSubUID = "subuid"
	schemeSingle = "single"
)

// newRootlessUser makes an unprivileged user for scheme: with a name and
// subordinate ids (subuid), or a bare uid (single).
func newRootlessUser(t *testing.T, scheme string) *rootlessUser {
	t.Helper()
	return newRootlessUserRange(t, scheme, 65536)
}

// newRootlessUserRange is newRootlessUser with subCount subordinate ids
// (subuid scheme).
func newRootlessUserRange(t *testing.T, scheme string, subCount int) *rootlessUser {
	t.Helper()
	testutil.RequireFUSE(t)
	if os.Geteuid() != 0 {
		t.Skip("the rootless tests need root to make their unprivileged user")
	}
	for _, tool := range []string{"unshare", "setpriv"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed (util-linux)", tool)
		}
	}
	if scheme == schemeSubUID {
		for _, tool := range []string{"newuidmap", "newgidmap"} {
			if _, err := exec.LookPath(tool); err != nil {
				t.Skipf("the subuid scheme needs %s (Debian: apt-get install uidmap); skipping it", tool)
			}
		}
		for _, f := range []string{"/etc/subuid", "/etc/subgid"} {
			if _, err := os.Stat(f); err != nil {
				t.Skipf("the subuid scheme binds a copy over %s, which is not there; skipping it", f)
			}
		}
	}
	u := &rootlessUser{t: t, scheme: scheme, uid: freeUID(t), etc: map[string]string{}}
	// The uid is this test's alone: a process of it still running at the
	// end (a failed test's sandbox) is the test's, and is ended.
	t.Cleanup(func() {
		for _, pid := range uidProcs(t, u.uid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	d, err := os.MkdirTemp("", "acpfs-rootless-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(d) })
	require.NoError(t, os.Chmod(d, 0o755))
	u.dir, u.home = d, filepath.Join(d, "home")
	require.NoError(t, os.Mkdir(u.home, 0o700))
	require.NoError(t, os.Chown(u.home, u.uid, u.uid))
	bin := filepath.Join(d, "bin")
	require.NoError(t, os.Mkdir(bin, 0o755))
	exe, err := os.ReadFile(acpfsBin)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(bin, "acpfs"), exe, 0o755))
	// The desktop's /dev/fuse: the same device, mode 0666.
	require.NoError(t, syscall.Mknod(filepath.Join(d, "fuse"), syscall.S_IFCHR|0o666, int(unixMkdev(10, 229))))
	require.NoError(t, os.Chmod(filepath.Join(d, "fuse"), 0o666))
	if scheme == schemeSubUID {
		name := fmt.Sprintf("acpfs-rl%d", u.uid)
		// Subordinate ids far above any account, one range per test uid.
		sub := fmt.Sprintf("%s:%d:%d\n", name, 1<<22+(u.uid%1000)*65536, subCount)
		for f, add := range map[string]string{
			"passwd": fmt.Sprintf("%s:x:%d:%d::%s:/bin/sh\n", name, u.uid, u.uid, u.home),
			"group":  fmt.Sprintf("%s:x:%d:\n", name, u.uid),
			"subuid": sub, "subgid": sub,
		} {
			old, err := os.ReadFile("/etc/" + f)
			require.NoError(t, err)
			p := filepath.Join(d, "etc-"+f)
			require.NoError(t, os.WriteFile(p, append(old, add...), 0o644))
			u.etc[f] = p
		}
	}
	return u
}

// unixMkdev is makedev(3).
func unixMkdev(major, minor uint32) uint64 {
	return uint64(major)<<8 | uint64(minor&0xff) | uint64(minor&^0xff)<<12
}

// sh runs script as the user, in its home, with bash -e -o pipefail and
// acpfs first on the PATH; it returns stdout, stderr and the exit status.
func (u *rootlessUser) sh(script string, args ...string) (string, string, int) {
	u.t.Helper()
	return runCmd(u.t, u.command(script, args...))
}

// command is the command that runs script as the user (see sh).
func (u *rootlessUser) command(script string, args ...string) *exec.Cmd {
	u.t.Helper()
	f, err := os.CreateTemp(u.dir, "script-*.sh")
	require.NoError(u.t, err)
	_, err = f.WriteString(script)
	require.NoError(u.t, err)
	require.NoError(u.t, f.Close())
	require.NoError(u.t, os.Chmod(f.Name(), 0o644))
	binds := fmt.Sprintf("mount --bind %q /dev/fuse\n", filepath.Join(u.dir, "fuse"))
	for name, p := range u.etc {
		binds += fmt.Sprintf("mount --bind %q /etc/%s\n", p, name)
	}
	wrapper := binds + fmt.Sprintf(`cd %q
exec setpriv --reuid %d --regid %d --clear-groups -- env -i HOME=%q PATH=%q ACPFS_STATE_CACHE_DIR=%q LANG=C.UTF-8 \
  /usr/bin/bash -e -o pipefail %q "$@"`, u.home, u.uid, u.uid, u.home,
		filepath.Join(u.dir, "bin")+":/usr/local/bin:/usr/bin:/bin", filepath.Join(u.home, ".state-cache"), f.Name())
	return exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "--", "/bin/sh", "-e", "-c", wrapper, "sh"}, args...)...)
}

// run is the command that runs argv as the user in dir (cd'd into as
// root: the user need not be able to reach it), with the environment of
// sh plus extraEnv.
func (u *rootlessUser) run(dir string, extraEnv []string, argv ...string) *exec.Cmd {
	u.t.Helper()
	binds := fmt.Sprintf("mount --bind %q /dev/fuse\n", filepath.Join(u.dir, "fuse"))
	for name, p := range u.etc {
		binds += fmt.Sprintf("mount --bind %q /etc/%s\n", p, name)
	}
	for _, b := range u.binds {
		binds += fmt.Sprintf("mount --bind %q %q\n", b[0], b[1])
	}
	env := []string{"HOME=" + u.home, "PATH=" + filepath.Join(u.dir, "bin") + ":/usr/local/bin:/usr/bin:/bin",
		"ACPFS_CHECKPOINT_DIR=" + filepath.Join(u.home, ".checkpoints"), "LANG=C.UTF-8"}
	wrapper := binds + fmt.Sprintf(`cd %q
exec setpriv --reuid %d --regid %d --clear-groups -- env -i "$@"`, dir, u.uid, u.uid)
	args := []string{"--mount", "--propagation", "private", "--", "/bin/sh", "-e", "-c", wrapper, "sh"}
	args = append(append(append(args, env...), extraEnv...), argv...)
	return exec.Command("unshare", args...)
}

// chownAll gives the tree at p to the user.
func (u *rootlessUser) chownAll(p string) {
	u.t.Helper()
	require.NoError(u.t, filepath.WalkDir(p, func(path string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, u.uid, u.uid)
	}))
}

// collab makes, as the user, the collaboration of newSandboxEnv in its
// home: collab/ and agent_runs/, alice may read the oracle, bob may not.
func (u *rootlessUser) collab() {
	u.t.Helper()
	_, stderr, code := u.sh(`
acpfs init --folder collab --participant alice --participant bob --objective "Design the cache layer" \
  --completion "Cache design reviewed" --primary-deliverable-type design-spec >/dev/null
mkdir -p collab/oracle && echo "the secret answer" > collab/oracle/answer.md
acpfs grant create --runs agent_runs --folder collab --agent alice --id G-alice --preset owner --may-read 'oracle/**' >/dev/null
acpfs grant create --runs agent_runs --folder collab --agent bob --id G-bob --preset reviewer --forbid 'oracle/**' >/dev/null
chmod 700 collab agent_runs`)
	require.Equal(u.t, 0, code, stderr)
}

// schemeLine is the first line of a rootless run.
var schemeLine = regexp.MustCompile(`^acpfs run: rootless sandbox, uid scheme (\w+): `)

// hostUIDLine gives the agent's host uid in the subuid scheme.
var hostUIDLine = regexp.MustCompile(`\(uid (\d+) on the host`)

// TestSandboxRootlessIsolation: an unprivileged user's `acpfs run`
// builds the sandbox in a user namespace, says which uid scheme it got
// first, and holds as the root sandbox does: the oracle, the run
// directory, the key, the backing folder and the daemon are out of
// reach; the walls (no_new_privs, seccomp, no capability) stand; the
// agent still does its work through the view, and with the subuid scheme
// its host uid cannot open the caller's files at all.
func TestSandboxRootlessIsolation(t *testing.T) {
	for _, scheme := range []string{schemeSubUID, schemeSingle} {
		t.Run(scheme, func(t *testing.T) {
			u := newRootlessUser(t, scheme)
			u.collab()
			for _, flags := range []string{"", "--net none"} {
				out, stderr, code := u.sh(`
acpfs run --folder collab --runs agent_runs --grant G-bob --no-limits ` + flags + ` -- /usr/bin/bash -c '
F=$1 R=$2
cat "$F/oracle/answer.md" 2>/dev/null && echo ORACLE
ls -A "$R" 2>/dev/null && echo RUNS
cat "$R/ledger.key" "$R/communication_ledger.jsonl" 2>/dev/null && echo KEY
for p in /proc/[0-9]*; do
  cat "$p/root$F/oracle/answer.md" "$p/root$R/ledger.key" 2>/dev/null && echo PROCROOT
  ls -l "$p/fd/" 2>/dev/null | grep -q /dev/fuse && echo FUSE-FD
done
echo x 2>/dev/null > /proc/1/mem && echo WROTE-INIT
ps -e -o args= | grep -q "[r]un-daemon" && echo DAEMON
umount "$F" 2>/dev/null && echo UMOUNTED
mount -t tmpfs none /tmp 2>/dev/null && echo MOUNTED
unshare -U true 2>/dev/null && echo UNSHARED
ls /dev/fuse 2>/dev/null && echo DEVFUSE
ls / >/dev/null 2>&1 || echo "root listing refused"
echo "fuse mounts: $(grep -c fuse /proc/self/mountinfo)"
grep -E "^(NoNewPrivs|Seccomp|CapEff|CapBnd):" /proc/self/status | tr -s "\t " " "
echo "interfaces: $(grep -c : /proc/net/dev)"
cd "$F"
ls -ln review.md | awk "{print \"owner \" \$3}"; echo "uid $(id -u)"
printf "\nrootless review\n" >> review.md
' bash "$PWD/collab" "$PWD/agent_runs"
tail -1 collab/review.md`)
				require.Equal(t, 0, code, "flags %q: %s%s", flags, out, stderr)
				m := schemeLine.FindStringSubmatch(strings.SplitN(stderr, "\n", 2)[0])
				require.NotNil(t, m, "the first line must name the uid scheme: %s", stderr)
				assert.Equal(t, scheme, m[1])
				for _, bad := range []string{"ORACLE", "RUNS", "KEY", "PROCROOT", "FUSE-FD", "WROTE-INIT", "DAEMON", "UMOUNTED", "MOUNTED", "UNSHARED", "DEVFUSE", sbxSecret, `"kind"`} {
					assert.NotContains(t, out, bad, "flags %q", flags)
				}
				for _, want := range []string{"fuse mounts: 1", "NoNewPrivs: 1", "Seccomp: 2", "CapEff: 0000000000000000", "CapBnd: 0000000000000000", "root listing refused", "rootless review"} {
					assert.Contains(t, out, want, "flags %q", flags)
				}
				f := regexp.MustCompile(`owner (\d+)\nuid (\d+)`).FindStringSubmatch(out)
				require.NotNil(t, f, out)
				assert.Equal(t, f[2], f[1], "the view's files appear owned by the agent")
				if flags == "--net none" {
					assert.Contains(t, out, "interfaces: 1", "a network of its own: loopback alone")
				}
				if scheme == schemeSingle {
					assert.Equal(t, "0", f[2])
					continue
				}
				assert.NotEqual(t, "0", f[2])
				h := hostUIDLine.FindStringSubmatch(stderr)
				require.NotNil(t, h, stderr)
				hostUID := atoi(t, h[1])
				assert.NotEqual(t, u.uid, hostUID)
				// The agent's host uid cannot open the caller's files, by any path.
				got, code := asUID(t, hostUID, `cat "$1/collab/oracle/answer.md" "$1/agent_runs/ledger.key"; ls "$1/collab" "$1/agent_runs"`, u.home)
				assert.NotEqual(t, 0, code)
				assert.NotContains(t, got, sbxSecret)
			}
		})
	}
}

// TestSandboxRootlessOtherViews: another agent's view (root's, with
// --allow-other) inside a directory the rootless caller shows with --ro
// cannot be reached: in a user namespace it cannot be detached, and is
// covered instead.
func TestSandboxRootlessOtherViews(t *testing.T) {
	u := newRootlessUser(t, schemeSingle)
	u.collab()
	views := filepath.Join(u.dir, "views")
	mnt := filepath.Join(views, "alice")
	require.NoError(t, os.MkdirAll(mnt, 0o755))
	folder, runs := filepath.Join(u.home, "collab"), filepath.Join(u.home, "agent_runs")
	p := pmStart(t, []string{mnt}, []string{filepath.Join(mnt, ".acpfs", "status")},
		"mount", "--folder", folder, "--grant", filepath.Join(runs, "context_grants", "G-alice.json"),
		"--ledger", filepath.Join(u.dir, "alice-ledger", "ledger.jsonl"), "--allow-other", mnt)
	eventually(t, func() bool { return strings.Contains(p.Output(), "mounted") }, "not started: "+p.Output())
	require.Contains(t, readFile(t, filepath.Join(mnt, "oracle/answer.md")), sbxSecret)

	out, stderr, code := u.sh(`acpfs run --folder collab --runs agent_runs --grant G-bob --no-limits --ro "$1" -- /usr/bin/bash -c '
cat "$1/oracle/answer.md"; ls -A "$1"; cat "$1/proposal.md" >/dev/null && echo LISTED
echo "cover: $(stat -c "%a %F" "$1")"
echo "views: $(grep -c " $PWD/collab .* - fuse" /proc/self/mountinfo)"' bash "$2" 2>&1`, views, mnt)
	require.Equal(t, 0, code, "%s%s", out, stderr)
	assert.NotContains(t, out, sbxSecret)
	assert.NotContains(t, out, "LISTED")
	// The other view stays in the mount table (locked), under an empty
	// directory nobody may enter.
	assert.Contains(t, out, "cover: 0 directory")
	assert.Contains(t, out, "views: 1")
}

// TestSandboxRootlessLimits: where no cgroup v2 subtree is delegated (as
// on this machine), a rootless run says so in one line and runs without
// limits; limits asked for by name are refused with what to pass; with
// --no-limits the line goes.
func TestSandboxRootlessLimits(t *testing.T) {
	u := newRootlessUser(t, schemeSingle)
	u.collab()
	run := func(flags string) (string, string, int) {
		return u.sh(`acpfs run --folder collab --runs agent_runs --grant G-bob ` + flags + ` -- /usr/bin/true`)
	}
	delegated := false
	if b, err := os.ReadFile("/proc/self/cgroup"); err == nil && strings.HasPrefix(string(b), "0::") {
		var sfs syscall.Statfs_t
		delegated = syscall.Statfs("/sys/fs/cgroup", &sfs) == nil && sfs.Type == 0x63677270
	}
	if delegated {
		t.Skip("cgroup v2 here: the no-delegation case cannot be shown")
	}
	_, stderr, code := run("")
	assert.Equal(t, 0, code, stderr)
	assert.Contains(t, stderr, "acpfs run: no limits (memory, processes, CPU): ")
	assert.Contains(t, stderr, "pass --no-limits")
	assert.Len(t, strings.Split(strings.TrimSpace(stderr), "\n"), 2, "the scheme line and the limits line: %s", stderr)

	_, stderr, code = run("--memory 1G")
	assert.Equal(t, 3, code, stderr)
	assert.Contains(t, stderr, "--memory: a run without root sets limits through a delegated cgroup v2 subtree")
	assert.Contains(t, stderr, "pass --no-limits")

	_, stderr, code = run("--no-limits")
	assert.Equal(t, 0, code, stderr)
	assert.NotContains(t, stderr, "no limits")
}

// TestSandboxRootlessReadme: the README's quick start and its `acpfs run`
// blocks (the agents' work, the agent's home kept between runs),
// verbatim, work for an unprivileged user.
func TestSandboxRootlessReadme(t *testing.T) {
	u := newRootlessUser(t, schemeSubUID)
	data, err := os.ReadFile(filepath.Join("..", "README.md"))
	require.NoError(t, err)
	blocks, err := parseReadme(string(data))
	require.NoError(t, err)
	var script strings.Builder
	for _, want := range []string{"acpfs init --folder collab", "acpfs grant create --runs agent_runs", "acpfs run --folder collab --runs agent_runs --grant G-alice"} {
		found := false
		for _, b := range blocks {
			if b.mode == readmeRunIt && strings.Contains(b.script, want) {
				script.WriteString(b.script)
				found = true
				if !strings.HasPrefix(want, "acpfs run") {
					break // every acpfs run block, the first of the others
				}
			}
		}
		require.True(t, found, "no README block runs %q", want)
	}
	out, stderr, code := u.sh(script.String())
	require.Equal(t, 0, code, "%s%s", out, stderr)
	assert.Contains(t, out, "no oracle here")
	assert.Contains(t, out, "logged in\n", "the home example: the next run finds the state of the last")
	assert.Contains(t, readFile(t, filepath.Join(u.home, "collab", "review.md")), "burst handling needs a number")
	assert.Contains(t, readFile(t, filepath.Join(u.home, "collab", "events.jsonl")), `"from":"bob","event":"review_submitted"`)
}

// TestSandboxRootlessDoctor: acpfs doctor tells an unprivileged user,
// apart from mounting, whether it can start a sandbox, with which uid
// scheme and which limits.
func TestSandboxRootlessDoctor(t *testing.T) {
	for _, scheme := range []string{schemeSubUID, schemeSingle} {
		t.Run(scheme, func(t *testing.T) {
			u := newRootlessUser(t, scheme)
			out, stderr, _ := u.sh(`acpfs doctor || true`)
			assert.Contains(t, out, "run: ready without root (in a user namespace)", stderr)
			assert.Contains(t, out, "run uid scheme: "+scheme+" ")
			assert.Regexp(t, `(?m)^run limits: (none: .*pass --no-limits|cgroup v2, in the delegated group )`, out)
			assert.Regexp(t, `(?m)^verdict: `, out, "the mount verdict stays")
		})
	}
}

// TestSandboxRootlessDiesWithRun: killing a rootless acpfs run ends its
// daemon, whose parent-death signal the exec into the user namespace
// cleared and that is set again, and the whole sandbox with it.
func TestSandboxRootlessDiesWithRun(t *testing.T) {
	u := newRootlessUser(t, schemeSingle)
	u.collab()
	out, pidFile := filepath.Join(u.home, "run.out"), filepath.Join(u.home, "run.pid")
	cmd := u.command(`acpfs run --folder collab --runs agent_runs --grant G-bob --no-limits -- /usr/bin/bash -c 'sleep 1000 & sleep 1001 & echo READY; wait' >"$1" 2>&1 &
echo $! >"$2"
wait || true`, out, pidFile)
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	waitFor(t, func() bool { b, _ := os.ReadFile(out); return strings.Contains(string(b), "READY") }, "the sandbox never said READY")
	b, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	pid := atoi(t, string(b))
	require.Greater(t, len(uidProcs(t, u.uid)), 3, "acpfs run, its daemon, the sandbox and the sleeps run as the user")
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	require.NoError(t, <-done)
	waitFor(t, func() bool { return len(uidProcs(t, u.uid)) == 0 }, "the daemon or the sandbox outlived acpfs run")
}

// TestSandboxRootlessTwoCollaborations: the same grant id of two
// collaborations of one user runs at once, as two host uids (with the
// subuid scheme), each stable from run to run. The uids come from the
// user's own registry, not from a hash of the run directory and grant
// into the range: with six subordinate uids, six grants of three
// collaborations run one after another get six uids (a hash into six
// slots gives two of them one uid 98 times in 100), and keep them.
func TestSandboxRootlessTwoCollaborations(t *testing.T) {
	const n = 6
	u := newRootlessUserRange(t, schemeSubUID, n)
	_, stderr, code := u.sh(`for c in a b c; do mkdir $c; cd $c
acpfs init --folder collab --participant alice --participant bob --objective o --completion c --primary-deliverable-type design-spec >/dev/null
acpfs grant create --runs agent_runs --folder collab --agent bob --id G-bob --preset reviewer >/dev/null
acpfs grant create --runs agent_runs --folder collab --agent alice --id G-alice --preset owner >/dev/null
cd ..; done`)
	require.Equal(t, 0, code, stderr)
	out := filepath.Join(u.home, "a.out")
	cmd := u.command(`cd a && exec acpfs run --folder collab --runs agent_runs --grant G-bob --no-limits -- /usr/bin/bash -c 'echo READY; read -r _ || true' >"$1" 2>&1`, out)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(done) }()
	t.Cleanup(func() { stdin.Close(); <-done })
	waitFor(t, func() bool { b, _ := os.ReadFile(out); return strings.Contains(string(b), "READY") }, "the first sandbox never said READY")

	hostUID := func(stderr string) string {
		m := hostUIDLine.FindStringSubmatch(stderr)
		require.NotNil(t, m, stderr)
		return m[1]
	}
	run := func(dir, grant string) string {
		_, stderr, code := u.sh(`cd ` + dir + ` && acpfs run --folder collab --runs agent_runs --grant ` + grant + ` --no-limits -- /usr/bin/true`)
		require.Equal(t, 0, code, "%s of %s: %s", grant, dir, stderr)
		return hostUID(stderr)
	}
	bobB := run("b", "G-bob")
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	bobA := hostUID(string(b))
	assert.NotEqual(t, bobA, bobB, "the same grant id of another collaboration runs beside the first, as another uid")
	stdin.Close()
	<-done
	require.NoError(t, waitErr)

	got := map[string]string{bobA: "a/G-bob", bobB: "b/G-bob"}
	first := 1<<22 + (u.uid%1000)*65536
	for _, g := range []string{"a/G-alice", "b/G-alice", "c/G-alice", "c/G-bob"} {
		dir, grant, _ := strings.Cut(g, "/")
		uid := run(dir, grant)
		assert.NotContains(t, got, uid, "%s shares a uid with %s", g, got[uid])
		got[uid] = g
	}
	for uid := range got {
		assert.GreaterOrEqual(t, atoi(t, uid), first)
		assert.Less(t, atoi(t, uid), first+n, "the user's own range")
	}
	assert.Equal(t, bobA, run("a", "G-bob"), "a grant keeps its host uid")
	assert.Equal(t, bobB, run("b", "G-bob"), "a grant keeps its host uid")
}

// TestSandboxRootlessRWOfTheCallers: without root, in the subuid scheme,
// a --rw or --home directory of the caller's would need an idmapped
// mount, which only root may make of a host directory: the run refuses,
// in one line before the command starts, naming the way out; it never
// shows it read-only. In the single scheme (chosen with --uid-scheme, the
// way out) the agent is the caller's uid and writes it as it is.
func TestSandboxRootlessRWOfTheCallers(t *testing.T) {
	u := newRootlessUser(t, schemeSubUID)
	u.collab()
	for _, flag := range []string{"--rw", "--home"} {
		out, stderr, code := u.sh(`mkdir -p .claude && acpfs run --folder collab --runs agent_runs --grant G-bob --no-limits ` + flag + ` .claude -- /usr/bin/bash -c 'echo COMMAND-RAN'`)
		assert.Equal(t, 3, code, stderr)
		assert.NotContains(t, out, "COMMAND-RAN", "the command must not start")
		lines := strings.Split(strings.TrimSpace(stderr), "\n")
		require.Len(t, lines, 1, "one line: %q", stderr)
		for _, want := range []string{flag + " " + u.home + "/.claude: owned by you", "idmapped mount", "agent_runs/homes/G-bob", "--uid-scheme single"} {
			assert.Contains(t, lines[0], want)
		}
	}
	out, stderr, code := u.sh(`acpfs run --folder collab --runs agent_runs --grant G-bob --no-limits --uid-scheme single --rw .claude -- /usr/bin/bash -c 'touch ~/.claude/x && echo touched'`)
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "touched\n", out)
	m := schemeLine.FindStringSubmatch(strings.SplitN(stderr, "\n", 2)[0])
	require.NotNil(t, m, stderr)
	assert.Equal(t, schemeSingle, m[1])
	var st syscall.Stat_t
	require.NoError(t, syscall.Lstat(filepath.Join(u.home, ".claude", "x"), &st))
	assert.Equal(t, uint32(u.uid), st.Uid, "the caller's own file")

	_, stderr, code = u.sh(`acpfs run --folder collab --runs agent_runs --grant G-bob --uid-scheme bogus -- /usr/bin/true`)
	assert.NotEqual(t, 0, code)
	assert.Contains(t, stderr, "--uid-scheme")
}
