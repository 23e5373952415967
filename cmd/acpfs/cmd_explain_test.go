package main

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestExplain(t *testing.T) {
	folder, _ := grantTestFolder(t)
	runs := filepath.Join(folder, "agent_runs") // inside the folder: hidden
	handoffTestGrants(t, folder, runs)

	res := runCLI(t, "explain", "--runs", runs, "--grant", "G-rev", "--folder", folder,
		"deliverables/design-spec.md", "oracle/answers.md", "review.md", "agent_runs/context_grants", ".",
		filepath.Join(folder, "events.jsonl"))
	require.NoError(t, res.err)
	for _, want := range []string{
		`deliverables/design-spec.md: visible yes, readable yes, writable no (may_read "deliverables/")`,
		`oracle/answers.md: visible no, readable no, writable no (forbidden_read "oracle/**")`,
		`review.md: visible yes, readable yes, writable yes (may_write "review.md")`,
		`agent_runs/context_grants: visible no, readable no, writable no (run directory)`,
		`.: visible yes, readable no, writable no (folder root)`,
		`events.jsonl: visible yes, readable yes, writable yes (may_write "events.jsonl")`,
	} {
		assert.Contains(t, res.out, want)
	}

	// Positional grant, JSON output.
	res = runCLI(t, "explain", "--runs", runs, "--json", "G-owner", "proposal.md", "notes.txt")
	require.NoError(t, res.err)
	var got []explainResult
	require.NoError(t, json.Unmarshal([]byte(res.out), &got))
	assert.Equal(t, []explainResult{
		{Path: "proposal.md", Visible: true, Readable: true, Writable: true, Rule: `may_write "proposal.md"`},
		{Path: "notes.txt", Rule: "no rule matches"},
	}, got)
}

func TestExplainErrors(t *testing.T) {
	folder, runs := grantTestFolder(t)
	handoffTestGrants(t, folder, runs)
	for name, args := range map[string][]string{
		"escaping path":        {"--grant", "G-rev", "../x"},
		"absolute, no folder":  {"--grant", "G-rev", "/etc/passwd"},
		"no path":              {"G-rev"},
		"unknown grant":        {"--grant", "G-none", "x"},
		"absolute outside dir": {"--grant", "G-rev", "--folder", folder, filepath.Dir(folder)},
	} {
		res := runCLI(t, append([]string{"explain", "--runs", runs}, args...)...)
		assert.Error(t, res.err, name)
		assert.Equal(t, exitFailed, res.code, name)
	}
}
