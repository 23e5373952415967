# Helpers of the scripted turns of examples/demo.yaml. acpfs drive runs
# each turn in its own acpfs run sandbox, in the folder (the agent's
# view), with ACPFS_PARTICIPANT, ACPFS_NEXT_ACTION and, on a retry,
# ACPFS_LAST_ERROR set; a turn does one step and exits.
set -eu
now() { date -u +%Y-%m-%dT%H:%M:%SZ; }
last_seq() { wc -l < events.jsonl | tr -d ' '; }
has_event() { grep -q "\"event\":\"$1\"" events.jsonl; }
# phase: the phase the turn was woken in, from its next action (acpfs
# next, as the driver handed it over).
phase() { sed -n 's/^phase: //p' "$ACPFS_NEXT_ACTION_FILE"; }
# edit FILE SED-SCRIPT: edit in place through the private /tmp (sed -i
# would create its temporary file next to FILE).
edit() { sed "$2" "$1" > "/tmp/edit.$$" && cat "/tmp/edit.$$" > "$1" && rm -f "/tmp/edit.$$"; }
# emit EVENT SUMMARY [EXTRA_JSON]: append one event as this participant,
# again with the next seq when another participant took this one first.
emit() {
  for _ in 1 2 3 4 5; do
    seq=$(( $(last_seq) + 1 ))
    if echo "{\"seq\":$seq,\"from\":\"$ACPFS_PARTICIPANT\",\"event\":\"$1\",\"at\":\"$(now)\",\"summary\":\"$2\",\"reply_to\":$((seq - 1))${3:-}}" >> events.jsonl 2>/dev/null; then
      echo "appended seq $seq $1"
      return 0
    fi
    grep -q "\[seq-continuous\]" .acpfs/last-error 2>/dev/null || break
  done
  echo "could not append $1: $(cat .acpfs/last-error)"
  return 1
}
# refused WHAT CMD...: run CMD, which must fail, and say how.
refused() {
  what=$1; shift
  if out=$("$@" 2>&1); then echo "UNEXPECTED: $what succeeded"; exit 1; fi
  echo "refused as it should be: $what: ${out##*: }"
}
