#!/bin/sh
# The owner's turn: one step of the design's way to completed.
. "$(dirname "$0")/lib.sh"
doc=deliverables/design-spec.md
echo "turn $ACPFS_TURN: $(sed -n 's/^next action: //p' "$ACPFS_NEXT_ACTION_FILE")"
case $(phase) in
  drafting)
    # The owner's grant shows the oracle: it drafts from it.
    echo "reads the oracle: $(cat oracle/expected-answer.md)"
    {
      printf '# Design Spec\n\nDeliverable type: `design-spec`\nStatus: In Review\n\n'
      for s in "Problem" "Goals" "Non-goals" "Proposed Design" "Interfaces / Contracts" "Failure Modes" "Validation Plan" "Open Questions"; do
        printf '## %s\n\nToken bucket per API key, 100 requests per second (%s).\n\n' "$s" "$s"
      done
    } > "$doc"
    emit deliverable_drafted "Drafted the design" ",\"doc\":\"$doc\",\"role\":\"primary\""
    emit proposal_submitted "Design ready for review"
    ;;
  revising)
    emit proposal_revised "Addressed the review"
    ;;
  decision_review)
    if tail -n 1 events.jsonl | grep -q '"event":"proposal_revised"'; then
      edit readiness.md 's/^- \[unresolved\] .*/- [resolved] Initial deliverable review completed./'
      emit question_classified "All questions resolved"
    else
      emit decision_accepted "Accepting D1"
    fi
    ;;
  readiness_check)
    if ! has_event deliverable_frozen; then
      edit "$doc" 's/^Status: In Review$/Status: Frozen/'
      emit deliverable_frozen "Freezing the design" ",\"doc\":\"$doc\",\"role\":\"primary\",\"sha256\":\"$(sha256sum "$doc" | cut -d' ' -f1)\""
      refused "a change to the frozen deliverable" sh -c "echo 'late change' >> $doc"
    elif ! has_event readiness_passed; then
      edit readiness.md 's/^- \[ \] /- [x] /'
      emit readiness_passed "All gates checked"
    else
      cat > conclusion.md <<CONCLUSION
# Conclusion

## Decision Outcome

- [proceed] Build the token bucket rate limiter as designed.

## Rationale

The reviewer agreed with the design.

## Deliverable Receipt

- Primary: \`$doc\`
- SHA-256: $(sha256sum "$doc" | cut -d' ' -f1)

## Accepted Decisions Summary

- D1 accepted by every participant.

## Readiness Result

- All gates passed.

## Assumptions

- Keys are authenticated upstream.

## Deferred Follow-ups

- None.

## Implementation Blockers

- None.

## Next Action

Implement the limiter.
CONCLUSION
      emit completed "Collaboration complete" ',"doc":"conclusion.md"'
    fi
    ;;
esac
