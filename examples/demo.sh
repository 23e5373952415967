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

ALICE_VIEW=$mnt/alice BOB_VIEW=$mnt/bob
# shellcheck source=examples/agents.sh
. "$(dirname "$0")/agents.sh"

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
