package grants

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func grantFor(id, agent string) *Grant {
	return &Grant{GrantID: id, AgentID: agent, Role: "reviewer", Objective: "review", MayRead: []string{"**"},
		ForbiddenRead: []string{"oracle/**"}}
}

func TestRunDirLayout(t *testing.T) {
	r := NewRunDir("")
	assert.Equal(t, "agent_runs", r.Root)
	r = NewRunDir("/x/runs")
	assert.Equal(t, "/x/runs/context_grants/G-a.json", r.GrantPath("G-a"))
	assert.Equal(t, "/x/runs/context_grants/G-a.prompt.md", r.PromptPath("G-a"))
	assert.Equal(t, "/x/runs/handoffs/H-1.json", r.HandoffPath("H-1"))
	assert.Equal(t, "/x/runs/communication_ledger.jsonl", r.LedgerPath())
	assert.Equal(t, "/x/runs/artifacts/abc", r.ArtifactPath("abc"))
}

// TestRunDirIsPrivate: a run directory acpfs creates is its owner's only
// (it holds the grants, the coordinator's lock, often the ledger key); an
// existing one keeps its mode.
func TestRunDirIsPrivate(t *testing.T) {
	for name, make := range map[string]func(RunDir) error{
		"Init":      func(r RunDir) error { return r.Init() },
		"SaveGrant": func(r RunDir) error { return r.SaveGrant(grantFor("G-a", "alpha")) },
	} {
		r := NewRunDir(filepath.Join(t.TempDir(), "a", "agent_runs"))
		require.NoError(t, make(r), name)
		fi, err := os.Stat(r.Root)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), name)
	}
	r := NewRunDir(filepath.Join(t.TempDir(), "agent_runs"))
	require.NoError(t, os.Mkdir(r.Root, 0o750))
	require.NoError(t, r.Init())
	fi, err := os.Stat(r.Root)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o750), fi.Mode().Perm())
}

func TestSaveAndLoadGrants(t *testing.T) {
	r := NewRunDir(filepath.Join(t.TempDir(), "agent_runs"))
	gs, err := r.LoadGrants()
	require.NoError(t, err, "a missing run directory is an empty set")
	assert.Empty(t, gs)

	require.NoError(t, r.SaveGrant(grantFor("G-b", "beta")))
	require.NoError(t, r.SaveGrant(grantFor("G-a", "alpha")))
	gs, err = r.LoadGrants()
	require.NoError(t, err)
	require.Len(t, gs, 2)
	assert.Equal(t, "G-a", gs[0].Grant.GrantID)
	assert.Equal(t, r.GrantPath("G-a"), gs[0].Path)

	prompt, err := os.ReadFile(r.PromptPath("G-a"))
	require.NoError(t, err)
	assert.Contains(t, string(prompt), "# Context grant G-a")
	assert.NotContains(t, string(prompt), "oracle")

	// No temporary files are left behind.
	entries, err := os.ReadDir(r.GrantsDir())
	require.NoError(t, err)
	for _, e := range entries {
		assert.False(t, strings.HasPrefix(e.Name(), "."), e.Name())
	}

	g, p, err := r.FindGrant("G-b")
	require.NoError(t, err)
	assert.Equal(t, "beta", g.AgentID)
	assert.Equal(t, r.GrantPath("G-b"), p)
	_, _, err = r.FindGrant(r.GrantPath("G-a"))
	require.NoError(t, err)
	_, _, err = r.FindGrant("nonsense")
	assert.Error(t, err)

	got, ok := ActiveGrantFor(gs, "beta")
	assert.True(t, ok)
	assert.Equal(t, "G-b", got.Grant.GrantID)
}

func TestSaveGrantRefusesInvalid(t *testing.T) {
	r := NewRunDir(t.TempDir())
	g := grantFor("G-a", "alpha")
	g.MayRead = nil
	assert.ErrorContains(t, r.SaveGrant(g), "may_read")
	_, err := os.Stat(r.GrantPath("G-a"))
	assert.True(t, os.IsNotExist(err))
}

func writeJSON(t *testing.T, path, body string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte(body), 0o644))
}

