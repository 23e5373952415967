package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/internal/sandbox"
)

// callerHome is where the sandbox shows the agent's home: the caller's
// HOME path, links resolved.
func callerHome(t *testing.T) string {
	t.Helper()
	h := os.Getenv("HOME")
	if h == "" || h == "/" {
		return sandbox.FallbackHome
	}
	if r, err := filepath.EvalSymlinks(h); err == nil {
		return r
	}
	return h
}

// homeAt is where e's sandboxes show the agent's home: the HOME path of
// whoever starts acpfs run.
func (e *coordEnv) homeAt() string {
	if e.user != nil {
		return e.user.home
	}
	return callerHome(e.t)
}

// callerUID is the uid that starts e's acpfs run.
func (e *coordEnv) callerUID() uint32 {
	if e.user != nil {
		return uint32(e.user.uid)
	}
	return 0
}

// TestSandboxHomePersists: the agent's home is at $HOME (the caller's
// HOME path), owned by its uid, in RUNS/homes/<grant>, and what one run
// writes there the next run finds; without root too, in both uid schemes
// (the subuid scheme's home is given to the agent's subordinate uid).
func TestSandboxHomePersists(t *testing.T) {
	eachMode(t, allModes, func(t *testing.T, m sbxMode) { sbxHomePersists(t, newSandboxEnvAs(t, m)) })
}

func sbxHomePersists(t *testing.T, e *coordEnv) {
	out, stderr, code := e.sandbox(sbxRun{grant: "G-bob", script: `set -e
		printf '%s\n' "$HOME"; id -u; stat -c %u "$HOME"
		mkdir -p "$HOME/.agent" && echo "logged in" > "$HOME/.agent/session"`})
	require.Equal(t, 0, code, stderr)
	f := strings.Fields(out)
	require.Len(t, f, 3, out)
	assert.Equal(t, e.homeAt(), f[0], "HOME is the caller's HOME path")
	assert.Equal(t, f[1], f[2], "the home is the agent's own")
	uid := e.hostUID(stderr, atoi(t, f[1]))

	home := filepath.Join(e.runs, sandbox.HomesDir, "G-bob")
	var st syscall.Stat_t
	require.NoError(t, syscall.Lstat(home, &st))
	assert.Equal(t, uint32(uid), st.Uid, "the agent's uid on the host")
	assert.Equal(t, uint32(0o700), st.Mode&0o7777)
	require.NoError(t, syscall.Lstat(filepath.Dir(home), &st))
	assert.Equal(t, e.callerUID(), st.Uid)
	assert.Equal(t, uint32(0o700), st.Mode&0o7777, "RUNS/homes keeps each home from other uids")
	assert.Equal(t, "logged in\n", readFile(t, filepath.Join(home, ".agent", "session")))

	out, stderr, code = e.sandbox(sbxRun{grant: "G-bob", script: `cat "$HOME/.agent/session"`})
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "logged in\n", out, "the next run finds the state of the last")

	// --home none: no home of its own; HOME is the private /tmp, or the
	// caller's HOME path where the sandbox shows it (the way to a folder
	// below it).
	out, stderr, code = e.sandbox(sbxRun{grant: "G-bob", flags: []string{"--home", "none"}, script: `printf '%s' "$HOME"; ls -A "$HOME" | grep -q .agent && echo LEAK; true`})
	require.Equal(t, 0, code, stderr)
	want := "/tmp"
	if e.user != nil {
		want = e.homeAt()
	}
	assert.Equal(t, want, out)
}

// TestSandboxHomeOthersCannotReach: another grant's run has a home of its
// own, cannot reach the first one's through the run directory, and its
// uid cannot enter it on the host either (in the single scheme without
// root both agents are the caller's uid on the host, which has no
// second uid to refuse).
func TestSandboxHomeOthersCannotReach(t *testing.T) {
	eachMode(t, allModes, func(t *testing.T, m sbxMode) { sbxHomeOthersCannotReach(t, newSandboxEnvAs(t, m), m) })
}

