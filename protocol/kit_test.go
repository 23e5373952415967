package protocol

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/internal/digest"
)

// kit drives a collaboration folder through Init and Append with a
// deterministic clock, and writes the documents each step needs.
type kit struct {
	t     testing.TB
	dir   string
	log   *Log
	parts []string
	clock time.Time
	// appender, when set, replaces Log.Append (the parity test appends
	// with the reference implementation).
	appender func(e ev, doc string, replyTo *int, role, sha string) (Event, error)
}

var kitEpoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// kitOptions returns Init options for a folder with the given
// participants and primary deliverable type.
func kitOptions(dir string, typ string, parts ...string) InitOptions {
	if len(parts) == 0 {
		parts = []string{"server", "reader"}
	}
	o := InitOptions{
		Folder:       dir,
		Participants: parts,
		Objective:    "Decide how the service stores sessions",
		Completion:   []string{"Accepted decisions are explicit", "Readiness passes"},
		PrimaryType:  typ,
		Now:          kitEpoch,
	}
	if typ == CustomType {
		o.PrimaryFile = "custom-output.md"
		o.PrimaryChecks = []string{"Summary", "Plan"}
	}
	return o
}

func newKit(t testing.TB, o InitOptions) *kit {
	t.Helper()
	if o.Now.IsZero() {
		o.Now = kitEpoch
	}
	res, err := Init(o)
	require.NoError(t, err)
	k := &kit{t: t, dir: res.Folder, clock: o.Now}
	for _, p := range o.Participants {
		p = strings.TrimSpace(p)
		if p != "" && !contains(k.parts, p) {
			k.parts = append(k.parts, p)
		}
	}
	k.open()
	return k
}

func (k *kit) open() {
	l, err := OpenLog(k.dir)
	require.NoError(k.t, err)
	l.now = k.tick
	k.log = l
}

func (k *kit) tick() time.Time {
	k.clock = k.clock.Add(time.Second)
	return k.clock
}

func (k *kit) owner() string { return k.parts[0] }

func (k *kit) reviewers() []string {
	out := append([]string{}, k.parts[1:]...)
	sort.Strings(out)
	return out
}

func (k *kit) sorted() []string {
	out := append([]string{}, k.parts...)
	sort.Strings(out)
	return out
}

func (k *kit) proto() *Protocol {
	p, err := LoadProtocol(k.dir)
	require.NoError(k.t, err)
	return p
}

func (k *kit) primaryPath() string {
	p := k.proto()
	path, err := p.DeliverablePath(k.dir, p.Primary.File)
	require.NoError(k.t, err)
	return path
}

func (k *kit) read(name string) string {
	b, err := os.ReadFile(filepath.Join(k.dir, name))
	require.NoError(k.t, err)
	return string(b)
}

