package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/internal/sandbox"
)

// agentCLI is an agent CLI of docs/agents.md, as npm installs it. The
// versions are pinned so that a rerun uses the cached installation and
// a new release cannot change what the test checks unseen.
type agentCLI struct{ pkg, version, bin string }

var (
	claudeCode = agentCLI{"@anthropic-ai/claude-code", "2.1.197", "claude"}
	codexCLI   = agentCLI{"@openai/codex", "0.171.0", "codex"}
	geminiCLI  = agentCLI{"@google/gemini-cli", "0.61.0", "gemini"}
	opencode   = agentCLI{"opencode-ai", "1.18.33", "opencode"}
)

// npmInstallTimeout bounds one npm install: the registry may be slow or
// unreachable, and the test must then say so instead of hanging.
const npmInstallTimeout = 5 * time.Minute

// npmCacheDir is where the CLIs are installed, once for every run of the
// suite (ACPFS_TEST_NPM_CACHE, default /var/cache/acpfs-test-npm).
func npmCacheDir() string {
	if d := os.Getenv("ACPFS_TEST_NPM_CACHE"); d != "" {
		return d
	}
	return "/var/cache/acpfs-test-npm"
}

// installCLI installs c into the cache unless it is there already, and
// returns the directory to show the sandbox (--ro) and the path of the
// CLI's binary. Installations of parallel test binaries wait for each
// other on a lock. A CLI that cannot be installed fails the test when
// ACPFS_REQUIRE_FUSE=1 (as CI runs) and skips it otherwise.
func installCLI(t *testing.T, c agentCLI) (string, string) {
	t.Helper()
	unavailable := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("ACPFS_REQUIRE_FUSE") == "1" {
			t.Fatalf("agent CLI not available (ACPFS_REQUIRE_FUSE=1): "+format, args...)
		}
		t.Skipf("agent CLI not available: "+format, args...)
	}
	cache := npmCacheDir()
	name := strings.NewReplacer("@", "", "/", "-").Replace(c.pkg) + "@" + c.version
	prefix := filepath.Join(cache, name)
	bin := filepath.Join(prefix, "node_modules", ".bin", c.bin)
	if _, err := os.Stat(bin); err == nil {
		return prefix, bin
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		unavailable("npm is not on the PATH, so %s@%s cannot be installed", c.pkg, c.version)
	}
	require.NoError(t, os.MkdirAll(cache, 0o755))
	lock, err := os.OpenFile(filepath.Join(cache, ".lock"), os.O_RDWR|os.O_CREATE, 0o644)
	require.NoError(t, err)
	defer lock.Close()
	require.NoError(t, syscall.Flock(int(lock.Fd()), syscall.LOCK_EX))
	if _, err := os.Stat(bin); err == nil {
		return prefix, bin // another test binary installed it meanwhile
	}
	partial := prefix + ".partial"
	require.NoError(t, os.RemoveAll(partial))
	ctx, cancel := context.WithTimeout(context.Background(), npmInstallTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "install", "--prefix", partial, "--no-audit", "--no-fund", "--loglevel=error",
		"--cache", filepath.Join(cache, ".npm"), c.pkg+"@"+c.version)
	if out, err := cmd.CombinedOutput(); err != nil {
		_ = os.RemoveAll(partial)
		unavailable("npm install %s@%s into %s (needs the npm registry, within %v): %v\n%s", c.pkg, c.version, cache, npmInstallTimeout, err, out)
	}
	if _, err := os.Stat(filepath.Join(partial, "node_modules", ".bin", c.bin)); err != nil {
		unavailable("npm install %s@%s installed no %s: %v", c.pkg, c.version, c.bin, err)
	}
	require.NoError(t, os.Rename(partial, prefix))
	return prefix, bin
}

