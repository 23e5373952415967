package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/ledger"
)

// grantTestFolder makes a collaboration folder with two participants, a
// deliverable and an oracle, and returns it with a run directory path
// beside it.
func grantTestFolder(t *testing.T) (folder, runs string) {
	t.Helper()
	base := t.TempDir()
	folder = filepath.Join(base, "collab")
	files := map[string]string{
		"protocol.json": `{"protocol":"acp","schemaVersion":2,"objective":"Design the cache layer",` +
			`"participants":[{"id":"server"},{"id":"reader"}],"deliverables":{"mode":"internal","dir":"deliverables"}}`,
		"deliverables/design-spec.md": "# Design spec\n\nStatus: Draft\n",
		"oracle/answers.md":           "42\n",
		"events.jsonl":                "",
	}
	for name, body := range files {
		p := filepath.Join(folder, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
	}
	return folder, filepath.Join(base, "agent_runs")
}

// grantLedgerKinds reads the kinds recorded in a run directory's ledger.
// grantLedgerKinds reads the run directory's ledger, without checkpoints.
func grantLedgerKinds(t *testing.T, runs string) []ledger.Record {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(runs, grants.LedgerFileName))
	require.NoError(t, err)
	var recs []ledger.Record
	rd := ledger.NewReader(bytes.NewReader(data))
	for {
		r, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return recs
		}
		require.NoError(t, err)
		if r.Kind == ledger.KindSignedCheckpoint {
			continue // the writer's own signatures
		}
		recs = append(recs, r)
	}
}

func TestGrantCreateWithPreset(t *testing.T) {
	folder, runs := grantTestFolder(t)
	res := runCLI(t, "grant", "create", "--runs", runs, "--folder", folder,
		"--agent", "codex", "--participant", "reader", "--preset", "reviewer", "--id", "G-rev",
		"--forbid", "oracle/**", "--input", "spec=deliverables/design-spec.md", "--guidance", "Be precise.",
		"--stop", "completed", "--output-contract", "a review", "--decision-authority", "none")
	require.NoError(t, res.err)
	assert.Contains(t, res.out, "created G-rev for agent codex (participant reader)")

	rd := grants.NewRunDir(runs)
	g, err := grants.Load(rd.GrantPath("G-rev"))
	require.NoError(t, err)
	assert.Equal(t, "reviewer", g.Role)
	assert.Equal(t, "Design the cache layer", g.Objective, "objective defaults to the protocol's")
	assert.Equal(t, "reader", g.ParticipantID())
	assert.Contains(t, g.MayRead, "deliverables/")
	assert.Equal(t, []string{"events.jsonl", "protocol.json", "review.md"}, g.MayWrite)
	assert.Equal(t, []string{"oracle/**"}, g.ForbiddenRead)
	assert.Equal(t, grants.NamedInput{Path: "deliverables/design-spec.md", Required: true}, g.NamedInputs["spec"])
	assert.NotEmpty(t, g.CreatedAt)

	prompt, err := os.ReadFile(rd.PromptPath("G-rev"))
	require.NoError(t, err)
	assert.Contains(t, string(prompt), "Be precise.")
	assert.NotContains(t, string(prompt), "oracle")

	recs := grantLedgerKinds(t, runs)
	require.Len(t, recs, 1)
	assert.Equal(t, ledger.KindGrantCreated, recs[0].Kind)
	assert.Equal(t, "codex", recs[0].Agent)
	assert.Equal(t, "G-rev", recs[0].Grant)
}

