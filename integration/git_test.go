package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/grants"
)

// TestGitHiddenUnlessNamed (issue 24): a collaboration folder that is a
// git repository shows its .git to no grant that does not name it, even
// one reading everything: .git holds every committed file, past and
// present, the oracle's included.
func TestGitHiddenUnlessNamed(t *testing.T) {
	c := newCollab(t)
	git := func(args ...string) (string, error) {
		cmd := exec.Command("git", append([]string{"-c", "user.email=a@example.test", "-c", "user.name=a", "-c", "safe.directory=*"}, args...)...)
		cmd.Dir = c.folder
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := git("init", "-q")
	require.NoError(t, err, out)
	out, err = git("add", "-A")
	require.NoError(t, err, out)
	out, err = git("commit", "-qm", "with the oracle")
	require.NoError(t, err, out)
	// A git directory under other names: a bare clone, a case variant.
	out, err = git("clone", "-q", "--bare", "--no-local", ".", "mirror.git")
	require.NoError(t, err, out)
	out, err = git("clone", "-q", "--bare", "--no-local", ".", "sub/.GIT")
	require.NoError(t, err, out)
	// Shaped otherwise: objects/ a symlink, a worktree's git directory
	// (HEAD and commondir only).
	out, err = git("clone", "-q", "--bare", "--no-local", ".", "h/r2")
	require.NoError(t, err, out)
	require.NoError(t, os.MkdirAll(filepath.Join(c.folder, "h", "store"), 0o755))
	require.NoError(t, os.Rename(filepath.Join(c.folder, "h", "r2", "objects"), filepath.Join(c.folder, "h", "store", "objects")))
	require.NoError(t, os.Symlink("../store/objects", filepath.Join(c.folder, "h", "r2", "objects")))
	require.NoError(t, os.MkdirAll(filepath.Join(c.folder, "h", "r4"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(c.folder, "h", "r4", "HEAD"), []byte("ref: refs/heads/master\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(c.folder, "h", "r4", "commondir"), []byte("../r2\n"), 0o644))

	g := &grants.Grant{GrantID: "G-all", AgentID: reviewer, Role: "reviewer", Objective: "o",
		MayRead: []string{"**"}, ForbiddenRead: []string{"oracle/**"}, MayWrite: []string{"events.jsonl", "review.md"}}
	v := c.mountView(g)
	_, err = os.Lstat(v.path(".git"))
	assert.ErrorIs(t, err, os.ErrNotExist)
	ents, err := os.ReadDir(v.dir)
	require.NoError(t, err)
	for _, e := range ents {
		assert.NotContains(t, []string{".git", "mirror.git"}, e.Name())
	}
	for _, rel := range []string{"mirror.git", "mirror.git/HEAD", "sub/.GIT", "sub/.GIT/HEAD", "h/r2", "h/r2/HEAD", "h/r4", "h/r4/commondir"} {
		_, err := os.Lstat(v.path(rel))
		assert.ErrorIs(t, err, os.ErrNotExist, rel)
	}
	bare := exec.Command("git", "-c", "safe.directory=*", "--git-dir", v.path("mirror.git"), "show", "HEAD:oracle/answer.md")
	b0, err := bare.CombinedOutput()
	assert.Error(t, err)
	assert.NotContains(t, string(b0), "the secret answer")
	// -C, not cmd.Dir: a child that changed into a view this process
	// serves between vfork and exec would wait for an answer while a
	// garbage collection here waits for the suspended thread (see
	// view.sh).
	cmd := exec.Command("git", "-C", v.dir, "-c", "safe.directory=*", "show", "HEAD:oracle/answer.md")
	cmd.Env = append(os.Environ(), "GIT_CEILING_DIRECTORIES="+filepath.Dir(v.dir))
	b, err := cmd.CombinedOutput()
	assert.Error(t, err)
	assert.NotContains(t, string(b), "the secret answer")

	named := *g
	named.GrantID, named.AgentID = "G-git", owner
	named.MayRead = append(named.MayRead, ".git/**")
	w := c.mountView(&named)
	_, err = os.Stat(w.path(".git/HEAD"))
	assert.NoError(t, err, "a grant that names .git shows it")
}

// TestGitInsideRunWhenNamed (issue 24): where a grant names .git, git
// status, diff, add and commit of the agent's own files work inside
// acpfs run as anywhere else: no GIT_DISCOVERY_ACROSS_FILESYSTEM, no
// safe.directory, no --rw of .git (the view shows the repository owned
// by the agent, on one file system). And such a grant gives away what
// docs/sandbox.md says: every committed file (the oracle's too), and the
// files the view hides look deleted to git. Without root too, in both
// uid schemes.
func TestGitInsideRunWhenNamed(t *testing.T) {
	eachMode(t, allModes, func(t *testing.T, m sbxMode) { gitInsideRun(t, newCoordEnvAs(t, m)) })
}

func gitInsideRun(t *testing.T, e *coordEnv) {
	for _, args := range [][]string{{"init", "-q"}, {"add", "-A"}, {"-c", "user.email=c@example.test", "-c", "user.name=c", "commit", "-qm", "start"}} {
		// The coordinator's own git, as root in a rootless user's folder:
		// safe.directory for it alone, never for the agent below.
		cmd := exec.Command("git", append([]string{"-c", "safe.directory=*"}, args...)...)
		cmd.Dir = e.folder
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%v: %s", args, out)
	}
	e.own()
	e.grant("--agent", owner, "--id", "G-alice", "--preset", "owner", "--may-read", "**", "--may-read", ".git/**",
		"--may-write", ".git/**", "--may-write", "src/**", "--forbid", "oracle/**")
	out, stderr, code := e.sandbox(sbxRun{grant: "G-alice", script: `set -e
cd "$0"
mkdir -p src && echo hello > src/a.txt
git status --short
git add src/a.txt
git diff --cached --stat
git -c user.email=a@example.test -c user.name=alice commit -qm "add a"
git log --format=%s -1
git show HEAD:oracle/answer.md 2>/dev/null && echo ORACLE || true`})
	require.Equal(t, 0, code, "%s%s", out, stderr)
	assert.Contains(t, out, "?? src/")
	assert.Contains(t, out, "src/a.txt")
	assert.Contains(t, out, "add a")
	assert.Contains(t, out, " D oracle/answer.md", "a hidden file looks deleted to git")
	assert.Contains(t, out, "ORACLE", "a grant naming .git reads every committed file")
}
