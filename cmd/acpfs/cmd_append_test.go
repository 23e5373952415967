package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/acpfs/acpfs/protocol"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func protoFiles(t testing.TB, dir string) (string, string) {
	ev, err := os.ReadFile(filepath.Join(dir, "events.jsonl"))
	require.NoError(t, err)
	pj, err := os.ReadFile(filepath.Join(dir, "protocol.json"))
	require.NoError(t, err)
	return string(ev), string(pj)
}

func TestAppendCommand(t *testing.T) {
	dir := protoInitFolder(t)
	r := runCLI(t, "append", "--folder", dir, "--participant", "server", "--event", "deliverable_drafted",
		"--summary", "draft", "--doc", "deliverables/design-spec.md", "--reply-to", "1", "--role", "primary")
	require.Equal(t, exitOK, r.code, "%v", r.err)
	assert.Equal(t, "appended seq 2: deliverable_drafted\n", r.out)
	r = runCLI(t, "append", "--folder", dir, "--participant", "server", "--event", "proposal_submitted",
		"--summary", "proposal", "--doc", "proposal.md", "--reply-to", "2")
	require.Equal(t, exitOK, r.code, "%v", r.err)
	_, pj := protoFiles(t, dir)
	assert.Contains(t, pj, `"currentPhase": "reviewing"`)

	refusals := []struct {
		name string
		args []string
		msg  string
	}{
		{"wrong turn", []string{"--participant", "server", "--event", "review_submitted", "--reply-to", "3"}, "events.jsonl line 4: seq 4:"},
		{"missing reply_to", []string{"--participant", "reader", "--event", "review_submitted"}, "[reply-to-required]"},
		{"bogus reply_to", []string{"--participant", "reader", "--event", "review_submitted", "--reply-to", "9"}, "[reply-to-range]"},
		{"unlisted", []string{"--participant", "mallory", "--event", "blocked", "--reply-to", "1"}, "[participant]"},
		{"unknown event", []string{"--participant", "reader", "--event", "paused", "--reply-to", "1"}, "--event"},
		{"bad role", []string{"--participant", "server", "--event", "deliverable_revised", "--reply-to", "1", "--role", "main"}, "--role"},
		{"uppercase sha", []string{"--participant", "server", "--event", "deliverable_frozen", "--reply-to", "1", "--role", "primary",
			"--doc", "deliverables/design-spec.md", "--sha256", strings.Repeat("A", 64)}, "[sha256-format]"},
		{"escaping doc", []string{"--participant", "server", "--event", "deliverable_revised", "--reply-to", "1", "--role", "primary",
			"--doc", "../deliverables/design-spec.md"}, "[deliverable-doc]"},
	}
	for _, c := range refusals {
		t.Run(c.name, func(t *testing.T) {
			evBefore, pjBefore := protoFiles(t, dir)
			r := runCLI(t, append([]string{"append", "--folder", dir, "--summary", "s"}, c.args...)...)
			assert.Equal(t, exitFailed, r.code)
			require.Error(t, r.err)
			assert.Contains(t, r.err.Error(), c.msg)
			evAfter, pjAfter := protoFiles(t, dir)
			assert.Equal(t, evBefore, evAfter)
			assert.Equal(t, pjBefore, pjAfter)
		})
	}
	r = runCLI(t, "append", "--folder", t.TempDir(), "--participant", "a", "--event", "blocked", "--summary", "s", "--reply-to", "1")
	assert.Equal(t, exitFailed, r.code)
	assert.ErrorContains(t, r.err, "protocol.json")
}

// TestAppendForeignHistory appends with acpfs append to histories other
// ACP writers leave: CRLF line ends (a trailing "\r" on each line) and
// unknown fields are extended; a torn last line or a broken history is
// not, and nothing is written then.
func TestAppendForeignHistory(t *testing.T) {
	crlf := func(s string) string { return strings.ReplaceAll(s, "\n", "\r\n") }
	tests := []struct {
		name    string
		edit    func(events string) string
		summary string
		rule    string // "" = accepted
	}{
		{"CRLF history", crlf, "draft", ""},
		{"CRLF history, summary ending in CR", crlf, "draft\r", ""},
		{"summary ending in CRLF", func(s string) string { return s }, "draft\r\n", ""},
		{"unknown field in the history", func(s string) string {
			return strings.Replace(s, `}`+"\n", `,"x-writer":{"name":"other"}}`+"\r\n", 1)
		}, "draft", ""},
		{"torn last line", func(s string) string { return s + `{"seq":2,"from":"ser` }, "draft", "[partial-line]"},
		{"carriage return inside a line", func(s string) string { return strings.Replace(s, `,"from"`, ",\r\"from\"", 1) }, "draft", "[history]"},
		{"duplicate key in the history", func(s string) string { return strings.Replace(s, `}`+"\n", `,"seq":1}`+"\n", 1) }, "draft", "[history]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := protoInitFolder(t)
			path := filepath.Join(dir, "events.jsonl")
			ev, _ := protoFiles(t, dir)
			require.NoError(t, os.WriteFile(path, []byte(tt.edit(ev)), 0o644))
			evBefore, pjBefore := protoFiles(t, dir)
			r := runCLI(t, "append", "--folder", dir, "--participant", "server", "--event", "deliverable_drafted",
				"--summary", tt.summary, "--doc", "deliverables/design-spec.md", "--reply-to", "1", "--role", "primary")
			evAfter, pjAfter := protoFiles(t, dir)
			if tt.rule != "" {
				assert.Equal(t, exitFailed, r.code)
				require.Error(t, r.err)
				assert.Contains(t, r.err.Error(), tt.rule)
				assert.Equal(t, evBefore, evAfter)
				assert.Equal(t, pjBefore, pjAfter)
				return
			}
			require.Equal(t, exitOK, r.code, "%v", r.err)
			assert.Equal(t, "appended seq 2: deliverable_drafted\n", r.out)
			require.True(t, strings.HasPrefix(evAfter, evBefore), "the history is kept byte for byte")
			added := strings.TrimPrefix(evAfter, evBefore)
			assert.Equal(t, 1, strings.Count(added, "\n"), "one line: %q", added)
			assert.NotContains(t, added, "\r", "a CR in the summary is written escaped")
			var e protocol.Event
			require.NoError(t, json.Unmarshal([]byte(added), &e))
			assert.Equal(t, tt.summary, e.Summary)
			assert.Contains(t, pjAfter, `"waitingFor": [`)
			v := runCLI(t, "validate", "--folder", dir)
			assert.NotEqual(t, exitFailed, v.code, v.out)
		})
	}
}