// TestAgentClaudeCode: Claude Code, as docs/agents.md starts it, runs in
// the sandbox, keeps its state in the agent's home between runs, and
// cannot read the oracle. No model API is reachable: it stops at
// start-up, not logged in, after writing its state.
func TestAgentClaudeCode(t *testing.T) {
	e := newSandboxEnv(t)
	prefix, claude := installCLI(t, claudeCode)
	flags := []string{"--ro", prefix, "--net", "none"}
	out, stderr, code := e.sandbox(sbxRun{grant: "G-bob", flags: flags, script: `
		export CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_AUTOUPDATER=1
		"$1" --version || echo VERSION-FAILED
		"$1" -p "review the design" </dev/null 2>&1 || echo "stopped at start-up"
		test -s "$HOME/.claude.json" && echo state-written
		cat "$0/oracle/answer.md" 2>/dev/null && echo ORACLE-READ
		true`, args: []string{claude}})
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "(Claude Code)")
	assert.NotContains(t, out, "VERSION-FAILED")
	assert.Contains(t, out, "stopped at start-up")
	assert.Contains(t, out, "state-written", out)
	assert.NotContains(t, out, "ORACLE-READ")
	assert.NotContains(t, out, sbxSecret)

	home := filepath.Join(e.runs, sandbox.HomesDir, "G-bob")
	var st syscall.Stat_t
	require.NoError(t, syscall.Lstat(filepath.Join(home, ".claude.json"), &st), "Claude Code's state is in the agent's home")
	var dir syscall.Stat_t
	require.NoError(t, syscall.Lstat(home, &dir))
	assert.Equal(t, dir.Uid, st.Uid, "and the agent's")

	out, stderr, code = e.sandbox(sbxRun{grant: "G-bob", flags: flags, script: `test -s "$HOME/.claude.json" && echo kept`})
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "kept\n", out, "the next run finds it")
}

// TestAgentCodex: Codex CLI runs in the sandbox and keeps its state
// (CODEX_HOME, ~/.codex) in the agent's home. Its own sandbox cannot
// start inside acpfs run (Landlock and the seccomp filter refuse the
// namespaces and mounts bwrap needs); with docs/agents.md's recipe,
// sandbox_mode="danger-full-access" (-s danger-full-access), it runs its
// commands directly, inside acpfs run's sandbox, which still keeps
// the oracle out.
func TestAgentCodex(t *testing.T) {
	e := newSandboxEnv(t)
	prefix, codex := installCLI(t, codexCLI)
	flags := []string{"--ro", prefix, "--net", "none"}
	out, stderr, code := e.sandbox(sbxRun{grant: "G-bob", flags: flags, script: `
		"$1" --version || echo VERSION-FAILED
		"$1" login status 2>&1 || echo "stopped at start-up"
		test -d "$HOME/.codex" && echo state-written
		"$1" sandbox -- true 2>&1 && echo OWN-SANDBOX-RAN
		cat "$0/oracle/answer.md" 2>/dev/null && echo ORACLE-READ
		true`, args: []string{codex}})
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "codex-cli "+codexCLI.version)
	assert.NotContains(t, out, "VERSION-FAILED")
	assert.Contains(t, out, "Not logged in")
	assert.Contains(t, out, "state-written")
	assert.Contains(t, out, "bwrap", "Codex's own sandbox fails inside acpfs run: %s", out)
	assert.NotContains(t, out, "OWN-SANDBOX-RAN")
	assert.NotContains(t, out, "ORACLE-READ")

	// The next run finds its state; with the recipe, Codex runs commands
	// without its own sandbox, and acpfs run's still hides the oracle.
	out, stderr, code = e.sandbox(sbxRun{grant: "G-bob", flags: flags, script: `
		test -d "$HOME/.codex" && echo kept
		"$1" sandbox -c 'sandbox_mode="danger-full-access"' -- sh -c 'echo command ran; cat "$0/oracle/answer.md" 2>/dev/null && echo ORACLE-READ; true' "$0" 2>&1`,
		args: []string{codex}})
	require.Equal(t, 0, code, stderr+out)
	assert.Contains(t, out, "kept\n")
	assert.Contains(t, out, "command ran")
	assert.NotContains(t, out, "ORACLE-READ")
	assert.NotContains(t, out, sbxSecret)
}

