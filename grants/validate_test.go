package grants

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// validGrantJSON is edited by each case of TestParseRejects.
func validGrantMap() map[string]any {
	return map[string]any{
		"grant_id":  "G-rev-1",
		"agent_id":  "reviewer-a",
		"role":      "reviewer",
		"objective": "Review the design",
		"named_inputs": map[string]any{
			"spec": map[string]any{"path": "deliverables/design-spec.md", "required": true},
		},
		"may_read":       []any{"deliverables/**", "proposal.md"},
		"forbidden_read": []any{"oracle/**"},
		"may_write":      []any{"review.md"},
	}
}

func encode(t *testing.T, m map[string]any) []byte {
	t.Helper()
	data, err := json.Marshal(m)
	require.NoError(t, err)
	return data
}

func TestParseValid(t *testing.T) {
	g, err := Parse(encode(t, validGrantMap()))
	require.NoError(t, err)
	assert.Equal(t, "G-rev-1", g.GrantID)
	assert.Equal(t, "reviewer-a", g.ParticipantID())
	assert.Equal(t, NamedInput{Path: "deliverables/design-spec.md", Required: true}, g.NamedInputs["spec"])
}

func TestParseNamedInputShorthand(t *testing.T) {
	m := validGrantMap()
	m["named_inputs"] = map[string]any{"spec": "deliverables/design-spec.md"}
	g, err := Parse(encode(t, m))
	require.NoError(t, err)
	assert.Equal(t, NamedInput{Path: "deliverables/design-spec.md", Required: true}, g.NamedInputs["spec"])
}

func TestParseRejects(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(m map[string]any)
		field string // must appear in the error
		msg   string
	}{
		{"unknown field", func(m map[string]any) { m["may_reed"] = []any{"x"} }, `"may_reed"`, "unknown field"},
		{"unknown named input field", func(m map[string]any) {
			m["named_inputs"] = map[string]any{"spec": map[string]any{"path": "proposal.md", "requierd": true}}
		}, `"requierd"`, "unknown field"},
		{"missing grant_id", func(m map[string]any) { delete(m, "grant_id") }, "grant_id", "missing"},
		{"grant_id without prefix", func(m map[string]any) { m["grant_id"] = "rev-1" }, "grant_id", `"G-"`},
		{"grant_id with slash", func(m map[string]any) { m["grant_id"] = "G-a/b" }, "grant_id", "not allowed"},
		{"missing agent_id", func(m map[string]any) { m["agent_id"] = "" }, "agent_id", "missing"},
		{"agent_id with spaces", func(m map[string]any) { m["agent_id"] = " a" }, "agent_id", "white space"},
		{"agent_id climbing out", func(m map[string]any) { m["agent_id"] = "../victim" }, "agent_id", "dot"},
		{"agent_id with a slash", func(m map[string]any) { m["agent_id"] = "a/b" }, "agent_id", "only letters"},
		{"agent_id dot-dot", func(m map[string]any) { m["agent_id"] = ".." }, "agent_id", "dot"},
		{"missing role", func(m map[string]any) { m["role"] = "  " }, "role", "missing"},
		{"missing objective", func(m map[string]any) { delete(m, "objective") }, "objective", "missing"},
		{"empty may_read", func(m map[string]any) { m["may_read"] = []any{} }, "may_read", "at least one"},
		{"absent may_read", func(m map[string]any) { delete(m, "may_read") }, "may_read", "at least one"},
		{"required slot unfilled", func(m map[string]any) {
			m["named_inputs"] = map[string]any{"oracle_free_spec": map[string]any{"required": true}}
		}, "named_inputs.oracle_free_spec", "not filled"},
		{"named input forbidden", func(m map[string]any) {
			m["named_inputs"] = map[string]any{"answers": "oracle/answers.md"}
			m["may_read"] = []any{"**"}
		}, "named_inputs.answers", "forbidden"},
		{"named input not readable", func(m map[string]any) {
			m["named_inputs"] = map[string]any{"notes": "notes/a.md"}
		}, "named_inputs.notes", "not covered"},
		{"named input escapes", func(m map[string]any) {
			m["named_inputs"] = map[string]any{"up": "../secret.md"}
		}, "named_inputs.up", "escapes"},
		{"named input absolute", func(m map[string]any) {
			m["named_inputs"] = map[string]any{"abs": "/etc/passwd"}
		}, "named_inputs.abs", "absolute"},
		{"may_read literal forbidden", func(m map[string]any) {
			m["may_read"] = []any{"proposal.md", "oracle/answers.md"}
		}, "may_read[1]", "forbidden"},
		{"may_read directory entirely forbidden", func(m map[string]any) {
			m["may_read"] = []any{"oracle/"}
		}, "may_read[0]", "forbidden"},
		{"may_write literal forbidden", func(m map[string]any) {
			m["may_write"] = []any{"oracle/notes.md"}
		}, "may_write[0]", "forbidden"},
		{"may_read escapes", func(m map[string]any) { m["may_read"] = []any{"a/../../b"} }, "may_read[0]", "escapes"},
		{"may_read absolute", func(m map[string]any) { m["may_read"] = []any{"/srv/data/**"} }, "may_read[0]", "absolute"},
		{"may_write escapes by brace", func(m map[string]any) { m["may_write"] = []any{"{review.md,x/../y}"} }, "may_write[0]", "escapes"},
		{"forbidden escapes", func(m map[string]any) { m["forbidden_read"] = []any{"notes/../../oracle"} }, "forbidden_read[0]", "escapes"},
		{"invalid glob", func(m map[string]any) { m["may_read"] = []any{"deliverables/[a"} }, "may_read[0]", "invalid glob"},
		{"invalid forbidden glob", func(m map[string]any) { m["forbidden_read"] = []any{"{a,b"} }, "forbidden_read[0]", "invalid glob"},
		{"empty pattern", func(m map[string]any) { m["may_write"] = []any{""} }, "may_write[0]", "empty"},
		{"bad created_at", func(m map[string]any) { m["created_at"] = "yesterday" }, "created_at", "RFC 3339"},
		{"revoked_at without revoked", func(m map[string]any) { m["revoked_at"] = "2026-05-21T10:00:00Z" }, "revoked_at", "not revoked"},
		{"wrong type", func(m map[string]any) { m["may_read"] = "deliverables/**" }, "may_read", "must be an array of strings, not a string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := validGrantMap()
			tt.edit(m)
			_, err := Parse(encode(t, m))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.field)
			assert.Contains(t, err.Error(), tt.msg)
		})
	}
}

