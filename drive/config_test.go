package drive

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const validFile = `objective: Design a rate limiter
completion: [Limits per API key are specified]
deliverable: {type: design-spec}
participants:
  - id: alice
    grant: {preset: owner, may_read: ["oracle/**"]}
    command: [sh, owner.sh]
  - id: bob
    grant: {preset: reviewer, forbid: ["oracle/**"]}
    command: sh reviewer.sh
    env: [OPENAI_API_KEY]
    network: {allow: [api.openai.com:443]}
    limits: {memory: 1G, pids: 64, cpu: 1.5}
    timeout: 90s
    retries: 3
    on_exhausted: blocked
`

func parseText(t *testing.T, text string) (*Config, error) {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tools"), nil, 0o644))
	return Parse(filepath.Join(dir, "c.yaml"), []byte(text))
}

func TestParseValid(t *testing.T) {
	cfg, err := parseText(t, validFile)
	require.NoError(t, err)
	dir := filepath.Dir(cfg.Path)
	assert.Equal(t, filepath.Join(dir, DefaultFolder), cfg.Folder)
	assert.Equal(t, filepath.Join(dir, DefaultRuns), cfg.Runs)
	assert.Equal(t, filepath.Join(dir, DefaultRoot), cfg.Root)
	assert.Equal(t, DefaultDeadline, cfg.Deadline)
	assert.Equal(t, []string{"alice", "bob"}, cfg.IDs())
	a, b := cfg.Participant("alice"), cfg.Participant("bob")
	assert.Equal(t, []string{"sh", "owner.sh"}, a.Command)
	assert.Equal(t, Network{Mode: NetNone}, a.Network, "no network unless the file says so")
	assert.Equal(t, DefaultTimeout, a.Timeout)
	assert.Equal(t, DefaultRetries, a.Retries)
	assert.Equal(t, ExhaustedStop, a.OnExhausted)
	assert.Equal(t, []string{"/bin/sh", "-c", "sh reviewer.sh"}, b.Command, "a shell string runs under sh -c")
	assert.Equal(t, Network{Mode: NetAllow, Allow: []string{"api.openai.com:443"}}, b.Network)
	assert.Equal(t, Limits{Memory: "1G", Pids: 64, CPU: 1.5}, b.Limits)
	assert.Equal(t, 90*time.Second, b.Timeout)
	assert.Equal(t, 3, b.Retries)
	assert.Equal(t, ExhaustedBlocked, b.OnExhausted)
	assert.Equal(t, []string{"oracle/**"}, b.Grant.Forbid)
}

// TestParseErrors: every problem names its line and column, and all of
// them are reported at once.
func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		text string
		want []string // "LINE:COL: fragment"
	}{
		{"unknown top-level field", strings.Replace(validFile, "objective:", "objectiv:", 1),
			[]string{`1:1: collaboration file: unknown field "objectiv"`, "1:1: collaboration file: objective is required"}},
		{"unknown participant field", strings.Replace(validFile, "    timeout: 90s", "    timout: 90s", 1),
			[]string{`14:5: participant: unknown field "timout"`}},
		{"bad duration", strings.Replace(validFile, "timeout: 90s", "timeout: soon", 1),
			[]string{`14:14: participant.timeout: "soon" is not a positive duration`}},
		{"unknown preset", strings.Replace(validFile, "preset: reviewer", "preset: critic", 1),
			[]string{`9:21: grant.preset: unknown preset "critic"`}},
		{"unknown deliverable type", strings.Replace(validFile, "type: design-spec", "type: poem", 1),
			[]string{`3:21: deliverable.type: unknown type "poem"`}},
		{"custom needs file and check", strings.Replace(validFile, "type: design-spec", "type: custom", 1),
			[]string{"3:21: deliverable: a custom deliverable needs file and check"}},
		{"duplicate participant", strings.Replace(validFile, "id: bob", "id: alice", 1),
			[]string{"8:5: participants: alice is listed twice (first at line 5)"}},
		{"missing command", strings.Replace(validFile, "    command: [sh, owner.sh]\n", "", 1),
			[]string{"5:5: participant: command is required"}},
		{"bad memory", strings.Replace(validFile, "memory: 1G", "memory: lots", 1),
			[]string{`13:22: participant.limits.memory: "lots"`}},
		{"bad network", strings.Replace(validFile, "network: {allow: [api.openai.com:443]}", "network: everywhere", 1),
			[]string{`12:14: participant.network: "everywhere": want none, host or {allow`}},
		{"reserved env name", strings.Replace(validFile, "env: [OPENAI_API_KEY]", "env: [ACPFS_TURN]", 1),
			[]string{`11:11: participant.env: "ACPFS_TURN"`}},
		{"blocked without events.jsonl", strings.Replace(validFile, "grant: {preset: reviewer, forbid: [\"oracle/**\"]}", "grant: {role: grader, may_read: [\"**\"]}", 1),
			[]string{"16:19: participant.on_exhausted: blocked is appended through bob's own view, and its grant does not let it write events.jsonl"}},
		{"grant without preset or role", strings.Replace(validFile, "grant: {preset: owner, may_read: [\"oracle/**\"]}", "grant: {forbid: [x]}", 1),
			[]string{"6:12: grant: without a preset, give role and may_read"}},
		{"run directory inside the folder", "runs: collab/runs\n" + validFile,
			[]string{"1:1: runs: the run directory"}},
		{"missing ro path", strings.Replace(validFile, "    timeout: 90s", "    ro: [tools, nowhere]\n    timeout: 90s", 1),
			[]string{"14:17: participant.ro: nowhere: no such file or directory"}},
		{"one participant", strings.SplitN(validFile, "  - id: bob", 2)[0],
			[]string{"5:3: participants: a collaboration needs at least two"}},
		{"not a mapping", "- a\n- b\n", []string{"1:1: collaboration file: want a mapping"}},
		{"empty", "", []string{"1:1: the file is empty"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseText(t, tt.text)
			require.Error(t, err)
			var fe *FileError
			require.ErrorAs(t, err, &fe)
			for _, w := range tt.want {
				found := false
				for _, p := range fe.Problems {
					if strings.Contains(p, "c.yaml:"+w) {
						found = true
					}
				}
				assert.True(t, found, "want %q in\n%s", w, err)
			}
		})
	}
}

func TestParseYAMLSyntax(t *testing.T) {
	_, err := parseText(t, "objective: [unclosed\n")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "line 1")
}