func TestGrantCreateRefusals(t *testing.T) {
	folder, runs := grantTestFolder(t)
	ok := runCLI(t, "grant", "create", "--runs", runs, "--folder", folder, "--agent", "claude",
		"--participant", "server", "--preset", "owner", "--id", "G-owner")
	require.NoError(t, ok.err)

	tests := []struct {
		name string
		args []string
		msg  string
	}{
		{"participant not in the protocol", []string{"--agent", "x", "--participant", "nobody", "--preset", "reviewer"}, `participant "nobody" is not listed`},
		{"agent id as participant", []string{"--agent", "codex", "--preset", "reviewer"}, `participant "codex" is not listed`},
		{"second active grant", []string{"--agent", "claude", "--participant", "server", "--preset", "owner"}, "already has an active grant G-owner"},
		{"duplicate id", []string{"--agent", "other", "--participant", "reader", "--preset", "reviewer", "--id", "G-owner"}, "G-owner already exists"},
		{"no role", []string{"--agent", "y", "--participant", "reader", "--may-read", "**"}, "--role is required"},
		{"no may_read", []string{"--agent", "y", "--participant", "reader", "--role", "r"}, "may_read"},
		{"named input forbidden", []string{"--agent", "y", "--participant", "reader", "--preset", "reviewer", "--may-read", "oracle/**", "--forbid", "oracle/", "--input", "a=oracle/answers.md"}, "named_inputs.a"},
		{"bad input flag", []string{"--agent", "y", "--participant", "reader", "--preset", "reviewer", "--input", "nopath"}, "slot=path"},
		{"unknown preset", []string{"--agent", "y", "--participant", "reader", "--preset", "admin"}, "unknown preset"},
		{"bad glob", []string{"--agent", "y", "--participant", "reader", "--preset", "reviewer", "--may-read", "notes/../../up"}, "escapes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"grant", "create", "--runs", runs, "--folder", folder}, tt.args...)
			res := runCLI(t, args...)
			require.Error(t, res.err)
			assert.Equal(t, exitFailed, res.code)
			assert.Contains(t, res.err.Error(), tt.msg)
		})
	}
	// Nothing but the first grant was written or recorded.
	gs, err := grants.NewRunDir(runs).LoadGrants()
	require.NoError(t, err)
	assert.Len(t, gs, 1)
	assert.Len(t, grantLedgerKinds(t, runs), 1)
}

func TestGrantCreateExternalDeliverables(t *testing.T) {
	folder, runs := grantTestFolder(t)
	require.NoError(t, os.WriteFile(filepath.Join(folder, "protocol.json"), []byte(
		`{"objective":"o","participants":["server"],"deliverables":{"mode":"external","dir":"docs"}}`), 0o644))
	res := runCLI(t, "grant", "create", "--runs", runs, "--folder", folder, "--agent", "server", "--preset", "owner")
	require.NoError(t, res.err)
	assert.Contains(t, res.errOut, "external")
	gs, err := grants.NewRunDir(runs).LoadGrants()
	require.NoError(t, err)
	require.Len(t, gs, 1)
	assert.NotContains(t, gs[0].Grant.MayRead, "docs/")
	assert.Equal(t, "G-server", gs[0].Grant.GrantID, "the default id is G-<agent>")
}

