package protocol

import (
	"fmt"
	"sort"
	"sync"
	"time"
)

// rules is the configuration the state machine needs from protocol.json.
type rules struct {
	proto        *Protocol
	participants []string // sorted, unique
	listed       map[string]bool
}

func newRules(p *Protocol) *rules {
	r := &rules{proto: p, listed: map[string]bool{}}
	for _, id := range p.participants {
		r.listed[id] = true
	}
	r.participants = sortedKeys(r.listed)
	return r
}

// core is the derived state after some prefix of events.jsonl. Every
// field is either a scalar or a slice/map that is never modified in place
// (changes build a new one), so copying a core is O(1) and a step can
// compute the next state without touching the current one.
type core struct {
	Count int `json:"count"` // events (JSON objects) applied so far

	Phase    string   `json:"phase"` // "" before any phase-setting event
	Owner    string   `json:"owner"`
	OwnerSet bool     `json:"owner_set"`
	Waiting  []string `json:"waiting"`

	ReviewWaiting []string `json:"review_waiting"` // sorted
	AcceptWaiting []string `json:"accept_waiting"` // sorted
	AcceptedRound []string `json:"accepted_round"` // accepted since the latest classification, sorted

	ClassificationSeq      int  `json:"classification_seq"`
	LatestDecisionInputSeq int  `json:"latest_decision_input_seq"`
	ReadinessPassed        bool `json:"readiness_passed"`
	PrimaryDrafted         bool `json:"primary_drafted"`
	PrimaryFrozen          bool `json:"primary_frozen"`

	LastSeq   int       `json:"last_seq"`
	LastAt    time.Time `json:"last_at"`
	LastAtOK  bool      `json:"last_at_ok"`
	LastAtStr string    `json:"last_at_str"`

	Frozen map[string]string `json:"frozen"` // deliverable doc ref -> sha256

	HasDecisionAccepted   bool `json:"has_decision_accepted"`
	HasReadinessPassed    bool `json:"has_readiness_passed"`
	HasCompleted          bool `json:"has_completed"`
	HasPrimaryFrozenEvent bool `json:"has_primary_frozen_event"`

	Last                lastEvent  `json:"last"`
	ProposalSubmitted   *lastEvent `json:"proposal_submitted"`
	ProposalRevised     *lastEvent `json:"proposal_revised"`
	LastReviewSubmitted *lastEvent `json:"last_review_submitted"`
}

// lastEvent is what the state keeps of one event.
type lastEvent struct {
	Seq    int    `json:"seq"`
	SeqOK  bool   `json:"seq_ok"`
	Name   string `json:"name"`
	From   string `json:"from"`
	FromOK bool   `json:"from_ok"`
}

// IsSHA256 reports a 64-character lowercase hexadecimal string.
func IsSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !(s[i] >= '0' && s[i] <= '9' || s[i] >= 'a' && s[i] <= 'f') {
			return false
		}
	}
	return true
}

func phaseName(p string) string {
	if p == "" {
		return "none"
	}
	return p
}

// step applies one event to cur and returns the rules it breaks and the
// state after it. cur and seen are not modified; seen holds the seqs of
// the events before this one. The checks here depend only on the events
// and protocol.json; checks against other documents are in docchecks.go.
//
// The order of the violations is part of the contract (an append reports
// the first): the event's shape within the log, then its transition (see
// transitions), then bookkeeping that never fails.
func step(rs *rules, cur *core, seen *seqSet, r *record) ([]Violation, core) {
	var next core
	viol := stepInto(rs, cur, seen, r, &next)
	return viol, next
}

// stepInto is step writing the state after the event to next, which
// must not be cur: a replay steps every event of the history, and the
// state, copied around by value, cost more than the checks.
func stepInto(rs *rules, cur *core, seen *seqSet, r *record, next *core) []Violation {
	*next = *cur
	t := transitionPool.Get().(*transition)
	defer transitionPool.Put(t)
	*t = newTransition(rs, cur, next, r)
	t.checkShape(seen)
	if apply, ok := transitions[t.name]; ok {
		apply(t)
	}
	t.bookkeep()
	viol := t.viol
	*t = transition{} // the pool keeps no pointer into the caller's state
	return viol
}

// transitionPool recycles transitions: called through the table, a
// transition escapes to the heap, and a replay steps through every event
// of the history.
var transitionPool = sync.Pool{New: func() any { return new(transition) }}

