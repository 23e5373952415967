package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/internal/testutil"
)

// Identity, not spelling (issue 23, finding 1): what no view may show
// (the run directory, the grants, the ledger and its key) is known by
// what it is on disk. However the coordinator spells its paths (a
// symlink to the run directory, to the grants' or the ledger's
// directory, a relative run directory with --folder .), a grant that
// would show one of them inside the folder is refused before anything
// is mounted, and a view conceals them wherever they are moved.

// idEnv is a collaboration whose run directory lies inside the folder.
type idEnv struct {
	t      *testing.T
	dir    string
	folder string
	runs   string // folder/agent_runs
	// runLink, grantsLink and ledgerLink are symlinks (outside the
	// folder) to the run directory, its grants and a ledger directory
	// inside the folder.
	runLink, grantsLink, ledgerLink string
}

func newIDEnv(t *testing.T) *idEnv {
	t.Helper()
	testutil.RequireFUSE(t)
	d := newDir(t, "identity")
	e := &idEnv{t: t, dir: d, folder: filepath.Join(d, "collab")}
	e.runs = filepath.Join(e.folder, "agent_runs")
	_, stderr, code := acpfs(t, "init", "--folder", e.folder, "--participant", owner, "--participant", reviewer,
		"--objective", "Design the cache layer", "--completion", "Cache design reviewed", "--primary-deliverable-type", "design-spec")
	require.Equal(t, 0, code, stderr)
	require.NoError(t, os.MkdirAll(filepath.Join(e.folder, "oracle"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(e.folder, "oracle/answer.md"), []byte("the secret answer\n"), 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(e.folder, "ledgers"), 0o700))
	e.runLink, e.grantsLink, e.ledgerLink = filepath.Join(d, "runs-link"), filepath.Join(d, "grants-link"), filepath.Join(d, "ledger-link")
	mkRunDir(t, e.runs)
	require.NoError(t, os.Symlink(e.runs, e.runLink))
	require.NoError(t, os.Symlink(filepath.Join(e.runs, "context_grants"), e.grantsLink))
	require.NoError(t, os.Symlink(filepath.Join(e.folder, "ledgers"), e.ledgerLink))
	return e
}

// wideGrant reads everything but the oracle: with the canonical
// spelling of the run directory, a view hides the run directory from it.
func wideGrant(id, agent string) *grants.Grant {
	return &grants.Grant{
		GrantID: id, AgentID: agent, Role: "reviewer", Objective: "Review the design",
		MayRead:       []string{"**"},
		ForbiddenRead: []string{"oracle/**"},
		MayWrite:      []string{"events.jsonl", "protocol.json", "review.md"},
	}
}

// TestIdentityRefusesEverySpelling: a grant that would show the run
// directory, its grants or the ledger inside the folder is refused by
// mount, run, up and up --store, whatever spelling of the paths the
// coordinator used; nothing is mounted and the sandbox's command never
// runs.
func TestIdentityRefusesEverySpelling(t *testing.T) {
	e := newIDEnv(t)
	pmWriteGrant(t, e.runs, wideGrant("G-bob", reviewer))
	outside := filepath.Join(e.dir, "runs-out") // a run directory outside the folder
	outGrant := pmWriteGrant(t, outside, wideGrant("G-bob", reviewer))
	mp := filepath.Join(e.dir, "mnt-bob")
	require.NoError(t, os.MkdirAll(mp, 0o755))
	root := filepath.Join(e.dir, "mnt")
	// The sandbox's command: it must never run, and would print what it
	// reached of the run directory.
	probe := []string{"--", "/usr/bin/bash", "-c", `ls -a "$0" "$0/agent_runs" "$0/ledgers" 2>&1; cat "$0/agent_runs/context_grants/G-bob.json" 2>&1; echo RAN`, e.folder}

	tests := []struct {
		name string
		dir  string
		args []string
	}{
		{"mount --runs RUNS (canonical)", "", []string{"mount", "--folder", e.folder, "--runs", e.runs, "--grant", "G-bob", mp}},
		{"mount --runs LINK", "", []string{"mount", "--folder", e.folder, "--runs", e.runLink, "--grant", "G-bob", mp}},
		{"mount, relative --runs with --folder .", e.folder, []string{"mount", "--folder", ".", "--runs", "agent_runs", "--grant", "G-bob", mp}},
		{"mount --grant DIRLINK/G-bob.json (DIRLINK to context_grants)", "", []string{"mount", "--folder", e.folder,
			"--grant", filepath.Join(e.grantsLink, "G-bob.json"), "--ledger", filepath.Join(outside, "communication_ledger.jsonl"), mp}},
		{"mount --grant DIRLINK/context_grants/G-bob.json (DIRLINK to the run directory)", "", []string{"mount", "--folder", e.folder,
			"--grant", filepath.Join(e.runLink, "context_grants", "G-bob.json"), "--ledger", filepath.Join(outside, "communication_ledger.jsonl"), mp}},
		{"mount --ledger DIRLINK/l.jsonl", "", []string{"mount", "--folder", e.folder, "--grant", outGrant,
			"--ledger", filepath.Join(e.ledgerLink, "l.jsonl"), mp}},
		{"run --runs RUNS (canonical)", "", append([]string{"run", "--folder", e.folder, "--runs", e.runs, "--grant", "G-bob"}, probe...)},
		{"run --runs LINK", "", append([]string{"run", "--folder", e.folder, "--runs", e.runLink, "--grant", "G-bob"}, probe...)},
		{"run --grant DIRLINK/G-bob.json", "", append([]string{"run", "--folder", e.folder, "--grant", filepath.Join(e.grantsLink, "G-bob.json"),
			"--ledger", filepath.Join(outside, "communication_ledger.jsonl")}, probe...)},
		{"run --grant DIRLINK/context_grants/G-bob.json (DIRLINK to the run directory)", "", append([]string{"run", "--folder", e.folder,
			"--grant", filepath.Join(e.runLink, "context_grants", "G-bob.json"), "--ledger", filepath.Join(outside, "communication_ledger.jsonl")}, probe...)},
		{"run --ledger DIRLINK/l.jsonl", "", append([]string{"run", "--folder", e.folder, "--grant", outGrant,
			"--ledger", filepath.Join(e.ledgerLink, "l.jsonl")}, probe...)},
		{"run, relative --runs with --folder .", e.folder, append([]string{"run", "--folder", ".", "--runs", "agent_runs", "--grant", "G-bob"}, probe...)},
		{"up, relative --runs with --folder .", e.folder, []string{"up", "--folder", ".", "--runs", "agent_runs", "--root", root}},
		{"up --runs LINK", "", []string{"up", "--folder", e.folder, "--runs", e.runLink, "--root", root}},
		{"up --runs RUNS (canonical)", "", []string{"up", "--folder", e.folder, "--runs", e.runs, "--root", root}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, stderr, code := sfRunIn(t, tt.dir, tt.args...)
			assert.Equal(t, 2, code, "%s%s", out, stderr)
			assert.Contains(t, stderr, "lies inside the collaboration folder")
			assert.Contains(t, stderr, "would show it")
			assert.NotContains(t, out, "RAN", "the sandbox's command ran")
			assert.NotContains(t, out, "context_grants")
			assert.Empty(t, sfFSTypesAt(mp), "nothing may be mounted")
			assert.Empty(t, sfFSTypesAt(filepath.Join(root, reviewer)), "nothing may be mounted")
		})
	}
}

