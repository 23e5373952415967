package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/internal/testutil"
	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/mount"
	"github.com/acpfs/acpfs/protocol"
)

// extPrimary is the external primary deliverable as grants, the ledger
// and .acpfs name it: beside the folder. extRef is how events name it.
const (
	extPrimary = "../deliverables/design-spec.md"
	extRef     = "external:design-spec.md"
)

// newExternalCollab is a collaboration whose deliverables are external
// (--deliverables-mode external --repo-root ..): repo/collab is the
// folder, repo/deliverables the deliverables, and the repository also
// holds a .git, sources and a secret no grant shows.
func newExternalCollab(t *testing.T) (*collab, string) {
	t.Helper()
	root := newDir(t, "ext")
	repo := filepath.Join(root, "repo")
	c := &collab{t: t, root: root, folder: filepath.Join(repo, "collab"), runs: filepath.Join(root, "agent_runs")}
	c.ledger = filepath.Join(c.runs, "communication_ledger.jsonl")
	_, stderr, code := acpfs(t, "init", "--folder", c.folder, "--participant", owner, "--participant", reviewer,
		"--objective", "Design the cache layer", "--completion", "Cache design reviewed",
		"--primary-deliverable-type", "design-spec", "--deliverables-mode", "external", "--repo-root", "..")
	require.Equal(t, 0, code, stderr)
	for p, body := range map[string]string{
		"src/main.go": "package main\n", "secret/oracle.md": "the secret answer\n",
		".git/HEAD": "ref: refs/heads/main\n", ".git/objects/info/packs": "", ".git/refs/heads/main": "0000\n",
	} {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(repo, p)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(repo, p), []byte(body), 0o644))
	}
	mkRunDir(c.t, c.runs)
	var err error
	c.log, err = protocol.OpenLog(c.folder)
	require.NoError(t, err)
	c.lw, err = ledger.Open(c.ledger, ledger.Options{Sync: ledger.SyncBatch})
	require.NoError(t, err)
	t.Cleanup(func() { c.lw.Close(); c.log.Close() })
	return c, repo
}

// mountAtRepo mounts g rooted at the repository.
func (c *collab) mountAtRepo(g *grants.Grant, repo string) *view {
	c.t.Helper()
	testutil.RequireFUSE(c.t)
	gp := c.writeGrant(g)
	dir := filepath.Join(c.root, "mnt-"+g.AgentID)
	require.NoError(c.t, os.MkdirAll(dir, 0o755))
	cfg := mount.Config{Folder: c.folder, ViewRoot: repo, Mountpoint: dir, Grant: g, GrantPath: gp,
		Log: c.log, Ledger: c.lw, Hidden: []string{c.runs}}
	cfg.Audit = "opens"
	m, err := mount.Start(cfg)
	require.NoError(c.t, err)
	c.t.Cleanup(func() {
		require.NoError(c.t, m.Stop())
		require.NotContains(c.t, leftoverMounts(), dir, "mount left behind")
	})
	return &view{t: c.t, dir: dir, m: m}
}

