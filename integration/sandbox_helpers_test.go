package integration

import (
	"bufio"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/internal/testutil"
)

// sbxSecret is in the oracle, which only alice's grant shows.
const sbxSecret = "the secret answer"

// newSandboxEnv is a collaboration where alice (the owner) may also
// read the oracle and her own scratch space, bob (the reviewer) may not,
// and both may read and write scratch/shared/.
func newSandboxEnv(t *testing.T) *coordEnv {
	e := newCoordEnv(t)
	sandboxGrants(e)
	return e
}

// sbxMode is who starts acpfs run: root, or an unprivileged user whose
// sandbox is built in a user namespace with one of the two uid schemes.
type sbxMode string

const (
	asRoot   sbxMode = "root"
	asSubUID sbxMode = schemeSubUID
	asSingle sbxMode = schemeSingle
)

// allModes are where the root sandbox's isolation checks run: as root,
// and without root in both uid schemes.
var allModes = []sbxMode{asRoot, asSubUID, asSingle}

// eachMode runs f as one subtest per mode.
func eachMode(t *testing.T, modes []sbxMode, f func(t *testing.T, m sbxMode)) {
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) { f(t, m) })
	}
}

// newSandboxEnvAs is newSandboxEnv whose acpfs run m's user starts: as
// root, or as an unprivileged user (newRootlessUser) that owns the
// collaboration, in its home, as on a desktop.
func newSandboxEnvAs(t *testing.T, m sbxMode) *coordEnv {
	t.Helper()
	e := newCoordEnvAs(t, m)
	sandboxGrants(e)
	return e
}

// newCoordEnvAs is newCoordEnv set up by m's user (see newSandboxEnvAs).
func newCoordEnvAs(t *testing.T, m sbxMode) *coordEnv {
	t.Helper()
	if m == asRoot {
		return newCoordEnv(t)
	}
	u := newRootlessUser(t, string(m))
	d := filepath.Join(u.home, "coord")
	require.NoError(t, os.Mkdir(d, 0o700))
	return newCoordEnvIn(t, d, u)
}

// own gives the collaboration's directory, whole, to the unprivileged
// user of a rootless env (the test makes its files as root).
func (e *coordEnv) own() {
	e.t.Helper()
	if e.user != nil {
		e.user.chownAll(filepath.Dir(e.folder))
	}
}

// newDir is newDir for e's user: a directory it owns and can reach.
func (e *coordEnv) newDir(name string) string {
	e.t.Helper()
	if e.user == nil {
		return newDir(e.t, name)
	}
	d, err := os.MkdirTemp(e.user.home, name+"-")
	require.NoError(e.t, err)
	e.user.chownAll(d)
	return d
}

// command is the acpfs run of r, started by e's user, with extra
// variables in acpfs run's own environment; not started.
func (e *coordEnv) command(r sbxRun, extraEnv ...string) *exec.Cmd {
	e.t.Helper()
	if e.user != nil {
		dir := r.dir
		if dir == "" {
			dir = e.user.dir // not shown in the sandbox, as the root tests' own
		}
		return e.user.run(dir, extraEnv, append([]string{"acpfs"}, e.runArgs(r)...)...)
	}
	cmd := exec.Command(acpfsBin, e.runArgs(r)...)
	cmd.Dir = r.dir
	if len(extraEnv) > 0 {
		cmd.Env = append(os.Environ(), extraEnv...)
	}
	return cmd
}

// hostUID is the uid the host knows the agent of a run by: as root, the
// uid it runs as in the sandbox (inside); without root, the caller's in
// the single scheme, else the one the run's first line names (stderr).
func (e *coordEnv) hostUID(stderr string, inside int) int {
	e.t.Helper()
	switch {
	case e.user == nil:
		return inside
	case e.user.scheme == schemeSingle:
		return e.user.uid
	}
	m := hostUIDLine.FindStringSubmatch(stderr)
	require.NotNil(e.t, m, "no host uid in %q", stderr)
	return atoi(e.t, m[1])
}