// TestGrantCreateIDs: the id is G-<agent> by default, --id takes it with
// or without "G-", and an id in use is refused with a hint to use --id.
func TestGrantCreateIDs(t *testing.T) {
	tests := []struct {
		name   string
		before [][]string // earlier grant create flags
		args   []string
		wantID string
		msg    []string // when refused
	}{
		{name: "default", args: []string{"--agent", "server", "--preset", "owner"}, wantID: "G-server"},
		{name: "participant differs", args: []string{"--agent", "claude", "--participant", "server", "--preset", "owner"}, wantID: "G-claude"},
		{name: "--id without prefix", args: []string{"--agent", "server", "--preset", "owner", "--id", "bob"}, wantID: "G-bob"},
		{name: "--id with prefix", args: []string{"--agent", "server", "--preset", "owner", "--id", "G-bob"}, wantID: "G-bob"},
		{
			name:   "default id taken by a revoked grant",
			before: [][]string{{"--agent", "server", "--preset", "owner"}, {"revoke", "G-server"}},
			args:   []string{"--agent", "server", "--preset", "owner"},
			msg:    []string{"grant G-server already exists", "revoked, agent server", "--id", "e.g. --id G-server-2"},
		},
		{
			name:   "id taken by another agent",
			before: [][]string{{"--agent", "server", "--preset", "owner", "--id", "bob"}},
			args:   []string{"--agent", "reader", "--preset", "reviewer", "--id", "bob"},
			msg:    []string{"grant G-bob already exists", "active, agent server", "e.g. --id G-bob-2"},
		},
		{
			name:   "same agent again",
			before: [][]string{{"--agent", "server", "--preset", "owner"}},
			args:   []string{"--agent", "server", "--preset", "owner"},
			msg:    []string{"grant G-server already exists", "revoke it first", "--id"},
		},
		{
			name:   "suggestion skips taken ids",
			before: [][]string{{"--agent", "server", "--preset", "owner"}, {"--agent", "reader", "--preset", "reviewer", "--id", "G-server-2"}},
			args:   []string{"--agent", "x", "--participant", "reader", "--preset", "reviewer", "--id", "server"},
			msg:    []string{"e.g. --id G-server-3"},
		},
		{name: "unusable agent id", args: []string{"--agent", "é", "--participant", "server", "--preset", "owner"}, msg: []string{"name one with --id"}},
		{name: "bad --id", args: []string{"--agent", "server", "--preset", "owner", "--id", "a/b"}, msg: []string{"grant_id"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			folder, runs := grantTestFolder(t)
			for _, b := range tt.before {
				var res cliResult
				if b[0] == "revoke" {
					res = runCLI(t, "grant", "revoke", "--runs", runs, "--grant", b[1])
				} else {
					res = runCLI(t, append([]string{"grant", "create", "--runs", runs, "--folder", folder}, b...)...)
				}
				require.NoError(t, res.err)
			}
			res := runCLI(t, append([]string{"grant", "create", "--runs", runs, "--folder", folder}, tt.args...)...)
			if tt.wantID == "" {
				require.Error(t, res.err)
				assert.Equal(t, exitFailed, res.code)
				for _, m := range tt.msg {
					assert.Contains(t, res.err.Error(), m)
				}
				return
			}
			require.NoError(t, res.err)
			assert.Contains(t, res.out, "created "+tt.wantID+" ")
			_, err := os.Stat(filepath.Join(runs, "context_grants", tt.wantID+".json"))
			assert.NoError(t, err)
			// Every command finds it by the id, with or without "G-".
			short := strings.TrimPrefix(tt.wantID, "G-")
			for _, ref := range []string{tt.wantID, short} {
				r := runCLI(t, "grant", "render", "--runs", runs, "--grant", ref)
				require.NoError(t, r.err, ref)
				assert.Contains(t, r.out, "# Context grant "+tt.wantID)
			}
		})
	}
}

// TestUnknownGrantNamesTheListCommand: every command that takes a grant
// id says, for one that does not exist, which id and how to list them.
func TestUnknownGrantNamesTheListCommand(t *testing.T) {
	folder, runs := grantTestFolder(t)
	require.NoError(t, runCLI(t, "grant", "create", "--runs", runs, "--folder", folder, "--agent", "server", "--preset", "owner").err)
	want := `grant G-bob not found in ` + filepath.Join(runs, "context_grants") + `: the grants are G-server (server) ("acpfs grant list --runs ` + runs + `" shows them)`
	for name, args := range map[string][]string{
		"render":  {"grant", "render", "--runs", runs, "--grant", "G-bob"},
		"revoke":  {"grant", "revoke", "--runs", runs, "--grant", "bob"},
		"explain": {"explain", "--runs", runs, "--grant", "G-bob", "proposal.md"},
		"handoff": {"handoff", "create", "--runs", runs, "--folder", folder, "--from", "G-server", "--to", "G-bob",
			"--path", "deliverables/design-spec.md", "--type", "design-spec", "--action", "review"},
	} {
		t.Run(name, func(t *testing.T) {
			res := runCLI(t, args...)
			require.Error(t, res.err)
			assert.Equal(t, exitFailed, res.code)
			assert.Contains(t, res.err.Error(), want)
		})
	}
}

