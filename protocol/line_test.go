package protocol

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAppendLine(t *testing.T) {
	// After init the log holds seq 1 at 2026-01-02T03:04:05Z; the primary
	// deliverable is deliverables/design-spec.md.
	const draft = `{"seq":2,"from":"server","event":"deliverable_drafted","at":"2026-01-02T03:05:00Z","summary":"draft","doc":"deliverables/design-spec.md","reply_to":1,"role":"primary"}`
	const block = `{"seq":2,"from":"server","event":"blocked","at":"2026-01-02T03:05:00Z","summary":"stop","reply_to":1}`
	with := func(old, new string) string { return strings.Replace(block, old, new, 1) }
	cases := []struct {
		name, line, participant string
		kind                    ErrorKind
		rule                    string
	}{
		{"valid", draft, "server", 0, ""},
		{"valid without participant binding", block, "", 0, ""},
		{"valid with spaces and unicode", `  { "seq" : 2 , "from":"server","event":"blocked","at":"2026-01-02T04:05:00.250+01:00","summary":"arrêt <&> 停止 \u2028 ok","reply_to":1}  `, "server", 0, ""},
		{"not json", `seq=2 blocked`, "server", Malformed, "json"},
		{"truncated", block[:40], "server", Malformed, "json"},
		{"two objects", block + block, "server", Malformed, "json"},
		{"NaN", with(`"reply_to":1`, `"reply_to":NaN`), "server", Malformed, "json"},
		{"array", `[` + block + `]`, "server", Malformed, "json-object"},
		{"string", `"blocked"`, "server", Malformed, "json-object"},
		{"empty", ``, "server", Malformed, "empty-line"},
		{"blank", "   \t", "server", Malformed, "empty-line"},
		{"invalid utf-8", with(`stop`, "st\xffop"), "server", Malformed, "utf8"},
		{"raw line separator", with(`stop`, "st\u2028op"), "server", Malformed, "line-break"},
		{"raw next-line", with(`stop`, "st\u0085op"), "server", Malformed, "line-break"},
		{"CRLF line end", block + "\r", "server", 0, ""},
		{"CRLF line end after spaces", block + " \r", "server", 0, ""},
		{"carriage return inside", with(`,"reply_to"`, ",\r\"reply_to\""), "server", Malformed, "line-break"},
		{"two carriage returns", block + "\r\r", "server", Malformed, "line-break"},
		{"raw newline inside", with(`,"reply_to"`, ",\n\"reply_to\""), "server", Malformed, "line-break"},
		{"carriage return only", "\r", "server", Malformed, "empty-line"},
		{"unknown event", with(`"blocked"`, `"paused"`), "server", Malformed, "event-unknown"},
		{"unknown field", with(`"reply_to":1`, `"reply_to":1,"extra":true`), "server", 0, ""},
		{"unknown fields of any type, CRLF", with(`"reply_to":1`, `"reply_to":1,"x-tool":{"v":[1,"}"]},"trace":null`) + "\r", "server", 0, ""},
		{"unknown field twice", with(`"reply_to":1`, `"reply_to":1,"extra":true,"extra":false`), "server", Malformed, "field-duplicate"},
		{"unknown field twice, once escaped", with(`"reply_to":1`, `"reply_to":1,"extra":true,"\u0065xtra":false`), "server", Malformed, "field-duplicate"},
		{"unknown field with a known field's escaped name", with(`"reply_to":1`, `"reply_to":1,"\u0073eq":2`), "server", Malformed, "field-duplicate"},
		{"duplicate field", with(`"reply_to":1`, `"reply_to":1,"seq":2`), "server", Malformed, "field-duplicate"},
		{"seq as string", with(`"seq":2`, `"seq":"2"`), "server", Malformed, "field-type"},
		{"seq as float", with(`"seq":2`, `"seq":2.0`), "server", Malformed, "field-type"},
		{"seq with exponent", with(`"seq":2`, `"seq":2e0`), "server", Malformed, "field-type"},
		{"seq as bool", with(`"seq":2`, `"seq":true`), "server", Malformed, "field-type"},
		{"seq too large", with(`"seq":2`, `"seq":99999999999999999999999`), "server", Malformed, "field-type"},
		{"from null", with(`"from":"server"`, `"from":null`), "", Malformed, "field-type"},
		{"summary as object", with(`"summary":"stop"`, `"summary":{"a":[1,{"b":"}"}]}`), "server", Malformed, "field-type"},
		{"reply_to as string", with(`"reply_to":1`, `"reply_to":"1"`), "server", Malformed, "field-type"},
		{"missing summary", with(`"summary":"stop",`, ``), "server", Malformed, "field-missing"},
		{"missing seq", with(`"seq":2,`, ``), "server", Malformed, "field-missing"},
		{"missing at", with(`"at":"2026-01-02T03:05:00Z",`, ``), "server", Malformed, "field-missing"},
		{"at without zone", with(`03:05:00Z`, `03:05:00`), "server", Malformed, "at-format"},
		{"at not a time", with(`2026-01-02T03:05:00Z`, `yesterday`), "server", Malformed, "at-format"},
		{"at impossible date", with(`2026-01-02`, `2026-02-30`), "server", Malformed, "at-format"},
		{"from mismatch", block, "reader", Rejected, "from-mismatch"},
		{"unlisted", with(`"from":"server"`, `"from":"mallory"`), "", Rejected, "participant"},
		{"seq gap", with(`"seq":2`, `"seq":3`), "server", Rejected, "seq-continuous"},
		{"seq repeated", with(`"seq":2`, `"seq":1`), "server", Rejected, "seq-continuous"},
		{"seq zero", with(`"seq":2`, `"seq":0`), "server", Rejected, "seq-continuous"},
		{"at backwards", with(`2026-01-02T03:05:00Z`, `2026-01-02T03:04:04Z`), "server", Rejected, "at-order"},
		{"at backwards via offset", with(`2026-01-02T03:05:00Z`, `2026-01-02T04:04:04+01:00`), "server", Rejected, "at-order"},
		{"reply_to zero", with(`"reply_to":1`, `"reply_to":0`), "server", Rejected, "reply-to-range"},
		{"reply_to itself", with(`"reply_to":1`, `"reply_to":2`), "server", Rejected, "reply-to-range"},
		{"no reply_to", with(`,"reply_to":1`, ``), "server", Rejected, "reply-to-required"},
		{"deliverable without role", strings.Replace(draft, `,"role":"primary"`, ``, 1), "server", Rejected, "role-required"},
		{"deliverable with odd role", strings.Replace(draft, `"role":"primary"`, `"role":"main"`, 1), "server", Rejected, "role-required"},
		{"deliverable without doc", strings.Replace(draft, `"doc":"deliverables/design-spec.md",`, ``, 1), "server", Rejected, "doc-required"},
		{"deliverable doc with ..", strings.Replace(draft, `deliverables/design-spec.md`, `deliverables/../deliverables/design-spec.md`, 1), "server", Rejected, "deliverable-doc"},
		{"deliverable absolute doc", strings.Replace(draft, `deliverables/design-spec.md`, `/tmp/design-spec.md`, 1), "server", Rejected, "deliverable-doc"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			k := newKit(t, kitOptions(filepath.Join(t.TempDir(), "c"), "design-spec"))
			evBefore, protoBefore := k.files()
			got, err := k.log.AppendLine([]byte(c.line), c.participant)
			if c.rule == "" {
				require.NoError(t, err)
				assert.Equal(t, 2, got.Seq)
				evAfter, _ := k.files()
				assert.Equal(t, evBefore+c.line+"\n", evAfter, "the line is written byte for byte")
				assert.Empty(t, Validate(k.dir).Errors)
				fresh, err := OpenLog(k.dir)
				require.NoError(t, err)
				assert.Nil(t, fresh.historyBad, "an accepted line replays cleanly")
				assert.Equal(t, k.log.Snapshot(), fresh.Snapshot())
				return
			}
			require.Error(t, err)
			var pe *Error
			require.ErrorAs(t, err, &pe)
			assert.Equal(t, c.rule, pe.Rule, "%v", err)
			assert.Equal(t, c.kind, pe.Kind, "%v", err)
			assert.Equal(t, c.kind, KindOf(err))
			assert.Equal(t, 2, pe.Line)
			assert.Contains(t, err.Error(), "events.jsonl line 2")
			assert.Contains(t, err.Error(), "["+c.rule+"]")
			assert.NotContains(t, err.Error(), "\n")
			evAfter, protoAfter := k.files()
			assert.Equal(t, evBefore, evAfter)
			assert.Equal(t, protoBefore, protoAfter)
		})
	}
}