func TestLoadGrantsSetChecks(t *testing.T) {
	grant := func(id, agent string, revoked bool) string {
		rev := ""
		if revoked {
			rev = `, "revoked": true`
		}
		return `{"grant_id": "` + id + `", "agent_id": "` + agent + `", "role": "r", "objective": "o", "may_read": ["**"]` + rev + `}`
	}
	t.Run("two active grants for one agent", func(t *testing.T) {
		r := NewRunDir(t.TempDir())
		writeJSON(t, r.GrantPath("G-1"), grant("G-1", "alpha", false))
		writeJSON(t, r.GrantPath("G-2"), grant("G-2", "alpha", false))
		gs, err := r.LoadGrants()
		require.Error(t, err)
		assert.Len(t, gs, 2)
		assert.Contains(t, err.Error(), r.GrantPath("G-1"))
		assert.Contains(t, err.Error(), r.GrantPath("G-2"))
		assert.Contains(t, err.Error(), "two active grants")
	})
	t.Run("a revoked grant does not count", func(t *testing.T) {
		r := NewRunDir(t.TempDir())
		writeJSON(t, r.GrantPath("G-1"), grant("G-1", "alpha", true))
		writeJSON(t, r.GrantPath("G-2"), grant("G-2", "alpha", false))
		_, err := r.LoadGrants()
		assert.NoError(t, err)
	})
	t.Run("duplicate grant id", func(t *testing.T) {
		r := NewRunDir(t.TempDir())
		writeJSON(t, r.GrantPath("G-1"), grant("G-1", "alpha", false))
		writeJSON(t, r.GrantPath("G-1-copy"), grant("G-1", "beta", false))
		_, err := r.LoadGrants()
		require.Error(t, err)
		assert.Contains(t, err.Error(), "duplicate grant id G-1")
		assert.Contains(t, err.Error(), "must be named G-1.json")
	})
	t.Run("an invalid grant names its file, the others still load", func(t *testing.T) {
		r := NewRunDir(t.TempDir())
		writeJSON(t, r.GrantPath("G-1"), grant("G-1", "alpha", false))
		writeJSON(t, r.GrantPath("G-2"), `{"grant_id": "G-2"}`)
		writeJSON(t, filepath.Join(r.GrantsDir(), ".G-3.json.tmp-1"), `garbage`)
		writeJSON(t, r.PromptPath("G-1"), `# not json`)
		gs, err := r.LoadGrants()
		require.Error(t, err)
		assert.Len(t, gs, 1)
		assert.Contains(t, err.Error(), r.GrantPath("G-2"))
		assert.NotContains(t, err.Error(), ".G-3")
	})
}

func TestHiddenIn(t *testing.T) {
	base := t.TempDir()
	folder := filepath.Join(base, "collab")
	require.NoError(t, os.MkdirAll(folder, 0o755))

	h, err := NewRunDir(filepath.Join(folder, "agent_runs")).HiddenIn(folder)
	require.NoError(t, err)
	assert.Equal(t, []string{"agent_runs"}, h, "works before the run directory exists")

	h, err = NewRunDir(filepath.Join(base, "runs")).HiddenIn(folder)
	require.NoError(t, err)
	assert.Empty(t, h)

	// An alias through a symbolic link is still inside.
	require.NoError(t, os.MkdirAll(filepath.Join(folder, "meta", "runs"), 0o755))
	require.NoError(t, os.Symlink(filepath.Join(folder, "meta"), filepath.Join(base, "alias")))
	h, err = NewRunDir(filepath.Join(base, "alias", "runs")).HiddenIn(folder)
	require.NoError(t, err)
	assert.Equal(t, []string{"meta/runs"}, h)

	_, err = NewRunDir(folder).HiddenIn(folder)
	assert.Error(t, err)
}

