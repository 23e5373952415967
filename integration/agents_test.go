package integration

import (
	"context"
	"fmt"
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
	"github.com/acpfs/acpfs/ledger"
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

// recipeCase is one recipe of docs/agents.md: the CLI, the directory of
// ~/agents it is installed in, its model API, the variable its key is in,
// and what it keeps in the agent's home.
type recipeCase struct {
	cli         agentCLI
	dir, api    string
	key, state  string
	modelPrefix string // the path of its model requests
}

var recipeCases = []recipeCase{
	{claudeCode, "claude", anthropicAPI, "ANTHROPIC_API_KEY", ".claude.json", "/v1/messages"},
	{codexCLI, "codex", openaiAPI, "CODEX_API_KEY", ".codex", "/v1/responses"},
	{geminiCLI, "gemini", geminiAPI, "GEMINI_API_KEY", ".gemini", "/v1beta/models/"},
	{opencode, "opencode", anthropicAPI, "ANTHROPIC_API_KEY", ".local/share/opencode", "/v1/messages"},
}

// TestAgentRecipes runs each recipe of docs/agents.md as it is written
// there (read from the page), with the CLI installed in ~/agents/<dir>
// and a made-up key in the caller's environment, against a fake model
// API on this machine's loopback: the test adds only --resolve to it and
// its CA. The CLI prints the fake model's answer, so its key, the proxy
// and the allow-list all worked; the API got the key; the ledger has the
// connection. A second run with the recipe's flags finds the CLI's state
// in the agent's home and cannot read the oracle.
func TestAgentRecipes(t *testing.T) {
	e := newSandboxEnv(t)
	api := startFakeModelAPI(t, caDirFor(t, e))
	for _, rc := range recipeCases {
		t.Run(rc.dir, func(t *testing.T) {
			prefix, _ := installCLI(t, rc.cli)
			recipe := docRecipe(t, filepath.Join("..", "docs", "agents.md"), "/node_modules/.bin/"+rc.cli.bin+" ")
			home := newDir(t, "caller-home")
			require.NoError(t, os.Chmod(home, 0o755))
			agents := filepath.Join(home, "agents", rc.dir)
			require.NoError(t, os.MkdirAll(agents, 0o755))
			key := "sk-acpfs-test-" + rc.dir
			line := withFlags(recipe, api.caFlags(rc.api)...)
			env := append(readmeEnv(t), "HOME="+home, rc.key+"="+key)
			run := func(script string) (string, string, int) {
				return runCmd(t, bindCommand([][2]string{{prefix, agents}}, filepath.Dir(e.folder), env, "bash", "-c", script))
			}
			out, stderr, code := run(line)
			require.Equal(t, 0, code, "%s\n%s%s", line, out, stderr)
			assert.Contains(t, out, fakeReply, "the CLI got the model's answer")
			var keyed bool
			for _, r := range api.requests() {
				keyed = keyed || r.host == rc.api && strings.HasPrefix(r.path, rc.modelPrefix) && r.key == key
			}
			assert.True(t, keyed, "the fake %s got no model request with the key: %v", rc.api, api.requests())
			assert.True(t, hasNetRecord(e.netRecords(), ledger.KindNetAllowed, rc.api+":443"), "no net_allowed record for %s", rc.api)

			// The recipe's flags, another command: the state is kept, the
			// oracle is out of reach (and Codex's own sandbox cannot start).
			flags, _, _ := strings.Cut(line, " -- ")
			script := `test -e "$HOME/` + rc.state + `" && echo state-kept
cat collab/oracle/answer.md 2>/dev/null && echo ORACLE-READ`
			if rc.dir == "codex" {
				script += `
"$0" sandbox -- true 2>&1 | grep -q bwrap && echo OWN-SANDBOX-REFUSED`
			}
			check := flags + ` -- sh -c '` + script + `; true' ` + filepath.Join(agents, "node_modules", ".bin", rc.cli.bin)
			out, stderr, code = run(check)
			require.Equal(t, 0, code, "%s\n%s%s", check, out, stderr)
			assert.Contains(t, out, "state-kept", "%s in the agent's home", rc.state)
			assert.NotContains(t, out, "ORACLE-READ")
			assert.NotContains(t, out, sbxSecret)
			if rc.dir == "codex" {
				assert.Contains(t, out, "OWN-SANDBOX-REFUSED", "Codex's own sandbox cannot start inside acpfs run")
			}
			assert.DirExists(t, filepath.Join(e.runs, sandbox.HomesDir, "G-bob"))
		})
	}
}

// TestAgentClaudeCodeREADME runs the README's agent example, read from
// the README, as root and without root in both uid schemes, with Claude
// Code installed in ~/.local (as its native installer puts it) and no
// key: Claude starts and says it is not logged in (no model API is
// reachable here), keeps its state in the agent's home, owned by the
// agent's uid on the host; a run with the same flags cannot read the
// oracle (nor, without root, the caller's uid registry in the ~/.local it
// shows). TestAgentRecipes takes Claude Code through the proxy to a fake
// model API. Before the home was given to rootless runs, Claude kept
// nothing without root.
func TestAgentClaudeCodeREADME(t *testing.T) {
	line := readmeAgentLine(t)
	eachMode(t, allModes, func(t *testing.T, m sbxMode) {
		e := newSandboxEnvAs(t, m)
		prefix, _ := installCLI(t, claudeCode)
		home := e.homeAt()
		if e.user == nil {
			home = newDir(t, "caller-home")
			require.NoError(t, os.Chmod(home, 0o755))
		}
		lib := filepath.Join(home, ".local", "lib", "claude")
		require.NoError(t, os.MkdirAll(lib, 0o755))
		require.NoError(t, os.MkdirAll(filepath.Join(home, ".local", "bin"), 0o755))
		require.NoError(t, os.Symlink("../lib/claude/node_modules/.bin/claude", filepath.Join(home, ".local", "bin", "claude")))
		if e.user != nil {
			e.user.chownAll(filepath.Join(home, ".local"))
		}
		run := func(script string) (string, string, int) {
			binds := [][2]string{{prefix, lib}}
			dir := filepath.Dir(e.folder)
			if e.user != nil {
				e.user.binds = binds
				path := filepath.Join(home, ".local", "bin") + ":" + filepath.Join(e.user.dir, "bin") + ":/usr/local/bin:/usr/bin:/bin"
				return runCmd(t, e.user.run(dir, []string{"PATH=" + path}, "bash", "-c", script))
			}
			env := append(readmeEnv(t), "HOME="+home)
			for i, kv := range env {
				if p, ok := strings.CutPrefix(kv, "PATH="); ok {
					env[i] = "PATH=" + filepath.Join(home, ".local", "bin") + ":" + p
				}
			}
			return runCmd(t, bindCommand(binds, dir, env, "bash", "-c", script))
		}
		out, stderr, code := run(line)
		assert.Equal(t, 1, code, "Claude's own status: not logged in\n%s%s", out, stderr)
		assert.Contains(t, out+stderr, "Not logged in")
		state := filepath.Join(e.runs, sandbox.HomesDir, "G-bob", ".claude.json")
		var st syscall.Stat_t
		require.NoError(t, syscall.Lstat(state, &st), "Claude Code's state is in the agent's home: %s", stderr)
		var dir syscall.Stat_t
		require.NoError(t, syscall.Lstat(filepath.Dir(state), &dir))
		assert.Equal(t, dir.Uid, st.Uid, "the agent's, as its home")
		if m != asSingle {
			assert.NotEqual(t, e.callerUID(), st.Uid, "not the caller's")
		}
		if m != asRoot {
			assert.Equal(t, uint32(e.hostUID(stderr, 0)), st.Uid, "the agent's on the host")
		}

		flags, _, _ := strings.Cut(line, " -- ")
		// The caller's registry of subordinate uids lies in the ~/.local
		// the line shows: masked.
		check := flags + ` -- sh -c 'cat collab/oracle/answer.md 2>/dev/null && echo ORACLE-READ
ls -A ~/.local/state/acpfs/uids 2>/dev/null | grep . && echo REGISTRY-SHOWN
test -s ~/.claude.json && echo kept'`
		out, stderr, code = run(check)
		require.Equal(t, 0, code, "%s\n%s%s", check, out, stderr)
		assert.Equal(t, "kept\n", out)
	})
}

// hasNetRecord says whether recs hold a record of kind for host:port.
func hasNetRecord(recs []ledger.Record, kind ledger.Kind, hostPort string) bool {
	for _, r := range recs {
		if r.Kind == kind && strings.HasPrefix(r.Detail, hostPort+":") {
			return true
		}
	}
	return false
}

// caDirFor is a directory for the fake API's CA that e's user may show
// its sandbox: readable by every uid.
func caDirFor(t *testing.T, e *coordEnv) string {
	t.Helper()
	d := e.newDir("fake-api-ca")
	require.NoError(t, os.Chmod(d, 0o755))
	return d
}

// bindCommand runs argv as root in dir, with env, in a private mount
// namespace where each bind's source is mounted at its target (an
// installation at the path a recipe names), so that nothing of the host
// changes.
func bindCommand(binds [][2]string, dir string, env []string, argv ...string) *exec.Cmd {
	script := ""
	for _, b := range binds {
		script += fmt.Sprintf("mount --bind %q %q\n", b[0], b[1])
	}
	script += fmt.Sprintf("cd %q\nexec \"$@\"", dir)
	cmd := exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "--", "/bin/sh", "-e", "-c", script, "sh"}, argv...)...)
	cmd.Env = env
	return cmd
}

