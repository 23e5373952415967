package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// grantRefRuns makes a run directory whose grants have every kind of
// name: bob's G-bob is revoked and replaced by G-bob-2; dave's grant is
// G-erin while erin holds G-erin-1, so "erin" could mean either.
func grantRefRuns(t *testing.T) (folder, runs string) {
	t.Helper()
	folder, runs = grantTestFolder(t)
	create := func(args ...string) {
		t.Helper()
		res := runCLI(t, append([]string{"grant", "create", "--runs", runs, "--folder", folder, "--participant", "reader", "--preset", "reviewer"}, args...)...)
		require.NoError(t, res.err, res.errOut)
	}
	create("--agent", "bob")
	require.NoError(t, runCLI(t, "grant", "revoke", "--runs", runs, "--grant", "G-bob").err)
	create("--agent", "bob", "--id", "bob-2", "--forbid", "oracle/**")
	create("--agent", "dave", "--id", "erin")
	create("--agent", "erin", "--id", "erin-1")
	return folder, runs
}

// TestGrantReferenceEveryCommand: every command taking a grant takes each
// of its names, an agent's name being its active grant (not the revoked
// one), refuses a name that means two grants with both, and lists the
// grants there are for a name that means none.
func TestGrantReferenceEveryCommand(t *testing.T) {
	folder, runs := grantRefRuns(t)
	ledgerPath := filepath.Join(runs, "communication_ledger.jsonl")
	commands := map[string]func(ref string) []string{
		"explain": func(ref string) []string {
			return []string{"explain", "--runs", runs, "--grant", ref, "oracle/answers.md"}
		},
		"render": func(ref string) []string { return []string{"grant", "render", "--runs", runs, "--grant", ref} },
		"ledger show": func(ref string) []string {
			return []string{"ledger", "show", "--ledger", ledgerPath, "--grant", ref, "--kind", "grant_created"}
		},
		"handoff": func(ref string) []string {
			return []string{"handoff", "create", "--runs", runs, "--folder", folder, "--from", ref, "--to", "G-erin-1",
				"--path", "deliverables/design-spec.md", "--type", "design-spec", "--action", "review"}
		},
	}
	tests := []struct {
		ref  string
		want map[string]string // command: what its output or error holds
		code int
	}{
		{ref: "bob", want: map[string]string{"explain": `forbidden_read "oracle/**"`, "render": "G-bob-2", "ledger show": "G-bob-2", "handoff": "from bob to erin"}},
		{ref: "G-bob-2", want: map[string]string{"explain": `forbidden_read "oracle/**"`, "render": "G-bob-2", "ledger show": "G-bob-2", "handoff": "from bob to erin"}},
		{ref: "bob-2", want: map[string]string{"explain": `forbidden_read "oracle/**"`, "render": "G-bob-2", "ledger show": "G-bob-2"}},
		{ref: "G-bob", want: map[string]string{"explain": "revoked", "render": "G-bob", "ledger show": "G-bob "}},
		{ref: filepath.Join(runs, "context_grants", "G-bob-2.json"), want: map[string]string{"render": "G-bob-2", "ledger show": "G-bob-2"}},
		{ref: "erin", code: exitFailed, want: map[string]string{
			"explain": `grant "erin" is ambiguous`, "render": "name one of G-erin-1, G-erin", "ledger show": "name one of G-erin-1, G-erin", "handoff": "G-erin-1, G-erin"}},
		{ref: "zoe", code: exitFailed, want: map[string]string{
			"explain": "grant G-zoe not found", "render": "G-bob (bob, revoked), G-bob-2 (bob), G-erin (dave), G-erin-1 (erin)", "handoff": "grant G-zoe not found"}},
	}
	for _, tt := range tests {
		for name, args := range commands {
			want, ok := tt.want[name]
			if !ok {
				continue
			}
			t.Run(name+"/"+filepath.Base(tt.ref), func(t *testing.T) {
				res := runCLI(t, args(tt.ref)...)
				if tt.code != 0 {
					require.Error(t, res.err)
					assert.Equal(t, tt.code, res.code)
					assert.Contains(t, res.err.Error(), want)
					return
				}
				require.NoError(t, res.err, res.errOut)
				assert.Contains(t, res.out, want)
				if name == "ledger show" && want == "G-bob-2" {
					assert.NotContains(t, res.out, "G-bob ", "the revoked grant's records")
				}
			})
		}
	}
	// A grant id the run directory no longer holds still selects its
	// records: the ledger outlives the grant.
	res := runCLI(t, "ledger", "show", "--ledger", ledgerPath, "--grant", "G-gone")
	require.NoError(t, res.err)
	assert.Contains(t, res.out, "0 record(s)")
}

// TestMountGrantPath: mount and run resolve --grant through the run
// directory as every other command does, and without --runs through
// ./agent_runs, a file being a file.
func TestMountGrantPath(t *testing.T) {
	_, runs := grantRefRuns(t)
	file := filepath.Join(runs, "context_grants", "G-bob-2.json")
	tests := []struct {
		name, runs, ref, chdir string
		want, err              string
	}{
		{name: "agent", runs: runs, ref: "bob", want: file},
		{name: "id", runs: runs, ref: "G-bob-2", want: file},
		{name: "file", runs: runs, ref: file, want: file},
		{name: "file without runs", ref: file, want: file},
		{name: "agent without runs", ref: "bob", chdir: filepath.Dir(runs), want: file},
		{name: "ambiguous", runs: runs, ref: "erin", err: "name one of G-erin-1, G-erin"},
		{name: "unknown", runs: runs, ref: "zoe", err: "the grants are G-bob (bob, revoked), G-bob-2 (bob)"},
		{name: "nothing", runs: runs, err: "--grant is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.chdir != "" {
				t.Chdir(tt.chdir)
			}
			mf := mountFlags{runs: tt.runs, grant: tt.ref}
			p, err := mf.grantPath()
			if tt.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, p)
		})
	}
}
