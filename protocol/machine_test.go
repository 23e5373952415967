package protocol

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// states are prefixes of the two-participant happy path (owner "server",
// reviewer "reader"): the number of happy steps applied.
var states = map[string]int{
	"init":       0,  // drafting, nothing drafted
	"drafted":    1,  // drafting, primary drafted
	"reviewing":  2,  // reviewing, waiting [reader]
	"revising":   3,  // revising, waiting [server]
	"decision":   4,  // decision_review, not classified
	"classified": 5,  // decision_review, waiting [reader server]
	"accepted1":  6,  // decision_review, reader accepted, waiting [server]
	"readiness":  7,  // readiness_check, not frozen
	"frozen":     8,  // readiness_check, frozen
	"passed":     9,  // readiness_check, readiness_passed
	"completed":  10, // completed
}

func kitAt(t *testing.T, state string, parts ...string) *kit {
	t.Helper()
	n, ok := states[state]
	require.True(t, ok, state)
	k := newKit(t, kitOptions(filepath.Join(t.TempDir(), "collab"), "design-spec", parts...))
	for _, s := range k.happySteps()[:n] {
		s()
	}
	return k
}

const S, R = "server", "reader"

func unresolved(k *kit) {
	k.write(ReadinessFile, strings.Replace(k.read(ReadinessFile), "[resolved]", "[unresolved]", 1))
}

