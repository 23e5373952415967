package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
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
	for _, f := range requiredFields {
		if seen&f.bit == 0 {
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
		rec.bad = append(rec.bad, malformed(lineNo, "field-duplicate", "field %q appears twice", fieldNames[bit]))
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

var fieldNames = map[fieldMask]string{fSeq: "seq", fFrom: "from", fEvent: "event", fAt: "at", fSummary: "summary",
	fDoc: "doc", fReplyTo: "reply_to", fRole: "role", fSHA: "sha256"}

// fieldBit maps a raw JSON key (with its quotes, without escapes) to its
// field, or 0.
func fieldBit(raw []byte) fieldMask {
	switch string(raw) {
	case `"seq"`:
		return fSeq
	case `"from"`:
		return fFrom
	case `"event"`:
		return fEvent
	case `"at"`:
		return fAt
	case `"summary"`:
		return fSummary
	case `"doc"`:
		return fDoc
	case `"reply_to"`:
		return fReplyTo
	case `"role"`:
		return fRole
	case `"sha256"`:
		return fSHA
	}
	return 0
}

var requiredFields = []struct {
	name string
	bit  fieldMask
}{{"seq", fSeq}, {"from", fFrom}, {"event", fEvent}, {"at", fAt}, {"summary", fSummary}}

func (rec *record) setField(bit fieldMask, kind pycompat.Kind, raw []byte, lineNo int, in interner) {
	switch bit {
	case fSeq:
		rec.Seq, _ = rec.intField(bit, kind, raw, lineNo)
		return
	case fReplyTo:
		if n, ok := rec.intField(bit, kind, raw, lineNo); ok {
			rec.ReplyTo = &n
		}
		return
	}
	// Every other field is a string.
	if kind != pycompat.String {
		rec.bad = append(rec.bad, malformed(lineNo, "field-type", "field %q must be a string", fieldNames[bit]))
		return
	}
	rec.has |= bit
	switch bit {
	case fFrom:
		rec.From = in.get(raw)
	case fEvent:
		rec.Event.Event = canonicalEvent(raw)
	case fAt:
		rec.At = pycompat.DecodeString(raw)
		t, ok := parseTime(rec.At)
		if !ok {
			rec.bad = append(rec.bad, malformed(lineNo, "at-format", "at %q is not an ISO-8601 UTC timestamp such as 2026-01-02T03:04:05Z", rec.At))
		}
		rec.at, rec.atOK = t, ok
	case fSummary:
		if in == nil {
			rec.Summary = pycompat.DecodeString(raw)
		}
	case fDoc:
		rec.Doc = pycompat.DecodeString(raw)
	case fRole:
		switch string(raw) {
		case `"primary"`:
			rec.Role = RolePrimary
		case `"supporting"`:
			rec.Role = RoleSupporting
		default:
			rec.Role = pycompat.DecodeString(raw)
		}
	case fSHA:
		rec.SHA256 = pycompat.DecodeString(raw)
	}
}

// intField reads the integer value of field bit, or reports why it is
// not one.
func (rec *record) intField(bit fieldMask, kind pycompat.Kind, raw []byte, lineNo int) (int, bool) {
	n, ok := 0, false
	if kind == pycompat.Number {
		n, ok = smallInt(raw)
	}
	if !ok {
		if kind != pycompat.Number || bytes.ContainsAny(raw, ".eE") {
			rec.bad = append(rec.bad, malformed(lineNo, "field-type", "field %q must be an integer", fieldNames[bit]))
			return 0, false
		}
		var err error
		if n, err = strconv.Atoi(string(raw)); err != nil {
			rec.bad = append(rec.bad, malformed(lineNo, "field-type", "field %q is out of range", fieldNames[bit]))
			return 0, false
		}
	}
	rec.has |= bit
	return n, true
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
	b.WriteString(`{"seq":`)
	b.WriteString(strconv.Itoa(e.Seq))
	b.WriteString(`,"from":`)
	pycompat.WriteLineString(&b, e.From)
	b.WriteString(`,"event":`)
	pycompat.WriteLineString(&b, e.Event)
	b.WriteString(`,"at":`)
	pycompat.WriteLineString(&b, e.At)
	b.WriteString(`,"summary":`)
	pycompat.WriteLineString(&b, e.Summary)
	if e.Doc != "" {
		b.WriteString(`,"doc":`)
		pycompat.WriteLineString(&b, e.Doc)
	}
	if e.ReplyTo != nil {
		b.WriteString(`,"reply_to":`)
		b.WriteString(strconv.Itoa(*e.ReplyTo))
	}
	if e.Role != "" {
		b.WriteString(`,"role":`)
		pycompat.WriteLineString(&b, e.Role)
	}
	if e.SHA256 != "" {
		b.WriteString(`,"sha256":`)
		pycompat.WriteLineString(&b, e.SHA256)
	}
	b.WriteByte('}')
	return b.Bytes()
}