func TestParseReportsEveryProblem(t *testing.T) {
	m := validGrantMap()
	delete(m, "role")
	m["may_read"] = []any{"a/../x", "[bad"}
	_, err := Parse(encode(t, m))
	var ve *ValidationError
	require.True(t, errors.As(err, &ve), "%v", err)
	var fields []string
	for _, p := range ve.Problems {
		fields = append(fields, p.Field)
	}
	assert.ElementsMatch(t, []string{"role", "may_read[0]", "may_read[1]"}, fields)
}

func TestParseTrailingData(t *testing.T) {
	data := append(encode(t, validGrantMap()), []byte(` {"x":1}`)...)
	_, err := Parse(data)
	assert.ErrorContains(t, err, "after the grant object")
}

// TestDecodeErrorsHaveLineAndColumn: a grant file that is not JSON, or
// whose JSON does not fit, is reported with the line and column of the
// problem, in terms of the grant's fields.
func TestDecodeErrorsHaveLineAndColumn(t *testing.T) {
	const head = "{\n  \"grant_id\": \"G-a\",\n  \"agent_id\": \"a\",\n"
	tests := []struct {
		name      string
		data      string
		line, col int
		msg       string
	}{
		{"trailing comma in an array", head + `  "may_read": ["a.md",]` + "\n}", 4, 23, "invalid character ']'"},
		{"missing comma", head + `  "role": "r"` + "\n" + `  "objective": "o"` + "\n}", 5, 3, "invalid character"},
		{"string for an array", head + `  "may_read": "a.md"` + "\n}", 4, 15, "may_read must be an array of strings, not a string"},
		{"number in an array", head + `  "may_read": ["a.md", 7]` + "\n}", 4, 24, "each entry of may_read must be a string, not a number"},
		{"string for a bool", head + `  "revoked": "yes"` + "\n}", 4, 14, "revoked must be true or false, not a string"},
		{"unknown field", head + `  "may_reed": []` + "\n}", 4, 3, `unknown field "may_reed"`},
		{"unknown field of a named input", head + `  "named_inputs": {"spec": {"path": "a.md", "requierd": true}}` + "\n}", 4, 45, `unknown field "requierd"`},
		{"wrong type in a named input", head + `  "named_inputs": {"spec": {"path": 3}}` + "\n}", 4, 37, "named_inputs.path must be a string, not a number"},
		{"truncated", head + `  "may_read": [`, 4, 16, "ends before the grant object"},
		{"trailing data", head + `  "role": "r", "objective": "o", "may_read": ["**"]` + "\n}\n\n  x", 7, 3, "unexpected data after the grant object"},
		{"column counts characters", head + `  "role": "é", "objective": "o" "may_read": []` + "\n}", 4, 33, "invalid character"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.data))
			require.Error(t, err)
			var de *DecodeError
			require.True(t, errors.As(err, &de), "%v", err)
			assert.Equal(t, [2]int{tt.line, tt.col}, [2]int{de.Line, de.Column}, "%v", err)
			assert.Contains(t, err.Error(), tt.msg)
			assert.Contains(t, err.Error(), fmt.Sprintf("line %d, column %d: ", tt.line, tt.col))
		})
	}

	// Load names the file too; an empty file says so.
	dir := t.TempDir()
	p := filepath.Join(dir, "G-a.json")
	require.NoError(t, os.WriteFile(p, []byte(head+`  "may_read": "a.md"`+"\n}"), 0o644))
	_, err := Load(p)
	assert.ErrorContains(t, err, p+": decode grant: line 4, column 15: may_read must be")
	require.NoError(t, os.WriteFile(p, nil, 0o644))
	_, err = Load(p)
	assert.ErrorContains(t, err, "the file is empty")
}

