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
	for _, rel := range []string{"mirror.git", "mirror.git/HEAD", "sub/.GIT", "sub/.GIT/HEAD"} {
		_, err := os.Lstat(v.path(rel))
		assert.ErrorIs(t, err, os.ErrNotExist, rel)
	}
	bare := exec.Command("git", "-c", "safe.directory=*", "--git-dir", v.path("mirror.git"), "show", "HEAD:oracle/answer.md")
	b0, err := bare.CombinedOutput()
	assert.Error(t, err)
	assert.NotContains(t, string(b0), "the secret answer")
	cmd := exec.Command("git", "-c", "safe.directory=*", "show", "HEAD:oracle/answer.md")
	cmd.Dir = v.dir
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
