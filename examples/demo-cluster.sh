#!/usr/bin/env bash
# The demo collaboration across two hosts: a NATS JetStream server, then
# one `acpfs up --store` per host, each with a folder, a run directory and
# mounts of its own. The owner's agent works on host A, the reviewer's on
# host B; neither host reads the other's disk. Both hosts live on this
# machine, talking to the server over loopback.
set -euo pipefail

ACPFS=${ACPFS:-$(pwd)/bin/acpfs}
NATS=${ACPFS_NATS:-$(pwd)/bin/acpfs-nats}
work=$(mktemp -d /tmp/acpfs-cluster-XXXXXX)
collab=demo
pids=()
agents=() # each agent's process group, stopped with its blocked reads

if [ -t 1 ] && [ -z "${NO_COLOR:-}" ]; then b=$'\033[1m' n=$'\033[0m'; else b='' n=''; fi
say() { printf '\n%s== %s%s\n' "$b" "$*" "$n"; }

cleanup() {
  for pid in "${agents[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
  # The hosts before the server: they ship their last ledger records.
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    pid=${pids[$i]}
    if kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid"; wait "$pid" 2>/dev/null || true; fi
  done
  for m in "$work"/host-*/mnt/*; do
    if mountpoint -q "$m" 2>/dev/null; then "$ACPFS" umount "$m" || true; fi
  done
}
trap cleanup EXIT
fail() { printf 'demo-cluster: %s\n' "$*" >&2; exit 1; }

say "1. A NATS JetStream server (built from the Go module, on loopback)"
"$NATS" --dir "$work/nats" --port -1 > "$work/nats.url" 2> "$work/nats.log" &
pids+=($!)
for _ in $(seq 200); do [ -s "$work/nats.url" ] && break; sleep 0.05; done
store=$(head -n 1 "$work/nats.url")
echo "server: $store"
S=(--store "$store" --collab "$collab")

say "2. Host A initializes the collaboration; the coordinator assigns one grant per host"
A=$work/host-a B=$work/host-b
"$ACPFS" init --folder "$A/collab" --participant alice --participant bob \
  --objective "Design a rate limiter for the public API" \
  --completion "Limits per API key are specified" \
  --primary-deliverable-type design-spec
mkdir -p "$A/collab/oracle" "$B/collab"
echo "Expected answer: token bucket, 100 req/s per key" > "$A/collab/oracle/expected-answer.md"
"$ACPFS" grant create "${S[@]}" --host ha --folder "$A/collab" --agent alice --preset owner \
  --objective "Write the rate limiter design and drive it to completion"
"$ACPFS" grant create "${S[@]}" --host hb --folder "$A/collab" --agent bob --preset reviewer \
  --objective "Review the design independently" --forbid 'oracle/**'

say "3. Each host serves its own copy; host B starts with an empty folder"
# Started together: host B, whose folder is empty, waits (--store-wait,
# 60s by default) until host A has published the collaboration.
declare -A up_pid
for h in a b; do
  d=$work/host-$h
  "$ACPFS" up "${S[@]}" --host "h$h" --runs "$d/runs" --folder "$d/collab" --root "$d/mnt" &
  pids+=($!) up_pid[$h]=$!
done
# up_alive: every host's coordinator still runs; one that exited leaves
# its agent without a view, and the demo stops at once saying so.
up_alive() {
  local h
  for h in a b; do
    kill -0 "${up_pid[$h]}" 2>/dev/null || fail "acpfs up of host ${h^^} exited (its error is above): its agent has no view"
  done
}
deadline=$((SECONDS + 180))
until [ -e "$A/mnt/alice/.acpfs/status" ] && [ -e "$B/mnt/bob/.acpfs/status" ]; do
  up_alive
  [ "$SECONDS" -lt "$deadline" ] || fail "the views did not answer within 180s"
  sleep 0.1
done
echo "alice sees on host A: $(cd "$A/mnt/alice" && ls | tr '\n' ' ')"
echo "bob sees on host B:   $(cd "$B/mnt/bob" && ls | tr '\n' ' ')"

ALICE_VIEW=$A/mnt/alice BOB_VIEW=$B/mnt/bob
# shellcheck source=examples/agents.sh
. "$(dirname "$0")/agents.sh"

say "4. Two scripted agents on two hosts take turns through .acpfs/wait"
# Job control: each agent in a process group of its own, so that one left
# waiting for its turn can be stopped with the read it is blocked in.
set -m
alice & agents+=($!)
bob & agents+=($!)
set +m
# Until both are done; an agent that fails, or a host whose view went
# away, ends the demo at once instead of leaving the other one waiting
# for a turn that never comes.
declare -A agent_pid=([alice]=${agents[0]} [bob]=${agents[1]})
while [ ${#agent_pid[@]} -gt 0 ]; do
  for a in "${!agent_pid[@]}"; do
    pid=${agent_pid[$a]}
    kill -0 "$pid" 2>/dev/null && continue
    rc=0
    wait "$pid" || rc=$?
    unset "agent_pid[$a]"
    [ "$rc" -eq 0 ] || fail "agent $a failed (exit $rc)"
  done
  up_alive
  sleep 0.2
done
agents=()

say "5. The hosts stop; every view is unmounted"
for pid in "${pids[@]:1}"; do kill -TERM "$pid"; wait "$pid" || true; done

say "6. Both copies hold one history, and both validate"
cmp "$A/collab/events.jsonl" "$B/collab/events.jsonl" && echo "events.jsonl: identical on both hosts ($(wc -l < "$A/collab/events.jsonl") events)"
for h in A B; do
  d=$work/host-${h,,}
  echo "host $h:"; "$ACPFS" validate --folder "$d/collab"
done

say "7. Every host's ledger, verified from the store"
"$ACPFS" ledger verify "${S[@]}"
echo
echo "Hosts' folders, run directories and ledgers kept in $work"