func TestGrantCheckListRenderRevoke(t *testing.T) {
	folder, runs := grantTestFolder(t)
	for _, args := range [][]string{
		{"--agent", "claude", "--participant", "server", "--preset", "owner", "--id", "G-owner"},
		{"--agent", "codex", "--participant", "reader", "--preset", "reviewer", "--id", "G-rev", "--forbid", "oracle/**",
			"--input", "spec=deliverables/design-spec.md"},
	} {
		res := runCLI(t, append([]string{"grant", "create", "--runs", runs, "--folder", folder}, args...)...)
		require.NoError(t, res.err)
	}

	res := runCLI(t, "grant", "check", "--runs", runs, "--folder", folder)
	require.NoError(t, res.err, res.out)
	assert.Contains(t, res.out, "ok G-owner")
	assert.Contains(t, res.out, "ok G-rev")

	// A missing named input is a warning (exit 1).
	require.NoError(t, os.Remove(filepath.Join(folder, "deliverables/design-spec.md")))
	res = runCLI(t, "grant", "check", "--runs", runs, "--folder", folder)
	assert.Equal(t, exitWarnings, res.code, res.out)
	assert.Contains(t, res.out, "warning:")

	res = runCLI(t, "grant", "list", "--runs", runs)
	require.NoError(t, res.err)
	assert.Contains(t, res.out, "G-owner")
	assert.Contains(t, res.out, "G-rev")
	res = runCLI(t, "grant", "list", "--runs", runs, "--json")
	require.NoError(t, res.err)
	var entries []grantListEntry
	require.NoError(t, json.Unmarshal([]byte(res.out), &entries))
	require.Len(t, entries, 2)
	assert.Equal(t, "G-owner", entries[0].Grant.GrantID)

	res = runCLI(t, "grant", "render", "--runs", runs, "--grant", "G-rev")
	require.NoError(t, res.err)
	assert.Contains(t, res.out, "# Context grant G-rev")
	assert.NotContains(t, res.out, "oracle")
	byPath := runCLI(t, "grant", "render", "--runs", runs, filepath.Join(runs, "context_grants", "G-rev.json"))
	require.NoError(t, byPath.err)
	assert.Equal(t, res.out, byPath.out)

	res = runCLI(t, "grant", "revoke", "--runs", runs, "--grant", "G-rev", "--reason", "review done")
	require.NoError(t, res.err)
	assert.Contains(t, res.out, "revoked G-rev")
	g, err := grants.Load(filepath.Join(runs, "context_grants", "G-rev.json"))
	require.NoError(t, err)
	assert.True(t, g.Revoked)
	assert.NotEmpty(t, g.RevokedAt)
	res = runCLI(t, "grant", "revoke", "--runs", runs, "--grant", "G-rev")
	require.NoError(t, res.err)
	assert.Contains(t, res.out, "already revoked")

	recs := grantLedgerKinds(t, runs)
	require.Len(t, recs, 3)
	assert.Equal(t, ledger.KindGrantRevoked, recs[2].Kind)
	assert.Equal(t, "revoked: review done", recs[2].Detail)

	// After revocation a new grant for the same agent is allowed.
	res = runCLI(t, "grant", "create", "--runs", runs, "--folder", folder, "--agent", "codex",
		"--participant", "reader", "--preset", "reviewer", "--id", "G-rev2")
	require.NoError(t, res.err)
}

func TestGrantCheckFindsSetProblems(t *testing.T) {
	folder, runs := grantTestFolder(t)
	dir := filepath.Join(runs, "context_grants")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	body := func(id, participant string) string {
		return `{"grant_id":"` + id + `","agent_id":"a","participant":"` + participant + `","role":"r","objective":"o","may_read":["**"]}`
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "G-1.json"), []byte(body("G-1", "server")), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "G-2.json"), []byte(body("G-2", "ghost")), 0o644))
	res := runCLI(t, "grant", "check", "--runs", runs, "--folder", folder)
	assert.Equal(t, exitFailed, res.code)
	assert.Contains(t, res.out, "two active grants")
	assert.Contains(t, res.out, `participant "ghost" is not listed`)

	res = runCLI(t, "grant", "list", "--runs", runs)
	assert.Equal(t, exitFailed, res.code, "list shows the grants but fails on set problems")
	assert.Contains(t, res.out, "G-2")
}

func TestGrantCheckEmpty(t *testing.T) {
	_, runs := grantTestFolder(t)
	res := runCLI(t, "grant", "check", "--runs", runs)
	require.NoError(t, res.err)
	assert.Contains(t, res.out, "no grants")
}