// transitionCases are candidate appends at each state, accepted or refused;
// the parity test replays them against the reference implementation.
var transitionCases = []struct {
	name  string
	state string
	prep  func(k *kit)
	e     ev
	rule  string // "" = accepted
	phase string // phase after an accepted event
}{
	// drafting
	{"draft by owner", "init", nil, ev{from: S, event: EvDeliverableDrafted}, "", PhaseDrafting},
	{"draft by reviewer", "init", nil, ev{from: R, event: EvDeliverableDrafted}, "turn", ""},
	{"draft wrong doc", "init", nil, ev{from: S, event: EvDeliverableDrafted, doc: "proposal.md"}, "deliverable-doc", ""},
	{"draft escaping doc", "init", nil, ev{from: S, event: EvDeliverableDrafted, doc: "../deliverables/design-spec.md"}, "deliverable-doc", ""},
	{"draft absolute doc", "init", nil, ev{from: S, event: EvDeliverableDrafted, doc: "/etc/passwd"}, "deliverable-doc", ""},
	{"draft undeclared supporting", "init", nil, ev{from: S, event: EvDeliverableDrafted, role: RoleSupporting, doc: "deliverables/x.md"}, "deliverable-doc", ""},
	{"draft without role", "init", nil, ev{from: S, event: EvDeliverableDrafted, role: "-"}, "role-required", ""},
	{"revise in drafting", "drafted", nil, ev{from: S, event: EvDeliverableRevised}, "phase", ""},
	{"submit without draft", "init", nil, ev{from: S, event: EvProposalSubmitted}, "primary-draft-required", ""},
	{"submit after draft", "drafted", nil, ev{from: S, event: EvProposalSubmitted}, "", PhaseReviewing},
	{"submit by reviewer", "drafted", nil, ev{from: R, event: EvProposalSubmitted}, "turn", ""},
	{"review in drafting", "drafted", nil, ev{from: R, event: EvReviewSubmitted}, "phase", ""},
	{"revise proposal in drafting", "drafted", nil, ev{from: S, event: EvProposalRevised}, "phase", ""},
	{"propose decision in drafting", "drafted", nil, ev{from: S, event: EvDecisionProposed}, "phase", ""},
	{"classify in drafting", "drafted", nil, ev{from: S, event: EvQuestionClassified}, "phase", ""},
	{"accept in drafting", "drafted", nil, ev{from: S, event: EvDecisionAccepted}, "phase", ""},
	{"freeze in drafting", "drafted", nil, ev{from: S, event: EvDeliverableFrozen}, "phase", ""},
	{"readiness in drafting", "drafted", nil, ev{from: S, event: EvReadinessPassed}, "phase", ""},
	{"complete in drafting", "drafted", nil, ev{from: S, event: EvCompleted}, "readiness-passed-required", ""},
	{"block in drafting", "init", nil, ev{from: R, event: EvBlocked}, "", PhaseBlocked},
	{"second initialized", "init", nil, ev{from: S, event: EvInitialized}, "initialized-seq", ""},
	{"unlisted participant", "init", nil, ev{from: "mallory", event: EvBlocked}, "participant", ""},
	{"reply_to missing", "init", nil, ev{from: S, event: EvBlocked, noReply: true}, "reply-to-required", ""},
	{"reply_to in the future", "init", nil, ev{from: S, event: EvBlocked, replyTo: 2}, "reply-to-range", ""},
	{"reply_to negative", "init", nil, ev{from: S, event: EvBlocked, replyTo: -1}, "reply-to-range", ""},
	// reviewing
	{"review by reader", "reviewing", nil, ev{from: R, event: EvReviewSubmitted}, "", PhaseRevising},
	{"review by owner", "reviewing", nil, ev{from: S, event: EvReviewSubmitted}, "turn", ""},
	{"resubmit while reviewing", "reviewing", nil, ev{from: S, event: EvProposalSubmitted}, "phase", ""},
	{"draft while reviewing", "reviewing", nil, ev{from: S, event: EvDeliverableDrafted}, "phase", ""},
	{"revise proposal while reviewing", "reviewing", nil, ev{from: S, event: EvProposalRevised}, "phase", ""},
	{"block while reviewing", "reviewing", nil, ev{from: S, event: EvBlocked}, "", PhaseBlocked},
	// revising
	{"revise proposal", "revising", nil, ev{from: S, event: EvProposalRevised}, "", PhaseDecisionReview},
	{"revise proposal by reader", "revising", nil, ev{from: R, event: EvProposalRevised}, "turn", ""},
	{"propose decision", "revising", nil, ev{from: S, event: EvDecisionProposed}, "", PhaseDecisionReview},
	{"revise deliverable", "revising", nil, ev{from: S, event: EvDeliverableRevised}, "", PhaseRevising},
	{"redraft deliverable", "revising", nil, ev{from: S, event: EvDeliverableDrafted}, "", PhaseRevising},
	{"resubmit from revising", "revising", nil, ev{from: S, event: EvProposalSubmitted}, "", PhaseReviewing},
	{"classify while revising", "revising", nil, ev{from: S, event: EvQuestionClassified}, "phase", ""},
	{"review while revising", "revising", nil, ev{from: R, event: EvReviewSubmitted}, "phase", ""},
	// decision_review before classification
	{"accept before classification", "decision", nil, ev{from: S, event: EvDecisionAccepted}, "classification-required", ""},
	{"classify", "decision", nil, ev{from: S, event: EvQuestionClassified}, "", PhaseDecisionReview},
	{"classify by reader", "decision", nil, ev{from: R, event: EvQuestionClassified}, "turn", ""},
	{"propose again", "decision", nil, ev{from: S, event: EvDecisionProposed}, "", PhaseDecisionReview},
	{"revise proposal in decision review", "decision", nil, ev{from: S, event: EvProposalRevised}, "phase", ""},
	{"revise deliverable in decision review", "decision", nil, ev{from: S, event: EvDeliverableRevised}, "", PhaseDecisionReview},
	// decision_review after classification
	{"accept by reader", "classified", nil, ev{from: R, event: EvDecisionAccepted}, "", PhaseDecisionReview},
	{"accept twice", "accepted1", nil, ev{from: R, event: EvDecisionAccepted}, "turn", ""},
	{"last acceptance", "accepted1", nil, ev{from: S, event: EvDecisionAccepted}, "", PhaseReadinessCheck},
	{"accept with blocking item", "classified", func(k *kit) {
		k.write(ReadinessFile, k.read(ReadinessFile)+"\n- [blocking] Storage quota unknown.\n")
	}, ev{from: R, event: EvDecisionAccepted}, "readiness-blocking", ""},
	{"accept with unresolved item", "classified", unresolved, ev{from: R, event: EvDecisionAccepted}, "readiness-unresolved", ""},
	{"accept with TBD", "classified", func(k *kit) {
		k.write(ReadinessFile, k.read(ReadinessFile)+"\n- [resolved] Expiry is TBD.\n")
	}, ev{from: R, event: EvDecisionAccepted}, "readiness-unresolved", ""},
	{"accept with reasonless deferral", "classified", func(k *kit) {
		k.write(ReadinessFile, strings.Replace(k.read(ReadinessFile), "Reason:", "Because", 1))
	}, ev{from: R, event: EvDecisionAccepted}, "readiness-reason", ""},
	{"accept after a new proposal", "accepted1", func(k *kit) {
		k.must(ev{from: S, event: EvDecisionProposed})
	}, ev{from: S, event: EvDecisionAccepted}, "classification-required", ""},
	{"freeze in decision review", "classified", nil, ev{from: S, event: EvDeliverableFrozen}, "phase", ""},
	// readiness_check
	{"freeze", "readiness", nil, ev{from: S, event: EvDeliverableFrozen}, "", PhaseReadinessCheck},
	{"freeze by reader", "readiness", nil, ev{from: R, event: EvDeliverableFrozen}, "turn", ""},
	{"freeze wrong hash", "readiness", nil, ev{from: S, event: EvDeliverableFrozen, sha: strings.Repeat("0", 64)}, "sha256-mismatch", ""},
	{"freeze uppercase hash", "readiness", func(k *kit) {}, ev{from: S, event: EvDeliverableFrozen, sha: strings.Repeat("A", 64)}, "sha256-format", ""},
	{"freeze short hash", "readiness", nil, ev{from: S, event: EvDeliverableFrozen, sha: "abc"}, "sha256-format", ""},
	{"freeze without hash", "readiness", nil, ev{from: S, event: EvDeliverableFrozen, sha: "-"}, "sha256-format", ""},
	{"freeze missing file", "readiness", func(k *kit) { require.NoError(k.t, os.Remove(k.primaryPath())) },
		ev{from: S, event: EvDeliverableFrozen, sha: strings.Repeat("1", 64)}, "deliverable-missing", ""},
	{"readiness before freeze", "readiness", nil, ev{from: S, event: EvReadinessPassed}, "freeze-required", ""},
	{"revise deliverable in readiness", "readiness", nil, ev{from: S, event: EvDeliverableRevised}, "phase", ""},
	{"complete before readiness", "readiness", nil, ev{from: S, event: EvCompleted}, "readiness-passed-required", ""},
	{"freeze twice", "frozen", nil, ev{from: S, event: EvDeliverableFrozen}, "primary-frozen-once", ""},
	{"revise after freeze", "frozen", nil, ev{from: S, event: EvDeliverableRevised}, "revise-after-freeze", ""},
	{"readiness passed", "frozen", nil, ev{from: S, event: EvReadinessPassed}, "", PhaseReadinessCheck},
	{"readiness by reader", "frozen", nil, ev{from: R, event: EvReadinessPassed}, "turn", ""},
	{"readiness without ready box", "frozen", func(k *kit) {
		k.write(ReadinessFile, strings.Replace(k.read(ReadinessFile), "- [x] Ready to implement", "- [ ] Ready to implement", 1))
	}, ev{from: S, event: EvReadinessPassed}, "ready-to-implement", ""},
	{"readiness with unresolved", "frozen", unresolved, ev{from: S, event: EvReadinessPassed}, "readiness-unresolved", ""},
	{"complete", "passed", func(k *kit) { k.writeConclusion() }, ev{from: S, event: EvCompleted}, "", PhaseCompleted},
	{"complete by reader", "passed", func(k *kit) { k.writeConclusion() }, ev{from: R, event: EvCompleted}, "turn", ""},
	{"complete with other doc", "passed", func(k *kit) { k.writeConclusion() }, ev{from: S, event: EvCompleted, doc: ReadinessFile}, "completed-doc", ""},
	{"complete with unchecked gate", "passed", func(k *kit) {
		k.writeConclusion()
		k.write(ReadinessFile, strings.Replace(k.read(ReadinessFile), "- [x] Readiness passes", "- [ ] Readiness passes", 1))
	}, ev{from: S, event: EvCompleted}, "completion-gates", ""},
	{"complete with template conclusion", "passed", nil, ev{from: S, event: EvCompleted}, "conclusion", ""},
	{"complete with placeholder", "passed", func(k *kit) {
		k.writeConclusion()
		k.write(ConclusionFile, k.read(ConclusionFile)+"\nOpen point: todo.\n")
	}, ev{from: S, event: EvCompleted}, "conclusion", ""},
	{"complete with two outcomes", "passed", func(k *kit) {
		k.writeConclusion()
		k.write(ConclusionFile, k.read(ConclusionFile)+"\n- [defer] Or later.\n")
	}, ev{from: S, event: EvCompleted}, "conclusion", ""},
	{"readiness passed twice", "passed", nil, ev{from: S, event: EvReadinessPassed}, "", PhaseReadinessCheck},
	// terminal phases
	{"review after completion", "completed", nil, ev{from: R, event: EvReviewSubmitted}, "phase", ""},
	{"complete twice", "completed", nil, ev{from: S, event: EvCompleted}, "readiness-passed-required", ""},
	{"block after completion", "completed", nil, ev{from: R, event: EvBlocked}, "", PhaseBlocked},
}