// TestIdentityStoreRelativeRuns: the same under up --store, with a
// relative run directory and --folder . on a store host, and with a
// --runs that is a symlink to a run directory inside the folder.
func TestIdentityStoreRelativeRuns(t *testing.T) {
	srv := mhServer(t, -1, newDir(t, "nats"))
	env := newMHEnv(t, owner, reviewer)
	h := env.host("ha", srv.url())
	runs := filepath.Join(h.folder, "agent_runs")
	link := filepath.Join(env.dir, "runs-link")
	require.NoError(t, os.Symlink(runs, link))
	h.grant(reviewer, reviewer, "--may-read", "**")
	store := []string{"up", "--store", h.url, "--collab", mhCollab, "--host", h.name, "--replicas", env.replicas, "--root", h.root}
	for _, tt := range []struct {
		name, dir string
		args      []string
	}{
		{"relative --runs with --folder .", h.folder, []string{"--runs", "agent_runs", "--folder", "."}},
		{"--runs LINK", "", []string{"--runs", link, "--folder", h.folder}},
		{"--runs RUNS (canonical)", "", []string{"--runs", runs, "--folder", h.folder}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, stderr, code := sfRunIn(t, tt.dir, append(append([]string(nil), store...), tt.args...)...)
			assert.Equal(t, 2, code, stderr)
			assert.Contains(t, stderr, "lies inside the collaboration folder")
			assert.Contains(t, stderr, "would show it")
			assert.Empty(t, sfFSTypesAt(filepath.Join(h.root, reviewer)), "nothing may be mounted")
			_, err := os.Stat(filepath.Join(runs, "ledger.key"))
			assert.NoError(t, err, "the run directory was made where it was asked for")
		})
	}
}

