package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
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
		"escaping path":        {"--grant", "G-rev", "a/../../x"},
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

// TestExplainBadPathsDoNotStopTheOthers: each path that cannot be judged
// is reported on its own, the others are answered, and the exit status
// is 2 when any was bad.
func TestExplainBadPathsDoNotStopTheOthers(t *testing.T) {
	folder, runs := grantTestFolder(t)
	handoffTestGrants(t, folder, runs)
	tests := []struct {
		name    string
		paths   []string
		answers []string // lines on stdout
		errs    []string // lines on stderr
		summary string   // the final error, "" for success
	}{
		{
			name:    "all good, a name beside the folder among them",
			paths:   []string{"review.md", "oracle/answers.md", "../deliverables/x.md"},
			answers: []string{"review.md: visible yes", "oracle/answers.md: visible no", "../deliverables/x.md: visible no"},
		},
		{
			name:    "one bad among good",
			paths:   []string{"review.md", "a/../x", "proposal.md"},
			answers: []string{"review.md: visible yes", "proposal.md: visible yes"},
			errs:    []string{"error: a/../x: escapes the collaboration folder"},
			summary: "1 of 3 path(s) could not be explained",
		},
		{
			name:    "several bad",
			paths:   []string{"/etc/passwd", "review.md", "a/../../b"},
			answers: []string{"review.md: visible yes"},
			errs:    []string{"error: /etc/passwd: absolute paths need --folder", "error: a/../../b: escapes the collaboration folder"},
			summary: "2 of 3 path(s) could not be explained",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := runCLI(t, append([]string{"explain", "--runs", runs, "--grant", "G-rev"}, tt.paths...)...)
			for _, a := range tt.answers {
				assert.Contains(t, res.out, a)
			}
			assert.Equal(t, len(tt.answers), strings.Count(res.out, "\n"), res.out)
			for _, e := range tt.errs {
				assert.Contains(t, res.errOut, e)
			}
			assert.Equal(t, len(tt.errs), strings.Count(res.errOut, "\n"), res.errOut)
			if tt.summary == "" {
				require.NoError(t, res.err)
				return
			}
			require.Error(t, res.err)
			assert.Equal(t, exitFailed, res.code)
			assert.Equal(t, tt.summary, res.err.Error())

			// The JSON form answers every path, in order, the bad ones
			// with their error.
			res = runCLI(t, append([]string{"explain", "--runs", runs, "--grant", "G-rev", "--json"}, tt.paths...)...)
			assert.Equal(t, exitFailed, res.code)
			var got []explainResult
			require.NoError(t, json.Unmarshal([]byte(res.out), &got))
			require.Len(t, got, len(tt.paths))
			bad := 0
			for i, r := range got {
				if r.Error != "" {
					bad++
					assert.Equal(t, tt.paths[i], r.Path)
					assert.False(t, r.Visible || r.Readable || r.Writable)
				} else {
					assert.NotEmpty(t, r.Rule)
				}
			}
			assert.Equal(t, len(tt.errs), bad)
		})
	}
}

// A name beside the folder is written with leading ".." segments, as the
// grant's patterns write it, and judged by them.
func TestExplainNamesBesideTheFolder(t *testing.T) {
	folder, runs := grantTestFolder(t)
	res := runCLI(t, "grant", "create", "--runs", runs, "--folder", folder, "--agent", "claude", "--participant", "server",
		"--preset", "owner", "--id", "G-ext", "--may-read", "../deliverables/**")
	require.NoError(t, res.err, res.errOut)
	res = runCLI(t, "explain", "--runs", runs, "--grant", "G-ext", "../deliverables/spec.md", "../other/x.md", "./../deliverables")
	require.NoError(t, res.err, res.errOut)
	assert.Contains(t, res.out, `../deliverables/spec.md: visible yes, readable yes`)
	assert.Contains(t, res.out, `../other/x.md: visible no`)
	assert.Contains(t, res.out, `../deliverables: visible yes`)
}
