#!/usr/bin/env bash
# The main job, through the driver: `acpfs drive examples/demo.yaml`
# carries an owner and a reviewer from `initialized` to `completed`, each
# turn a scripted shell agent (examples/turns/) in its own acpfs run
# sandbox. The owner's grant shows an oracle file, the reviewer's forbids
# it; along the way the reviewer's read of the oracle, its event forged
# as the owner and the owner's write to the frozen deliverable are
# refused, and the driver explains each refusal. Then the folder is
# validated, the ledger verified and the audit's turn timeline printed.
# Everything lives in a temporary directory, removed at the end
# (ACPFS_DEMO_KEEP=1 keeps it).
set -euo pipefail

ACPFS=${ACPFS:-$(pwd)/bin/acpfs}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/acpfs-demo-XXXXXX")
chmod 755 "$work"

if [ -t 1 ] && [ -z "${NO_COLOR:-}" ]; then b=$'\033[1m' n=$'\033[0m'; else b='' n=''; fi
say() { printf '\n%s== %s%s\n' "$b" "$*" "$n"; }

cleanup() {
  # acpfs drive unmounts its views however it ends; never leave one.
  for m in "$work"/mnt/*; do
    if mountpoint -q "$m" 2>/dev/null; then "$ACPFS" umount "$m" || true; fi
  done
  if [ -z "${ACPFS_DEMO_KEEP:-}" ]; then rm -rf "$work"; else echo "kept $work"; fi
}
trap cleanup EXIT

# The collaboration file and the turn scripts, next to the folder they
# name (collab/, agent_runs/ and mnt/, relative to the file).
cp "$here/demo.yaml" "$work/"
cp -r "$here/turns" "$work/"
chmod -R a+rX "$work/turns"
mkdir -p "$work/collab/oracle"
echo "Expected answer: token bucket, 100 req/s per key" > "$work/collab/oracle/expected-answer.md"

say "1. acpfs drive --check: the collaboration file is valid"
"$ACPFS" drive --check "$work/demo.yaml"

say "2. acpfs drive: every turn in its own sandbox"
"$ACPFS" drive --plain "$work/demo.yaml"

say "3. acpfs validate"
"$ACPFS" validate --folder "$work/collab"
say "4. acpfs ledger verify"
"$ACPFS" ledger verify --ledger "$work/agent_runs/communication_ledger.jsonl"
say "5. The audit: verdicts and the turn timeline"
awk '/^## Summary/,0' "$work/agent_runs/audit.md" | awk '/^## Agent [^×]/{skip=1} /^## (Turns|Agent ×)/{skip=0} !skip'
echo
echo "Receipts of every turn: agent_runs/turns/*.json (in $work)"