// TestIdentityConcealedWhereverMoved: a view of a grant that does not
// show the run directory where it is conceals it by identity when it
// is moved, on the backing side, to where the grant reads everything:
// whatever name leads there, the ledger key, the grants and the ledger
// stay out of the view.
func TestIdentityConcealedWhereverMoved(t *testing.T) {
	e := newIDEnv(t)
	g := &grants.Grant{
		GrantID: "G-bob", AgentID: reviewer, Role: "reviewer", Objective: "Review the design",
		MayRead:  []string{"protocol.json", "events.jsonl", "deliverables/**", "scratch/**"},
		MayWrite: []string{"events.jsonl", "protocol.json", "scratch/**"},
	}
	pmWriteGrant(t, e.runs, g)
	require.NoError(t, os.MkdirAll(filepath.Join(e.folder, "scratch"), 0o755))
	mp := filepath.Join(e.dir, "mnt-bob")
	pmStart(t, []string{mp}, []string{filepath.Join(mp, ".acpfs", "status")},
		"mount", "--folder", e.folder, "--runs", e.runLink, "--grant", "G-bob", mustMkdir(t, mp))
	_, err := os.Stat(filepath.Join(e.runs, "ledger.key"))
	require.NoError(t, err, "the ledger's key is in the run directory")

	moved := filepath.Join(e.folder, "scratch", "runs")
	require.NoError(t, os.Rename(e.runs, moved))
	t.Cleanup(func() { _ = os.Rename(moved, e.runs) })
	for _, rel := range []string{"scratch/runs", "scratch/runs/ledger.key", "scratch/runs/context_grants/G-bob.json", "scratch/runs/communication_ledger.jsonl"} {
		_, err := os.Lstat(filepath.Join(mp, rel))
		assert.ErrorIs(t, err, os.ErrNotExist, rel)
	}
	ents, err := os.ReadDir(filepath.Join(mp, "scratch"))
	require.NoError(t, err)
	for _, ent := range ents {
		assert.NotEqual(t, "runs", ent.Name(), "the moved run directory is listed")
	}
	assert.Error(t, os.WriteFile(filepath.Join(mp, "scratch/runs/context_grants/G-bob.json"), []byte("{}"), 0o644))
	// The view still serves, and the ledger still records.
	assert.Contains(t, readFile(t, filepath.Join(mp, ".acpfs", "status")), "agent: bob")
	assert.False(t, strings.Contains(readFile(t, filepath.Join(moved, "context_grants", "G-bob.json")), "{}\n"))
}