func TestTransitions(t *testing.T) {
	cases := transitionCases

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			k := kitAt(t, c.state)
			if c.prep != nil {
				c.prep(k)
			}
			e := c.e
			doc, rt, role, sha := k.defaults(e)
			if e.role == "-" {
				role = ""
			}
			if e.sha == "-" {
				sha = ""
			}
			evBefore, protoBefore := k.files()
			before := k.log.Snapshot()
			got, err := k.log.Append(EventSpec{Participant: e.from, Event: e.event, Summary: "case " + c.name, Doc: doc, ReplyTo: rt, Role: role, SHA256: sha})
			if c.rule == "" {
				require.NoError(t, err)
				assert.Equal(t, before.LastSeq+1, got.Seq)
				s := k.log.Snapshot()
				assert.Equal(t, c.phase, s.Phase)
				assert.Equal(t, got.Seq, s.LastSeq)
				return
			}
			require.Error(t, err)
			var pe *Error
			require.ErrorAs(t, err, &pe)
			assert.Equal(t, c.rule, pe.Rule, "%v", err)
			assert.Equal(t, Rejected, pe.Kind)
			assert.Equal(t, before.LastSeq+1, pe.Line)
			evAfter, protoAfter := k.files()
			assert.Equal(t, evBefore, evAfter, "events.jsonl changed")
			assert.Equal(t, protoBefore, protoAfter, "protocol.json changed")
			assert.Equal(t, before, k.log.Snapshot(), "state changed")
		})
	}
}