// docRecipe is the acpfs run command of a Markdown file's code blocks
// whose command runs want, its continuation lines joined: a recipe as
// the page gives it.
func docRecipe(t *testing.T, path, want string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var found []string
	in := false
	var cur strings.Builder
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "```") {
			in = !in
			continue
		}
		if !in {
			continue
		}
		if cur.Len() == 0 && !strings.HasPrefix(l, "acpfs run ") {
			continue
		}
		line, more := strings.CutSuffix(strings.TrimRight(l, " "), "\\")
		cur.WriteString(strings.TrimSpace(line) + " ")
		if !more {
			if cmd := strings.TrimSpace(cur.String()); strings.Contains(cmd+" ", want) {
				found = append(found, cmd)
			}
			cur.Reset()
		}
	}
	require.Len(t, found, 1, "%s: want one acpfs run command that runs %q", path, want)
	return found[0]
}

// readmeAgentLine is the README's agent CLI example.
func readmeAgentLine(t *testing.T) string {
	t.Helper()
	return docRecipe(t, filepath.Join("..", "README.md"), " -- claude -p ")
}

// withFlags puts flags before the " -- " of an acpfs run command line.
func withFlags(line string, flags ...string) string {
	var quoted []string
	for _, f := range flags {
		quoted = append(quoted, "'"+f+"'")
	}
	return strings.Replace(line, " -- ", " "+strings.Join(quoted, " ")+" -- ", 1)
}
