package grants

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
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
		assert.ErrorContains(t, err, "not a regular file")
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
	for i, target := range []*Grant{e.consumer, other, e.consumer} {
		_, err := e.runs.CreateHandoff(HandoffRequest{
			ID: []string{"H-a", "H-b", "H-c"}[i], Folder: e.folder, Source: e.producer, Target: target,
			ArtifactPath: "deliverables/design-spec.md", Now: time.Unix(int64(1000+i), 0),
		})
		require.NoError(t, err)
	}
	ids := func(hs []*HandoffArtifact) []string {
		var out []string
		for _, h := range hs {
			out = append(out, h.HandoffID)
		}
		return out
	}
	hs, err := e.runs.HandoffsFor("G-rev", "")
	require.NoError(t, err)
	assert.Equal(t, []string{"H-a", "H-c"}, ids(hs))
	hs, err = e.runs.HandoffsFor("G-new", "codex")
	require.NoError(t, err)
	assert.Equal(t, []string{"H-a", "H-c"}, ids(hs), "a replaced grant's agent keeps its handoffs")
	hs, err = e.runs.HandoffsFor("G-other", "")
	require.NoError(t, err)
	assert.Equal(t, []string{"H-b"}, ids(hs))

	// All three share one stored copy.
	entries, err := os.ReadDir(e.runs.ArtifactsDir())
	require.NoError(t, err)
	assert.Len(t, entries, 1)
}

func TestParseHandoffRejects(t *testing.T) {
	good := `{"handoff_id":"H-1","producer_agent_id":"a","consumer_agent_id":"b","artifact_path":"x.md",` +
		`"artifact_sha256":"` + sha("x") + `","source_grant_id":"G-a","target_grant_id":"G-b","created_at":"2026-05-21T10:00:00Z"}`
	_, err := ParseHandoff([]byte(good))
	require.NoError(t, err)
	for name, body := range map[string]string{
		"unknown field":  `{"handoff_id":"H-1","extra":1}`,
		"bad sha":        `{"handoff_id":"H-1","producer_agent_id":"a","consumer_agent_id":"b","artifact_path":"x.md","artifact_sha256":"ABC","source_grant_id":"G-a","target_grant_id":"G-b"}`,
		"unclean path":   `{"handoff_id":"H-1","producer_agent_id":"a","consumer_agent_id":"b","artifact_path":"../x.md","artifact_sha256":"` + sha("x") + `","source_grant_id":"G-a","target_grant_id":"G-b"}`,
		"missing fields": `{"handoff_id":"H-1"}`,
	} {
		_, err := ParseHandoff([]byte(body))
		assert.Error(t, err, name)
	}
}
