package grants

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type handoffEnv struct {
	folder   string
	runs     RunDir
	producer *Grant
	consumer *Grant
}

func newHandoffEnv(t *testing.T) handoffEnv {
	t.Helper()
	folder := t.TempDir()
	for name, body := range map[string]string{
		"deliverables/design-spec.md": "# Design\n\nStatus: Draft\n",
		"oracle/answers.md":           "the answers\n",
		"notes/private.md":            "owner's notes\n",
	} {
		writeJSON(t, filepath.Join(folder, name), body)
	}
	return handoffEnv{
		folder: folder,
		runs:   NewRunDir(filepath.Join(folder, "agent_runs")),
		producer: &Grant{GrantID: "G-owner", AgentID: "claude", Role: "owner", Objective: "o",
			MayRead: []string{"deliverables/**", "notes/**"}, ForbiddenRead: []string{"oracle/**"}},
		consumer: &Grant{GrantID: "G-rev", AgentID: "codex", Role: "reviewer", Objective: "o",
			MayRead: []string{"proposal.md"}},
	}
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func TestHandoffCreateVerify(t *testing.T) {
	e := newHandoffEnv(t)
	now := time.Date(2026, 5, 21, 10, 0, 0, 0, time.UTC)
	h, err := e.runs.CreateHandoff(HandoffRequest{
		ID: "H-1", Folder: e.folder, Source: e.producer, Target: e.consumer,
		ArtifactPath: "./deliverables/design-spec.md", Type: "design-spec",
		Summary: "first draft", Action: "review it", Now: now,
	})
	require.NoError(t, err)
	want := sha("# Design\n\nStatus: Draft\n")
	assert.Equal(t, HandoffArtifact{
		HandoffID: "H-1", ProducerAgentID: "claude", ConsumerAgentID: "codex",
		ArtifactPath: "deliverables/design-spec.md", ArtifactSHA256: want, ArtifactType: "design-spec",
		NonAuthoritativeSummary: "first draft", RequiredConsumerAction: "review it",
		SourceGrantID: "G-owner", TargetGrantID: "G-rev", CreatedAt: "2026-05-21T10:00:00Z",
	}, *h)

	// The stored copy is content-addressed and read-only.
	fi, err := os.Stat(e.runs.ArtifactPath(want))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o444), fi.Mode().Perm())
	loaded, err := e.runs.FindHandoff("H-1")
	require.NoError(t, err)
	assert.Equal(t, h, loaded)

	c, err := e.runs.VerifyHandoff(h, e.folder)
	require.NoError(t, err)
	assert.True(t, c.OK(), c.Problems())
	assert.True(t, c.ArtifactChecked)

	// The original changes: drift, but the consumer's copy is intact.
	writeJSON(t, filepath.Join(e.folder, "deliverables/design-spec.md"), "# Design\n\nStatus: In Review\n")
	c, err = e.runs.VerifyHandoff(h, e.folder)
	require.NoError(t, err)
	assert.True(t, c.ArtifactDrift)
	assert.False(t, c.CopyCorrupt)
	assert.Contains(t, c.Problems()[0], "changed since the handoff")

	// The copy is tampered with: corruption.
	p := e.runs.ArtifactPath(want)
	require.NoError(t, os.Chmod(p, 0o644))
	require.NoError(t, os.WriteFile(p, []byte("forged"), 0o644))
	c, err = e.runs.VerifyHandoff(h, "")
	require.NoError(t, err)
	assert.True(t, c.CopyCorrupt)
	assert.False(t, c.ArtifactChecked)

	// The original disappears, the copy too.
	require.NoError(t, os.Remove(filepath.Join(e.folder, "deliverables/design-spec.md")))
	require.NoError(t, os.Remove(p))
	c, err = e.runs.VerifyHandoff(h, e.folder)
	require.NoError(t, err)
	assert.True(t, c.ArtifactMissing)
	assert.True(t, c.CopyMissing)
	assert.Len(t, c.Problems(), 2)
}

