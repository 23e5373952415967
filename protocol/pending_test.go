package protocol

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/internal/pycompat"
)

func TestClassifyPending(t *testing.T) {
	const event = `{"seq":2,"from":"server","event":"blocked","at":"2026-01-02T03:05:00Z","summary":"stop","reply_to":1}`
	cases := []struct {
		name    string
		pending string
		want    PendingState
	}{
		{"nothing", "", PendingEmpty},
		{"spaces", "  \t", PendingEmpty},
		{"carriage return", "\r", PendingEmpty},
		{"complete event", event, PendingComplete},
		{"complete event, CR", event + "\r", PendingComplete},
		{"complete event, spaces around", "  " + event + " \t", PendingComplete},
		{"complete empty object", `{}`, PendingComplete},
		{"complete non-object", `[1,2]`, PendingComplete},
		{"complete number", `12`, PendingComplete},
		{"complete string with braces", `"{\"a\":"`, PendingComplete},
		{"cut in a key", event[:20], PendingPartial},
		{"cut in a string", `{"seq":2,"summary":"st`, PendingPartial},
		{"cut after an escape", `{"summary":"a\`, PendingPartial},
		{"cut in a literal", `{"x":tru`, PendingPartial},
		{"cut in a number", `{"seq":1.`, PendingPartial},
		{"cut before the closing brace", event[:len(event)-1], PendingPartial},
		{"cut in a nested value", `{"x":{"y":[1,{"z":`, PendingPartial},
		{"only an opening brace", `{`, PendingPartial},
		{"leading spaces, cut", `   {"seq"`, PendingPartial},
		{"not JSON", `seq=2 blocked`, PendingInvalid},
		{"two values", event + event, PendingInvalid},
		{"value then garbage", event + ` x`, PendingInvalid},
		{"value then a partial one", event + `{"seq":`, PendingInvalid},
		{"syntax error inside", `{"seq" 2`, PendingInvalid},
		{"trailing comma", `{"seq":2,}`, PendingInvalid},
		{"NaN", `{"seq":NaN}`, PendingInvalid},
		{"closing brace only", `}`, PendingInvalid},
		{"vertical tab after a value", event + "\v", PendingInvalid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := ClassifyPending([]byte(c.pending))
			assert.Equal(t, c.want, got, "got %s, want %s", got, c.want)
		})
	}
	assert.Equal(t, "complete", PendingComplete.String())
	assert.Equal(t, "unknown", PendingState(42).String())
}

func TestAppendPending(t *testing.T) {
	const event = `{"seq":2,"from":"server","event":"blocked","at":"2026-01-02T03:05:00Z","summary":"stop","reply_to":1}`
	cases := []struct {
		name    string
		pending string
		kind    ErrorKind
		rule    string // "" = appended
	}{
		{"complete event", event, 0, ""},
		{"complete event, CR", event + "\r", 0, ""},
		{"complete event, spaces", " " + event + " ", 0, ""},
		{"cut off", event[:30], Malformed, "incomplete-line"},
		{"cut off before the last brace", event[:len(event)-1], Malformed, "incomplete-line"},
		{"two events", event + event, Malformed, "json"},
		{"not JSON", "hello", Malformed, "json"},
		{"whitespace", "  ", Malformed, "empty-line"},
		{"complete but not an object", `[1]`, Malformed, "json-object"},
		{"complete object, refused by the protocol", `{"seq":3,"from":"server","event":"blocked","at":"2026-01-02T03:05:00Z","summary":"gap","reply_to":1}`, Rejected, "seq-continuous"},
		{"complete event from another participant", `{"seq":2,"from":"reader","event":"blocked","at":"2026-01-02T03:05:00Z","summary":"stop","reply_to":1}`, Rejected, "from-mismatch"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			k := newKit(t, kitOptions(filepath.Join(t.TempDir(), "c"), "design-spec"))
			evBefore, protoBefore := k.files()
			got, err := k.log.AppendPending([]byte(c.pending), "server")
			evAfter, protoAfter := k.files()
			if c.rule == "" {
				require.NoError(t, err)
				assert.Equal(t, 2, got.Seq)
				assert.Equal(t, evBefore+c.pending+"\n", evAfter, "appended as if the newline were there")
				assert.Empty(t, Validate(k.dir).Errors)
				return
			}
			require.Error(t, err)
			var pe *Error
			require.ErrorAs(t, err, &pe)
			assert.Equal(t, c.rule, pe.Rule, "%v", err)
			assert.Equal(t, c.kind, pe.Kind, "%v", err)
			assert.Equal(t, 2, pe.Line, "%v", err)
			assert.Equal(t, evBefore, evAfter)
			assert.Equal(t, protoBefore, protoAfter)
		})
	}
}

// FuzzClassifyPending checks the classification against encoding/json:
// complete means one valid JSON value, and no prefix of a valid value is
// ever invalid (a writer cut off anywhere is only partial).
func FuzzClassifyPending(f *testing.F) {
	for _, s := range []string{
		`{"seq":2,"from":"server","event":"blocked","at":"2026-01-02T03:05:00Z","summary":"stop \u00e9\\n","reply_to":1}`,
		`[1,-2.5e+3,true,false,null,"x",{"a":{}}]`, "\r", " {} ", `"\ud83d\ude00"`, `{"a":1}x`, `{`, `0`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got := ClassifyPending(data)
		if got == PendingComplete {
			assert.True(t, json.Valid(data))
		}
		if !json.Valid(data) || pycompat.IsBlank(data) {
			return
		}
		assert.Equal(t, PendingComplete, got)
		for i := range data {
			assert.NotEqual(t, PendingInvalid, ClassifyPending(data[:i]), "prefix %q of %q", data[:i], data)
		}
	})
}