// TestAppendBinaryRefusal checks the refusal as an agent sees it: exit
// code 2 and exactly one line on stderr naming file, line and rule.
func TestAppendBinaryRefusal(t *testing.T) {
	bin := protoBuildCLI(t)
	dir := protoInitFolder(t)
	cmd := exec.Command(bin, "append", "--folder", dir, "--participant", "reader", "--event", "deliverable_drafted",
		"--summary", "s", "--doc", "deliverables/design-spec.md", "--reply-to", "1", "--role", "primary")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee), "%v", err)
	assert.Equal(t, exitFailed, ee.ExitCode())
	assert.Empty(t, stdout.String())
	assert.Equal(t, 1, strings.Count(stderr.String(), "\n"), stderr.String())
	assert.Regexp(t, `^error: events.jsonl line 2: seq 2: .* \[turn\]\n$`, stderr.String())
}

// TestAppendCommandStartsFromItsStateCache: each run leaves a private
// state cache that the next one starts from, and a run after appends made
// by anyone else (here a long-lived log) still sees the whole history.
func TestAppendCommandStartsFromItsStateCache(t *testing.T) {
	dir := protoInitFolder(t)
	cache := protocol.DefaultStateCachePath(dir)
	require.NotEmpty(t, cache)
	r := runCLI(t, "append", "--folder", dir, "--participant", "server", "--event", "deliverable_drafted",
		"--summary", "draft", "--doc", "deliverables/design-spec.md", "--reply-to", "1", "--role", "primary")
	require.Equal(t, exitOK, r.code, "%v", r.err)
	st, err := os.Stat(cache)
	require.NoError(t, err, "the run leaves a state cache")
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	other, err := protocol.OpenLog(dir)
	require.NoError(t, err)
	_, err = other.Append(protocol.EventSpec{Participant: "server", Event: "proposal_submitted", Summary: "by another writer", Doc: "proposal.md", ReplyTo: protoIntp(2)})
	require.NoError(t, err)
	require.NoError(t, other.Close())

	r = runCLI(t, "append", "--folder", dir, "--participant", "server", "--event", "proposal_submitted",
		"--summary", "again", "--doc", "proposal.md", "--reply-to", "3")
	assert.Equal(t, exitFailed, r.code, "the phase moved on since the state was cached: %s", r.out)
	r = runCLI(t, "append", "--folder", dir, "--participant", "server", "--event", "blocked",
		"--summary", "stop", "--reply-to", "3")
	require.Equal(t, exitOK, r.code, "%v", r.err)
	assert.Equal(t, "appended seq 4: blocked\n", r.out)
	assert.Equal(t, 0, protocol.Validate(dir).ExitCode())
}

// BenchmarkCLIAppend execs the built acpfs binary to append one event to a
// 5,000-event folder; it includes process start, replay of the history
// (OpenLog) and the locked append.
func BenchmarkCLIAppend(b *testing.B) {
	bin := protoBuildCLI(b)
	dir := protoInitFolder(b)
	l, err := protocol.OpenLog(dir)
	require.NoError(b, err)
	steps := []struct{ who, event, doc, role string }{
		{"server", "deliverable_drafted", "deliverables/design-spec.md", "primary"},
		{"server", "proposal_submitted", "proposal.md", ""},
		{"reader", "review_submitted", "review.md", ""},
		{"server", "proposal_revised", "proposal.md", ""},
	}
	for _, s := range steps {
		_, err := l.Append(protocol.EventSpec{Participant: s.who, Event: s.event, Summary: "setup", Doc: s.doc, ReplyTo: protoIntp(1), Role: s.role})
		require.NoError(b, err)
	}
	// Then a loop that is valid forever: the owner proposes decisions and
	// classifies questions in turn (phase decision_review).
	cycle := []string{"question_classified", "decision_proposed"}
	f, err := os.OpenFile(filepath.Join(dir, "events.jsonl"), os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(b, err)
	at := time.Now().UTC()
	var buf bytes.Buffer
	seq := 6
	for ; seq <= 5000; seq++ {
		fmt.Fprintf(&buf, `{"seq":%d,"from":"server","event":"%s","at":"%s","summary":"loop","reply_to":%d}`+"\n",
			seq, cycle[seq%2], at.Add(time.Duration(seq)*time.Millisecond).Format("2006-01-02T15:04:05Z"), seq-1)
	}
	_, err = f.Write(buf.Bytes())
	require.NoError(b, err)
	require.NoError(b, f.Close())
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		out, err := exec.Command(bin, "append", "--folder", dir, "--participant", "server", "--event", cycle[seq%2],
			"--summary", "bench", "--reply-to", "1").CombinedOutput()
		if err != nil {
			b.Fatalf("%v: %s", err, out)
		}
		seq++
	}
}

func protoIntp(n int) *int { return &n }