func sbxHomeOthersCannotReach(t *testing.T, e *coordEnv, m sbxMode) {
	_, stderr, code := e.sandbox(sbxRun{grant: "G-alice", script: `echo "alice's token" > "$HOME/token"`})
	require.Equal(t, 0, code, stderr)
	aliceHome := filepath.Join(e.runs, sandbox.HomesDir, "G-alice")
	require.FileExists(t, filepath.Join(aliceHome, "token"))

	out, stderr, code := e.sandbox(sbxRun{grant: "G-bob", script: `
		id -u
		cat "$HOME/token" 2>/dev/null && echo LEAK-home
		cat "$1/token" 2>/dev/null && echo LEAK-runs
		ls "$2" 2>/dev/null | grep -q . && echo LEAK-homes
		grep -rs "alice's token" "$HOME" /tmp /var/tmp /dev/shm "$0" && echo LEAK-grep
		true`, args: []string{aliceHome, filepath.Dir(aliceHome)}})
	require.Equal(t, 0, code, stderr)
	assert.NotContains(t, out, "LEAK")
	if m == asSingle {
		return
	}
	bobUID := e.hostUID(stderr, atoi(t, strings.Fields(out)[0]))
	hostOut, hostCode := asUID(t, bobUID, `cat "$1/token"`, aliceHome)
	assert.NotEqual(t, 0, hostCode, "bob's uid read alice's home on the host: %s", hostOut)
}

// TestSandboxRWIdmapped: a --rw directory of the caller's (root-owned
// here) appears owned by the agent, which can write there; what it
// creates is owned by the caller on the host.
func TestSandboxRWIdmapped(t *testing.T) {
	e := newSandboxEnv(t)
	dir := newDir(t, "claude-state")
	require.NoError(t, os.Chmod(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "settings.json"), []byte("{}\n"), 0o644))
	out, stderr, code := e.sandbox(sbxRun{grant: "G-bob", flags: []string{"--rw", dir}, script: `set -e
		id -u; stat -c %u "$1" "$1/settings.json"
		touch "$1/x"; echo '{"a":1}' > "$1/settings.json"; mkdir "$1/sessions"; stat -c %u "$1/x"`, args: []string{dir}})
	require.Equal(t, 0, code, stderr)
	f := strings.Fields(out)
	require.Len(t, f, 4, out)
	for _, owner := range f[1:] {
		assert.Equal(t, f[0], owner, "shown owned by the agent: %s", out)
	}
	for _, p := range []string{"x", "sessions", "settings.json"} {
		var st syscall.Stat_t
		require.NoError(t, syscall.Lstat(filepath.Join(dir, p), &st), p)
		assert.Equal(t, uint32(0), st.Uid, "%s is the caller's on the host", p)
		assert.Equal(t, uint32(0), st.Gid, p)
	}
	assert.Equal(t, "{\"a\":1}\n", readFile(t, filepath.Join(dir, "settings.json")))

	// A file made set-ID would be the caller's on the host (and keep its
	// bits when the caller writes it later): refused.
	out, stderr, code = e.sandbox(sbxRun{grant: "G-bob", flags: []string{"--rw", dir}, script: `
		for m in 0o4755 0o2755; do
			python3 -c 'import os, sys; os.close(os.open(sys.argv[1], os.O_CREAT | os.O_WRONLY, int(sys.argv[2], 8)))' "$1/s$m" "$m" 2>/dev/null && echo MADE-$m
		done
		mknod -m 4755 "$1/p" p 2>/dev/null && echo MADE-fifo
		true`, args: []string{dir}})
	require.Equal(t, 0, code, stderr)
	assert.NotContains(t, out, "MADE")
	for _, p := range []string{"s0o4755", "s0o2755", "p"} {
		if fi, err := os.Lstat(filepath.Join(dir, p)); err == nil {
			assert.Zero(t, fi.Mode()&(os.ModeSetuid|os.ModeSetgid), "%s: %v", p, fi.Mode())
		}
	}
}

