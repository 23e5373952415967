package protocol

import (
	"fmt"
	"strings"
)

// transitions maps each event name to its step of the phase state
// machine: the phase and turn rules it must satisfy, in the order they
// are reported, and the state it leaves. Events without an entry (unknown
// names, which parsing already refuses) only get the shape checks and the
// bookkeeping.
var transitions = map[string]func(*transition){
	EvInitialized:        (*transition).initialized,
	EvBlocked:            (*transition).blocked,
	EvDeliverableDrafted: (*transition).deliverableDrafted,
	EvDeliverableRevised: (*transition).deliverableRevised,
	EvDeliverableFrozen:  (*transition).deliverableFrozen,
	EvProposalSubmitted:  (*transition).proposalSubmitted,
	EvReviewSubmitted:    (*transition).reviewSubmitted,
	EvProposalRevised:    (*transition).proposalRevised,
	EvDecisionProposed:   (*transition).decisionProposed,
	EvQuestionClassified: (*transition).questionClassified,
	EvDecisionAccepted:   (*transition).decisionAccepted,
	EvReadinessPassed:    (*transition).readinessPassed,
	EvCompleted:          (*transition).completed,
}

func (t *transition) initialized() {
	if !t.r.has.has(fSeq) || t.r.Seq != 1 {
		t.violate("initialized-seq", "initialized must be seq 1")
	}
	if !t.actorOK || !t.rs.listed[t.actor] {
		t.violate("participant", "initialized by %s, who is not listed in protocol.json", t.who())
	}
	t.next.Owner, t.next.OwnerSet = "", false
	if t.actorOK {
		t.next.Owner, t.next.OwnerSet = t.actor, true
	}
	t.enter(PhaseDrafting, t.ownerList())
}

func (t *transition) blocked() { t.enter(PhaseBlocked, nil) }

func (t *transition) deliverableDrafted() {
	if t.role != RolePrimary {
		return
	}
	t.allowedIn(PhaseDrafting, PhaseRevising, PhaseDecisionReview)
	t.ownerTurn("drafting the primary deliverable")
	t.next.PrimaryDrafted = true
}

func (t *transition) deliverableRevised() {
	if t.role != RolePrimary {
		return
	}
	if t.cur.PrimaryFrozen {
		t.violate("revise-after-freeze", "the primary deliverable is frozen and can no longer be revised")
	}
	t.allowedIn(PhaseRevising, PhaseDecisionReview)
	t.ownerTurn("revising the primary deliverable")
	t.next.PrimaryDrafted = true
}

func (t *transition) deliverableFrozen() {
	if t.role == RolePrimary {
		if t.cur.PrimaryFrozen {
			t.violate("primary-frozen-once", "the primary deliverable is already frozen")
		}
		t.allowedIn(PhaseReadinessCheck)
		t.ownerTurn("freezing the primary deliverable")
		t.next.PrimaryFrozen = true
		t.next.HasPrimaryFrozenEvent = true
	}
	if t.validRole() && t.r.has.has(fDoc) && t.hasSHA() {
		m := make(map[string]string, len(t.cur.Frozen)+1)
		for k, val := range t.cur.Frozen {
			m[k] = val
		}
		m[t.r.Doc] = t.r.SHA256
		t.next.Frozen = m
	}
}

func (t *transition) proposalSubmitted() {
	t.allowedIn(PhaseDrafting, PhaseRevising)
	if !t.cur.PrimaryDrafted {
		t.violate("primary-draft-required", "proposal_submitted needs an earlier deliverable_drafted of the primary deliverable")
	}
	switch {
	case t.cur.Owner != "":
		t.expectTurn([]string{t.cur.Owner}, "submitting the proposal")
	case t.actorOK:
	default:
		t.expectTurn(nil, "submitting the proposal")
	}
	if t.actorOK {
		t.next.Owner, t.next.OwnerSet = t.actor, true
	}
	var reviewers []string
	for _, p := range t.rs.participants {
		if !(t.next.OwnerSet && p == t.next.Owner) {
			reviewers = append(reviewers, p)
		}
	}
	if len(reviewers) == 0 {
		t.violate("reviewer-required", "proposal_submitted needs at least one other participant to review")
	}
	t.next.ReviewWaiting = reviewers
	t.enter(PhaseReviewing, reviewers)
	le := t.event()
	t.next.ProposalSubmitted = &le
}

func (t *transition) reviewSubmitted() {
	t.allowedIn(PhaseReviewing)
	t.next.ReviewWaiting = t.answer(t.cur.ReviewWaiting, "submitting a review now")
	t.untilAllAnswered(t.next.ReviewWaiting, PhaseReviewing, PhaseRevising)
	le := t.event()
	t.next.LastReviewSubmitted = &le
}

func (t *transition) proposalRevised() {
	t.allowedIn(PhaseRevising)
	t.ownerTurn("revising the proposal")
	t.newDecisionInput()
	le := t.event()
	t.next.ProposalRevised = &le
}

