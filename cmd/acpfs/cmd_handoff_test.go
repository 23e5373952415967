package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/ledger"
)

// handoffTestGrants creates an owner and a reviewer grant in runs.
func handoffTestGrants(t *testing.T, folder, runs string) {
	t.Helper()
	for _, args := range [][]string{
		{"--agent", "claude", "--participant", "server", "--preset", "owner", "--id", "G-owner", "--forbid", "oracle/**"},
		{"--agent", "codex", "--participant", "reader", "--preset", "reviewer", "--id", "G-rev", "--forbid", "oracle/**"},
	} {
		res := runCLI(t, append([]string{"grant", "create", "--runs", runs, "--folder", folder}, args...)...)
		require.NoError(t, res.err)
	}
}

func TestHandoffCreateAndVerify(t *testing.T) {
	folder, runs := grantTestFolder(t)
	handoffTestGrants(t, folder, runs)

	res := runCLI(t, "handoff", "create", "--runs", runs, "--folder", folder, "--from", "G-owner", "--to", "G-rev",
		"--path", "deliverables/design-spec.md", "--id", "H-spec", "--type", "design-spec",
		"--summary", "first draft", "--action", "review it")
	require.NoError(t, res.err)
	assert.Contains(t, res.out, "recorded H-spec")

	rd := grants.NewRunDir(runs)
	h, err := rd.FindHandoff("H-spec")
	require.NoError(t, err)
	sum, err := grants.HashFile(filepath.Join(folder, "deliverables/design-spec.md"))
	require.NoError(t, err)
	assert.Equal(t, sum, h.ArtifactSHA256)
	assert.Equal(t, "codex", h.ConsumerAgentID)

	recs := grantLedgerKinds(t, runs)
	last := recs[len(recs)-1]
	assert.Equal(t, ledger.KindHandoffRecorded, last.Kind)
	assert.Equal(t, sum, last.SHA256)
	assert.Equal(t, "deliverables/design-spec.md", last.Path)

	res = runCLI(t, "handoff", "verify", "--runs", runs, "--folder", folder)
	require.NoError(t, res.err)
	assert.Contains(t, res.out, "ok H-spec")

	// The original changes: drift, exit 2.
	require.NoError(t, os.WriteFile(filepath.Join(folder, "deliverables/design-spec.md"), []byte("# changed\n"), 0o644))
	res = runCLI(t, "handoff", "verify", "--runs", runs, "--folder", folder, "--handoff", "H-spec")
	assert.Equal(t, exitFailed, res.code)
	assert.Contains(t, res.out, "changed since the handoff")

	// Without --folder only the stored copy is checked, and it is intact.
	res = runCLI(t, "handoff", "verify", "--runs", runs)
	require.NoError(t, res.err)
	assert.Contains(t, res.out, "originals not checked")
}

func TestHandoffCreateRefusals(t *testing.T) {
	folder, runs := grantTestFolder(t)
	handoffTestGrants(t, folder, runs)
	tests := []struct {
		name string
		args []string
		msg  string
	}{
		{"forbidden to the producer", []string{"--from", "G-owner", "--to", "G-rev", "--path", "oracle/answers.md"}, "may not read oracle/answers.md"},
		{"absolute path outside the folder", []string{"--from", "G-owner", "--to", "G-rev", "--path", "/etc/passwd"}, "not inside the collaboration folder"},
		{"unknown grant", []string{"--from", "G-nobody", "--to", "G-rev", "--path", "events.jsonl"}, "--from"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := runCLI(t, append([]string{"handoff", "create", "--runs", runs, "--folder", folder}, tt.args...)...)
			require.Error(t, res.err)
			assert.Equal(t, exitFailed, res.code)
			assert.Contains(t, res.err.Error(), tt.msg)
		})
	}
	// An absolute path inside the folder is accepted.
	res := runCLI(t, "handoff", "create", "--runs", runs, "--folder", folder, "--from", "G-owner", "--to", "G-rev",
		"--path", filepath.Join(folder, "events.jsonl"))
	require.NoError(t, res.err)
}
