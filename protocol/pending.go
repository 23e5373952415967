package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"unicode/utf8"

	"github.com/acpfs/acpfs/internal/pycompat"
)

// PendingState classifies the bytes that a writer of events.jsonl left
// after its last newline: what the filesystem holds for an open handle
// when the handle is closed.
type PendingState int

const (
	// PendingEmpty: no bytes, or whitespace only. There is no event;
	// AppendLine and AppendPending refuse it as an empty line
	// ("empty-line"), a caller may also simply drop it.
	PendingEmpty PendingState = iota
	// PendingPartial: the beginning of a JSON value that more bytes
	// could complete ({"seq":3,"fr). At close it is a cut-off event.
	PendingPartial
	// PendingComplete: exactly one complete JSON value, with optional
	// JSON whitespace around it (a final "\r" included). It is a line
	// whose newline is missing, and can be appended as if it were there.
	PendingComplete
	// PendingInvalid: no continuation can make it one JSON value (a
	// syntax error, or a second value after the first).
	PendingInvalid
)

func (s PendingState) String() string {
	switch s {
	case PendingEmpty:
		return "empty"
	case PendingPartial:
		return "partial"
	case PendingComplete:
		return "complete"
	case PendingInvalid:
		return "invalid"
	}
	return "unknown"
}

// ClassifyPending tells whether pending, bytes written to events.jsonl
// after the last newline, is one complete JSON value (PendingComplete),
// the start of one (PendingPartial), whitespace (PendingEmpty) or
// something no further bytes can repair (PendingInvalid). It does not
// check that the value is an event: AppendLine does.
//
// The filesystem uses it when a handle is closed with an unterminated
// line: `printf '{...}' >> events.jsonl` leaves a complete value, which
// is appended as if the newline had been written (see AppendPending),
// while a cut-off or broken line is still refused.
func ClassifyPending(pending []byte) PendingState {
	if utf8.Valid(pending) && pycompat.IsBlank(pending) {
		return PendingEmpty
	}
	if json.Valid(pending) {
		return PendingComplete
	}
	var v json.RawMessage
	err := json.NewDecoder(bytes.NewReader(pending)).Decode(&v)
	switch {
	case err == nil:
		// One value is complete and something other than whitespace
		// follows it.
		return PendingInvalid
	case errors.Is(err, io.ErrUnexpectedEOF):
		return PendingPartial
	}
	return PendingInvalid
}

// AppendPending appends the bytes that a writer left after the last
// newline of events.jsonl when it closes the file, as if the missing
// newline had been written: when ClassifyPending(pending) is
// PendingComplete, it is exactly AppendLine(pending, participant), and
// the file receives pending followed by "\n". A PendingPartial buffer is
// refused as Malformed with rule "incomplete-line" (the event was cut
// off); anything else is refused by AppendLine with its usual rule
// ("empty-line", "json", "utf8", ...). Errors are *Error, as for
// AppendLine.
func (l *Log) AppendPending(pending []byte, participant string) (Event, error) {
	if ClassifyPending(pending) != PendingPartial {
		return l.AppendLine(pending, participant)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		_ = l.refreshLocked() // only for the line number
	}
	return Event{}, &Error{Kind: Malformed, Line: l.lines + 1, Rule: "incomplete-line",
		Msg: "the line was closed without a newline and is not a complete JSON value: the event was cut off"}
}
