package drive

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/ledger"
)

func TestProgressModes(t *testing.T) {
	var plain, js, tty bytes.Buffer
	for _, o := range []struct {
		w    *bytes.Buffer
		mode string
	}{{&plain, ModePlain}, {&js, ModeJSON}, {&tty, ModeTTY}} {
		p := newProgress(o.w, o.mode)
		p.update(func(s *status) { s.phase, s.running = "reviewing", []string{"bob"} })
		p.notef("turn_started", "bob", "000003-bob-1", "turn %s: bob", "000003-bob-1")
		p.note(Note{Type: "output", Participant: "bob", Text: "hello"})
	}
	assert.Equal(t, "acpfs drive: turn 000003-bob-1: bob\n  bob| hello\n", plain.String(), "no status block off a terminal")

	lines := strings.Split(strings.TrimSpace(js.String()), "\n")
	require.Len(t, lines, 2)
	var n Note
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &n))
	assert.Equal(t, "turn_started", n.Type)
	assert.Equal(t, "000003-bob-1", n.Turn)
	assert.NotEmpty(t, n.At)

	// On a terminal each note erases the block, prints its line, and
	// draws the block again below it.
	out := tty.String()
	assert.Contains(t, out, "phase: reviewing")
	assert.Contains(t, out, "turn: bob")
	assert.Equal(t, 2*4, strings.Count(out, "\033[1A\033[2K"), "the 4-line block erased before each of the 2 notes")
	assert.True(t, strings.HasSuffix(strings.TrimSpace(out), "last refusal: none"))
}

func TestRefusalExplained(t *testing.T) {
	r := Refusal{Kind: ledger.KindAppendRejected, Op: "append", Path: "events.jsonl", Detail: "from-mismatch"}
	assert.Equal(t, "append events.jsonl: from-mismatch (append_rejected: the line was not appended to events.jsonl: the protocol or the grant refuses it)", r.String())
	r = Refusal{Kind: ledger.KindFrozenRefused, Op: "open", Path: "deliverables/spec.md", Detail: "frozen deliverable"}
	assert.Contains(t, r.String(), "after deliverable_frozen nothing may change it")
}

// TestProgressPrintable: what agents print reaches the coordinator's
// terminal without its control characters.
func TestProgressPrintable(t *testing.T) {
	var b bytes.Buffer
	p := newProgress(&b, ModePlain)
	p.note(Note{Type: "output", Participant: "bob", Text: "a\x1b[2J\x1b]0;owned\x07b\tc\u009bd\xff"})
	assert.Equal(t, "  bob| a\\x1b[2J\\x1b]0;owned\\x07b\tc\\x9bd\uFFFD\n", b.String())
}

// TestPrintableInvisible: the bidirectional controls and the other
// invisible format characters an agent could reorder or hide the
// coordinator's lines with are shown as \u{XXXX}; visible text,
// accents and emoji pass as they are.
func TestPrintableInvisible(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain text, é, 漢字, 😀", "plain text, é, 漢字, 😀"},
		{"evil\u202etxt.exe", `evil\u{202e}txt.exe`},
		{"\u061c\u200b\u200c\u200d\u200e\u200f", `\u{061c}\u{200b}\u{200c}\u{200d}\u{200e}\u{200f}`},
		{"\u202a\u202b\u202c\u202d\u202e", `\u{202a}\u{202b}\u{202c}\u{202d}\u{202e}`},
		{"\u2060\u2061\u2062\u2063\u2064", `\u{2060}\u{2061}\u{2062}\u{2063}\u{2064}`},
		{"\u2066\u2067\u2068\u2069", `\u{2066}\u{2067}\u{2068}\u{2069}`},
		{"\ufeffbom", `\u{feff}bom`},
		{"line\u2028sep\u2029", `line\u{2028}sep\u{2029}`},
		{"tag\U000E0041", `tag\u{e0041}`},
		{"filler\u3164", `filler\u{3164}`},
		{"cr\rover", `cr\x0dover`},
		{"csi\u009b2J", `csi\x9b2J`},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, Printable(tt.in), "%q", tt.in)
	}
}

// TestProgressJSONPrintable: --json output carries an agent's text
// whole, but escaped (\uXXXX) where a terminal showing the JSON would
// act on it or hide it.
func TestProgressJSONPrintable(t *testing.T) {
	text := "a\x1b[2Jb\u009bc\u202ed\u2066e\ufefff\U000E0041g\u2028h é😀"
	var b bytes.Buffer
	newProgress(&b, ModeJSON).note(Note{Type: NoteOutput, Participant: "bob", Text: text})
	raw := b.String()
	for _, r := range []string{"\x1b", "\u009b", "\u202e", "\u2066", "\ufeff", "\U000E0041", "\u2028"} {
		assert.NotContains(t, raw, r)
	}
	assert.Contains(t, raw, `\u202e`)
	assert.Contains(t, raw, `\udb40\udc41`, "a tag character as its surrogate pair")
	assert.Contains(t, raw, "é😀", "visible characters as they are")
	var n Note
	require.NoError(t, json.Unmarshal(b.Bytes(), &n))
	assert.Equal(t, text, n.Text, "decoded, the same text")
}