// TestFindGrantReferences: a grant is found by its id, by its id without
// "G-", or by its file; a missing one is an error naming the id and the
// command that lists the run directory's grants.
func TestFindGrantReferences(t *testing.T) {
	base := t.TempDir()
	r := NewRunDir(filepath.Join(base, "agent_runs"))
	require.NoError(t, r.SaveGrant(grantFor("G-bob", "bob")))
	empty := NewRunDir(filepath.Join(base, "elsewhere"))
	// carol's first grant is revoked and replaced by G-carol-2; dave's
	// grant is named G-erin, and erin holds G-erin-1 (a reference "erin"
	// then names two grants).
	revoked := grantFor("G-carol", "carol")
	revoked.Revoked = true
	require.NoError(t, r.SaveGrant(revoked))
	require.NoError(t, r.SaveGrant(grantFor("G-carol-2", "carol")))
	require.NoError(t, r.SaveGrant(grantFor("G-erin", "dave")))
	require.NoError(t, r.SaveGrant(grantFor("G-erin-1", "erin")))

	tests := []struct {
		name     string
		rd       RunDir
		ref      string
		wantID   string
		msg      []string
		notExist bool
	}{
		{name: "id", rd: r, ref: "G-bob", wantID: "G-bob"},
		{name: "id without prefix", rd: r, ref: "bob", wantID: "G-bob"},
		{name: "an agent: its active grant, not the revoked one", rd: r, ref: "carol", wantID: "G-carol-2"},
		{name: "the revoked grant by its id", rd: r, ref: "G-carol", wantID: "G-carol"},
		{name: "the replacement by its id", rd: r, ref: "G-carol-2", wantID: "G-carol-2"},
		{name: "the replacement by its short id", rd: r, ref: "carol-2", wantID: "G-carol-2"},
		{name: "an agent's name that is another agent's grant id", rd: r, ref: "erin", msg: []string{
			`grant "erin" is ambiguous`, "G-erin-1, G-erin"}},
		{name: "the other agent's grant by its id", rd: r, ref: "G-erin", wantID: "G-erin"},
		{name: "file", rd: r, ref: r.GrantPath("G-bob"), wantID: "G-bob"},
		{name: "unknown id", rd: r, ref: "G-alice", notExist: true, msg: []string{
			"grant G-alice not found in " + r.GrantsDir(), "the grants are G-bob (bob), G-carol (carol, revoked), G-carol-2 (carol)",
			`"acpfs grant list --runs ` + r.Root + `" shows them`}},
		{name: "unknown id without prefix", rd: r, ref: "alice", notExist: true, msg: []string{"grant G-alice not found"}},
		{name: "no run directory", rd: empty, ref: "G-bob", notExist: true, msg: []string{
			empty.GrantsDir() + " does not exist", "acpfs grant list --runs DIR"}},
		{name: "missing file", rd: r, ref: filepath.Join(base, "G-x.json"), notExist: true, msg: []string{"open grant file " + filepath.Join(base, "G-x.json")}},
		{name: "not an id", rd: r, ref: "b@d", msg: []string{"neither a grant id nor a file"}},
		{name: "nothing", rd: r, ref: "", msg: []string{"no grant given"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, _, err := tt.rd.FindGrant(tt.ref)
			if tt.wantID != "" {
				require.NoError(t, err)
				assert.Equal(t, tt.wantID, g.GrantID)
				return
			}
			require.Error(t, err)
			for _, m := range tt.msg {
				assert.Contains(t, err.Error(), m)
			}
			assert.Equal(t, tt.notExist, errors.Is(err, fs.ErrNotExist), "%v", err)
		})
	}
}

func TestNoGrantErrorQuotesTheRunDirectory(t *testing.T) {
	err := &NoGrantError{ID: "G-x", Runs: "my runs"}
	assert.Contains(t, err.Error(), `"acpfs grant list --runs 'my runs'"`)
}

// TestResolve: every name of a grant leads to it, an agent's name to its
// active grant; a name that could mean two grants is refused with both,
// and one that means none lists the grants there are.
func TestResolve(t *testing.T) {
	grant := func(id, agent string, revoked bool) GrantFile {
		g := grantFor(id, agent)
		g.Revoked = revoked
		return GrantFile{Path: "/runs/context_grants/" + id + ".json", Grant: g}
	}
	set := []GrantFile{
		grant("G-alice", "alice", false),
		grant("G-bob", "bob", true), // replaced by G-bob-2
		grant("G-bob-2", "bob", false),
		grant("G-carol", "carol", true), // revoked, not replaced
		grant("G-erin", "dave", false),  // dave's grant is named after erin
		grant("G-erin-1", "erin", false),
		grant("G-frank", "frank", false), // two active grants (grant check refuses the set)
		grant("G-frank-2", "frank", false),
	}
	tests := []struct {
		ref    string
		wantID string
		errAs  any
		msg    []string
	}{
		{ref: "alice", wantID: "G-alice"},
		{ref: "G-alice", wantID: "G-alice"},
		{ref: "bob", wantID: "G-bob-2"},
		{ref: "G-bob", wantID: "G-bob"},
		{ref: "G-bob-2", wantID: "G-bob-2"},
		{ref: "bob-2", wantID: "G-bob-2"},
		{ref: "carol", wantID: "G-carol"},
		{ref: "dave", wantID: "G-erin"},
		{ref: "G-erin", wantID: "G-erin"},
		{ref: "erin-1", wantID: "G-erin-1"},
		{ref: "erin", errAs: new(*AmbiguousGrantError), msg: []string{`grant "erin" is ambiguous`, "name one of G-erin-1, G-erin"}},
		{ref: "frank", errAs: new(*AmbiguousGrantError), msg: []string{"agent frank holds several active grants", "G-frank, G-frank-2"}},
		{ref: "G-frank", wantID: "G-frank"},
		{ref: "zoe", errAs: new(*NoGrantError), msg: []string{"grant G-zoe not found",
			"G-alice (alice), G-bob (bob, revoked), G-bob-2 (bob), G-carol (carol, revoked)"}},
		{ref: "G-bob-3", errAs: new(*NoGrantError), msg: []string{"grant G-bob-3 not found"}},
	}
	for _, tt := range tests {
		t.Run(tt.ref, func(t *testing.T) {
			gf, err := Resolve(set, tt.ref)
			if tt.wantID != "" {
				require.NoError(t, err)
				assert.Equal(t, tt.wantID, gf.Grant.GrantID)
				assert.Equal(t, "/runs/context_grants/"+tt.wantID+".json", gf.Path)
				return
			}
			require.Error(t, err)
			assert.ErrorAs(t, err, tt.errAs)
			for _, m := range tt.msg {
				assert.Contains(t, err.Error(), m)
			}
		})
	}
	_, err := Resolve(nil, "bob")
	assert.EqualError(t, err, "grant G-bob not found: there is no grant")
}