func TestErrorFormat(t *testing.T) {
	assert.Equal(t, "events.jsonl line 3: seq 3: expected seq 3, got 5 [seq-continuous]",
		(&Error{Kind: Rejected, Line: 3, Seq: 3, Rule: "seq-continuous", Msg: "expected seq 3, got 5"}).Error())
	assert.Equal(t, "events.jsonl line 3: not JSON [json]", (&Error{Kind: Malformed, Line: 3, Rule: "json", Msg: "not JSON"}).Error())
	assert.Equal(t, "gone [io]", (&Error{Kind: Unavailable, Rule: "io", Msg: "gone"}).Error())
	assert.Equal(t, Unavailable, KindOf(assert.AnError))
}

func TestParseTime(t *testing.T) {
	for _, s := range []string{"2026-01-02T03:04:05Z", "2026-01-02 03:04:05Z", "2026-01-02T03:04:05.123456789Z", "2026-01-02T03:04:05,5+02:00", "2026-01-02T03:04:05-0130"} {
		_, ok := parseTime(s)
		assert.True(t, ok, s)
	}
	for _, s := range []string{"", "2026-01-02", "2026-01-02T03:04Z", "2026-01-02T03:04:05", "2026-01-02T03:04:05.Z", "2026-13-02T03:04:05Z", "2026-01-02T24:00:00Z", "2026-01-02T03:04:05+2:00", "2026-01-02T03:04:05Zjunk", "2026-01-02X03:04:05Z"} {
		_, ok := parseTime(s)
		assert.False(t, ok, s)
	}
	a, _ := parseTime("2026-01-02T04:04:05+01:00")
	b, _ := parseTime("2026-01-02T03:04:05Z")
	assert.True(t, a.Equal(b))
}

