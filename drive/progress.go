package drive

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/internal/textsafe"
)

// Progress output modes.
const (
	ModePlain = "plain" // one line per event
	ModeTTY   = "tty"   // one live status block, events above it
	ModeJSON  = "json"  // one JSON object per event
)

// The types of the driver's notes.
const (
	NotePhase       = "phase"        // the collaboration moved on
	NoteTurnStarted = "turn_started" // a participant's turn began
	NoteTurnEnded   = "turn_ended"   // and ended (or could not start)
	NoteRefusal     = "refusal"      // a turn was refused something, or overran its timeout
	NoteOutput      = "output"       // a line a turn's command printed
	NoteRetry       = "retry"        // a turn appended nothing and runs again
	NoteGaveUp      = "gave_up"      // a participant's retries are exhausted
	NoteStopped     = "stopped"      // a signal or the deadline stops the running turns
	NoteAudit       = "audit"        // the closing audit's verdict
	NoteInfo        = "info"         // anything else worth a line
)

// Note is one thing the driver reports.
type Note struct {
	At          string `json:"at"`
	Type        string `json:"type"` // one of the Note* types
	Participant string `json:"participant,omitempty"`
	Turn        string `json:"turn,omitempty"`
	Text        string `json:"text"`
}

// status is the live block's content.
type status struct {
	phase       string
	running     []string
	events      int
	lastRefusal string
}

// progress writes notes in one of the modes; it is safe for concurrent
// use (turns report their output from their own goroutines).
type progress struct {
	mu    sync.Mutex
	w     io.Writer
	mode  string
	start time.Time
	st    status
	drawn int // lines of the block on screen
}

func newProgress(w io.Writer, mode string) *progress {
	return &progress{w: w, mode: mode, start: time.Now()}
}

func (p *progress) note(n Note) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n.At == "" {
		n.At = time.Now().UTC().Format(time.RFC3339)
	}
	switch p.mode {
	case ModeJSON:
		b, _ := json.Marshal(n)
		fmt.Fprintf(p.w, "%s\n", jsonPrintable(b))
	case ModeTTY:
		p.eraseLocked()
		fmt.Fprintln(p.w, plainLine(n))
		p.drawLocked()
	default:
		fmt.Fprintln(p.w, plainLine(n))
	}
}

func plainLine(n Note) string {
	if n.Type == NoteOutput {
		return fmt.Sprintf("  %s| %s", n.Participant, Printable(n.Text))
	}
	return "acpfs drive: " + Printable(n.Text)
}

// Printable shows control characters as \xNN and the invisible format
// characters of Unicode (bidirectional overrides and isolates,
// zero-width characters, line and paragraph separators, tag characters)
// as \u{XXXX}: agents choose their output and much of what their
// refusals quote, and must not drive the coordinator's terminal (move
// the cursor, rewrite lines, set its title) nor reorder or hide what it
// shows.
func Printable(s string) string {
	var b strings.Builder
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		switch {
		case r == '\t' || r >= 0x20 && r < 0x7f:
			b.WriteRune(r)
		case r < 0x20 || r >= 0x7f && r <= 0x9f:
			fmt.Fprintf(&b, "\\x%02x", r)
		case textsafe.Invisible(r):
			fmt.Fprintf(&b, "\\u{%04x}", r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// jsonPrintable escapes, in a JSON text, the characters a terminal that
// shows it would act on or hide that encoding/json leaves as they are
// (C1 controls, the invisible ones): as JSON's own \uXXXX, so that a
// reader decodes the same text.
func jsonPrintable(js []byte) []byte {
	out := make([]byte, 0, len(js))
	for len(js) > 0 {
		r, n := utf8.DecodeRune(js)
		if r >= 0x80 && r <= 0x9f || r > 0x9f && textsafe.Invisible(r) {
			if r > 0xffff {
				hi, lo := utf16.EncodeRune(r)
				out = fmt.Appendf(out, "\\u%04x\\u%04x", hi, lo)
			} else {
				out = fmt.Appendf(out, "\\u%04x", r)
			}
		} else {
			out = append(out, js[:n]...)
		}
		js = js[n:]
	}
	return out
}

func (p *progress) notef(typ, participant, turn, format string, args ...any) {
	p.note(Note{Type: typ, Participant: participant, Turn: turn, Text: fmt.Sprintf(format, args...)})
}

// update changes the live block (shown on a terminal only).
func (p *progress) update(f func(*status)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(&p.st)
	if p.mode == ModeTTY {
		p.eraseLocked()
		p.drawLocked()
	}
}

// tick redraws the block, for the elapsed time.
func (p *progress) tick() { p.update(func(*status) {}) }

// done leaves the block's last state on screen.
func (p *progress) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drawn = 0
}

func (p *progress) eraseLocked() {
	for ; p.drawn > 0; p.drawn-- {
		fmt.Fprint(p.w, "\033[1A\033[2K")
	}
}

func (p *progress) drawLocked() {
	turn := strings.Join(p.st.running, ", ")
	if turn == "" {
		turn = "-"
	}
	refusal := p.st.lastRefusal
	if refusal == "" {
		refusal = "none"
	}
	lines := []string{
		fmt.Sprintf("┌ phase: %s", p.st.phase),
		fmt.Sprintf("│ turn: %s", turn),
		fmt.Sprintf("│ elapsed: %s   events: %d", time.Since(p.start).Round(time.Second), p.st.events),
		fmt.Sprintf("└ last refusal: %s", refusal),
	}
	width := termWidth(p.w)
	for _, l := range lines {
		l = Printable(l)
		// A line the terminal wraps would be erased only in part.
		if r := []rune(l); len(r) > width {
			l = string(r[:width-1]) + "…"
		}
		fmt.Fprintln(p.w, l)
	}
	p.drawn = len(lines)
}

// termWidth is the width of the terminal w is, 80 when it cannot tell.
func termWidth(w io.Writer) int {
	if f, ok := w.(*os.File); ok {
		if ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ); err == nil && ws.Col > 10 {
			return int(ws.Col)
		}
	}
	return 80
}