// mustAt appends an event through the folder inside a repository view.
func (c *collab) mustAt(v *view, from, name string, extra map[string]any) {
	c.t.Helper()
	line := c.event(from, name, extra)
	f, err := os.OpenFile(v.path("collab/events.jsonl"), os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(c.t, err)
	_, werr := f.Write([]byte(line + "\n"))
	cerr := f.Close()
	require.True(c.t, werr == nil && cerr == nil, "append %s: %v %v: %s", line, werr, cerr, readFile(c.t, v.path("collab/.acpfs/last-error")))
}

func listNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

// TestViewRootedAtRepository (issue 24, git that tells the truth): with
// the view rooted at the repository, an external deliverable is judged
// by the grant, recorded under its name beside the folder, and frozen
// like an internal one; what no pattern names, .git included, is not
// shown, and the folder cannot be moved out from under the protocol.
func TestViewRootedAtRepository(t *testing.T) {
	c, repo := newExternalCollab(t)
	protoFiles := []string{"protocol.json", "events.jsonl", "README.md", "proposal.md", "review.md", "decisions.md", "readiness.md", "conclusion.md"}
	alice := c.mountAtRepo(&grants.Grant{GrantID: "G-owner", AgentID: owner, Role: "proposal owner", Objective: "Write the design",
		MayRead:       append([]string{"../deliverables/**", "../src/**"}, protoFiles...),
		ForbiddenRead: []string{"../secret/**"},
		MayWrite:      []string{"events.jsonl", "protocol.json", "proposal.md", "decisions.md", "readiness.md", "conclusion.md", "../deliverables/**"},
	}, repo)
	bob := c.mountAtRepo(&grants.Grant{GrantID: "G-reviewer", AgentID: reviewer, Role: "reviewer", Objective: "Review",
		MayRead: append([]string{"../deliverables/**"}, protoFiles...), MayWrite: []string{"events.jsonl", "protocol.json", "review.md"},
	}, repo)

	assert.Equal(t, []string{"collab", "deliverables", "src"}, listNames(t, alice.dir), "no .git, no secret")
	assert.Equal(t, []string{"collab", "deliverables"}, listNames(t, bob.dir))
	assert.Contains(t, listNames(t, alice.path("collab")), "events.jsonl")
	for _, p := range []string{".git/HEAD", "secret/oracle.md", "src/main.go"} {
		_, err := os.Stat(bob.path(p))
		assert.ErrorIs(t, err, syscall.ENOENT, p)
	}
	assert.Contains(t, readFile(t, alice.path("collab/.acpfs/status")), "agent: "+owner)

	// Judged by the grant, recorded by its name beside the folder.
	spec := alice.path("deliverables/design-spec.md")
	require.NoError(t, os.WriteFile(spec, []byte(designSpec("In Review")), 0o644))
	assert.ErrorIs(t, os.WriteFile(bob.path("deliverables/design-spec.md"), []byte("x"), 0o644), syscall.EACCES)
	assert.Contains(t, readFile(t, bob.path("deliverables/design-spec.md")), "Status: In Review")
	assert.Contains(t, readFile(t, bob.path("collab/.acpfs/last-error")), extPrimary)
	recs := c.records()
	assert.NotNil(t, findRecord(recs, ledger.KindWrite, owner, extPrimary), "the owner's write, by its name beside the folder")
	assert.NotNil(t, findRecord(recs, ledger.KindRead, reviewer, extPrimary), "the reviewer's read")
	assert.NotNil(t, findRecord(recs, ledger.KindDenied, reviewer, extPrimary), "the reviewer's refused write")

	// The folder and the directories above it stay where the protocol
	// finds them; the deliverables' directory cannot be moved away.
	assert.Error(t, os.Rename(alice.path("collab"), alice.path("moved")))
	assert.Error(t, os.Remove(alice.path("collab")))
	assert.ErrorIs(t, os.Rename(alice.path("deliverables"), alice.path("deliverables-old")), syscall.EPERM)
	assert.ErrorIs(t, os.Remove(spec), syscall.EPERM)

	// Through to the freeze, with every event appended through the views.
	c.mustAt(alice, owner, "deliverable_drafted", map[string]any{"doc": extRef, "role": "primary"})
	c.mustAt(alice, owner, "proposal_submitted", nil)
	review := strings.ReplaceAll(reviewDoc(c.snapshot().LastSeq+1), primary, extRef)
	require.NoError(t, os.WriteFile(bob.path("collab/review.md"), []byte(review), 0o644))
	c.mustAt(bob, reviewer, "review_submitted", nil)
	c.mustAt(alice, owner, "proposal_revised", nil)
	p := alice.path("collab/readiness.md")
	s := regexp.MustCompile(`(?m)^- \[unresolved\] .*$`).ReplaceAllString(readFile(t, p), "- [resolved] The first review is complete.")
	require.NoError(t, os.WriteFile(p, []byte(s), 0o644))
	c.mustAt(alice, owner, "question_classified", nil)
	c.mustAt(alice, owner, "decision_accepted", nil)
	c.mustAt(bob, reviewer, "decision_accepted", nil)
	require.NoError(t, os.WriteFile(spec, []byte(designSpec("Frozen")), 0o644))
	c.mustAt(alice, owner, "deliverable_frozen", map[string]any{"doc": extRef, "role": "primary", "sha256": fileSHA(t, spec)})

	err := os.WriteFile(spec, []byte("changed after the freeze\n"), 0o644)
	assert.ErrorIs(t, err, syscall.EROFS)
	assert.Contains(t, readFile(t, alice.path("collab/.acpfs/last-error")), "frozen deliverable")
	assert.NotNil(t, findRecord(c.records(), ledger.KindFrozenRefused, owner, extPrimary))
	assert.Contains(t, readFile(t, filepath.Join(repo, "deliverables/design-spec.md")), "Status: Frozen", "unchanged on disk")
}

// TestViewRootedAtRepositorySymlinks: a link beside the folder is judged
// by the name its target has in the grant, so a link that leads back
// into the folder cannot show what the folder's own rules hide, and a
// link above the view's root is never shown or made.
func TestViewRootedAtRepositorySymlinks(t *testing.T) {
	c, repo := newExternalCollab(t)
	require.NoError(t, os.WriteFile(filepath.Join(c.folder, "oracle.md"), []byte("the folder's oracle\n"), 0o644))
	for link, target := range map[string]string{
		"deliverables/peek":  "../collab/oracle.md",
		"deliverables/back":  "../collab/README.md",
		"deliverables/above": "../../outside",
		"src/up":             "../..",
	} {
		require.NoError(t, os.Symlink(target, filepath.Join(repo, link)))
	}
	carol := c.mountAtRepo(&grants.Grant{GrantID: "G-owner", AgentID: owner, Role: "proposal owner", Objective: "Read around",
		MayRead: []string{"**", "../**"}, ForbiddenRead: []string{"oracle.md", "../secret/**"}, MayWrite: []string{"../deliverables/**"},
	}, repo)

	names := listNames(t, carol.path("deliverables"))
	assert.Contains(t, names, "back", "a link to a shown file in the folder")
	assert.NotContains(t, names, "peek", "a link to the folder's forbidden oracle")
	assert.NotContains(t, names, "above", "a link above the view's root")
	assert.NotContains(t, listNames(t, carol.path("src")), "up")
	_, err := os.ReadFile(carol.path("deliverables/peek"))
	assert.ErrorIs(t, err, syscall.ENOENT)
	assert.Contains(t, readFile(t, carol.path("deliverables/back")), "#", "README.md through the link")
	_, err = os.ReadFile(carol.path("collab/oracle.md"))
	assert.ErrorIs(t, err, syscall.ENOENT)

	for _, target := range []string{"../collab/oracle.md", "../secret/oracle.md", "../../outside", "/etc/passwd"} {
		err := os.Symlink(target, carol.path("deliverables/mine"))
		assert.ErrorIs(t, err, syscall.EACCES, target)
	}
	require.NoError(t, os.Symlink("../collab/README.md", carol.path("deliverables/mine")))
	assert.Contains(t, readFile(t, carol.path("deliverables/mine")), "#")
}

// findRecord returns the first record of kind by agent at path, or nil.
func findRecord(recs []ledger.Record, kind ledger.Kind, agent, path string) *ledger.Record {
	for i := range recs {
		if recs[i].Kind == kind && recs[i].Agent == agent && recs[i].Path == path {
			return &recs[i]
		}
	}
	return nil
}

// TestRunRootedAtRepository: `acpfs run --view-root repo` shows the
// repository at its own path through the view: the preset of an
// external-mode folder reads the deliverables beside it, the reviewer
// cannot write them, nothing ungranted is there, and an owner whose grant
// names .git runs git on the repository with no extra setting.
func TestRunRootedAtRepository(t *testing.T) {
	testutil.RequireFUSE(t)
	d := newDir(t, "extrun")
	repo, runs := filepath.Join(d, "repo"), filepath.Join(d, "agent_runs")
	folder := filepath.Join(repo, "collab")
	_, stderr, code := acpfs(t, "init", "--folder", folder, "--participant", owner, "--participant", reviewer,
		"--objective", "Design the cache layer", "--completion", "Cache design reviewed",
		"--primary-deliverable-type", "design-spec", "--deliverables-mode", "external", "--repo-root", "..")
	require.Equal(t, 0, code, stderr)
	require.NoError(t, os.MkdirAll(filepath.Join(repo, "secret"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(repo, "secret/oracle.md"), []byte(sbxSecret+"\n"), 0o644))
	for _, args := range [][]string{{"init", "-q"}, {"add", "-A"}, {"-c", "user.email=c@example.test", "-c", "user.name=c", "commit", "-qm", "start"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = repo
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%v: %s", args, out)
	}
	grant := func(args ...string) string {
		_, stderr, code := acpfs(t, append([]string{"grant", "create", "--runs", runs, "--folder", folder}, args...)...)
		require.Equal(t, 0, code, stderr)
		return stderr
	}
	note := grant("--agent", reviewer, "--id", "G-bob", "--preset", "reviewer")
	assert.Contains(t, note, "../deliverables/", "the preset names the deliverables beside the folder")
	grant("--agent", owner, "--id", "G-alice", "--preset", "owner", "--may-read", "../.git/**", "--may-write", "../.git/**")
	run := func(g, script string) (string, string, int) {
		cmd := exec.Command(acpfsBin, "run", "--folder", folder, "--runs", runs, "--grant", g, "--view-root", "repo",
			"--", "/usr/bin/bash", "-c", script, repo)
		return runCmd(t, cmd)
	}

	out, stderr, code := run("G-bob", `cd "$0"
ls -A; echo ---
grep -c 'Design Spec' deliverables/design-spec.md
cat secret/oracle.md 2>&1 || echo NO-SECRET
echo changed >> deliverables/design-spec.md 2>&1 || echo NO-WRITE
cat collab/.acpfs/last-error
git status 2>&1 | head -1`)
	require.Equal(t, 0, code, "%s%s", out, stderr)
	listing, rest, _ := strings.Cut(out, "---\n")
	assert.Equal(t, "collab\ndeliverables\n", listing, "no .git, no secret")
	assert.Contains(t, rest, "NO-SECRET")
	assert.NotContains(t, rest, sbxSecret)
	assert.Contains(t, rest, "NO-WRITE")
	assert.Contains(t, rest, extPrimary+": not writable under the grant")
	assert.Contains(t, rest, "not a git repository")

	out, stderr, code = run("G-alice", `set -e
cd "$0"
echo "more" >> deliverables/design-spec.md
git status --short
git add deliverables/design-spec.md
git -c user.email=a@example.test -c user.name=alice commit -qm "revise the spec"
git log --format=%s -1`)
	require.Equal(t, 0, code, "%s%s", out, stderr)
	assert.Contains(t, out, " M deliverables/design-spec.md")
	assert.Contains(t, out, " D secret/oracle.md", "a hidden file looks deleted to git")
	assert.Contains(t, out, "revise the spec")
	var recs []ledger.Record
	require.NoError(t, ledger.Scan(filepath.Join(runs, "communication_ledger.jsonl"), ledger.Filter{},
		func(r ledger.Record) error { recs = append(recs, r); return nil }))
	assert.NotNil(t, findRecord(recs, ledger.KindWrite, owner, extPrimary))
	assert.Empty(t, leftoverMounts())
}
