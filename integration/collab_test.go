package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// designSpec is a complete design-spec deliverable with the given status.
func designSpec(status string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Design Spec\n\nDeliverable type: `design-spec`\nStatus: %s\n\n", status)
	for _, s := range []string{"Problem", "Goals", "Non-goals", "Proposed Design", "Interfaces / Contracts", "Failure Modes", "Validation Plan", "Open Questions"} {
		fmt.Fprintf(&b, "## %s\n\nContent for %s.\n\n", s, strings.ToLower(s))
	}
	return b.String()
}

func reviewDoc(seq int) string {
	return fmt.Sprintf(`# Review

## %s - %s - seq %d

Context:
- Reviewed primary deliverable: `+"`%s`"+`

Review Scope:
- Proposal coherence
- Primary deliverable completeness

Position:
- Sound design.
`, time.Now().UTC().Format("2006-01-02T15:04:05Z"), reviewer, seq, primary)
}

func conclusionDoc() string {
	return `# Conclusion

## Decision Outcome

- [proceed] Implement the cache layer as designed.

## Rationale

The review found the design sound.

## Deliverable Receipt

- Primary: ` + "`" + primary + "`" + `

## Accepted Decisions Summary

- D1 accepted.

## Readiness Result

- All gates passed.

## Assumptions

- None.

## Deferred Follow-ups

- None.

## Implementation Blockers

- None.

## Next Action

Start implementation.
`
}

// collabRun is a two-agent collaboration with one view per agent. Its
// to* methods advance it to a phase by writing through the views only.
type collabRun struct {
	t     testing.TB
	c     *collab
	alice *view
	bob   *view
}

func newRun(t testing.TB) *collabRun {
	c := newCollab(t)
	return &collabRun{t: t, c: c, alice: c.mountView(ownerGrant(), withAuditOpens()), bob: c.mountView(reviewerGrant(), withAuditOpens())}
}

func (r *collabRun) must(v *view, from, name string, extra map[string]any) {
	r.t.Helper()
	line := r.c.event(from, name, extra)
	errno := v.appendEvent(line)
	require.Equal(r.t, syscall.Errno(0), errno, "append %s: %s", line, readFile(r.t, v.path(".acpfs/last-error")))
}

func (r *collabRun) toReviewing() {
	a := r.alice
	require.NoError(r.t, os.WriteFile(a.path(primary), []byte(designSpec("In Review")), 0o644))
	r.must(a, owner, "deliverable_drafted", map[string]any{"doc": primary, "role": "primary"})
	r.must(a, owner, "proposal_submitted", nil)
}

func (r *collabRun) toDecisionReview() {
	r.toReviewing()
	seq := r.c.snapshot().LastSeq + 1
	require.NoError(r.t, os.WriteFile(r.bob.path("review.md"), []byte(reviewDoc(seq)), 0o644))
	r.must(r.bob, reviewer, "review_submitted", nil)
	r.must(r.alice, owner, "proposal_revised", nil)
}

func (r *collabRun) toReadinessCheck() {
	r.toDecisionReview()
	p := r.alice.path("readiness.md")
	s := regexp.MustCompile(`(?m)^- \[unresolved\] .*$`).ReplaceAllString(readFile(r.t, p), "- [resolved] The first review is complete.")
	require.NoError(r.t, os.WriteFile(p, []byte(s), 0o644))
	r.must(r.alice, owner, "question_classified", nil)
	r.must(r.alice, owner, "decision_accepted", nil)
	r.must(r.bob, reviewer, "decision_accepted", nil)
}

func (r *collabRun) toFrozen() {
	r.toReadinessCheck()
	r.freeze()
}

// freeze marks the primary deliverable Frozen and appends its freeze.
func (r *collabRun) freeze() {
	require.NoError(r.t, os.WriteFile(r.alice.path(primary), []byte(designSpec("Frozen")), 0o644))
	r.must(r.alice, owner, "deliverable_frozen", map[string]any{"doc": primary, "role": "primary", "sha256": fileSHA(r.t, r.alice.path(primary))})
}

func (r *collabRun) toCompleted() {
	r.toFrozen()
	p := r.alice.path("readiness.md")
	s := readFile(r.t, p)
	s = strings.ReplaceAll(s, "- [ ] ", "- [x] ")
	require.NoError(r.t, os.WriteFile(p, []byte(s), 0o644))
	r.must(r.alice, owner, "readiness_passed", nil)
	require.NoError(r.t, os.WriteFile(r.alice.path("conclusion.md"), []byte(conclusionDoc()), 0o644))
	r.must(r.alice, owner, "completed", map[string]any{"doc": "conclusion.md"})
}

// TestFullCollaboration drives two agents from initialized to completed
// with writes through their own mounts only, then validates the folder
// and the ledger.
func TestFullCollaboration(t *testing.T) {
	r := newRun(t)
	r.toCompleted()
	s := r.c.snapshot()
	require.Equal(t, "completed", s.Phase)
	require.Equal(t, 11, s.LastSeq)

	out, stderr, code := acpfs(t, "validate", "--folder", r.c.folder)
	require.Equal(t, 0, code, "%s%s", out, stderr)
	require.NoError(t, r.c.lw.Sync())
	// The views are still mounted: their last records may wait up to a
	// second for their signature.
	out, stderr, code = acpfs(t, "ledger", "verify", "--live", "--ledger", r.c.ledger)
	require.Equal(t, 0, code, "%s%s", out, stderr)

	// The reviewer's mount showed the same history all along.
	require.Equal(t, readFile(t, filepath.Join(r.c.folder, "events.jsonl")), readFile(t, r.bob.path("events.jsonl")))
	require.Contains(t, readFile(t, r.bob.path(".acpfs/status")), "phase: completed")
}
