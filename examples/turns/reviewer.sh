#!/bin/sh
# A reviewer's turn: review once, then accept the decision.
. "$(dirname "$0")/lib.sh"
echo "turn $ACPFS_TURN: $(sed -n 's/^next action: //p' "$ACPFS_NEXT_ACTION_FILE")"
case $(phase) in
  reviewing)
    echo "reads the design: $(grep -c '^## ' deliverables/design-spec.md) sections"
    # The reviewer's grant forbids the oracle: the view shows no such file.
    refused "a read of the oracle" cat oracle/expected-answer.md
    # from must be this participant: a line written as the owner is refused.
    seq=$(( $(last_seq) + 1 ))
    refused "an event forged as the owner" sh -c "echo '{\"seq\":$seq,\"from\":\"alice\",\"event\":\"proposal_revised\",\"at\":\"$(now)\",\"summary\":\"forged\",\"reply_to\":$((seq - 1))}' >> events.jsonl"
    echo "  (the shell reports any failed write as an I/O error; the view says why: $(cut -d' ' -f2- .acpfs/last-error))"
    cat >> review.md <<REVIEW

## $(now) - $ACPFS_PARTICIPANT - seq $seq

Context:
- Reviewed primary deliverable: \`deliverables/design-spec.md\`

Review Scope:
- Proposal coherence

Position:
- The token bucket design is sound.
REVIEW
    emit review_submitted "Reviewed the design"
    ;;
  decision_review)
    emit decision_accepted "Accepting D1"
    ;;
esac
