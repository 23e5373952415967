package protocol

import (
	"fmt"
	"strings"
)

// templateData is what the document templates of a new folder need.
type templateData struct {
	objective    string
	participants []string
	objGates     []string
	genGates     []string
	primaryType  string
	primaryRef   string
	dir          string
}

// generatedGates are the completion gates init derives from the primary
// deliverable, in addition to the objective's own gates.
func generatedGates(primaryRef, primaryType string) []string {
	return []string{
		fmt.Sprintf("Primary deliverable `%s` exists", primaryRef),
		fmt.Sprintf("Primary deliverable has every section its type `%s` requires", primaryType),
		"Each accepted decision names where it is `Reflected in`",
		"Each accepted decision is reflected in the primary deliverable",
		"Primary deliverable is marked `Status: Frozen`",
		"SHA-256 of the frozen primary deliverable is recorded",
	}
}

func bullets(items []string, prefix string) string {
	lines := make([]string, len(items))
	for i, s := range items {
		lines[i] = prefix + s
	}
	return strings.Join(lines, "\n")
}

// renderDeliverable is the skeleton of a deliverable: its title, the
// Status line and one empty "## " section per required section.
func renderDeliverable(d Deliverable) string {
	title := "Deliverable"
	if d.Type == CustomType {
		title = "Custom Deliverable"
	} else if spec, ok := deliverableTypes[d.Type]; ok {
		title = spec.title
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\nDeliverable type: `%s`\nStatus: Draft\n", title, d.Type)
	for _, s := range d.Sections() {
		fmt.Fprintf(&b, "\n## %s\n\n", s)
	}
	return b.String()
}

func renderReadme(t templateData) string {
	var participants []string
	for _, p := range t.participants {
		participants = append(participants, "`"+p+"`")
	}
	return fmt.Sprintf(`# Collaboration: %s

This folder follows the Agent Collaboration Protocol (ACP), schema v2.

Participants: %s (the first one owns the proposal).

Objective gates:
%s

Primary deliverable: `+"`%s`"+` (type `+"`%s`"+`).

| file | purpose |
|---|---|
| protocol.json | declaration and derived state (phase, owner, who is awaited) |
| events.jsonl | append-only event log, one JSON object per line, seq without gaps |
| proposal.md | the current proposal only |
| review.md | one structured review per review_submitted |
| decisions.md | accepted decisions with stable ids D1, D2, ... |
| readiness.md | question classification, gates, freeze snapshot |
| conclusion.md | the final receipt, pointing at the frozen deliverable |
| %s/ | the deliverables themselves |
`, t.objective, strings.Join(participants, ", "), bullets(t.objGates, "- "), t.primaryRef, t.primaryType, t.dir)
}

func renderProposal(t templateData) string {
	return fmt.Sprintf(`# Proposal

## Purpose

%s

## Current Proposal

No proposal has been written yet.

## Deliverable Draft

- Primary: `+"`%s`"+`

## What Reviewers Should Check

- The proposal is coherent.
- Primary deliverable completeness.
- Every accepted decision can be traced to a deliverable.
- The result can be implemented.
`, t.objective, t.primaryRef)
}

func renderReview(t templateData) string {
	return fmt.Sprintf(`# Review

Add one review per review_submitted event, under a heading of the form
`+"`## <UTC time> - <participant id> - seq <seq of the review_submitted event>`"+`,
written before the event is appended. Each review states:

Context:
- Read proposal.md as of event seq <n>.
- Reviewed primary deliverable: `+"`%s`"+`
- Reviewed supporting deliverables: none.

Review Scope:
- Proposal coherence
- Primary deliverable completeness
- Accepted decision traceability
- Implementation readiness

Position, Concerns, Required Changes and Questions follow, one list each.
`, t.primaryRef)
}

func renderDecisions(t templateData) string {
	return fmt.Sprintf(`# Decisions

Accepted decisions only, with stable ids; each one says where it is reflected.

## Accepted Decisions

### D1. Primary deliverable

- Decision: The collaboration produces `+"`%s`"+` as its primary deliverable.
- Rationale: ACP schema v2 declares one primary deliverable per collaboration.
- Reflected in: `+"`%s`"+`
`, t.primaryRef, t.primaryRef)
}

func renderReadiness(t templateData) string {
	return fmt.Sprintf(`# Readiness

Every open question gets a status before readiness can pass:
resolved, deferred_nonblocking (with "Reason: ..."), or blocking.

## Open Question Classification

- [unresolved] The first review of the primary deliverable is still pending.

## Blocking Issues

- None.

## Objective Gates

%s

## Generated Deliverable Gates

%s

## Deliverable Snapshot

- Primary: `+"`%s`"+`
- SHA-256:

## Supporting Deliverables

- None.

## Attachments

- None.

## Deferred Follow-ups

- None.

## Implementation Blockers

- None.

## Ready to Implement

- [ ] Ready to implement
`, bullets(t.objGates, "- [ ] "), bullets(t.genGates, "- [ ] "), t.primaryRef)
}

func renderConclusion(t templateData) string {
	return fmt.Sprintf(`# Conclusion

The receipt of the collaboration, written at the end; the result itself is the primary deliverable.

## Decision Outcome

- [blocked] The collaboration is still in progress.

The final outcome is one of [proceed], [do_not_proceed] or [defer].

## Rationale

Not written yet.

## Deliverable Receipt

- Primary: `+"`%s`"+`
- Type: `+"`%s`"+`
- SHA-256:
- Supporting: none
- Attachments: none

## Accepted Decisions Summary

- None accepted yet.

## Readiness Result

- Objective gates: not passed
- Generated deliverable gates: not passed
- Readiness file: `+"`readiness.md`"+`

## Assumptions

- None yet.

## Deferred Follow-ups

- None.

## Implementation Blockers

- None.

## Next Action

Follow the protocol to the next phase.
`, t.primaryRef, t.primaryType)
}