func TestOptionalSlotMayBeEmpty(t *testing.T) {
	m := validGrantMap()
	m["named_inputs"] = map[string]any{"extra": map[string]any{"required": false}}
	_, err := Parse(encode(t, m))
	assert.NoError(t, err)
}

func TestNamedInputDirectory(t *testing.T) {
	m := validGrantMap()
	m["may_read"] = []any{"deliverables/*.md"}
	m["named_inputs"] = map[string]any{"dir": "deliverables/"}
	_, err := Parse(encode(t, m))
	assert.NoError(t, err, "a directory leading to readable files is a valid named input")
}

func TestLoadTestdata(t *testing.T) {
	files, err := filepath.Glob("../testdata/grants/valid/*.json")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		_, err := Load(f)
		assert.NoError(t, err, f)
	}
	bad, err := filepath.Glob("../testdata/grants/invalid/*.json")
	require.NoError(t, err)
	require.NotEmpty(t, bad)
	for _, f := range bad {
		_, err := Load(f)
		if assert.Error(t, err, f) {
			// Each invalid fixture names the offending field in its file
			// name: "<field>--<what>.json".
			field := strings.SplitN(filepath.Base(f), "--", 2)[0]
			assert.Contains(t, err.Error(), field, f)
			assert.Contains(t, err.Error(), f, "the error names the file")
		}
	}
	_, err = Load("../testdata/grants/does-not-exist.json")
	assert.True(t, errors.Is(err, os.ErrNotExist))
}

func TestCheckID(t *testing.T) {
	for _, ok := range []string{"G-1", "G-reviewer.a_b-2", "G-A"} {
		assert.NoError(t, CheckID(ok, "G"), ok)
	}
	for _, bad := range []string{"G-", "G", "g-1", "G--x", "G-.x", "G-a b", "G-a/b", "G-" + strings.Repeat("a", 200), "H-1"} {
		assert.Error(t, CheckID(bad, "G"), bad)
	}
	id := NewID("G", "Claude Code/1")
	assert.NoError(t, CheckID(id, "G"))
	assert.True(t, strings.HasPrefix(id, "G-Claude-Code-1-"), id)
	assert.NoError(t, CheckID(NewID("H", ""), "H"))
}

func TestGrantIDFor(t *testing.T) {
	tests := []struct{ agent, want string }{
		{"bob", "G-bob"},
		{"claude-code", "G-claude-code"},
		{"Claude Code/1", "G-Claude-Code-1"},
		{"  ", ""},
		{"é", ""},
	}
	for _, tt := range tests {
		got := GrantIDFor(tt.agent)
		assert.Equal(t, tt.want, got, tt.agent)
		if got != "" {
			assert.NoError(t, CheckID(got, "G"))
		}
	}
}

func TestNormalizeGrantID(t *testing.T) {
	for in, want := range map[string]string{"bob": "G-bob", "G-bob": "G-bob", "": "", "G-": "G-", "reviewer-1": "G-reviewer-1"} {
		assert.Equal(t, want, NormalizeGrantID(in), in)
	}
}
