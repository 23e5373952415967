package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLedgerUnknownVersion: verify, show and the audit refuse a ledger in
// a format version this acpfs does not know, with one line naming the
// version and what to do, and exit 2.
func TestLedgerUnknownVersion(t *testing.T) {
	runs := ledgerTestRun(t, false)
	path := filepath.Join(runs, "communication_ledger.jsonl")
	future, err := os.ReadFile(filepath.Join("..", "..", "testdata", "ledger", "future-v4.jsonl"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, future, 0o600))
	tests := []struct {
		name string
		args []string
	}{
		{"verify", []string{"ledger", "verify", "--ledger", path}},
		{"show", []string{"ledger", "show", "--ledger", path}},
		{"ledger audit", []string{"ledger", "audit", "--ledger", path, "--grants", filepath.Join(runs, "context_grants")}},
		{"audit", []string{"audit", "--runs", runs}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runCLI(t, tt.args...)
			assert.Equal(t, exitFailed, r.code)
			require.Error(t, r.err)
			msg := r.err.Error()
			assert.NotContains(t, msg, "\n", "one line")
			assert.Contains(t, msg, "format version 4")
			assert.Contains(t, msg, "read it with a newer acpfs")
			assert.NotContains(t, r.out, "docs/a.md", "nothing of it is shown as if it were read")
			assert.False(t, strings.Contains(r.out, "isolated"), "no verdict on a ledger it cannot read")
		})
	}
}

// TestLedgerOldVersionVerifies: a version 1 ledger (no version field)
// still verifies and shows.
func TestLedgerOldVersionVerifies(t *testing.T) {
	golden := filepath.Join("..", "..", "testdata", "ledger", "golden.jsonl")
	dir := t.TempDir()
	path := filepath.Join(dir, "l.jsonl")
	b, err := os.ReadFile(golden)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, b, 0o600))
	r := runCLI(t, "ledger", "verify", "--ledger", path)
	assert.Equal(t, exitUnchecked, r.code, "%v", r.err)
	assert.Contains(t, r.out, "valid chain, 7 record(s)")
	r = runCLI(t, "ledger", "show", "--ledger", path)
	require.NoError(t, r.err)
	assert.Contains(t, r.out, "7 record(s)")
}