// sandboxGrants makes newSandboxEnv's grants and scratch directories.
func sandboxGrants(e *coordEnv) {
	t := e.t
	e.grant("--agent", owner, "--id", "G-alice", "--preset", "owner",
		"--may-read", "oracle/**", "--may-read", "scratch/alice/**", "--may-write", "scratch/alice/**",
		"--may-read", "scratch/shared/**", "--may-write", "scratch/shared/**")
	e.grant("--agent", reviewer, "--id", "G-bob", "--preset", "reviewer", "--forbid", "oracle/**",
		"--may-read", "scratch/shared/**", "--may-write", "scratch/shared/**")
	require.NoError(t, os.MkdirAll(filepath.Join(e.folder, "scratch", "alice"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(e.folder, "scratch", "shared"), 0o755))
	e.own()
}

// sbxRun is one `acpfs run`: grant, extra flags, a bash script and its
// positional arguments ($0 is the folder).
type sbxRun struct {
	grant  string
	flags  []string
	script string
	args   []string
	dir    string // working directory of acpfs run (default: the test's)
}

func (e *coordEnv) runArgs(r sbxRun) []string {
	args := append([]string{"run", "--folder", e.folder, "--runs", e.runs, "--grant", r.grant}, r.flags...)
	args = append(args, "--", "/usr/bin/bash", "-c", r.script, e.folder)
	return append(args, r.args...)
}

// sandbox runs r to completion and returns stdout, stderr and the exit
// status.
func (e *coordEnv) sandbox(r sbxRun) (string, string, int) {
	e.t.Helper()
	return runCmd(e.t, e.command(r))
}

// sbxProc is an `acpfs run` left running: its script prints READY when
// it has done its part, then waits for its stdin to close.
type sbxProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    testutil.SyncBuffer
	ready  chan struct{}
	exited chan struct{}
	err    error
}

// sbxReadyLine ends the scripts of background sandboxes: say READY,
// then hold until the test closes stdin.
const sbxReadyLine = "\necho READY; read -r _ || true\n"

// startSandbox starts r in the background and returns once it printed
// READY. It is stopped at cleanup if the test did not finish it.
func (e *coordEnv) startSandbox(r sbxRun) *sbxProc {
	e.t.Helper()
	p := &sbxProc{t: e.t, ready: make(chan struct{}), exited: make(chan struct{})}
	r.script += sbxReadyLine
	p.cmd = e.command(r)
	var err error
	p.stdin, err = p.cmd.StdinPipe()
	require.NoError(e.t, err)
	stdout, err := p.cmd.StdoutPipe()
	require.NoError(e.t, err)
	p.cmd.Stderr = &p.out
	require.NoError(e.t, p.cmd.Start())
	go func() {
		sc := bufio.NewScanner(stdout)
		seen := false
		for sc.Scan() {
			p.out.Write([]byte(sc.Text() + "\n"))
			if !seen && sc.Text() == "READY" {
				seen = true
				close(p.ready)
			}
		}
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	e.t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			select {
			case <-p.exited:
			case <-time.After(time.Minute):
				e.t.Errorf("sandbox still holds its output a minute after acpfs run was killed")
			}
		}
	})
	select {
	case <-p.ready:
	case <-p.exited:
		e.t.Fatalf("sandbox ended before READY (%v):\n%s", p.err, p.out.String())
	case <-time.After(time.Minute):
		e.t.Fatalf("sandbox printed no READY in a minute:\n%s", p.out.String())
	}
	return p
}

// finish lets the background sandbox end and returns its output and
// exit status.
func (p *sbxProc) finish() (string, int) {
	p.t.Helper()
	p.stdin.Close()
	select {
	case <-p.exited:
	case <-time.After(time.Minute):
		_ = p.cmd.Process.Kill()
		<-p.exited
		p.t.Fatalf("sandbox did not end after its stdin closed:\n%s", p.out.String())
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		code = ee.ExitCode()
	}
	return p.out.String(), code
}

// uidProcs lists the host pids of the processes running as uid.
func uidProcs(t *testing.T, uid int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	var pids []int
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "status"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" && f[1] == strconv.Itoa(uid) {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// asUID runs a shell command as uid (no supplementary groups) and
// returns its combined output and exit status. It never starts in a view
// (see view.sh).
func asUID(t *testing.T, uid int, script string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command("/usr/bin/bash", append([]string{"-c", script}, args...)...)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return string(out), code
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(strings.TrimSpace(s))
	require.NoError(t, err, "not a number: %q", s)
	return n
}