// The fast path of the common form answers exactly as the general one,
// valid dates or not, to the bit of the time.Time.
func TestParseUTCSecondMatchesGeneral(t *testing.T) {
	n := 0
	for _, year := range []int{0, 1, 4, 100, 400, 1600, 1899, 1900, 1969, 1970, 1999, 2000, 2024, 2026, 2100, 2400, 9999} {
		for month := 0; month <= 13; month++ {
			for day := 0; day <= 32; day++ {
				for _, hms := range []string{"00:00:00", "03:04:05", "23:59:59", "24:00:00", "12:60:00", "12:00:60"} {
					s := fmt.Sprintf("%04d-%02d-%02dT%sZ", year, month, day, hms)
					want, wantOK := parseTimeGeneral(s)
					got, ok, done := parseUTCSecond(s)
					require.True(t, done, s)
					require.Equal(t, wantOK, ok, s)
					require.Equal(t, want, got, s)
					n++
				}
			}
		}
	}
	for _, s := range []string{"2026-01-02 03:04:05Z", "2026-01-02T03:04:05.5Z", "2026-01-02T03:04:05+00:00", "2O26-01-02T03:04:05Z", "2026-01-02T03:04:0xZ"} {
		_, _, done := parseUTCSecond(s)
		assert.False(t, done, s)
	}
	assert.Equal(t, 17*14*33*6, n)
}