// TestSandboxHomeAtHOME: --ro and --rw paths below the caller's HOME are
// shown inside the agent's home, at the paths ~ names.
func TestSandboxHomeAtHOME(t *testing.T) {
	e := newSandboxEnv(t)
	dir := newDir(t, "fake-home")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, ".local", "bin"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, ".local", "bin", "tool"), []byte("#!/bin/sh\necho tool ran\n"), 0o755))
	require.NoError(t, os.Mkdir(filepath.Join(dir, ".claude"), 0o700))
	cmd := e.runArgs(sbxRun{grant: "G-bob", flags: []string{"--ro", filepath.Join(dir, ".local"), "--rw", filepath.Join(dir, ".claude")},
		script: `set -e; [ "$HOME" = "$1" ]; "$HOME/.local/bin/tool"; touch "$HOME/.claude/x" "$HOME/own"`, args: []string{dir}})
	c := exec.Command(acpfsBin, cmd...)
	c.Env = append(os.Environ(), "HOME="+dir)
	out, stderr, code := runCmd(t, c)
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "tool ran\n", out)
	assert.FileExists(t, filepath.Join(dir, ".claude", "x"))
	assert.FileExists(t, filepath.Join(e.runs, sandbox.HomesDir, "G-bob", "own"))
	assert.NoFileExists(t, filepath.Join(dir, "own"), "the caller's home itself is not shown")

	// A bind of the home's own path is refused: the home is shown there.
	_, stderr, code = e.sandbox(sbxRun{grant: "G-bob", flags: []string{"--rw", callerHome(t)}, script: `true`})
	assert.Equal(t, 2, code, stderr)
	assert.Contains(t, stderr, "the agent's home is shown there")
}

// TestSandboxRWIdmapRefusedClearly: a --rw directory on a file system
// that cannot idmap (a FUSE view here) stops the run before the command
// starts, with a line that says why and what to do; it is never shown
// read-only in silence.
func TestSandboxRWIdmapRefusedClearly(t *testing.T) {
	e := newSandboxEnv(t)
	mnt := filepath.Join(e.root, "alice")
	require.NoError(t, os.MkdirAll(mnt, 0o755))
	p := pmStart(t, []string{mnt}, []string{filepath.Join(mnt, ".acpfs", "status")},
		"mount", "--folder", e.folder, "--runs", e.runs, "--grant", "G-alice", mnt)
	eventually(t, func() bool { return strings.Contains(p.Output(), "mounted") }, "not started: "+p.Output())

	out, stderr, code := e.sandbox(sbxRun{grant: "G-bob", flags: []string{"--rw", mnt}, script: `echo COMMAND-RAN`})
	assert.Equal(t, 3, code, stderr)
	assert.NotContains(t, out, "COMMAND-RAN", "the command must not start")
	assert.Contains(t, stderr, "does not support idmapped mounts")
	assert.Contains(t, stderr, "--rw "+mnt)
	assert.Contains(t, stderr, "--allow-root")
}

// TestSandboxHomeDir: --home DIR of the caller's is the agent's home,
// shown owned by the agent (idmapped), its files the caller's on the
// host; a --home in the run directory is refused.
func TestSandboxHomeDir(t *testing.T) {
	e := newSandboxEnv(t)
	dir := newDir(t, "agent-home")
	out, stderr, code := e.sandbox(sbxRun{grant: "G-bob", flags: []string{"--home", dir}, script: `set -e
		id -u; stat -c %u "$HOME"; echo kept > "$HOME/state"`})
	require.Equal(t, 0, code, stderr)
	f := strings.Fields(out)
	require.Len(t, f, 2, out)
	assert.Equal(t, f[0], f[1], "the home is shown owned by the agent")
	var st syscall.Stat_t
	require.NoError(t, syscall.Lstat(filepath.Join(dir, "state"), &st))
	assert.Equal(t, uint32(0), st.Uid, "and its files are the caller's on the host")
	assert.NoDirExists(t, filepath.Join(e.runs, sandbox.HomesDir, "G-bob"), "the default home is not made")

	_, stderr, code = e.sandbox(sbxRun{grant: "G-bob", flags: []string{"--home", e.runs}, script: `true`})
	assert.Equal(t, 2, code, stderr)
	assert.Contains(t, stderr, "no agent may reach")
}