func TestHandoffRefusals(t *testing.T) {
	e := newHandoffEnv(t)
	req := func(path string) HandoffRequest {
		return HandoffRequest{Folder: e.folder, Source: e.producer, Target: e.consumer, ArtifactPath: path}
	}
	tests := []struct {
		name string
		req  HandoffRequest
		msg  string
	}{
		{"forbidden to the producer", req("oracle/answers.md"), `may not read oracle/answers.md`},
		{"outside the producer's grant", req("proposal.md"), "may not read"},
		{"escapes the folder", req("../etc/passwd"), "escapes"},
		{"absolute", req("/etc/passwd"), "absolute"},
		{"a directory", req("deliverables"), "is a directory"},
		{"missing file", req("deliverables/nope.md"), "no such file"},
		{"bad id", HandoffRequest{ID: "X-1", Folder: e.folder, Source: e.producer, Target: e.consumer, ArtifactPath: "notes/private.md"}, `"H-"`},
		{"no target", HandoffRequest{Folder: e.folder, Source: e.producer, ArtifactPath: "notes/private.md"}, "required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.runs.CreateHandoff(tt.req)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.msg)
		})
	}

	t.Run("the run directory is never handed over", func(t *testing.T) {
		g := *e.producer
		g.MayRead = []string{"**"}
		writeJSON(t, e.runs.GrantPath("G-x"), "{}")
		_, err := e.runs.CreateHandoff(HandoffRequest{Folder: e.folder, Source: &g, Target: e.consumer,
			ArtifactPath: "agent_runs/context_grants/G-x.json"})
		assert.ErrorContains(t, err, "run directory")
	})
	t.Run("revoked target", func(t *testing.T) {
		g := *e.consumer
		g.Revoked = true
		_, err := e.runs.CreateHandoff(HandoffRequest{Folder: e.folder, Source: e.producer, Target: &g,
			ArtifactPath: "notes/private.md"})
		assert.ErrorContains(t, err, "revoked")
	})
	t.Run("symbolic link", func(t *testing.T) {
		require.NoError(t, os.Symlink(filepath.Join(e.folder, "oracle/answers.md"), filepath.Join(e.folder, "notes/link.md")))
		_, err := e.runs.CreateHandoff(req("notes/link.md"))
		assert.ErrorContains(t, err, "symlink")
	})
	t.Run("a directory symlink on the way", func(t *testing.T) {
		// Lexically notes/via/answers.md; physically the oracle.
		require.NoError(t, os.Symlink("../oracle", filepath.Join(e.folder, "notes/via")))
		_, err := e.runs.CreateHandoff(req("notes/via/answers.md"))
		assert.ErrorContains(t, err, "symlink")
	})
	t.Run("hard link", func(t *testing.T) {
		require.NoError(t, os.Link(filepath.Join(e.folder, "oracle/answers.md"), filepath.Join(e.folder, "notes/hard.md")))
		_, err := e.runs.CreateHandoff(req("notes/hard.md"))
		assert.ErrorContains(t, err, "several names")
	})
	t.Run("duplicate id", func(t *testing.T) {
		r := req("notes/private.md")
		r.ID = "H-dup"
		_, err := e.runs.CreateHandoff(r)
		require.NoError(t, err)
		_, err = e.runs.CreateHandoff(r)
		assert.ErrorContains(t, err, "already exists")
	})
}

func TestHandoffsFor(t *testing.T) {
	e := newHandoffEnv(t)
	other := &Grant{GrantID: "G-other", AgentID: "gemini", Role: "r", Objective: "o", MayRead: []string{"**"}}
	create := func(id string, target *Grant, path string, at int64) {
		_, err := e.runs.CreateHandoff(HandoffRequest{
			ID: id, Folder: e.folder, Source: e.producer, Target: target,
			ArtifactPath: path, Now: time.Unix(at, 0),
		})
		require.NoError(t, err)
	}
	create("H-a", e.consumer, "deliverables/design-spec.md", 1000)
	create("H-b", other, "deliverables/design-spec.md", 1001)
	create("H-c", e.consumer, "deliverables/design-spec.md", 1002) // supersedes H-a
	create("H-d", e.consumer, "notes/private.md", 1003)

	tests := []struct {
		name         string
		grant, agent string
		want         []string
	}{
		{"by grant: the current handoff of each path", "G-rev", "", []string{"H-c", "H-d"}},
		{"by agent", "", "codex", []string{"H-c", "H-d"}},
		{"a replaced grant's agent keeps its handoffs", "G-new", "codex", []string{"H-c", "H-d"}},
		{"another consumer of the same path is not superseded", "G-other", "", []string{"H-b"}},
		{"nobody", "G-none", "nobody", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hs, err := e.runs.HandoffsFor(tt.grant, tt.agent)
			require.NoError(t, err)
			assert.Equal(t, tt.want, handoffIDs(hs))
		})
	}

	// One stored copy per distinct content.
	entries, err := os.ReadDir(e.runs.ArtifactsDir())
	require.NoError(t, err)
	assert.Len(t, entries, 2)
}

func handoffIDs(hs []*HandoffArtifact) []string {
	var out []string
	for _, h := range hs {
		out = append(out, h.HandoffID)
	}
	return out
}