// TestIdentityRunDirectoryFilesConcealedWhereverMoved: under `acpfs
// mount` (a view of its own, no coordinator), the ledger's key, another
// agent's grant file and another agent's home, each moved out of the run
// directory into the folder after the view started, stay concealed
// whatever they are called there, as under `acpfs up`.
func TestIdentityRunDirectoryFilesConcealedWhereverMoved(t *testing.T) {
	e := newIDEnv(t)
	g := &grants.Grant{
		GrantID: "G-bob", AgentID: reviewer, Role: "reviewer", Objective: "Review the design",
		MayRead:  []string{"protocol.json", "events.jsonl", "scratch/**"},
		MayWrite: []string{"events.jsonl", "protocol.json", "scratch/**"},
	}
	pmWriteGrant(t, e.runs, g)
	pmWriteGrant(t, e.runs, wideGrant("G-alice", owner))
	home := filepath.Join(e.runs, "homes", "G-alice")
	require.NoError(t, os.MkdirAll(home, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(home, ".session"), []byte("alice's session\n"), 0o600))
	require.NoError(t, os.MkdirAll(filepath.Join(e.folder, "scratch"), 0o755))
	mp := filepath.Join(e.dir, "mnt-bob")
	pmStart(t, []string{mp}, []string{filepath.Join(mp, ".acpfs", "status")},
		"mount", "--folder", e.folder, "--runs", e.runs, "--grant", "G-bob", mustMkdir(t, mp))

	for _, tt := range []struct{ from, to string }{
		{filepath.Join(e.runs, "ledger.key"), "scratch/k"},
		{filepath.Join(e.runs, "context_grants", "G-alice.json"), "scratch/a"},
		{home, "scratch/h"},
	} {
		to := filepath.Join(e.folder, tt.to)
		require.NoError(t, os.Rename(tt.from, to))
		t.Cleanup(func() { _ = os.Rename(to, tt.from) })
		imNotShown(t, mp, tt.to)
		_, err := os.ReadFile(filepath.Join(mp, tt.to))
		assert.ErrorIs(t, err, os.ErrNotExist, tt.to)
	}
	// The view still serves.
	assert.Contains(t, readFile(t, filepath.Join(mp, ".acpfs", "status")), "agent: bob")
}

func mustMkdir(t *testing.T, p string) string {
	t.Helper()
	require.NoError(t, os.MkdirAll(p, 0o755))
	return p
}

// TestIdentityOtherRunDirectoriesConcealed (outside attack, F1): another
// coordinator's run directory, or a ledger's directory, inside the
// folder is shown to no view, whatever it is called, even to a grant
// that reads and writes everything; and no agent can make the names that
// mark one.
func TestIdentityOtherRunDirectoriesConcealed(t *testing.T) {
	e := newIDEnv(t)
	outside := filepath.Join(e.dir, "runs")
	wide := wideGrant("G-alice", owner)
	wide.MayWrite = []string{"**"}
	pmWriteGrant(t, outside, wide)
	// A second coordinator's run directory, and a bare ledger directory,
	// inside the folder (made by its own commands).
	_, stderr, code := acpfs(t, "grant", "create", "--runs", filepath.Join(e.folder, "runs2"), "--folder", e.folder,
		"--agent", "carol", "--participant", owner, "--role", "owner", "--may-read", "events.jsonl", "--may-write", "events.jsonl")
	require.Equal(t, 0, code, stderr)
	lp := filepath.Join(e.folder, "ledgers", "l.jsonl")
	_, _, _ = acpfs(t, "ledger", "verify", "--ledger", lp) // no-op when missing
	require.NoError(t, os.WriteFile(filepath.Join(e.folder, "ledgers", "ledger.key"), []byte("a key\n"), 0o600))
	mp := filepath.Join(e.dir, "mnt-alice")
	pmStart(t, []string{mp}, []string{filepath.Join(mp, ".acpfs", "status")},
		"mount", "--folder", e.folder, "--runs", outside, "--grant", "G-alice", mustMkdir(t, mp))
	for _, rel := range []string{"runs2", "runs2/context_grants/G-carol.json", "ledgers", "ledgers/ledger.key", "agent_runs"} {
		_, err := os.Lstat(filepath.Join(mp, rel))
		assert.ErrorIs(t, err, os.ErrNotExist, rel)
	}
	ents, err := os.ReadDir(mp)
	require.NoError(t, err)
	for _, ent := range ents {
		assert.NotContains(t, []string{"runs2", "ledgers", "agent_runs"}, ent.Name())
	}
	require.NoError(t, os.MkdirAll(filepath.Join(mp, "scratch"), 0o755))
	for _, name := range []string{"ledger.key", "context_grants", "communication_ledger.jsonl"} {
		err := os.WriteFile(filepath.Join(mp, "scratch", name), []byte("x"), 0o644)
		assert.ErrorIs(t, err, os.ErrPermission, name)
	}
	assert.ErrorIs(t, os.Mkdir(filepath.Join(mp, "scratch", "context_grants"), 0o755), os.ErrPermission)
}

