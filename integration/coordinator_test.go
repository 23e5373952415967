package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/internal/testutil"
	"github.com/acpfs/acpfs/ledger"
)

// coordEnv is a collaboration set up with the CLI only, as a coordinator
// would, plus helpers to run `acpfs up` and `acpfs run` as processes.
type coordEnv struct {
	t      *testing.T
	folder string
	runs   string
	root   string
	// user, when set, is the unprivileged user that owns the
	// collaboration and starts acpfs run (see newSandboxEnvAs).
	user *rootlessUser
}

func newCoordEnv(t *testing.T) *coordEnv {
	testutil.RequireFUSE(t)
	return newCoordEnvIn(t, newDir(t, "coord"), nil)
}

// newCoordEnvIn is newCoordEnv in the directory d, set up by u (root's
// when nil).
func newCoordEnvIn(t *testing.T, d string, u *rootlessUser) *coordEnv {
	e := &coordEnv{t: t, folder: filepath.Join(d, "collab"), runs: filepath.Join(d, "agent_runs"), root: filepath.Join(d, "mnt"), user: u}
	e.own()
	_, stderr, code := e.acpfs("init", "--folder", e.folder, "--participant", owner, "--participant", reviewer,
		"--objective", "Design the cache layer", "--completion", "Cache design reviewed", "--primary-deliverable-type", "design-spec")
	require.Equal(t, 0, code, stderr)
	require.NoError(t, os.MkdirAll(filepath.Join(e.folder, "oracle"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(e.folder, "oracle/answer.md"), []byte("the secret answer\n"), 0o644))
	e.own()
	return e
}

// acpfs runs the CLI as e's user.
func (e *coordEnv) acpfs(args ...string) (string, string, int) {
	e.t.Helper()
	if e.user == nil {
		return acpfs(e.t, args...)
	}
	return runCmd(e.t, e.user.run(e.user.dir, nil, append([]string{"acpfs"}, args...)...))
}

func (e *coordEnv) grant(args ...string) {
	e.t.Helper()
	_, stderr, code := e.acpfs(append([]string{"grant", "create", "--runs", e.runs, "--folder", e.folder}, args...)...)
	require.Equal(e.t, 0, code, stderr)
}

func (e *coordEnv) standardGrants() {
	e.grant("--agent", owner, "--id", "G-alice", "--preset", "owner")
	e.grant("--agent", reviewer, "--id", "G-bob", "--preset", "reviewer", "--forbid", "oracle/**")
}

// up starts `acpfs up`, waits until the views of the agents given
// answer, and stops it with SIGTERM at cleanup, checking that it
// unmounted everything.
func (e *coordEnv) up(views ...string) *testutil.Daemon {
	e.t.Helper()
	return pmUp(e.t, e.runs, e.folder, e.root, views)
}

func (e *coordEnv) mounted(agent string) bool {
	for _, m := range leftoverMounts() {
		if m == filepath.Join(e.root, agent) {
			return true
		}
	}
	return false
}

func (e *coordEnv) view(agent, rel string) string { return filepath.Join(e.root, agent, rel) }

func (e *coordEnv) loadGrant(id string) *grants.Grant {
	e.t.Helper()
	g, err := grants.Load(filepath.Join(e.runs, "context_grants", id+".json"))
	require.NoError(e.t, err)
	return g
}

func (e *coordEnv) saveGrant(g *grants.Grant) {
	e.t.Helper()
	require.NoError(e.t, grants.NewRunDir(e.runs).SaveGrant(g))
}

func TestCoordinatorFollowsGrants(t *testing.T) {
	e := newCoordEnv(t)
	e.grant("--agent", owner, "--id", "G-alice", "--preset", "owner")
	e.up(owner)
	assert.Contains(t, readFile(t, e.view(owner, ".acpfs/status")), "agent: alice")

	// A new grant mounts a new view.
	e.grant("--agent", reviewer, "--id", "G-bob", "--preset", "reviewer", "--forbid", "oracle/**")
	eventually(t, func() bool { return e.mounted(reviewer) }, "new grant was not mounted")
	_, err := os.Stat(e.view(reviewer, "oracle"))
	assert.ErrorIs(t, err, syscall.ENOENT)

	// A changed grant applies to the live view.
	require.NoError(t, os.WriteFile(filepath.Join(e.folder, "notes.md"), []byte("n\n"), 0o644))
	_, err = os.Stat(e.view(reviewer, "notes.md"))
	assert.ErrorIs(t, err, syscall.ENOENT)
	g := e.loadGrant("G-bob")
	g.MayRead = append(g.MayRead, "notes.md")
	e.saveGrant(g)
	eventually(t, func() bool { _, err := os.Stat(e.view(reviewer, "notes.md")); return err == nil }, "changed grant not applied")

	out, stderr, code := acpfs(t, "status", "--runs", e.runs, "--json")
	require.Equal(t, 0, code, stderr)
	var st struct {
		Phase string `json:"phase"`
		Views []struct {
			Agent string `json:"agent"`
		} `json:"views"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	assert.Equal(t, "drafting", st.Phase)
	assert.Len(t, st.Views, 2)

	// A revoked grant is unmounted.
	_, stderr, code = acpfs(t, "grant", "revoke", "--runs", e.runs, "--grant", "G-bob", "--reason", "test")
	require.Equal(t, 0, code, stderr)
	eventually(t, func() bool { return !e.mounted(reviewer) }, "revoked grant still mounted")
	assert.True(t, e.mounted(owner))
}

func TestCoordinatorRefusesBadSetups(t *testing.T) {
	e := newCoordEnv(t)
	e.standardGrants()
	// Only bad grants: nothing to serve, so up fails with nothing mounted.
	only := filepath.Join(newDir(t, "only"), "runs")
	g := e.loadGrant("G-bob")
	g.GrantID, g.AgentID = "G-mallory", "mallory"
	pmWriteGrant(t, only, g)
	_, stderr, code := acpfs(t, "up", "--runs", only, "--folder", e.folder, "--root", e.root)
	assert.NotEqual(t, 0, code)
	assert.Contains(t, stderr, "mallory")
	assert.Empty(t, leftoverMounts())

	// A mount root that is not empty.
	require.NoError(t, os.MkdirAll(filepath.Join(e.root, "junk"), 0o755))
	_, stderr, code = acpfs(t, "up", "--runs", e.runs, "--folder", e.folder, "--root", e.root)
	assert.NotEqual(t, 0, code)
	assert.Contains(t, stderr, "not empty")
	assert.Empty(t, leftoverMounts())
}

func TestRunIsolatesCommand(t *testing.T) {
	e := newCoordEnv(t)
	e.standardGrants()
	run := func(args ...string) (string, string, int) {
		return acpfs(t, append([]string{"run", "--folder", e.folder, "--runs", e.runs, "--grant", "G-bob", "--"}, args...)...)
	}
	// The real path of a forbidden file is unreachable inside run.
	out, stderr, code := run("cat", filepath.Join(e.folder, "oracle/answer.md"))
	assert.NotEqual(t, 0, code)
	assert.NotContains(t, out, "secret")
	assert.Contains(t, stderr, "No such file")
	// So is the run directory, ledger included.
	_, _, code = run("ls", filepath.Join(e.runs, "context_grants"))
	assert.NotEqual(t, 0, code)
	// Readable files read normally, by their usual path.
	out, stderr, code = run("cat", filepath.Join(e.folder, "proposal.md"))
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, readFile(t, filepath.Join(e.folder, "proposal.md")), out)
	// As an unprivileged user too, and the command's status comes back.
	uid := strconv.Itoa(freeUID(t))
	out, stderr, code = acpfs(t, "run", "--folder", e.folder, "--runs", e.runs, "--grant", "G-bob", "--uid", uid,
		"--", "sh", "-c", "id -u; cat "+filepath.Join(e.folder, "oracle/answer.md")+" 2>/dev/null; exit 7")
	assert.Equal(t, 7, code, stderr)
	assert.Equal(t, uid+"\n", out)
	// The command does not inherit the daemon's /dev/fuse descriptor,
	// with which it could answer the kernel's requests itself.
	out, stderr, code = run("sh", "-c", "ls -l /proc/self/fd/ | grep -c /dev/fuse; true")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "0\n", out)
	// Writes follow the grant: the reviewer may not touch proposal.md.
	_, _, code = run("sh", "-c", "echo x >> "+filepath.Join(e.folder, "proposal.md"))
	assert.NotEqual(t, 0, code)
	assert.Empty(t, leftoverMounts())
	// Every read inside run was recorded.
	out, _, _ = acpfs(t, "ledger", "show", "--ledger", filepath.Join(e.runs, "communication_ledger.jsonl"), "--agent", reviewer, "--kind", "read")
	assert.Contains(t, out, "proposal.md")
}

func TestHandoffSnapshotIsWhatWasHanded(t *testing.T) {
	e := newCoordEnv(t)
	e.standardGrants()
	handed := "handed-over design\n"
	require.NoError(t, os.WriteFile(filepath.Join(e.folder, primary), []byte(handed), 0o644))
	_, stderr, code := acpfs(t, "handoff", "create", "--runs", e.runs, "--folder", e.folder, "--from", "G-alice", "--to", "G-bob",
		"--path", primary, "--type", "design-spec", "--action", "review it")
	require.Equal(t, 0, code, stderr)
	e.up(owner, reviewer)
	assert.Equal(t, handed, readFile(t, e.view(reviewer, primary)))

	// The producer keeps editing; the consumer still reads what was handed.
	require.NoError(t, os.WriteFile(e.view(owner, primary), []byte("edited afterwards\n"), 0o644))
	assert.Equal(t, "edited afterwards\n", readFile(t, e.view(owner, primary)))
	assert.Equal(t, handed, readFile(t, e.view(reviewer, primary)))
	assert.ErrorIs(t, os.WriteFile(e.view(reviewer, primary), []byte("x"), 0o644), syscall.EACCES)

	_, _, code = acpfs(t, "handoff", "verify", "--runs", e.runs, "--folder", e.folder)
	assert.NotEqual(t, 0, code, "drift after the handoff must be reported")
}

func TestAuditVerdicts(t *testing.T) {
	e := newCoordEnv(t)
	e.standardGrants()
	// A deliberately wrong grant lets the reviewer read the oracle.
	wrong := e.loadGrant("G-bob")
	wrong.ForbiddenRead = nil
	wrong.MayRead = append(wrong.MayRead, "oracle/**")
	e.saveGrant(wrong)
	e.up(owner, reviewer)
	assert.Contains(t, readFile(t, e.view(reviewer, "oracle/answer.md")), "secret")
	_ = readFile(t, e.view(owner, "proposal.md"))

	// Judged against the grant as it should have been, the read is a violation.
	right := e.loadGrant("G-bob")
	right.ForbiddenRead = []string{"oracle/**"}
	right.MayRead = right.MayRead[:len(right.MayRead)-1]
	e.saveGrant(right)
	out, _, code := acpfs(t, "audit", "--live", "--runs", e.runs, "--format", "json")
	assert.Equal(t, 2, code)
	assert.Contains(t, out, "violated")
	assert.Contains(t, out, "oracle/answer.md")

	html := filepath.Join(e.runs, "report.html")
	_, _, _ = acpfs(t, "audit", "--runs", e.runs, "--format", "html", "--out", html)
	page := readFile(t, html)
	assert.True(t, strings.HasPrefix(strings.TrimSpace(page), "<!DOCTYPE html>") || strings.HasPrefix(strings.TrimSpace(page), "<!doctype html>"))
	assert.Contains(t, page, "violated")
	assert.NotContains(t, page, "<script src=")
}

// TestRunForwardsSIGTERM stops `acpfs run` while its command runs: the
// command gets the signal, and the view is unmounted and recorded.
func TestRunForwardsSIGTERM(t *testing.T) {
	e := newCoordEnv(t)
	e.standardGrants()
	cmd := exec.Command(acpfsBin, "run", "--folder", e.folder, "--runs", e.runs, "--grant", "G-bob", "--",
		"sh", "-c", "trap 'echo got TERM; exit 143' TERM; echo started; while :; do sleep 0.05; done")
	var out testutil.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	eventually(t, func() bool { return strings.Contains(out.String(), "started") }, "command did not start: "+out.String())
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee)
		assert.Equal(t, 143, ee.ExitCode())
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("acpfs run did not stop on SIGTERM: %s", out.String())
	}
	assert.Contains(t, out.String(), "got TERM")
	ledgerOut, _, _ := acpfs(t, "ledger", "show", "--ledger", filepath.Join(e.runs, "communication_ledger.jsonl"), "--kind", "mount_stopped")
	assert.Contains(t, ledgerOut, "G-bob")
}

// TestCoordinatorBadGrantCostsOnlyItsAgent (issue 25, finding 5): a grant
// file that does not load, a grant for someone who is not a participant
// and two active grants for one agent cost only their own agents: acpfs
// up starts with the valid grants, says what it refused on stderr, in
// the ledger and in acpfs status (exit 2), and mounts a grant once fixed.
func TestCoordinatorBadGrantCostsOnlyItsAgent(t *testing.T) {
	e := newCoordEnv(t)
	e.standardGrants()
	bobFile := filepath.Join(e.runs, "context_grants", "G-bob.json")
	bob := e.loadGrant("G-bob")
	require.NoError(t, os.WriteFile(bobFile, []byte("{ not json"), 0o644))
	m := *bob
	m.GrantID, m.AgentID = "G-mallory", "mallory"
	e.saveGrant(&m)
	p := e.up(owner)
	out := p.Output()
	assert.Contains(t, out, "G-bob.json")
	assert.Contains(t, out, "mallory")
	assert.True(t, e.mounted(owner))
	assert.False(t, e.mounted(reviewer))
	stdout, _, code := acpfs(t, "status", "--runs", e.runs)
	assert.Equal(t, 2, code, stdout)
	assert.Contains(t, stdout, "refused: ")
	assert.Contains(t, stdout, "G-bob.json")
	refused := 0
	for _, r := range pmLedgerRecords(t, filepath.Join(e.runs, "communication_ledger.jsonl")) {
		if r.Kind == ledger.KindGrantRefused {
			refused++
		}
	}
	assert.GreaterOrEqual(t, refused, 2, "each refused grant is recorded")

	// Fixed: bob's view is mounted.
	e.saveGrant(bob)
	eventually(t, func() bool { return e.mounted(reviewer) }, "bob's view is mounted once his grant is fixed")
	require.NoError(t, os.Remove(filepath.Join(e.runs, "context_grants", "G-mallory.json")))
	eventually(t, func() bool {
		_, _, code := acpfs(t, "status", "--runs", e.runs)
		return code == 0
	}, "status is clean once every grant is fixed")

	// Two active grants for bob cost bob's view, not alice's; revoking
	// one gives it back.
	second := *bob
	second.GrantID = "G-bob-2"
	e.saveGrant(&second)
	eventually(t, func() bool { return !e.mounted(reviewer) }, "bob has no view while he has two active grants")
	assert.True(t, e.mounted(owner))
	_, stderr, code := acpfs(t, "grant", "revoke", "--runs", e.runs, "--grant", "G-bob-2")
	require.Equal(t, 0, code, stderr)
	eventually(t, func() bool { return e.mounted(reviewer) }, "bob's view is mounted again once one grant is left")
}