// TestRunDirOfGrant: the run directory of a grant is found by what the
// grant's directory is, through a symlink to context_grants named
// otherwise as surely as by its own path; a grant elsewhere has none.
func TestRunDirOfGrant(t *testing.T) {
	d := t.TempDir()
	runs := filepath.Join(d, "runs")
	require.NoError(t, os.MkdirAll(filepath.Join(runs, GrantsDirName), 0o755))
	require.NoError(t, os.Symlink(filepath.Join(runs, GrantsDirName), filepath.Join(d, "grants-link")))
	require.NoError(t, os.MkdirAll(filepath.Join(d, "loose"), 0o755))
	require.NoError(t, os.Symlink(filepath.Join(d, "loose"), filepath.Join(d, GrantsDirName)))
	for _, tt := range []struct{ name, grant, want string }{
		{"its own path", filepath.Join(runs, GrantsDirName, "G-bob.json"), runs},
		{"a symlink to context_grants", filepath.Join(d, "grants-link", "G-bob.json"), runs},
		{"a directory that is no run directory's", filepath.Join(d, "loose", "G-bob.json"), ""},
		{"a symlink named context_grants to it", filepath.Join(d, GrantsDirName, "G-bob.json"), ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := RunDirOfGrant(tt.grant)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

// TestTighten: a run directory of the caller's that others may read is
// made 0700 once; a private one, a missing one and (as root) one of
// another owner are left alone.
func TestTighten(t *testing.T) {
	d := t.TempDir()
	r := NewRunDir(filepath.Join(d, "runs"))
	_, changed, err := r.Tighten()
	require.NoError(t, err)
	assert.False(t, changed, "missing")
	require.NoError(t, os.Mkdir(r.Root, 0o755))
	require.NoError(t, os.Chmod(r.Root, 0o755))
	old, changed, err := r.Tighten()
	require.NoError(t, err)
	assert.True(t, changed)
	assert.Equal(t, fs.FileMode(0o755), old)
	fi, err := os.Stat(r.Root)
	require.NoError(t, err)
	assert.Equal(t, fs.FileMode(0o700), fi.Mode().Perm())
	_, changed, err = r.Tighten()
	require.NoError(t, err)
	assert.False(t, changed, "already private")
	if os.Geteuid() == 0 {
		require.NoError(t, os.Chmod(r.Root, 0o755))
		require.NoError(t, os.Chown(r.Root, 65533, 65533))
		_, changed, err = r.Tighten()
		require.NoError(t, err)
		assert.False(t, changed, "another owner's")
	}
}

// TestMarksDir: the names whose entries make a directory a run, ledger
// or git directory, and no other.
func TestMarksDir(t *testing.T) {
	for _, tt := range []struct {
		name string
		want bool
	}{
		{GrantsDirName, true}, {LedgerKeyName, true}, {LedgerFileName, true},
		{"HEAD", true}, {"objects", true}, {"refs", true}, {"commondir", true}, {"packed-refs", true},
		{"", false}, {"HEAD.lock", false}, {"protocol.json", false}, {"ledger.key.tmp", false}, {"head", false},
	} {
		assert.Equal(t, tt.want, MarksDir(tt.name), "%q", tt.name)
	}
}
