package protocol

import (
	"fmt"
	"strings"
)

func turnReady(s Snapshot, participant string) (bool, string) {
	if Terminal(s.Phase) {
		return true, "phase is " + s.Phase
	}
	if contains(s.WaitingFor, participant) {
		return true, participant + " is listed in waitingFor"
	}
	waiting := strings.Join(s.WaitingFor, ", ")
	if waiting == "" {
		waiting = "none"
	}
	if s.LastSeq > 0 {
		return false, fmt.Sprintf("waiting for %s after seq %d", waiting, s.LastSeq)
	}
	return false, "waiting for " + waiting
}

// StatusEvent names the latest event of the log.
type StatusEvent struct {
	Seq   int    `json:"seq"`
	Event string `json:"event"`
	From  string `json:"from"`
}

// Status is what `acpfs next` reports for one participant.
type Status struct {
	Participant string       `json:"participant"`
	Phase       string       `json:"phase"`
	Owner       string       `json:"proposalOwner"`
	WaitingFor  []string     `json:"waitingFor"`
	LastEvent   *StatusEvent `json:"lastEvent"`
	Action      string       `json:"nextAction"`
	// Invalid is set when the phase is unknown (no events): the reference
	// next-action script exits 1 then.
	Invalid bool `json:"invalid,omitempty"`
}

// String renders the status in the line structure of the reference
// next-action script.
func (s Status) String() string {
	var b strings.Builder
	owner := s.Owner
	if owner == "" {
		owner = "none"
	}
	waiting := strings.Join(s.WaitingFor, ", ")
	if waiting == "" {
		waiting = "none"
	}
	fmt.Fprintf(&b, "phase: %s\nproposal owner: %s\nwaiting for: %s\n", phaseName(s.Phase), owner, waiting)
	if s.LastEvent != nil {
		fmt.Fprintf(&b, "last event: seq %d %s from %s\n", s.LastEvent.Seq, s.LastEvent.Event, s.LastEvent.From)
	}
	fmt.Fprintf(&b, "next action: %s\n", s.Action)
	return b.String()
}

// Status computes the next action of participant from the derived state
// and the documents, after catching up with other writers. The
// participant must be listed in protocol.json.
func (l *Log) Status(participant string) (Status, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.refreshLocked(); err != nil {
		return Status{}, err
	}
	if !l.rules.listed[participant] {
		return Status{}, &Error{Kind: Rejected, Rule: "participant", Msg: fmt.Sprintf("%q is not a participant listed in protocol.json", participant)}
	}
	st := &l.state
	s := Status{
		Participant: participant,
		Phase:       st.Phase,
		Owner:       st.Owner,
		WaitingFor:  append([]string{}, st.Waiting...),
	}
	if st.Count > 0 {
		s.LastEvent = &StatusEvent{Seq: st.Last.Seq, Event: st.Last.Name, From: st.Last.From}
	}
	action, err := l.nextActionLocked(participant)
	if err != nil {
		return Status{}, err
	}
	s.Action, s.Invalid = action, !knownPhase(st.Phase)
	return s, nil
}

// nextActionLocked says what participant should do next in the current
// phase. Called with l.mu held.
func (l *Log) nextActionLocked(participant string) (string, error) {
	st := &l.state
	waited := contains(st.Waiting, participant)
	switch st.Phase {
	case PhaseDrafting:
		if waited {
			return "draft the primary deliverable, append deliverable_drafted (role primary), update proposal.md, then append proposal_submitted", nil
		}
		return "wait until the proposal owner submits the proposal", nil
	case PhaseReviewing:
		proposal := st.ProposalSubmitted
		if proposal == nil {
			proposal = st.ProposalRevised
		}
		switch {
		case waited && proposal != nil && proposal.From != participant:
			return "review proposal.md and the primary deliverable, add your review to review.md (heading '## <UTC time> - " + participant + " - seq <n>', with Review Scope), then append review_submitted", nil
		case participant == st.Owner:
			return "wait for the reviewers; leave proposal.md and the deliverables alone while they review (append blocked if you must stop)", nil
		default:
			return "wait for the remaining reviewers to append review_submitted (or blocked)", nil
		}
	case PhaseRevising:
		review := st.LastReviewSubmitted
		if waited && review != nil && review.From != participant {
			return "revise proposal.md and the deliverables, append deliverable_revised if a deliverable changed, then append proposal_revised", nil
		}
		return "wait until the proposal owner has revised the proposal", nil
	case PhaseDecisionReview:
		if waited && !contains(st.AcceptedRound, participant) {
			return "review decisions.md and append decision_accepted only if every decision is explicit", nil
		}
		return "wait for the remaining participants to accept the decisions", nil
	case PhaseReadinessCheck:
		return l.readinessActionLocked()
	case PhaseCompleted:
		return "stop; the collaboration is complete", nil
	case PhaseBlocked:
		return "resolve the blocker or start a new collaboration round", nil
	default:
		return "run acpfs validate; the current phase is unknown", nil
	}
}

// readinessActionLocked is the next action in the readiness check: the
// first of readiness.md, the freeze, readiness_passed and conclusion.md
// that is not done yet. Called with l.mu held.
func (l *Log) readinessActionLocked() (string, error) {
	st := &l.state
	rd, err := ScanReadiness(l.folder)
	if err != nil {
		return "", err
	}
	problems, err := ConclusionProblems(l.folder, l.proto)
	if err != nil {
		return "", err
	}
	switch {
	case !rd.Clear():
		return "classify every question in readiness.md and clear the blockers before readiness_passed", nil
	case !rd.ReadyToImplement:
		return "work through the final checklist of readiness.md and check '- [x] Ready to implement'", nil
	case !st.HasPrimaryFrozenEvent:
		return "set the primary deliverable to Status: Frozen, append deliverable_frozen with its sha256, run acpfs validate, then append readiness_passed", nil
	case !st.HasReadinessPassed:
		return "run acpfs validate, then append readiness_passed", nil
	case len(problems) > 0:
		return "write conclusion.md: the final outcome, the deliverable receipt, the readiness result and the next action", nil
	default:
		return "run acpfs validate, then append completed with doc conclusion.md", nil
	}
}