// TestIdentityGrantOutsideRunsFlag (outside attack, F1 variant and F4):
// a grant given by its path in a run directory's context_grants, without
// --runs, makes that run directory (its key, ledger, artifacts) the
// coordinator's too: a view refuses a grant showing it and conceals it,
// and a sandbox does not show it through --ro.
func TestIdentityGrantOutsideRunsFlag(t *testing.T) {
	e := newIDEnv(t)
	g := wideGrant("G-bob", reviewer)
	g.ForbiddenRead = append(g.ForbiddenRead, "agent_runs/context_grants")
	gp := pmWriteGrant(t, e.runs, g)
	require.NoError(t, os.MkdirAll(filepath.Join(e.runs, "artifacts"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(e.runs, "artifacts", "copy"), []byte("a copy of the oracle\n"), 0o444))
	ledgerOut := filepath.Join(e.dir, "ledg", "l.jsonl")
	mp := mustMkdir(t, filepath.Join(e.dir, "mnt-bob"))
	// The grant by its path, and through a symlink to context_grants
	// (named otherwise): the run directory holding it is known by what
	// the grant's directory is, not by its name.
	for _, spelling := range []string{gp, filepath.Join(e.grantsLink, "G-bob.json")} {
		_, stderr, code := sfRun(t, "mount", "--folder", e.folder, "--grant", spelling, "--ledger", ledgerOut, mp)
		assert.Equal(t, 2, code, "%s: %s", spelling, stderr)
		assert.Contains(t, stderr, "agent_runs lies inside the collaboration folder", spelling)
		assert.Empty(t, sfFSTypesAt(mp))
	}

	// The sandbox: the run directory outside the folder, its grant given
	// by path, its parent shown read-only.
	out := filepath.Join(e.dir, "out")
	og := pmWriteGrant(t, filepath.Join(out, "runs"), wideGrant("G-bob", reviewer))
	require.NoError(t, os.MkdirAll(filepath.Join(out, "runs", "artifacts"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(out, "runs", "artifacts", "copy"), []byte("a copy of the oracle\n"), 0o444))
	stdout, stderr, code := sfRun(t, "run", "--folder", e.folder, "--grant", og, "--ledger", ledgerOut, "--ro", out,
		"--", "/usr/bin/bash", "-c", `cat "$0"/runs/artifacts/copy 2>&1; ls "$0"/runs 2>&1; true`, out)
	assert.Equal(t, 0, code, stderr)
	assert.NotContains(t, stdout, "a copy of the oracle")
	assert.NotContains(t, stdout, "artifacts\n")
}

// TestIdentitySymlinkedRunDirParts (outside attack, F3 and round 2): a
// grant file in the run directory that is a symlink (to a file an agent
// could write) is refused by acpfs up, and so is a run directory whose
// artifacts (or grants, or handoffs) directory is a symlink.
func TestIdentitySymlinkedRunDirParts(t *testing.T) {
	e := newIDEnv(t)
	runs := filepath.Join(e.dir, "runs5")
	owner := &grants.Grant{GrantID: "G-alice", AgentID: "alice", Role: "proposal owner", Objective: "o",
		MayRead: []string{"**"}, MayWrite: []string{"**"}, ForbiddenRead: []string{"oracle/**"}}
	pmWriteGrant(t, runs, owner)
	pmWriteGrant(t, runs, &grants.Grant{GrantID: "G-bob", AgentID: "bob", Role: "reviewer", Objective: "o",
		MayRead: []string{"protocol.json", "events.jsonl", "docs/**"}, MayWrite: []string{"events.jsonl"}})
	require.NoError(t, os.MkdirAll(filepath.Join(e.folder, "docs"), 0o755))
	gg := filepath.Join(e.folder, "gg")
	require.NoError(t, os.MkdirAll(gg, 0o755))
	require.NoError(t, os.Rename(filepath.Join(runs, "context_grants", "G-alice.json"), filepath.Join(gg, "G-alice.json")))
	require.NoError(t, os.Symlink(filepath.Join(gg, "G-alice.json"), filepath.Join(runs, "context_grants", "G-alice.json")))
	art := filepath.Join(e.folder, "art")
	require.NoError(t, os.MkdirAll(art, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(art, "copy"), []byte("handed over\n"), 0o444))

	root := filepath.Join(e.dir, "mnt5")
	p := pmUp(t, runs, e.folder, root, []string{"bob"})
	assert.Contains(t, p.Output(), "not a regular file")
	assert.Empty(t, sfFSTypesAt(filepath.Join(root, "alice")), "the symlinked grant is not served")
	require.NoError(t, p.Stop(), p.Output())
	require.NoError(t, os.RemoveAll(filepath.Join(runs, "artifacts")))
	require.NoError(t, os.Symlink(art, filepath.Join(runs, "artifacts")))

	// Without the symlinked grant, the symlinked artifacts directory
	// still keeps up from starting, and handoffs and grants are not
	// written through it (they would land in the folder under names no
	// view conceals).
	require.NoError(t, os.Remove(filepath.Join(runs, "context_grants", "G-alice.json")))
	_, stderr, code := sfRun(t, "up", "--runs", runs, "--folder", e.folder, "--root", root)
	assert.NotEqual(t, 0, code)
	assert.Contains(t, stderr, "not a directory of the run directory's own")
	assert.Empty(t, sfFSTypesAt(filepath.Join(root, "bob")))
	_, stderr, code = acpfs(t, "grant", "create", "--runs", runs, "--folder", e.folder, "--agent", "alice", "--preset", "owner")
	assert.NotEqual(t, 0, code)
	assert.Contains(t, stderr, "not a directory of the run directory's own")
	_, err := os.Stat(filepath.Join(art, "G-alice.json"))
	assert.ErrorIs(t, err, os.ErrNotExist)
}

// TestIdentityStoreNeverSyncsARunDirectory (outside attack, F2): a run
// directory moved into a store host's folder is never published to the
// other hosts, whose views would show its key and grants.
func TestIdentityStoreNeverSyncsARunDirectory(t *testing.T) {
	_, a, b := twoMHHosts(t)
	moved := filepath.Join(a.folder, "runs-moved")
	require.NoError(t, os.Rename(a.runs, moved))
	t.Cleanup(func() { _ = os.Rename(moved, a.runs) })
	// A document written after the move reaches host b: the sync has
	// seen the folder since.
	require.NoError(t, os.WriteFile(filepath.Join(a.folder, "deliverables", "after-the-move.md"), []byte("# after\n"), 0o644))
	eventually(t, func() bool {
		_, err := os.Stat(filepath.Join(b.folder, "deliverables", "after-the-move.md"))
		return err == nil
	}, "host b has the document written after the move")
	_, err := os.Stat(filepath.Join(b.folder, "runs-moved"))
	assert.ErrorIs(t, err, os.ErrNotExist, "the run directory reached host b")
	_, err = os.Stat(filepath.Join(b.view("bob"), "runs-moved", "ledger.key"))
	assert.ErrorIs(t, err, os.ErrNotExist)
}

// TestIdentityFoldersAndBindsOutsideRunDirectories (outside attack,
// round 3): a collaboration folder that is or lies in a run directory
// (any coordinator's: its key, grants and homes would be the view's top
// level) is refused by init, mount, run and up; a --ro, --rw or --home
// that is, lies in or holds another coordinator's run directory is
// refused by run before anything starts.
func TestIdentityFoldersAndBindsOutsideRunDirectories(t *testing.T) {
	e := newCoordEnv(t)
	e.standardGrants()
	other := filepath.Join(newDir(t, "other"), "runs")
	_, stderr, code := acpfs(t, "grant", "create", "--runs", other, "--folder", e.folder, "--agent", owner, "--preset", "owner")
	require.Equal(t, 0, code, stderr)
	require.NoError(t, os.MkdirAll(filepath.Join(other, "homes", "G-alice"), 0o700))
	holder := filepath.Dir(other)

	_, stderr, code = acpfs(t, "init", "--folder", filepath.Join(other, "homes", "collab"), "--participant", owner,
		"--objective", "o", "--completion", "c", "--primary-deliverable-type", "design-spec")
	assert.NotEqual(t, 0, code)
	assert.Contains(t, stderr, "run or ledger directory")
	mp := mustMkdir(t, filepath.Join(newDir(t, "mp"), "v"))
	_, stderr, code = sfRun(t, "mount", "--folder", other, "--runs", e.runs, "--grant", "G-bob", mp)
	assert.Equal(t, 2, code, stderr)
	assert.Contains(t, stderr, "run or ledger directory")
	assert.Empty(t, sfFSTypesAt(mp))

	// Another coordinator's grants reached through a bind mount (whose
	// ".." is not the run directory): known by what they hold.
	alias := mustMkdir(t, filepath.Join(newDir(t, "alias"), "a"))
	require.NoError(t, unix.Mount(filepath.Join(other, "context_grants"), alias, "", unix.MS_BIND, ""))
	t.Cleanup(func() { _ = unix.Unmount(alias, unix.MNT_DETACH) })
	_, stderr, code = sfRun(t, "mount", "--folder", alias, "--runs", e.runs, "--grant", "G-bob", mp)
	assert.Equal(t, 2, code, stderr)
	assert.Contains(t, stderr, "run or ledger directory")
	assert.Empty(t, sfFSTypesAt(mp))

	for _, flags := range [][]string{
		{"--ro", alias},
		{"--ro", holder},
		{"--rw", holder},
		{"--ro", filepath.Join(other, "homes")},
		{"--home", filepath.Join(other, "homes", "G-alice")},
	} {
		out, stderr, code := e.sandbox(sbxRun{grant: "G-bob", flags: flags, script: "echo STARTED"})
		assert.NotEqual(t, 0, code, "%v: %s", flags, stderr)
		assert.NotContains(t, out, "STARTED", "%v", flags)
		assert.Contains(t, stderr, "run or ledger directory", "%v", flags)
	}
}

// TestIdentityRefusesWhatNoViewCouldHide: a ledger whose directory is
// the folder, the repository a view is rooted at, or a directory holding
// the folder, a run directory that is the folder, and a grant file in
// the folder that no run directory holds are refused by mount and run
// before anything is made: another view of the folder (this
// coordinator's or another's) would show the ledger's key, the records
// or the grant, since no view can hide the folder's own entries by what
// holds them. Nothing is made, and the folder's mode is left alone.
func TestIdentityRefusesWhatNoViewCouldHide(t *testing.T) {
	e := newIDEnv(t)
	outside := filepath.Join(e.dir, "runs-out")
	outGrant := pmWriteGrant(t, outside, wideGrant("G-bob", reviewer))
	loose := filepath.Join(e.folder, "grants")
	require.NoError(t, os.MkdirAll(loose, 0o755))
	b, err := os.ReadFile(outGrant)
	require.NoError(t, err)
	looseGrant := filepath.Join(loose, "G-bob.json")
	require.NoError(t, os.WriteFile(looseGrant, b, 0o644))
	mp := filepath.Join(e.dir, "mnt-bob")
	require.NoError(t, os.MkdirAll(mp, 0o755))
	outLedger := filepath.Join(e.dir, "ledger-out", "l.jsonl")
	probe := []string{"--", "/usr/bin/bash", "-c", "echo RAN"}
	before, err := os.Stat(e.folder)
	require.NoError(t, err)

	tests := []struct {
		name, dir, want string
		args            []string
	}{
		{"mount --ledger in the folder itself", "", "no view could hide", []string{"mount", "--folder", e.folder, "--grant", outGrant,
			"--ledger", filepath.Join(e.folder, "audit.jsonl"), mp}},
		{"run --ledger in the folder itself", "", "no view could hide", append([]string{"run", "--folder", e.folder, "--grant", outGrant,
			"--ledger", filepath.Join(e.folder, "audit.jsonl")}, probe...)},
		{"run --ledger ./audit.jsonl from inside the folder", e.folder, "no view could hide", append([]string{"run", "--folder", ".", "--grant", outGrant,
			"--ledger", "audit.jsonl"}, probe...)},
		{"run --ledger beside the folder, in the directory holding it", "", "no view could hide", append([]string{"run", "--folder", e.folder, "--grant", outGrant,
			"--ledger", filepath.Join(e.dir, "audit.jsonl")}, probe...)},
		{"mount --runs FOLDER", "", "no view could hide", []string{"mount", "--folder", e.folder, "--runs", e.folder, "--grant", outGrant,
			"--ledger", outLedger, mp}},
		{"mount --grant FOLDER/grants/G-bob.json (no run directory)", "", "not in a run directory", []string{"mount", "--folder", e.folder,
			"--grant", looseGrant, "--ledger", outLedger, mp}},
		{"run --grant FOLDER/grants/G-bob.json (no run directory)", "", "not in a run directory", append([]string{"run", "--folder", e.folder,
			"--grant", looseGrant, "--ledger", outLedger}, probe...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, stderr, code := sfRunIn(t, tt.dir, tt.args...)
			assert.NotEqual(t, 0, code, "%s%s", out, stderr)
			assert.Contains(t, stderr, tt.want)
			assert.NotContains(t, out, "RAN", "the sandbox's command ran")
			assert.Empty(t, sfFSTypesAt(mp), "nothing may be mounted")
			for _, d := range []string{e.folder, e.dir} {
				for _, name := range []string{"ledger.key", "ledger.pub", "audit.jsonl"} {
					assert.NoFileExists(t, filepath.Join(d, name))
				}
			}
			st, err := os.Stat(e.folder)
			require.NoError(t, err)
			assert.Equal(t, before.Mode(), st.Mode(), "the folder's mode")
		})
	}
}

// TestIdentityRefusesALedgerAtTheRepositoryRoot: with --view-root repo,
// a ledger in the repository's root would be listed in the views rooted
// there: refused.
func TestIdentityRefusesALedgerAtTheRepositoryRoot(t *testing.T) {
	testutil.RequireFUSE(t)
	d := newDir(t, "identity-repo")
	repo := filepath.Join(d, "repo")
	folder := filepath.Join(repo, "collab")
	_, stderr, code := acpfs(t, "init", "--folder", folder, "--participant", owner, "--participant", reviewer,
		"--objective", "Design the cache layer", "--completion", "Cache design reviewed", "--primary-deliverable-type", "design-spec",
		"--deliverables-mode", "external", "--repo-root", "..")
	require.Equal(t, 0, code, stderr)
	g := wideGrant("G-alice", owner)
	g.MayRead = []string{"**", "../**"}
	grant := pmWriteGrant(t, filepath.Join(d, "runs"), g)
	out, stderr, code := sfRunIn(t, "", "run", "--folder", folder, "--grant", grant, "--view-root", "repo",
		"--ledger", filepath.Join(repo, "audit.jsonl"), "--", "/usr/bin/bash", "-c", "echo RAN")
	assert.NotEqual(t, 0, code, "%s%s", out, stderr)
	assert.Contains(t, stderr, "no view could hide")
	assert.NotContains(t, out, "RAN")
	assert.NoFileExists(t, filepath.Join(repo, "ledger.key"))
}
