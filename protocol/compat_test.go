package protocol

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// crlf turns every line end of s into CRLF.
func crlf(s string) string { return strings.ReplaceAll(s, "\n", "\r\n") }

// addField adds `"name":value` at the end of line n (1-based) of
// events.jsonl, keeping its line end.
func (k *kit) addField(n int, field string) {
	k.editLine(n, func(s string) string {
		cr := strings.HasSuffix(s, "\r")
		s = strings.TrimSuffix(strings.TrimSuffix(s, "\r"), "}") + "," + field + "}"
		if cr {
			s += "\r"
		}
		return s
	})
}

// foreignCases are folders as other ACP writers leave them, and what
// validate reports. The parity corpus validates and extends each of them
// (TestParityGolden).
var foreignCases = []struct {
	name     string
	state    string
	edit     func(k *kit)
	code     int
	errors   []string // rules that must be reported as errors
	warnings []string // rules that must be reported as warnings
}{
	{"CRLF line ends", "revising", func(k *kit) { k.write(EventsFile, crlf(k.read(EventsFile))) }, 0, nil, nil},
	{"CRLF on one line only", "revising", func(k *kit) { k.editLine(2, func(s string) string { return s + "\r" }) }, 0, nil, nil},
	{"CRLF blank lines", "revising", func(k *kit) { k.write(EventsFile, crlf(k.read(EventsFile)+"\n \n")) }, 0, nil, nil},
	{"CRLF completed collaboration", "completed", func(k *kit) { k.write(EventsFile, crlf(k.read(EventsFile))) }, 0, nil, nil},
	{"carriage return inside a line", "revising", func(k *kit) {
		k.editLine(2, func(s string) string { return strings.Replace(s, `,"from"`, ",\r\"from\"", 1) })
	}, 2, []string{"line-break"}, nil},
	{"two carriage returns", "revising", func(k *kit) { k.editLine(2, func(s string) string { return s + "\r\r" }) }, 2, []string{"line-break"}, nil},
	{"unknown field", "revising", func(k *kit) { k.addField(2, `"tool":"other-acp"`) }, 1, nil, []string{"field-unknown"}},
	{"unknown fields on every line, CRLF", "revising", func(k *kit) {
		for i := 1; i <= 4; i++ {
			k.addField(i, `"x-trace":{"id":[1,"}"]}`)
		}
		k.addField(3, `"note":null`)
		k.write(EventsFile, crlf(k.read(EventsFile)))
	}, 1, nil, []string{"field-unknown", "field-unknown"}},
	{"unknown field twice in one event", "revising", func(k *kit) { k.addField(2, `"tool":1,"tool":2`) }, 2, []string{"field-duplicate"}, []string{"field-unknown"}},
	{"known field twice", "revising", func(k *kit) { k.addField(2, `"seq":2`) }, 2, []string{"field-duplicate"}, nil},
	{"torn last line", "revising", func(k *kit) { k.write(EventsFile, k.read(EventsFile)+`{"seq":5,"from":"ser`) }, 1, nil, []string{"partial-line"}},
	{"complete last event without newline", "revising", func(k *kit) {
		text := k.read(EventsFile)
		lines := strings.SplitAfter(text, "\n")
		last := strings.TrimSuffix(lines[len(lines)-2], "\n")
		k.write(EventsFile, strings.Join(lines[:len(lines)-2], "")+last)
	}, 2, []string{"derived-state"}, []string{"partial-line"}},
	{"blank last line without newline", "revising", func(k *kit) { k.write(EventsFile, k.read(EventsFile)+"  ") }, 1, nil, []string{"partial-line"}},
}

func TestValidateForeignWriters(t *testing.T) {
	for _, c := range foreignCases {
		t.Run(c.name, func(t *testing.T) {
			k := kitAt(t, c.state)
			c.edit(k)
			res := Validate(k.dir)
			assert.Equal(t, c.code, res.ExitCode(), "errors: %v\nwarnings: %v", res.Errors, res.Warnings)
			errs, warns := rulesOf(res.Errors), rulesOf(res.Warnings)
			for _, r := range c.errors {
				assert.Contains(t, errs, r, "errors: %v", res.Errors)
			}
			if len(c.errors) == 0 {
				assert.Empty(t, res.Errors)
			}
			assert.Equal(t, len(c.warnings), len(res.Warnings), "warnings: %v", res.Warnings)
			for _, r := range c.warnings {
				assert.Contains(t, warns, r, "warnings: %v", res.Warnings)
			}
			for _, w := range res.Warnings {
				assert.Regexp(t, `^events\.jsonl line \d+: `, w)
			}
		})
	}
}

func TestValidateUnknownFieldWarning(t *testing.T) {
	k := kitAt(t, "revising")
	for i := 2; i <= 4; i++ {
		k.addField(i, `"x-tool":"other"`)
	}
	k.addField(3, `"note":"n"`)
	res := Validate(k.dir)
	assert.Empty(t, res.Errors)
	assert.Equal(t, []string{
		`events.jsonl line 2: seq 2: field "x-tool" is not part of ACP schema v2; it is kept but not checked (3 lines, the first here) [field-unknown]`,
		`events.jsonl line 3: seq 3: field "note" is not part of ACP schema v2; it is kept but not checked (this line only) [field-unknown]`,
	}, res.Warnings)
}

// TestLogExtendsForeignHistory replays histories other writers left and
// appends to them: CRLF line ends and unknown fields are extended, a
// broken history or an unterminated last line is not.
func TestLogExtendsForeignHistory(t *testing.T) {
	byName := map[string]func(k *kit){}
	for _, c := range foreignCases {
		byName[c.name] = c.edit
	}
	cases := []struct {
		name string
		rule string // "" = the append is accepted
	}{
		{"CRLF line ends", ""},
		{"CRLF on one line only", ""},
		{"CRLF blank lines", ""},
		{"unknown field", ""},
		{"unknown fields on every line, CRLF", ""},
		{"carriage return inside a line", "history"},
		{"two carriage returns", "history"},
		{"unknown field twice in one event", "history"},
		{"known field twice", "history"},
		{"torn last line", "partial-line"},
		{"complete last event without newline", "partial-line"},
		{"blank last line without newline", "partial-line"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			k := kitAt(t, "revising")
			want := k.log.Snapshot()
			edit, ok := byName[c.name]
			require.True(t, ok)
			edit(k)
			l, err := OpenLog(k.dir)
			require.NoError(t, err)
			defer l.Close()
			before, protoBefore := k.files()
			_, err = l.Append(EventSpec{Participant: "server", Event: EvProposalRevised, Summary: "revised", Doc: ProposalFile, ReplyTo: intp(4)})
			if c.rule != "" {
				require.Error(t, err)
				assert.Equal(t, c.rule, err.(*Error).Rule, "%v", err)
				after, protoAfter := k.files()
				assert.Equal(t, before, after)
				assert.Equal(t, protoBefore, protoAfter)
				return
			}
			require.NoError(t, err)
			assert.Nil(t, l.historyBad, "the history replays cleanly")
			assert.Equal(t, want.LastSeq+1, l.Snapshot().LastSeq)
			after, _ := k.files()
			assert.True(t, strings.HasPrefix(after, before), "the old lines are kept byte for byte")
			assert.Equal(t, PhaseDecisionReview, l.Snapshot().Phase)
			assert.Empty(t, Validate(k.dir).Errors)
			// A second log catching up incrementally agrees with a replay.
			require.NoError(t, k.log.Refresh())
			assert.Equal(t, l.Snapshot(), k.log.Snapshot())
		})
	}
}