// TestHandoffSupersedes hands the same path to the same agent again and
// again: each new handoff names the one it replaces, and only the newest
// is current, whatever the creation times and ids say.
func TestHandoffSupersedes(t *testing.T) {
	same := time.Date(2026, 5, 21, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name       string
		ids        []string
		times      []time.Time
		supersedes []string // expected Supersedes of each, in creation order
	}{
		{"later and later", []string{"H-1", "H-2", "H-3"}, []time.Time{same, same.Add(time.Second), same.Add(2 * time.Second)}, []string{"", "H-1", "H-2"}},
		{"same second, ids sorting backwards", []string{"H-z", "H-m", "H-a"}, []time.Time{same, same, same}, []string{"", "H-z", "H-m"}},
		{"clock going back", []string{"H-x", "H-y"}, []time.Time{same, same.Add(-time.Hour)}, []string{"", "H-x"}},
		{"generated ids", []string{"", "", ""}, []time.Time{same, same, same}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newHandoffEnv(t)
			var made []*HandoffArtifact
			for i, id := range tt.ids {
				writeJSON(t, filepath.Join(e.folder, "deliverables/design-spec.md"), fmt.Sprintf("# Design %d\n", i))
				h, err := e.runs.CreateHandoff(HandoffRequest{ID: id, Folder: e.folder, Source: e.producer, Target: e.consumer,
					ArtifactPath: "deliverables/design-spec.md", Now: tt.times[i]})
				require.NoError(t, err)
				if i > 0 {
					assert.Equal(t, made[i-1].HandoffID, h.Supersedes)
				} else {
					assert.Empty(t, h.Supersedes)
				}
				if tt.supersedes != nil {
					assert.Equal(t, tt.supersedes[i], h.Supersedes)
				}
				made = append(made, h)
			}
			newest := made[len(made)-1]
			hs, err := e.runs.HandoffsFor("G-rev", "codex")
			require.NoError(t, err)
			assert.Equal(t, []string{newest.HandoffID}, handoffIDs(hs))
			assert.Equal(t, sha(fmt.Sprintf("# Design %d\n", len(made)-1)), hs[0].ArtifactSHA256, "the view shows the newest copy")

			states, err := e.runs.LoadHandoffStates()
			require.NoError(t, err)
			require.Len(t, states, len(made))
			for _, st := range states {
				if st.Handoff.HandoffID == newest.HandoffID {
					assert.True(t, st.Current())
					var want []string
					for i := len(made) - 2; i >= 0; i-- {
						want = append(want, made[i].HandoffID)
					}
					assert.Equal(t, want, st.Replaced, "newest first")
					continue
				}
				assert.False(t, st.Current())
				for i := range made[:len(made)-1] {
					if made[i].HandoffID == st.Handoff.HandoffID {
						assert.Equal(t, made[i+1].HandoffID, st.SupersededBy)
					}
				}
			}
			// The record on disk names what it superseded.
			loaded, err := e.runs.FindHandoff(newest.HandoffID)
			require.NoError(t, err)
			assert.Equal(t, newest.Supersedes, loaded.Supersedes)
		})
	}
}

func TestResolveHandoffs(t *testing.T) {
	mk := func(id, agent, path, at, supersedes string) *HandoffArtifact {
		return &HandoffArtifact{HandoffID: id, ConsumerAgentID: agent, ArtifactPath: path, CreatedAt: at, Supersedes: supersedes}
	}
	tests := []struct {
		name     string
		hs       []*HandoffArtifact
		current  []string
		replaced map[string][]string // of current handoffs
		by       map[string]string   // SupersededBy of the others
	}{
		{"one handoff", []*HandoffArtifact{mk("H-a", "codex", "x.md", "1", "")}, []string{"H-a"}, map[string][]string{"H-a": nil}, nil},
		{"chain", []*HandoffArtifact{mk("H-a", "codex", "x.md", "1", ""), mk("H-b", "codex", "x.md", "2", "H-a"), mk("H-c", "codex", "x.md", "3", "H-b")},
			[]string{"H-c"}, map[string][]string{"H-c": {"H-b", "H-a"}}, map[string]string{"H-a": "H-b", "H-b": "H-c"}},
		{"chain against the sort order", []*HandoffArtifact{mk("H-b", "codex", "x.md", "1", "H-c"), mk("H-c", "codex", "x.md", "1", "")},
			[]string{"H-b"}, map[string][]string{"H-b": {"H-c"}}, map[string]string{"H-c": "H-b"}},
		{"legacy records without links: the latest is current", []*HandoffArtifact{mk("H-a", "codex", "x.md", "1", ""), mk("H-b", "codex", "x.md", "2", "")},
			[]string{"H-b"}, map[string][]string{"H-b": {"H-a"}}, map[string]string{"H-a": "H-b"}},
		{"other agent, other path: independent", []*HandoffArtifact{mk("H-a", "codex", "x.md", "1", ""), mk("H-b", "gemini", "x.md", "2", "H-a"), mk("H-c", "codex", "y.md", "3", "H-a")},
			[]string{"H-a", "H-b", "H-c"}, map[string][]string{"H-a": nil, "H-b": nil, "H-c": nil}, nil},
		{"link to a missing handoff", []*HandoffArtifact{mk("H-b", "codex", "x.md", "2", "H-gone")}, []string{"H-b"}, map[string][]string{"H-b": nil}, nil},
		{"two handoffs superseding the same one", []*HandoffArtifact{mk("H-a", "codex", "x.md", "1", ""), mk("H-b", "codex", "x.md", "2", "H-a"), mk("H-c", "codex", "x.md", "3", "H-a")},
			[]string{"H-c"}, map[string][]string{"H-c": {"H-a", "H-b"}}, map[string]string{"H-a": "H-c", "H-b": "H-c"}},
		{"cycle edited by hand", []*HandoffArtifact{mk("H-a", "codex", "x.md", "1", "H-b"), mk("H-b", "codex", "x.md", "2", "H-a")},
			[]string{"H-b"}, map[string][]string{"H-b": {"H-a"}}, map[string]string{"H-a": "H-b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			states := ResolveHandoffs(tt.hs)
			require.Len(t, states, len(tt.hs))
			var current []string
			for i, st := range states {
				assert.Same(t, tt.hs[i], st.Handoff, "in input order")
				id := st.Handoff.HandoffID
				if st.Current() {
					current = append(current, id)
					assert.Equal(t, tt.replaced[id], st.Replaced, id)
					continue
				}
				assert.Equal(t, tt.by[id], st.SupersededBy, id)
				assert.Empty(t, st.Replaced)
			}
			assert.Equal(t, tt.current, current)
			assert.Equal(t, tt.current, handoffIDs(CurrentHandoffs(tt.hs)))
		})
	}
}