func (t *transition) decisionProposed() {
	t.allowedIn(PhaseRevising, PhaseDecisionReview)
	t.ownerTurn("proposing decisions")
	t.newDecisionInput()
}

// newDecisionInput starts a round of decisions: the questions must be
// classified (again) before anyone accepts.
func (t *transition) newDecisionInput() {
	if t.r.has.has(fSeq) {
		t.next.LatestDecisionInputSeq = t.r.Seq
	}
	t.next.ClassificationSeq = 0
	t.next.AcceptedRound = nil
	t.enter(PhaseDecisionReview, t.ownerList())
}

func (t *transition) questionClassified() {
	t.allowedIn(PhaseDecisionReview)
	t.ownerTurn("classifying questions")
	if t.r.has.has(fSeq) {
		t.next.ClassificationSeq = t.r.Seq
	}
	t.next.AcceptWaiting = t.rs.participants
	t.next.AcceptedRound = nil
	t.enter(PhaseDecisionReview, t.rs.participants)
}

func (t *transition) decisionAccepted() {
	t.allowedIn(PhaseDecisionReview)
	if t.cur.LatestDecisionInputSeq != 0 && t.cur.ClassificationSeq <= t.cur.LatestDecisionInputSeq {
		t.violate("classification-required", "decision_accepted needs a question_classified after the latest proposal_revised or decision_proposed (seq %d)", t.cur.LatestDecisionInputSeq)
	}
	t.next.AcceptWaiting = t.answer(t.cur.AcceptWaiting, "accepting decisions now")
	if t.inSet(t.cur.AcceptWaiting) {
		t.next.AcceptedRound = withItem(t.cur.AcceptedRound, t.actor)
	}
	t.untilAllAnswered(t.next.AcceptWaiting, PhaseDecisionReview, PhaseReadinessCheck)
	t.next.HasDecisionAccepted = true
}

func (t *transition) readinessPassed() {
	t.allowedIn(PhaseReadinessCheck)
	if !t.cur.PrimaryFrozen {
		t.violate("freeze-required", "readiness_passed needs an earlier deliverable_frozen of the primary deliverable")
	}
	t.ownerTurn("passing readiness")
	t.next.ReadinessPassed = true
	t.enter(PhaseReadinessCheck, t.ownerList())
	t.next.HasReadinessPassed = true
}

func (t *transition) completed() {
	if t.cur.Phase != PhaseReadinessCheck || !t.cur.ReadinessPassed {
		t.violate("readiness-passed-required", "completed needs an earlier readiness_passed in phase readiness_check (phase is %s)", phaseName(t.cur.Phase))
	}
	if !t.r.has.has(fDoc) || t.r.Doc != ConclusionFile {
		t.violate("completed-doc", "completed must have doc %q", ConclusionFile)
	}
	t.ownerTurn("completing the collaboration")
	t.enter(PhaseCompleted, nil)
	t.next.HasCompleted = true
}

// enter moves the collaboration to phase, waiting for waiting.
func (t *transition) enter(phase string, waiting []string) {
	t.next.Phase = phase
	t.next.Waiting = waiting
}

// untilAllAnswered stays in phase while someone is still waited for, and
// hands the turn back to the owner in then once nobody is.
func (t *transition) untilAllAnswered(waiting []string, phase, then string) {
	if len(waiting) > 0 {
		t.enter(phase, waiting)
	} else {
		t.enter(then, t.ownerList())
	}
}

// answer checks that the actor is among waiting and returns who is still
// waited for after this event.
func (t *transition) answer(waiting []string, action string) []string {
	t.expectTurn(waiting, action)
	if t.inSet(waiting) {
		return without(waiting, t.actor)
	}
	return waiting
}

// allowedIn refuses the event unless the phase before it is one of
// allowed.
func (t *transition) allowedIn(allowed ...string) {
	if contains(allowed, t.cur.Phase) {
		return
	}
	t.violate("phase", "%s is not allowed in phase %s (allowed: %s)", t.name, phaseName(t.cur.Phase), strings.Join(allowed, ", "))
}

func (t *transition) inSet(set []string) bool { return t.actorOK && contains(set, t.actor) }

// who names the actor in a message.
func (t *transition) who() string {
	if t.actorOK {
		return fmt.Sprintf("%q", t.actor)
	}
	return "an event without from"
}

// expectTurn refuses the event unless its actor is one of allowed.
func (t *transition) expectTurn(allowed []string, action string) {
	if t.inSet(allowed) {
		return
	}
	list := strings.Join(allowed, ", ")
	if list == "" {
		list = "no participant"
	}
	t.violate("turn", "%s is reserved for %s, not %s", action, list, t.who())
}

// ownerTurn refuses the event unless the proposal owner, if there is one,
// writes it.
func (t *transition) ownerTurn(action string) {
	if t.next.Owner != "" {
		t.expectTurn([]string{t.next.Owner}, action)
	}
}

// ownerList is the waiting list of the owner's turn.
func (t *transition) ownerList() []string {
	if t.next.Owner != "" {
		return []string{t.next.Owner}
	}
	return nil
}
