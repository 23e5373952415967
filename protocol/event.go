package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/acpfs/acpfs/internal/pycompat"
)

// Event names of ACP schema v2.
const (
	EvInitialized        = "initialized"
	EvDeliverableDrafted = "deliverable_drafted"
	EvDeliverableRevised = "deliverable_revised"
	EvDeliverableFrozen  = "deliverable_frozen"
	EvProposalSubmitted  = "proposal_submitted"
	EvReviewSubmitted    = "review_submitted"
	EvProposalRevised    = "proposal_revised"
	EvQuestionClassified = "question_classified"
	EvDecisionProposed   = "decision_proposed"
	EvDecisionAccepted   = "decision_accepted"
	EvReadinessPassed    = "readiness_passed"
	EvCompleted          = "completed"
	EvBlocked            = "blocked"
)

// EventNames lists every event name, sorted.
var EventNames = []string{
	EvBlocked, EvCompleted, EvDecisionAccepted, EvDecisionProposed,
	EvDeliverableDrafted, EvDeliverableFrozen, EvDeliverableRevised,
	EvInitialized, EvProposalRevised, EvProposalSubmitted,
	EvQuestionClassified, EvReadinessPassed, EvReviewSubmitted,
}

var eventNameSet = func() map[string]bool {
	m := make(map[string]bool, len(EventNames))
	for _, n := range EventNames {
		m[n] = true
	}
	return m
}()

// KnownEvent reports whether name is an ACP event name.
func KnownEvent(name string) bool { return eventNameSet[name] }

func isDeliverableEvent(name string) bool {
	return name == EvDeliverableDrafted || name == EvDeliverableRevised || name == EvDeliverableFrozen
}

// Roles of deliverable events.
const (
	RolePrimary    = "primary"
	RoleSupporting = "supporting"
)

// fieldMask records which event fields were present with the right JSON type.
type fieldMask uint16

// The fields of an event, one bit each, in the order of eventFields.
const (
	fSeq fieldMask = 1 << iota
	fFrom
	fEvent
	fAt
	fSummary
	fDoc
	fReplyTo
	fRole
	fSHA
)

// eventField declares one field of an event line: how it is read from a
// line and written to one. A field of Event that lines carry is a row of
// eventFields (and a bit above); parsing, the required-field check and
// encodeLine all follow the table.
type eventField struct {
	bit      fieldMask
	name     string
	required bool // a line without it is refused; encodeLine always writes it
	integer  bool // a JSON integer, otherwise a JSON string
	// read stores the value of a field present with the right JSON
	// type: raw is a string's JSON (with its quotes), n an integer.
	read func(rec *record, raw []byte, n int, in interner)
	// write appends the value to b and reports whether it is set:
	// encodeLine leaves out an optional field that is not.
	write func(b *bytes.Buffer, e *Event) bool
}

// eventFields lists the fields in the order encodeLine writes them, the
// order the reference scripts write them; row i holds bit 1<<i.
var eventFields = [...]eventField{
	{bit: fSeq, name: "seq", required: true, integer: true,
		read:  func(rec *record, _ []byte, n int, _ interner) { rec.Seq = n },
		write: func(b *bytes.Buffer, e *Event) bool { b.WriteString(strconv.Itoa(e.Seq)); return true }},
	{bit: fFrom, name: "from", required: true,
		read:  func(rec *record, raw []byte, _ int, in interner) { rec.From = in.get(raw) },
		write: func(b *bytes.Buffer, e *Event) bool { return writeString(b, e.From) }},
	{bit: fEvent, name: "event", required: true,
		read:  func(rec *record, raw []byte, _ int, _ interner) { rec.Event.Event = canonicalEvent(raw) },
		write: func(b *bytes.Buffer, e *Event) bool { return writeString(b, e.Event) }},
	{bit: fAt, name: "at", required: true, read: readAt,
		write: func(b *bytes.Buffer, e *Event) bool { return writeString(b, e.At) }},
	{bit: fSummary, name: "summary", required: true,
		read: func(rec *record, raw []byte, _ int, in interner) {
			if in == nil { // a replay checks the summary but does not keep it
				rec.Summary = pycompat.DecodeString(raw)
			}
		},
		write: func(b *bytes.Buffer, e *Event) bool { return writeString(b, e.Summary) }},
	{bit: fDoc, name: "doc",
		read:  func(rec *record, raw []byte, _ int, _ interner) { rec.Doc = pycompat.DecodeString(raw) },
		write: func(b *bytes.Buffer, e *Event) bool { return writeString(b, e.Doc) }},
	{bit: fReplyTo, name: "reply_to", integer: true,
		read: func(rec *record, _ []byte, n int, _ interner) { rec.ReplyTo = &n },
		write: func(b *bytes.Buffer, e *Event) bool {
			if e.ReplyTo == nil {
				return false
			}
			b.WriteString(strconv.Itoa(*e.ReplyTo))
			return true
		}},
	{bit: fRole, name: "role", read: readRole,
		write: func(b *bytes.Buffer, e *Event) bool { return writeString(b, e.Role) }},
	{bit: fSHA, name: "sha256",
		read:  func(rec *record, raw []byte, _ int, _ interner) { rec.SHA256 = pycompat.DecodeString(raw) },
		write: func(b *bytes.Buffer, e *Event) bool { return writeString(b, e.SHA256) }},
}

