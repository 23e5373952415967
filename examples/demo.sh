#!/usr/bin/env bash
# The main job: two agents collaborate from `initialized` to `completed`
# through their own acpfs mounts, using nothing but ordinary shell tools.
# The reviewer has a forbidden oracle file in the folder; along the way
# the run shows a refused forged event, a refused write to the frozen
# deliverable and a refused read of the oracle, then validates the
# folder, verifies the ledger and writes the isolation report.
set -euo pipefail

ACPFS=${ACPFS:-$(pwd)/bin/acpfs}
work=$(mktemp -d /tmp/acpfs-demo-XXXXXX)
folder=$work/collab
runs=$work/agent_runs
mnt=$work/mnt
coord_pid=""

# Bold headings on a terminal only, and never with NO_COLOR set.
if [ -t 1 ] && [ -z "${NO_COLOR:-}" ]; then b=$'\033[1m' n=$'\033[0m'; else b='' n=''; fi
say() { printf '\n%s== %s%s\n' "$b" "$*" "$n"; }

cleanup() {
  if [ -n "$coord_pid" ] && kill -0 "$coord_pid" 2>/dev/null; then
    kill -TERM "$coord_pid"
    wait "$coord_pid" 2>/dev/null || true
  fi
  # Belt and braces: never leave a mount of ours behind.
  for m in "$mnt"/*; do
    if mountpoint -q "$m" 2>/dev/null; then "$ACPFS" umount "$m" || true; fi
  done
}
trap cleanup EXIT

say "1. A collaboration folder, an oracle, and one grant per agent"
"$ACPFS" init --folder "$folder" --participant alice --participant bob \
  --objective "Design a rate limiter for the public API" \
  --completion "Limits per API key are specified" \
  --primary-deliverable-type design-spec
mkdir -p "$folder/oracle"
echo "Expected answer: token bucket, 100 req/s per key" > "$folder/oracle/expected-answer.md"
"$ACPFS" grant create --runs "$runs" --folder "$folder" --agent alice --preset owner \
  --objective "Write the rate limiter design and drive it to completion"
"$ACPFS" grant create --runs "$runs" --folder "$folder" --agent bob --preset reviewer \
  --objective "Review the design independently" --forbid 'oracle/**'

say "2. The coordinator mounts one view per agent"
"$ACPFS" up --runs "$runs" --folder "$folder" --root "$mnt" &
coord_pid=$!
for _ in $(seq 100); do
  [ -e "$mnt/alice/.acpfs/status" ] && [ -e "$mnt/bob/.acpfs/status" ] && break
  sleep 0.05
done
echo "alice sees: $(cd "$mnt/alice" && ls | tr '\n' ' ')"
echo "bob sees:   $(cd "$mnt/bob" && ls | tr '\n' ' ')"

# --- what every agent script shares: plain shell over its own mount ---
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
  cd "$mnt/alice"
  local doc=deliverables/design-spec.md
  while :; do
    cat .acpfs/wait > /dev/null
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
  cd "$mnt/bob"
  while :; do
    cat .acpfs/wait > /dev/null
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

say "3. Two scripted agents take turns through .acpfs/wait"
alice & alice_pid=$!
bob & bob_pid=$!
wait "$alice_pid"
wait "$bob_pid"

say "4. The coordinator stops; every view is unmounted"
kill -TERM "$coord_pid"
wait "$coord_pid" || true
coord_pid=""

say "5. acpfs validate"
"$ACPFS" validate --folder "$folder"
say "6. acpfs ledger verify"
"$ACPFS" ledger verify --ledger "$runs/communication_ledger.jsonl"
say "7. Isolation report"
# The summary and the agent x file matrix; the full report has every read.
"$ACPFS" audit --runs "$runs" --format md | awk '/^## Agent [^×]/{skip=1} /^## Agent ×/{skip=0} !skip'
"$ACPFS" audit --runs "$runs" --format html --out "$work/isolation-report.html"
echo
echo "HTML report: $work/isolation-report.html"
echo "Folder, run directory and ledger kept in $work"
