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