// fieldOf is the row of a field's bit.
func fieldOf(bit fieldMask) *eventField { return &eventFields[bits.TrailingZeros16(uint16(bit))] }

func (m fieldMask) has(f fieldMask) bool { return m&f != 0 }

// record is one parsed line of events.jsonl: the typed event, which fields
// were usable, the parsed time and the parse problems found.
type record struct {
	Event
	has    fieldMask
	at     time.Time
	atOK   bool
	line   int
	object bool        // the line is a JSON object (it counts as an event)
	bad    []Violation // malformed-line findings, in field order
	// unknown lists the names of fields that ACP schema v2 does not
	// define, in line order. They are kept in the file as written (other
	// ACP tools may add fields) and only reported by the validator.
	unknown []string
	members []pycompat.Member // the parse's scratch
}

// Violation is one broken rule, as found by a replay, an append check or
// the validator.
type Violation struct {
	File string // folder-relative file name, "" for the folder itself
	Line int    // 1-based line in File, 0 if not applicable
	Seq  int    // event seq, 0 if unknown
	Rule string // stable rule identifier
	Msg  string // one human sentence, no trailing period
	Kind ErrorKind
}

func (v Violation) String() string {
	var b bytes.Buffer
	if v.File != "" {
		b.WriteString(v.File)
		if v.Line > 0 {
			fmt.Fprintf(&b, " line %d", v.Line)
		}
		b.WriteString(": ")
	}
	if v.Seq > 0 {
		fmt.Fprintf(&b, "seq %d: ", v.Seq)
	}
	fmt.Fprintf(&b, "%s [%s]", v.Msg, v.Rule)
	return b.String()
}

// asError converts a violation on events.jsonl into the contract's error.
func (v Violation) asError() *Error {
	kind := v.Kind
	if kind == 0 {
		kind = Rejected
	}
	return &Error{Kind: kind, Line: v.Line, Seq: v.Seq, Rule: v.Rule, Msg: v.Msg}
}

func malformed(line int, rule, format string, args ...any) Violation {
	return Violation{File: EventsFile, Line: line, Rule: rule, Msg: fmt.Sprintf(format, args...), Kind: Malformed}
}

// parseLine parses one line of events.jsonl (without its newline). It never
// fails outright: problems are reported in rec.bad, and rec.object tells
// whether the line still counts as an event for the history. One "\r"
// at the end of the line is the CR of a CRLF line ending (JSON
// whitespace, and a line end for the reference's universal-newline
// reader), not part of the event.
func parseLine(line []byte, lineNo int) *record {
	rec := &record{}
	parseLineInto(rec, line, lineNo, nil)
	return rec
}

// interner returns canonical copies of the strings that repeat on every
// line (participant ids), so that a replay does not allocate them again.
type interner map[string]string

