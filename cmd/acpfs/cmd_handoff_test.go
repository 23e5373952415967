package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/internal/digest"
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
	sum, err := digest.File(filepath.Join(folder, "deliverables/design-spec.md"))
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

// TestHandoffSupersede is the stale-handoff story: a handoff made early
// snapshots the template, the producer edits the file, and a second
// handoff of the same path to the same agent replaces the first. verify
// then checks only the current handoff, and list shows what it replaced.
func TestHandoffSupersede(t *testing.T) {
	folder, runs := grantTestFolder(t)
	handoffTestGrants(t, folder, runs)
	spec := filepath.Join(folder, "deliverables/design-spec.md")
	handoff := func(id string) cliResult {
		return runCLI(t, "handoff", "create", "--runs", runs, "--folder", folder, "--from", "G-owner", "--to", "G-rev",
			"--path", "deliverables/design-spec.md", "--id", id)
	}
	res := handoff("H-early")
	require.NoError(t, res.err)
	assert.NotContains(t, res.out, "supersedes")
	require.NoError(t, os.WriteFile(spec, []byte("# Design spec\n\nStatus: In Review\n\nFilled in.\n"), 0o644))

	// The early handoff now drifts.
	res = runCLI(t, "handoff", "verify", "--runs", runs, "--folder", folder)
	assert.Equal(t, exitFailed, res.code)

	res = handoff("H-final")
	require.NoError(t, res.err)
	assert.Contains(t, res.out, "supersedes: H-early")
	// Another path to the same agent is independent.
	res = runCLI(t, "handoff", "create", "--runs", runs, "--folder", folder, "--from", "G-owner", "--to", "G-rev",
		"--path", "events.jsonl", "--id", "H-events")
	require.NoError(t, res.err)
	assert.NotContains(t, res.out, "supersedes")

	recs := grantLedgerKinds(t, runs)
	var details []string
	for _, r := range recs {
		if r.Kind == ledger.KindHandoffRecorded {
			details = append(details, r.Detail)
		}
	}
	require.Len(t, details, 3)
	assert.Contains(t, details[1], "H-final")
	assert.Contains(t, details[1], "supersedes H-early")

	rd := grants.NewRunDir(runs)
	h, err := rd.FindHandoff("H-final")
	require.NoError(t, err)
	assert.Equal(t, "H-early", h.Supersedes)
	hs, err := rd.HandoffsFor("G-rev", "codex")
	require.NoError(t, err)
	var shown []string
	for _, h := range hs {
		shown = append(shown, h.HandoffID)
	}
	assert.ElementsMatch(t, []string{"H-final", "H-events"}, shown, "the view shows only the current handoffs")

	tests := []struct {
		name    string
		args    []string
		code    int
		has     []string
		hasNot  []string
		checkFn func(t *testing.T, out string)
	}{
		{"verify checks only the current ones", []string{"verify", "--folder", folder}, exitOK,
			[]string{"ok H-final", "ok H-events", "superseded H-early  deliverables/design-spec.md  by H-final (not checked)"}, []string{"drift"}, nil},
		{"verify without folder", []string{"verify"}, exitOK, []string{"ok H-final", "superseded H-early", "originals not checked"}, nil, nil},
		{"verify a superseded handoff by id", []string{"verify", "--folder", folder, "--handoff", "H-early"}, exitOK,
			[]string{"superseded H-early"}, []string{"ok", "drift"}, nil},
		{"verify the current handoff by id", []string{"verify", "--folder", folder, "--handoff", "H-final"}, exitOK, []string{"ok H-final"}, []string{"H-early"}, nil},
		{"list shows the current ones and what they superseded", []string{"list"}, exitOK,
			[]string{"HANDOFF", "SUPERSEDES", "H-final", "H-events"}, []string{"H-early  "}, func(t *testing.T, out string) {
				for _, line := range strings.Split(out, "\n") {
					if strings.HasPrefix(line, "H-final") {
						assert.Regexp(t, `current\s+H-early$`, line)
					}
					if strings.HasPrefix(line, "H-events") {
						assert.Regexp(t, `current\s+-$`, line)
					}
				}
			}},
		{"list --all shows the superseded ones too", []string{"list", "--all"}, exitOK, []string{"H-early", "superseded by H-final", "H-final"}, nil, nil},
		{"list --json", []string{"list", "--json"}, exitOK, nil, nil, func(t *testing.T, out string) {
			var entries []handoffListEntry
			require.NoError(t, json.Unmarshal([]byte(out), &entries))
			require.Len(t, entries, 2)
			for _, e := range entries {
				assert.True(t, e.Current)
				if e.Handoff.HandoffID == "H-final" {
					assert.Equal(t, []string{"H-early"}, e.Superseded)
					assert.Equal(t, "H-early", e.Handoff.Supersedes)
				}
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := runCLI(t, append([]string{"handoff", tt.args[0], "--runs", runs}, tt.args[1:]...)...)
			assert.Equal(t, tt.code, res.code, "%v\n%s", res.err, res.out)
			for _, s := range tt.has {
				assert.Contains(t, res.out, s)
			}
			for _, s := range tt.hasNot {
				assert.NotContains(t, res.out, s)
			}
			if tt.checkFn != nil {
				tt.checkFn(t, res.out)
			}
		})
	}

	// The current handoff drifts: verify fails for it, still not for the
	// superseded one.
	require.NoError(t, os.WriteFile(spec, []byte("# changed again\n"), 0o644))
	res = runCLI(t, "handoff", "verify", "--runs", runs, "--folder", folder)
	assert.Equal(t, exitFailed, res.code)
	assert.Contains(t, res.out, "drift: H-final")
	assert.NotContains(t, res.out, "drift: H-early")
}
