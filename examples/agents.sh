# The two scripted agents of examples/demo-cluster.sh (two hosts; the
# one-host demo runs them as per-turn scripts, examples/turns/): plain shell over their own views.
# The including script sets ALICE_VIEW, BOB_VIEW and work, and defines say.

# view AGENT DIR: enter DIR, the agent's view, or fail at once saying
# that it is missing (its coordinator not running, or exited).
view() {
  if ! mountpoint -q "$2" 2>/dev/null; then
    echo "  $1: no view at $2: it is not mounted (is its acpfs up running?)" >&2
    return 1
  fi
  cd "$2"
}
# await AGENT: block until it is AGENT's turn; a view that went away
# fails at once instead of waiting.
await() {
  if ! cat .acpfs/wait > /dev/null; then
    echo "  $1: the view stopped answering (unmounted, or its acpfs up exited)" >&2
    return 1
  fi
}
now() { date -u +%Y-%m-%dT%H:%M:%SZ; }
last_seq() { wc -l < events.jsonl | tr -d ' '; }
has_event() { grep -q "\"event\":\"$1\"" events.jsonl; }
phase() { sed -n 's/^phase: //p' .acpfs/status; }
# edit FILE SED-SCRIPT: edit in place. `sed -i` would create its temporary
# file next to FILE, in a directory the grant does not let agents write.
edit() { sed "$2" "$1" > "$work/edit.$$" && cat "$work/edit.$$" > "$1" && rm -f "$work/edit.$$"; }
# emit FROM EVENT SUMMARY [EXTRA_JSON]: append one event with echo >>,
# retrying when another agent took the seq first.
emit() {
  local from=$1 event=$2 summary=$3 extra=${4:-} seq
  for _ in 1 2 3 4 5; do
    seq=$(( $(last_seq) + 1 ))
    if echo "{\"seq\":$seq,\"from\":\"$from\",\"event\":\"$event\",\"at\":\"$(now)\",\"summary\":\"$summary\",\"reply_to\":$((seq - 1))$extra}" >> events.jsonl 2>/dev/null; then
      echo "  $from: appended seq $seq $event"
      return 0
    fi
    sleep 0.1
  done
  echo "  $from: could not append $event: $(cat .acpfs/last-error)" >&2
  return 1
}

alice() {
  view alice "$ALICE_VIEW" || return 1
  local doc=deliverables/design-spec.md
  while :; do
    await alice || return 1
    case $(phase) in
      drafting)
        {
          printf '# Design Spec\n\nDeliverable type: `design-spec`\nStatus: In Review\n\n'
          for s in "Problem" "Goals" "Non-goals" "Proposed Design" "Interfaces / Contracts" "Failure Modes" "Validation Plan" "Open Questions"; do
            printf '## %s\n\nToken bucket per API key, 100 requests per second (%s).\n\n' "$s" "$s"
          done
        } > "$doc"
        emit alice deliverable_drafted "Drafted the design" ",\"doc\":\"$doc\",\"role\":\"primary\""
        emit alice proposal_submitted "Design ready for review"
        ;;
      revising)
        emit alice proposal_revised "Addressed the review"
        ;;
      decision_review)
        if tail -n 1 events.jsonl | grep -q '"event":"proposal_revised"'; then
          edit readiness.md 's/^- \[unresolved\] .*/- [resolved] Initial deliverable review completed./'
          emit alice question_classified "All questions resolved"
        else
          emit alice decision_accepted "Accepting D1"
        fi
        ;;
      readiness_check)
        if ! has_event deliverable_frozen; then
          edit "$doc" 's/^Status: In Review$/Status: Frozen/'
          emit alice deliverable_frozen "Freezing the design" ",\"doc\":\"$doc\",\"role\":\"primary\",\"sha256\":\"$(sha256sum "$doc" | cut -d' ' -f1)\""
          echo "  alice: tries to edit the frozen deliverable..."
          if err=$({ echo "late change" >> "$doc"; } 2>&1); then echo "  UNEXPECTED: frozen write succeeded"; exit 1; fi
          echo "  refused: ${err##*: }"
        elif ! has_event readiness_passed; then
          edit readiness.md 's/^- \[ \] /- [x] /'
          emit alice readiness_passed "All gates checked"
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

- D1 accepted by alice and bob.

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
          emit alice completed "Collaboration complete" ',"doc":"conclusion.md"'
        fi
        ;;
      completed | blocked) return 0 ;;
    esac
  done
}

bob() {
  view bob "$BOB_VIEW" || return 1
  while :; do
    await bob || return 1
    case $(phase) in
      reviewing)
        echo "  bob: reads the design: $(grep -c '^## ' deliverables/design-spec.md) sections, $(grep -c . proposal.md) lines of proposal"
        echo "  bob: tries to read the oracle..."
        if cat oracle/expected-answer.md 2>/dev/null; then echo "  UNEXPECTED: oracle readable"; exit 1; fi
        echo "  refused: $(cat oracle/expected-answer.md 2>&1 | sed 's/^.*: //')"
        echo "  bob: tries to forge an event from alice..."
        seq=$(( $(last_seq) + 1 ))
        if echo "{\"seq\":$seq,\"from\":\"alice\",\"event\":\"proposal_revised\",\"at\":\"$(now)\",\"summary\":\"forged\",\"reply_to\":$((seq - 1))}" >> events.jsonl 2>/dev/null; then
          echo "  UNEXPECTED: forged event accepted"; exit 1
        fi
        echo "  refused: $(cut -d' ' -f2- .acpfs/last-error)"
        cat >> review.md <<REVIEW

## $(now) - bob - seq $seq

Context:
- Reviewed primary deliverable: \`deliverables/design-spec.md\`

Review Scope:
- Proposal coherence
- Primary deliverable completeness

Position:
- The token bucket design is sound.
REVIEW
        emit bob review_submitted "Reviewed the design"
        ;;
      decision_review) emit bob decision_accepted "Accepting D1" ;;
      completed | blocked) return 0 ;;
    esac
  done
}