func (in interner) get(raw []byte) string {
	if in == nil {
		return pycompat.DecodeString(raw)
	}
	if s, ok := in[string(raw)]; ok {
		return s
	}
	s := pycompat.DecodeString(raw)
	if len(in) < 1024 {
		in[string(raw)] = s
	}
	return s
}

// parseLineInto is parseLine into a reused record. With a non-nil
// interner (history replays) the summary is checked but not kept.
func parseLineInto(rec *record, line []byte, lineNo int, in interner) {
	bad, unknown, members := rec.bad[:0], rec.unknown[:0], rec.members[:0]
	*rec = record{line: lineNo, bad: bad, unknown: unknown}
	line = trimCR(line)
	// Nearly every line is a flat object read in one pass; the others
	// (and every invalid one) take the general path, which decides.
	members, flat := pycompat.ScanFlat(line, members)
	if !flat {
		if !utf8.Valid(line) {
			rec.bad = append(rec.bad, malformed(lineNo, "utf8", "line is not valid UTF-8"))
			return
		}
		if members, flat = rec.scanGeneral(line, lineNo, members); !flat {
			return
		}
	}
	rec.object = true
	var seen fieldMask
	for _, m := range members {
		seen = rec.member(seen, m.Key(line), m.Kind, m.Raw(line), lineNo, in)
	}
	rec.members = members[:0]
	for i := range eventFields {
		if f := &eventFields[i]; f.required && seen&f.bit == 0 {
			rec.bad = append(rec.bad, malformed(lineNo, "field-missing", "missing required field %q", f.name))
		}
	}
	if rec.has.has(fEvent) && !KnownEvent(rec.Event.Event) {
		rec.bad = append(rec.bad, malformed(lineNo, "event-unknown", "unknown event %q", rec.Event.Event))
	}
	if rec.has.has(fSeq) {
		for i := range rec.bad {
			rec.bad[i].Seq = rec.Seq
		}
	}
}

// scanGeneral reads a line ScanFlat did not: it reports a blank line,
// invalid JSON, a JSON value that is not an object or a raw line break,
// and appends the members of an object to members. ok is false when the
// line is not an object (it then counts as no event).
func (rec *record) scanGeneral(line []byte, lineNo int, members []pycompat.Member) ([]pycompat.Member, bool) {
	if pycompat.IsBlank(line) {
		rec.bad = append(rec.bad, malformed(lineNo, "empty-line", "line is empty"))
		return members, false
	}
	if !json.Valid(line) {
		rec.bad = append(rec.bad, malformed(lineNo, "json", "line is not one JSON value"))
		return members, false
	}
	if len(line) > math.MaxInt32 { // members are int32 offsets
		rec.bad = append(rec.bad, malformed(lineNo, "line-length", "line is longer than 2 GiB"))
		return members, false
	}
	s := pycompat.NewScanner(line)
	if !s.Open() {
		rec.bad = append(rec.bad, malformed(lineNo, "json-object", "line is a JSON value but not an object"))
		return members, false
	}
	if r := pycompat.LineBreakRune(line); r != 0 {
		rec.bad = append(rec.bad, malformed(lineNo, "line-break", "line contains a raw line-separator character (U+%04X)", r))
	}
	for {
		m, ok := s.Next()
		if !ok {
			return members, true
		}
		members = append(members, m)
	}
}

// member applies one member of the line's object, given the fields seen
// before it, and returns the fields seen with it.
func (rec *record) member(seen fieldMask, keyRaw []byte, kind pycompat.Kind, raw []byte, lineNo int, in interner) fieldMask {
	bit := fieldBit(keyRaw)
	if bit == 0 {
		key := pycompat.DecodeString(keyRaw)
		if bit = fieldBit([]byte(`"` + key + `"`)); bit == 0 {
			if contains(rec.unknown, key) {
				rec.bad = append(rec.bad, malformed(lineNo, "field-duplicate", "field %q appears twice", key))
				return seen
			}
			// Kept for forward compatibility with other writers;
			// the validator mentions it as a warning.
			rec.unknown = append(rec.unknown, key)
			return seen
		}
	}
	if seen&bit != 0 {
		rec.bad = append(rec.bad, malformed(lineNo, "field-duplicate", "field %q appears twice", fieldOf(bit).name))
		return seen
	}
	rec.setField(bit, kind, raw, lineNo, in)
	return seen | bit
}