// TestAgentClaudeCodeREADME: the README's form, `--ro ~/.local --rw
// ~/.claude -- claude -p ...`, with the caller's ~/.claude (root's here):
// Claude Code writes its state there, shown owned by the agent, and on
// the host it stays the caller's. Before idmapped --rw, every write there
// was refused (Permission denied) and Claude kept nothing.
func TestAgentClaudeCodeREADME(t *testing.T) {
	e := newSandboxEnv(t)
	prefix, claude := installCLI(t, claudeCode)
	home := newDir(t, "caller-home")
	require.NoError(t, os.Chmod(home, 0o755))
	local := filepath.Join(home, ".local")
	require.NoError(t, os.MkdirAll(filepath.Join(local, "bin"), 0o755))
	require.NoError(t, os.Symlink(claude, filepath.Join(local, "bin", "claude")))
	state := filepath.Join(home, ".claude")
	require.NoError(t, os.Mkdir(state, 0o755))

	args := e.runArgs(sbxRun{grant: "G-bob", flags: []string{"--ro", local, "--rw", state, "--ro", prefix, "--net", "none"}, script: `
		export CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_AUTOUPDATER=1
		claude -p "review the design" </dev/null 2>&1 || echo "stopped at start-up"
		touch ~/.claude/x && echo touched
		cat "$0/oracle/answer.md" 2>/dev/null && echo ORACLE-READ
		true`})
	cmd := exec.Command(acpfsBin, args...)
	cmd.Env = append(os.Environ(), "HOME="+home, "PATH="+filepath.Join(local, "bin")+":"+os.Getenv("PATH"))
	out, stderr, code := runCmd(t, cmd)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "stopped at start-up")
	assert.Contains(t, out, "touched", "~/.claude must be writable by the agent: %s", out)
	assert.NotContains(t, out, "ORACLE-READ")
	ents, err := os.ReadDir(state)
	require.NoError(t, err)
	var names []string
	for _, ent := range ents {
		names = append(names, ent.Name())
		var st syscall.Stat_t
		require.NoError(t, syscall.Lstat(filepath.Join(state, ent.Name()), &st))
		assert.Equal(t, uint32(0), st.Uid, "%s is the caller's on the host", ent.Name())
	}
	assert.Contains(t, names, "x")
	assert.Greater(t, len(names), 1, "Claude Code wrote its state into ~/.claude: %v", names)
}

// TestAgentGeminiAndOpencode: Gemini CLI and opencode, as docs/agents.md
// starts them, run in the sandbox, write their state into the agent's
// home, find it at the next run, and cannot read the oracle.
func TestAgentGeminiAndOpencode(t *testing.T) {
	for _, tc := range []struct {
		cli     agentCLI
		version string // what --version prints
		state   string // below $HOME
	}{
		{geminiCLI, geminiCLI.version, ".gemini"},
		{opencode, opencode.version, ".local/share/opencode"},
	} {
		t.Run(tc.cli.bin, func(t *testing.T) {
			e := newSandboxEnv(t)
			prefix, bin := installCLI(t, tc.cli)
			flags := []string{"--ro", prefix, "--net", "none"}
			out, stderr, code := e.sandbox(sbxRun{grant: "G-bob", flags: flags, script: `
				"$1" --version </dev/null || echo VERSION-FAILED
				test -d "$HOME/$2" && echo state-written
				cat "$0/oracle/answer.md" 2>/dev/null && echo ORACLE-READ
				true`, args: []string{bin, tc.state}})
			require.Equal(t, 0, code, stderr)
			assert.Contains(t, out, tc.version)
			assert.NotContains(t, out, "VERSION-FAILED")
			assert.Contains(t, out, "state-written", out)
			assert.NotContains(t, out, "ORACLE-READ")
			assert.DirExists(t, filepath.Join(e.runs, sandbox.HomesDir, "G-bob", tc.state))

			out, stderr, code = e.sandbox(sbxRun{grant: "G-bob", flags: flags, script: `test -d "$HOME/$1" && echo kept`, args: []string{tc.state}})
			require.Equal(t, 0, code, stderr)
			assert.Equal(t, "kept\n", out)
		})
	}
}