// transition is one event being applied: the record, the state before it
// and the state being built, and the rules broken so far.
type transition struct {
	rs   *rules
	cur  *core
	next *core // starts as a copy of cur
	r    *record
	viol []Violation

	seq     int    // the event's seq, 0 without one
	name    string // the event name, "" without one
	actor   string // from
	actorOK bool
	role    string // "" without one
}

func newTransition(rs *rules, cur, next *core, r *record) transition {
	t := transition{rs: rs, cur: cur, next: next, r: r, actor: r.From, actorOK: r.has.has(fFrom)}
	if r.has.has(fSeq) {
		t.seq = r.Seq
	}
	if r.has.has(fEvent) {
		t.name = r.Event.Event
	}
	if r.has.has(fRole) {
		t.role = r.Role
	}
	return t
}

// violate records a broken rule of the event.
func (t *transition) violate(rule, format string, args ...any) {
	t.viol = append(t.viol, Violation{File: EventsFile, Line: t.r.line, Seq: t.seq, Rule: rule, Msg: fmt.Sprintf(format, args...), Kind: Rejected})
}

// validRole reports a role deliverable events accept.
func (t *transition) validRole() bool { return t.role == RolePrimary || t.role == RoleSupporting }

// event is the event as later checks (validate, next) remember it.
func (t *transition) event() lastEvent {
	return lastEvent{Seq: t.r.Seq, SeqOK: t.r.has.has(fSeq), Name: t.name, From: t.actor, FromOK: t.actorOK}
}

// checkShape checks the event's place within the log and its fields,
// whatever its transition.
func (t *transition) checkShape(seen *seqSet) {
	t.checkSeq()
	if isDeliverableEvent(t.name) {
		t.checkDeliverableFields()
	}
	t.checkReplyTo(seen)
	if t.r.atOK && t.cur.LastAtOK && t.r.at.Before(t.cur.LastAt) {
		t.violate("at-order", "at %s is earlier than the previous event's %s", t.r.At, t.cur.LastAtStr)
	}
	if isDeliverableEvent(t.name) && t.validRole() && t.r.has.has(fDoc) {
		if _, why := t.rs.proto.deliverableFile(t.r.Doc, t.role); why != "" {
			t.violate("deliverable-doc", "%s", why)
		}
	}
}

func (t *transition) checkSeq() {
	expected := t.cur.Count + 1
	if !t.r.has.has(fSeq) {
		t.violate("seq-continuous", "expected seq %d, got none", expected)
	} else if t.r.Seq != expected {
		t.violate("seq-continuous", "expected seq %d, got %d", expected, t.r.Seq)
	}
}

func (t *transition) checkDeliverableFields() {
	if !t.validRole() {
		t.violate("role-required", "%s needs role primary or supporting", t.name)
	}
	if !t.r.has.has(fDoc) {
		t.violate("doc-required", "%s needs doc naming the deliverable", t.name)
	}
	if t.name == EvDeliverableFrozen && !t.hasSHA() {
		t.violate("sha256-format", "deliverable_frozen needs sha256 as 64 lowercase hexadecimal digits")
	}
}

func (t *transition) hasSHA() bool { return t.r.has.has(fSHA) && IsSHA256(t.r.SHA256) }

func (t *transition) checkReplyTo(seen *seqSet) {
	r := t.r
	if t.name != EvInitialized && r.ReplyTo == nil {
		t.violate("reply-to-required", "reply_to is required on every event after initialized")
	}
	if r.ReplyTo == nil || seen.has(*r.ReplyTo) {
		return
	}
	if t.cur.Count == 0 {
		t.violate("reply-to-range", "reply_to %d names no earlier event (the log is empty)", *r.ReplyTo)
	} else {
		t.violate("reply-to-range", "reply_to %d names no earlier event (expected 1..%d)", *r.ReplyTo, t.cur.LastSeq)
	}
}

// bookkeep records what every event leaves behind; it never fails.
func (t *transition) bookkeep() {
	t.next.Count++
	if t.r.has.has(fSeq) {
		t.next.LastSeq = t.r.Seq
	}
	if t.r.atOK {
		t.next.LastAt, t.next.LastAtOK, t.next.LastAtStr = t.r.at, true, t.r.At
	}
	t.next.Last = t.event()
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// without returns a new slice without s.
func without(list []string, s string) []string {
	out := make([]string, 0, len(list))
	for _, x := range list {
		if x != s {
			out = append(out, x)
		}
	}
	return out
}

// withItem returns a new sorted slice that also holds s.
func withItem(list []string, s string) []string {
	if contains(list, s) {
		return list
	}
	out := append(append(make([]string, 0, len(list)+1), list...), s)
	sort.Strings(out)
	return out
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