// TestHandoffConcurrentSupersede creates handoffs of one path to one
// agent from several goroutines at once: the lock makes them one chain,
// so exactly one is current and every other is superseded once.
func TestHandoffConcurrentSupersede(t *testing.T) {
	e := newHandoffEnv(t)
	const n = 12
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := e.runs.CreateHandoff(HandoffRequest{ID: fmt.Sprintf("H-%02d", i), Folder: e.folder, Source: e.producer,
				Target: e.consumer, ArtifactPath: "deliverables/design-spec.md"})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	all, err := e.runs.LoadHandoffs()
	require.NoError(t, err)
	require.Len(t, all, n)
	first, named := 0, map[string]int{}
	for _, h := range all {
		if h.Supersedes == "" {
			first++
		}
		named[h.Supersedes]++
	}
	assert.Equal(t, 1, first, "one handoff started the chain")
	for id, c := range named {
		assert.Equal(t, 1, c, "%q superseded once", id)
	}
	assert.Len(t, CurrentHandoffs(all), 1)
}

func TestParseHandoffRejects(t *testing.T) {
	good := `{"handoff_id":"H-1","producer_agent_id":"a","consumer_agent_id":"b","artifact_path":"x.md",` +
		`"artifact_sha256":"` + sha("x") + `","source_grant_id":"G-a","target_grant_id":"G-b","created_at":"2026-05-21T10:00:00Z"}`
	_, err := ParseHandoff([]byte(good))
	require.NoError(t, err)
	h, err := ParseHandoff([]byte(strings.Replace(good, `}`, `,"supersedes":"H-0"}`, 1)))
	require.NoError(t, err)
	assert.Equal(t, "H-0", h.Supersedes)
	for name, body := range map[string]string{
		"unknown field":     `{"handoff_id":"H-1","extra":1}`,
		"bad sha":           `{"handoff_id":"H-1","producer_agent_id":"a","consumer_agent_id":"b","artifact_path":"x.md","artifact_sha256":"ABC","source_grant_id":"G-a","target_grant_id":"G-b"}`,
		"unclean path":      `{"handoff_id":"H-1","producer_agent_id":"a","consumer_agent_id":"b","artifact_path":"../x.md","artifact_sha256":"` + sha("x") + `","source_grant_id":"G-a","target_grant_id":"G-b"}`,
		"missing fields":    `{"handoff_id":"H-1"}`,
		"bad supersedes":    `{"handoff_id":"H-1","producer_agent_id":"a","consumer_agent_id":"b","artifact_path":"x.md","artifact_sha256":"` + sha("x") + `","source_grant_id":"G-a","target_grant_id":"G-b","supersedes":"G-1"}`,
		"supersedes itself": `{"handoff_id":"H-1","producer_agent_id":"a","consumer_agent_id":"b","artifact_path":"x.md","artifact_sha256":"` + sha("x") + `","source_grant_id":"G-a","target_grant_id":"G-b","supersedes":"H-1"}`,
	} {
		_, err := ParseHandoff([]byte(body))
		assert.Error(t, err, name)
	}
}
