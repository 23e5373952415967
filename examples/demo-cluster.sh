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

if [ -t 1 ] && [ -z "${NO_COLOR:-}" ]; then b=$'\033[1m' n=$'\033[0m'; else b='' n=''; fi
say() { printf '\n%s== %s%s\n' "$b" "$*" "$n"; }

cleanup() {
  for pid in "${pids[@]}"; do
    if kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid"; wait "$pid" 2>/dev/null || true; fi
  done
  for m in "$work"/host-*/mnt/*; do
    if mountpoint -q "$m" 2>/dev/null; then "$ACPFS" umount "$m" || true; fi
  done
}
trap cleanup EXIT

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
for h in a b; do
  d=$work/host-$h
  "$ACPFS" up "${S[@]}" --host "h$h" --runs "$d/runs" --folder "$d/collab" --root "$d/mnt" &
  pids+=($!)
done
for _ in $(seq 200); do
  [ -e "$A/mnt/alice/.acpfs/status" ] && [ -e "$B/mnt/bob/.acpfs/status" ] && break
  sleep 0.05
done
echo "alice sees on host A: $(cd "$A/mnt/alice" && ls | tr '\n' ' ')"
echo "bob sees on host B:   $(cd "$B/mnt/bob" && ls | tr '\n' ' ')"

ALICE_VIEW=$A/mnt/alice BOB_VIEW=$B/mnt/bob
# shellcheck source=examples/agents.sh
. "$(dirname "$0")/agents.sh"

say "4. Two scripted agents on two hosts take turns through .acpfs/wait"
alice & alice_pid=$!
bob & bob_pid=$!
wait "$alice_pid"
wait "$bob_pid"

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