// trimCR removes the "\r" of a CRLF line ending from a line whose "\n"
// is already gone. Only one is removed: any other raw "\r" still splits
// the line for the reference's reader, and is refused as a line break.
func trimCR(line []byte) []byte {
	if n := len(line); n > 0 && line[n-1] == '\r' {
		return line[:n-1]
	}
	return line
}

// fieldBit maps a raw JSON key (with its quotes, without escapes) to its
// field, or 0.
func fieldBit(raw []byte) fieldMask {
	if len(raw) < 2 {
		return 0
	}
	name := raw[1 : len(raw)-1]
	for i := range eventFields {
		if string(name) == eventFields[i].name {
			return eventFields[i].bit
		}
	}
	return 0
}

// setField checks the JSON type of a field's value and, when it is
// right, marks the field present and reads it.
func (rec *record) setField(bit fieldMask, kind pycompat.Kind, raw []byte, lineNo int, in interner) {
	f := fieldOf(bit)
	n := 0
	switch {
	case !f.integer && kind != pycompat.String:
		rec.bad = append(rec.bad, malformed(lineNo, "field-type", "field %q must be a string", f.name))
		return
	case f.integer && (kind != pycompat.Number || bytes.ContainsAny(raw, ".eE")):
		rec.bad = append(rec.bad, malformed(lineNo, "field-type", "field %q must be an integer", f.name))
		return
	case f.integer:
		var ok bool
		if n, ok = smallInt(raw); !ok {
			var err error
			if n, err = strconv.Atoi(string(raw)); err != nil {
				rec.bad = append(rec.bad, malformed(lineNo, "field-type", "field %q is out of range", f.name))
				return
			}
		}
	}
	rec.has |= bit
	f.read(rec, raw, n, in)
}

// smallInt reads a JSON integer of at most 18 digits, which no int64
// overflows, without the allocation of strconv.Atoi(string(raw)); ok is
// false for anything else.
func smallInt(raw []byte) (int, bool) {
	digits := raw
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || len(digits) > 18 {
		return 0, false
	}
	n := 0
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	if len(digits) < len(raw) {
		n = -n
	}
	return n, true
}

// readAt reads the time of an event, which must parse.
func readAt(rec *record, raw []byte, _ int, _ interner) {
	rec.At = pycompat.DecodeString(raw)
	t, ok := parseTime(rec.At)
	if !ok {
		rec.bad = append(rec.bad, malformed(rec.line, "at-format", "at %q is not an ISO-8601 UTC timestamp such as 2026-01-02T03:04:05Z", rec.At))
	}
	rec.at, rec.atOK = t, ok
}

// readRole reads a deliverable's role, without allocating the two that
// ACP knows.
func readRole(rec *record, raw []byte, _ int, _ interner) {
	switch string(raw) {
	case `"primary"`:
		rec.Role = RolePrimary
	case `"supporting"`:
		rec.Role = RoleSupporting
	default:
		rec.Role = pycompat.DecodeString(raw)
	}
}

// canonicalEvent returns the constant for a known event name, avoiding an
// allocation per line.
func canonicalEvent(raw []byte) string {
	if len(raw) >= 2 && bytes.IndexByte(raw, '\\') < 0 {
		name := raw[1 : len(raw)-1]
		for _, n := range EventNames {
			if string(name) == n {
				return n
			}
		}
	}
	return pycompat.DecodeString(raw)
}

// encodeLine renders an event as one compact JSON line, fields in the
// order the reference scripts write them and non-ASCII kept as is.
func encodeLine(e Event) []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for i := range eventFields {
		f := &eventFields[i]
		mark := b.Len()
		if mark > 1 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		b.WriteString(f.name)
		b.WriteString(`":`)
		if !f.write(&b, &e) && !f.required {
			b.Truncate(mark)
		}
	}
	b.WriteByte('}')
	return b.Bytes()
}

// writeString appends s as a JSON string and reports whether it is set.
func writeString(b *bytes.Buffer, s string) bool {
	pycompat.WriteLineString(b, s)
	return s != ""
}