func (k *kit) write(name, text string) {
	path := name
	if !filepath.IsAbs(name) {
		path = filepath.Join(k.dir, name)
	}
	require.NoError(k.t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(k.t, os.WriteFile(path, []byte(text), 0o644))
}

// ev describes an event to append; empty fields get the defaults of the
// event (doc, role, reply_to = last seq, sha256 of the primary file).
type ev struct {
	from, event, doc, role, sha string
	replyTo                     int
	noReply                     bool
}

func (k *kit) defaults(e ev) (string, *int, string, string) {
	doc, role, sha := e.doc, e.role, e.sha
	p := k.proto()
	switch e.event {
	case EvDeliverableDrafted, EvDeliverableRevised, EvDeliverableFrozen:
		if role == "" {
			role = RolePrimary
		}
		if doc == "" {
			doc = p.PrimaryRef()
		}
		if e.event == EvDeliverableFrozen && sha == "" {
			sum, err := digest.File(k.primaryPath())
			require.NoError(k.t, err)
			sha = sum
		}
	case EvProposalSubmitted, EvProposalRevised, EvDecisionProposed:
		if doc == "" {
			doc = ProposalFile
		}
	case EvReviewSubmitted:
		if doc == "" {
			doc = ReviewFile
		}
	case EvDecisionAccepted:
		if doc == "" {
			doc = DecisionsFile
		}
	case EvQuestionClassified, EvReadinessPassed:
		if doc == "" {
			doc = ReadinessFile
		}
	case EvCompleted:
		if doc == "" {
			doc = ConclusionFile
		}
	}
	var rt *int
	if !e.noReply {
		n := e.replyTo
		if n == 0 {
			n = k.log.Snapshot().LastSeq
		}
		rt = &n
	}
	return doc, rt, role, sha
}

// add appends e through Log.Append.
func (k *kit) add(e ev) (Event, error) {
	require.NoError(k.t, k.log.Refresh())
	doc, rt, role, sha := k.defaults(e)
	if k.appender != nil {
		return k.appender(e, doc, rt, role, sha)
	}
	return k.log.Append(EventSpec{Participant: e.from, Event: e.event, Summary: "step " + e.event, Doc: doc, ReplyTo: rt, Role: role, SHA256: sha})
}

func (k *kit) must(e ev) Event {
	k.t.Helper()
	got, err := k.add(e)
	require.NoError(k.t, err, "append %s from %s", e.event, e.from)
	return got
}

// writeReview adds a review section for the review_submitted event that
// will get seq.
func (k *kit) writeReview(seq int, who string) {
	text := k.read(ReviewFile)
	ref := k.proto().PrimaryRef()
	text += fmt.Sprintf(`
## 2026-01-02T03:04:%02dZ - %s - seq %d

Context:
- Reviewed primary deliverable: `+"`%s`"+`

Review Scope:
- Primary deliverable completeness
- Accepted decision traceability

Position:
- Accept.
`, seq%60, who, seq, ref)
	k.write(ReviewFile, text)
}

func (k *kit) writeDecisions() {
	ref := k.proto().PrimaryRef()
	k.write(DecisionsFile, fmt.Sprintf(`# Decisions

## Accepted Decisions

### D1. Store sessions in the database

- Decision: Sessions live in the primary database.
- Reflected in: `+"`%s#proposed-design`"+`

### D2. Expire sessions after a day

- Decision: Sessions expire after 24 hours.
- Reflected in: `+"`%s`"+`
`, ref, ref))
}

// writeReadiness marks every question resolved and every gate checked.
func (k *kit) writeReadiness() {
	var gates []string
	for _, g := range k.proto().GateTexts() {
		gates = append(gates, "- [x] "+g)
	}
	k.write(ReadinessFile, fmt.Sprintf(`# Readiness

## Open Question Classification

- [resolved] Storage engine chosen.
- [deferred_nonblocking] Tune the expiry later. Reason: the default is safe.

## Gates

%s

## Ready to Implement

- [x] Ready to implement
`, strings.Join(gates, "\n")))
}

// fillPrimary gives every required section content and sets the status.
func (k *kit) fillPrimary(status string) {
	p := k.proto()
	var b strings.Builder
	fmt.Fprintf(&b, "# Deliverable\n\nStatus: %s\n", status)
	for _, s := range p.Primary.Sections() {
		fmt.Fprintf(&b, "\n## %s\n\nContent for %s.\n", s, s)
	}
	k.write(k.primaryPath(), b.String())
}

func (k *kit) writeConclusion() {
	ref := k.proto().PrimaryRef()
	k.write(ConclusionFile, fmt.Sprintf(`# Conclusion

## Decision Outcome

- [proceed] Implement the accepted design.

## Rationale

The decisions answer the objective.

## Deliverable Receipt

- Primary: `+"`%s`"+`

## Accepted Decisions Summary

- D1, D2.

## Readiness Result

- All gates passed.

## Assumptions

- None.

## Deferred Follow-ups

- Tune the expiry.

## Implementation Blockers

- None.

## Next Action

Start implementation.
`, ref))
}

// happySteps is the complete path to completed; each step appends one
// event (after writing the documents it needs). Tests take prefixes of it
// to reach a given phase.
func (k *kit) happySteps() []func() {
	o := k.owner()
	steps := []func(){
		func() { k.must(ev{from: o, event: EvDeliverableDrafted}) },
		func() { k.must(ev{from: o, event: EvProposalSubmitted}) },
	}
	for _, r := range k.reviewers() {
		steps = append(steps, func() {
			require.NoError(k.t, k.log.Refresh())
			k.writeReview(k.log.Snapshot().LastSeq+1, r)
			k.must(ev{from: r, event: EvReviewSubmitted})
		})
	}
	steps = append(steps,
		func() { k.must(ev{from: o, event: EvProposalRevised}) },
		func() {
			k.writeDecisions()
			k.writeReadiness()
			k.must(ev{from: o, event: EvQuestionClassified})
		},
	)
	for _, p := range k.sorted() {
		steps = append(steps, func() { k.must(ev{from: p, event: EvDecisionAccepted}) })
	}
	steps = append(steps,
		func() {
			k.fillPrimary("Frozen")
			k.must(ev{from: o, event: EvDeliverableFrozen})
		},
		func() { k.must(ev{from: o, event: EvReadinessPassed}) },
		func() {
			k.writeConclusion()
			k.must(ev{from: o, event: EvCompleted})
		},
	)
	return steps
}

// run executes the happy steps until the phase (and, optionally, the
// number of events) is reached.
func (k *kit) runUntil(stop func(Snapshot) bool) {
	snap := func() Snapshot {
		require.NoError(k.t, k.log.Refresh())
		return k.log.Snapshot()
	}
	for _, s := range k.happySteps() {
		if stop(snap()) {
			return
		}
		s()
	}
	require.True(k.t, stop(snap()), "stop condition never reached")
}

func (k *kit) happy() { k.runUntil(func(s Snapshot) bool { return s.Phase == PhaseCompleted }) }

// files returns the bytes of events.jsonl and protocol.json.
func (k *kit) files() (string, string) {
	return k.read(EventsFile), k.read(ProtocolFile)
}

var ruleRe = regexp.MustCompile(`\[([a-z0-9-]+)\]$`)

// rulesOf extracts the rule ids of validator messages.
func rulesOf(msgs []string) []string {
	var out []string
	for _, m := range msgs {
		if r := ruleRe.FindStringSubmatch(m); r != nil {
			out = append(out, r[1])
		}
	}
	return out
}