func TestWaitingSetsThreeParticipants(t *testing.T) {
	k := newKit(t, kitOptions(filepath.Join(t.TempDir(), "c"), "adr", "owner", "bob", "alice"))
	k.must(ev{from: "owner", event: EvDeliverableDrafted})
	k.must(ev{from: "owner", event: EvProposalSubmitted})
	assert.Equal(t, []string{"alice", "bob"}, k.log.Snapshot().WaitingFor)
	k.writeReview(4, "bob")
	k.must(ev{from: "bob", event: EvReviewSubmitted})
	s := k.log.Snapshot()
	assert.Equal(t, PhaseReviewing, s.Phase)
	assert.Equal(t, []string{"alice"}, s.WaitingFor)
	_, err := k.add(ev{from: "bob", event: EvReviewSubmitted})
	require.Error(t, err)
	assert.Equal(t, "turn", err.(*Error).Rule)
	k.writeReview(5, "alice")
	k.must(ev{from: "alice", event: EvReviewSubmitted})
	assert.Equal(t, []string{"owner"}, k.log.Snapshot().WaitingFor)
	k.must(ev{from: "owner", event: EvProposalRevised})
	k.writeDecisions()
	k.writeReadiness()
	k.must(ev{from: "owner", event: EvQuestionClassified})
	assert.Equal(t, []string{"alice", "bob", "owner"}, k.log.Snapshot().WaitingFor)
	k.must(ev{from: "owner", event: EvDecisionAccepted})
	assert.Equal(t, []string{"alice", "bob"}, k.log.Snapshot().WaitingFor)
	// A new decision input resets the round: everyone accepts again.
	k.must(ev{from: "owner", event: EvDecisionProposed})
	assert.Equal(t, []string{"owner"}, k.log.Snapshot().WaitingFor)
	k.must(ev{from: "owner", event: EvQuestionClassified})
	assert.Equal(t, []string{"alice", "bob", "owner"}, k.log.Snapshot().WaitingFor)
}
