package protocol

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
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
	count int // events (JSON objects) applied so far

	phase    string // "" before any phase-setting event
	owner    string
	ownerSet bool
	waiting  []string

	reviewWaiting []string // sorted
	acceptWaiting []string // sorted
	acceptedRound []string // accepted since the latest classification, sorted

	classificationSeq      int
	latestDecisionInputSeq int
	readinessPassed        bool
	primaryDrafted         bool
	primaryFrozen          bool

	lastSeq   int
	lastAt    time.Time
	lastAtOK  bool
	lastAtStr string

	frozen map[string]string // deliverable doc ref -> sha256

	hasDecisionAccepted   bool
	hasReadinessPassed    bool
	hasCompleted          bool
	hasPrimaryFrozenEvent bool

	last                lastEvent
	proposalSubmitted   *lastEvent
	proposalRevised     *lastEvent
	lastReviewSubmitted *lastEvent
}

type lastEvent struct {
	seq    int
	seqOK  bool
	name   string
	from   string
	fromOK bool
}

var sha256Pattern = regexp.MustCompile(`^[0-9a-f]{64}$`)

// IsSHA256 reports a 64-character lowercase hexadecimal string.
func IsSHA256(s string) bool { return len(s) == 64 && sha256Pattern.MatchString(s) }

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
func step(rs *rules, cur *core, seen *seqSet, r *record) ([]Violation, core) {
	next := *cur
	var viol []Violation
	seq := 0
	if r.has.has(fSeq) {
		seq = r.Seq
	}
	v := func(rule, format string, args ...any) {
		viol = append(viol, Violation{File: EventsFile, Line: r.line, Seq: seq, Rule: rule, Msg: fmt.Sprintf(format, args...), Kind: Rejected})
	}
	name := ""
	if r.has.has(fEvent) {
		name = r.Event.Event
	}
	actor, actorOK := r.From, r.has.has(fFrom)
	role := ""
	if r.has.has(fRole) {
		role = r.Role
	}

	// Shape of the event within the log.
	expected := cur.count + 1
	if !r.has.has(fSeq) {
		v("seq-continuous", "expected seq %d, got none", expected)
	} else if r.Seq != expected {
		v("seq-continuous", "expected seq %d, got %d", expected, r.Seq)
	}
	validRole := role == RolePrimary || role == RoleSupporting
	if isDeliverableEvent(name) {
		if !validRole {
			v("role-required", "%s needs role primary or supporting", name)
		}
		if !r.has.has(fDoc) {
			v("doc-required", "%s needs doc naming the deliverable", name)
		}
		if name == EvDeliverableFrozen && !(r.has.has(fSHA) && IsSHA256(r.SHA256)) {
			v("sha256-format", "deliverable_frozen needs sha256 as 64 lowercase hexadecimal digits")
		}
	}
	if name != EvInitialized && r.ReplyTo == nil {
		v("reply-to-required", "reply_to is required on every event after initialized")
	}
	if r.ReplyTo != nil && !seen.has(*r.ReplyTo) {
		if cur.count == 0 {
			v("reply-to-range", "reply_to %d names no earlier event (the log is empty)", *r.ReplyTo)
		} else {
			v("reply-to-range", "reply_to %d names no earlier event (expected 1..%d)", *r.ReplyTo, cur.lastSeq)
		}
	}
	if r.atOK && cur.lastAtOK && r.at.Before(cur.lastAt) {
		v("at-order", "at %s is earlier than the previous event's %s", r.At, cur.lastAtStr)
	}
	if isDeliverableEvent(name) && validRole && r.has.has(fDoc) {
		if _, why := rs.proto.deliverableFile(r.Doc, role); why != "" {
			v("deliverable-doc", "%s", why)
		}
	}

	// The phase state machine.
	inSet := func(set []string) bool { return actorOK && contains(set, actor) }
	who := func() string {
		if actorOK {
			return fmt.Sprintf("%q", actor)
		}
		return "an event without from"
	}
	expectTurn := func(allowed []string, action string) {
		if inSet(allowed) {
			return
		}
		list := strings.Join(allowed, ", ")
		if list == "" {
			list = "no participant"
		}
		v("turn", "%s is reserved for %s, not %s", action, list, who())
	}
	ownerTurn := func(action string) {
		if next.owner != "" {
			expectTurn([]string{next.owner}, action)
		}
	}
	ownerList := func() []string {
		if next.owner != "" {
			return []string{next.owner}
		}
		return nil
	}
	notFrom := func(allowed ...string) {
		for _, p := range allowed {
			if cur.phase == p {
				return
			}
		}
		v("phase", "%s is not allowed in phase %s (allowed: %s)", name, phaseName(cur.phase), strings.Join(allowed, ", "))
	}

	switch name {
	case EvInitialized:
		if !r.has.has(fSeq) || r.Seq != 1 {
			v("initialized-seq", "initialized must be seq 1")
		}
		if !actorOK || !rs.listed[actor] {
			v("participant", "initialized by %s, who is not listed in protocol.json", who())
		}
		next.owner, next.ownerSet = "", false
		if actorOK {
			next.owner, next.ownerSet = actor, true
		}
		next.phase = PhaseDrafting
		next.waiting = ownerList()
	case EvBlocked:
		next.phase = PhaseBlocked
		next.waiting = nil
	case EvDeliverableDrafted:
		if role == RolePrimary {
			notFrom(PhaseDrafting, PhaseRevising, PhaseDecisionReview)
			ownerTurn("drafting the primary deliverable")
			next.primaryDrafted = true
		}
	case EvDeliverableRevised:
		if role == RolePrimary {
			if cur.primaryFrozen {
				v("revise-after-freeze", "the primary deliverable is frozen and can no longer be revised")
			}
			notFrom(PhaseRevising, PhaseDecisionReview)
			ownerTurn("revising the primary deliverable")
			next.primaryDrafted = true
		}
	case EvDeliverableFrozen:
		if role == RolePrimary {
			if cur.primaryFrozen {
				v("primary-frozen-once", "the primary deliverable is already frozen")
			}
			notFrom(PhaseReadinessCheck)
			ownerTurn("freezing the primary deliverable")
			next.primaryFrozen = true
		}
	case EvProposalSubmitted:
		notFrom(PhaseDrafting, PhaseRevising)
		if !cur.primaryDrafted {
			v("primary-draft-required", "proposal_submitted needs an earlier deliverable_drafted of the primary deliverable")
		}
		switch {
		case cur.owner != "":
			expectTurn([]string{cur.owner}, "submitting the proposal")
		case actorOK:
		default:
			expectTurn(nil, "submitting the proposal")
		}
		if actorOK {
			next.owner, next.ownerSet = actor, true
		}
		var reviewers []string
		for _, p := range rs.participants {
			if !(next.ownerSet && p == next.owner) {
				reviewers = append(reviewers, p)
			}
		}
		if len(reviewers) == 0 {
			v("reviewer-required", "proposal_submitted needs at least one other participant to review")
		}
		next.reviewWaiting = reviewers
		next.phase = PhaseReviewing
		next.waiting = reviewers
	case EvReviewSubmitted:
		notFrom(PhaseReviewing)
		expectTurn(cur.reviewWaiting, "submitting a review now")
		if inSet(cur.reviewWaiting) {
			next.reviewWaiting = without(cur.reviewWaiting, actor)
		}
		if len(next.reviewWaiting) > 0 {
			next.phase = PhaseReviewing
			next.waiting = next.reviewWaiting
		} else {
			next.phase = PhaseRevising
			next.waiting = ownerList()
		}
	case EvProposalRevised, EvDecisionProposed:
		if name == EvProposalRevised {
			notFrom(PhaseRevising)
			ownerTurn("revising the proposal")
		} else {
			notFrom(PhaseRevising, PhaseDecisionReview)
			ownerTurn("proposing decisions")
		}
		if r.has.has(fSeq) {
			next.latestDecisionInputSeq = r.Seq
		}
		next.classificationSeq = 0
		next.acceptedRound = nil
		next.phase = PhaseDecisionReview
		next.waiting = ownerList()
	case EvQuestionClassified:
		notFrom(PhaseDecisionReview)
		ownerTurn("classifying questions")
		if r.has.has(fSeq) {
			next.classificationSeq = r.Seq
		}
		next.acceptWaiting = rs.participants
		next.acceptedRound = nil
		next.phase = PhaseDecisionReview
		next.waiting = rs.participants
	case EvDecisionAccepted:
		notFrom(PhaseDecisionReview)
		if cur.latestDecisionInputSeq != 0 && cur.classificationSeq <= cur.latestDecisionInputSeq {
			v("classification-required", "decision_accepted needs a question_classified after the latest proposal_revised or decision_proposed (seq %d)", cur.latestDecisionInputSeq)
		}
		expectTurn(cur.acceptWaiting, "accepting decisions now")
		if inSet(cur.acceptWaiting) {
			next.acceptWaiting = without(cur.acceptWaiting, actor)
			next.acceptedRound = withItem(cur.acceptedRound, actor)
		}
		if len(next.acceptWaiting) > 0 {
			next.phase = PhaseDecisionReview
			next.waiting = next.acceptWaiting
		} else {
			next.phase = PhaseReadinessCheck
			next.waiting = ownerList()
		}
	case EvReadinessPassed:
		notFrom(PhaseReadinessCheck)
		if !cur.primaryFrozen {
			v("freeze-required", "readiness_passed needs an earlier deliverable_frozen of the primary deliverable")
		}
		ownerTurn("passing readiness")
		next.readinessPassed = true
		next.phase = PhaseReadinessCheck
		next.waiting = ownerList()
	case EvCompleted:
		if cur.phase != PhaseReadinessCheck || !cur.readinessPassed {
			v("readiness-passed-required", "completed needs an earlier readiness_passed in phase readiness_check (phase is %s)", phaseName(cur.phase))
		}
		if !r.has.has(fDoc) || r.Doc != ConclusionFile {
			v("completed-doc", "completed must have doc %q", ConclusionFile)
		}
		ownerTurn("completing the collaboration")
		next.phase = PhaseCompleted
		next.waiting = nil
	}

	// Bookkeeping that never fails.
	next.count++
	if r.has.has(fSeq) {
		next.lastSeq = r.Seq
	}
	if r.atOK {
		next.lastAt, next.lastAtOK, next.lastAtStr = r.at, true, r.At
	}
	if name == EvDeliverableFrozen && validRole && r.has.has(fDoc) && r.has.has(fSHA) && IsSHA256(r.SHA256) {
		m := make(map[string]string, len(cur.frozen)+1)
		for k, val := range cur.frozen {
			m[k] = val
		}
		m[r.Doc] = r.SHA256
		next.frozen = m
	}
	le := lastEvent{seq: r.Seq, seqOK: r.has.has(fSeq), name: name, from: actor, fromOK: actorOK}
	next.last = le
	switch name {
	case EvDecisionAccepted:
		next.hasDecisionAccepted = true
	case EvReadinessPassed:
		next.hasReadinessPassed = true
	case EvCompleted:
		next.hasCompleted = true
	case EvDeliverableFrozen:
		if role == RolePrimary {
			next.hasPrimaryFrozenEvent = true
		}
	case EvProposalSubmitted:
		next.proposalSubmitted = &le
	case EvProposalRevised:
		next.proposalRevised = &le
	case EvReviewSubmitted:
		next.lastReviewSubmitted = &le
	}
	return viol, next
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
