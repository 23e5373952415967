#!/usr/bin/env bash
# Regenerates testdata/protocol/parity/golden.json: the verdicts of the
# reference implementation of ACP (validate_collaboration.py,
# append_event.py) on every case of the parity corpus
# (protocol/corpus_test.go). `make test` then checks acpfs against the
# committed file without Python (TestParityGolden).
#
# Usage: scripts/parity-golden.sh [REFERENCE_SCRIPTS_DIR]
#
# REFERENCE_SCRIPTS_DIR (or ACPFS_REFERENCE_SCRIPTS) is the scripts
# directory of a checkout of the reference implementation you made
# yourself; nothing is downloaded. It needs python3 and go, and takes
# several minutes (one Python start-up per validation and append).
set -euo pipefail

die() { echo "parity-golden: $*" >&2; exit 2; }

dir=${1:-${ACPFS_REFERENCE_SCRIPTS:-}}
[ -n "$dir" ] || die "name the reference's scripts directory (argument or ACPFS_REFERENCE_SCRIPTS)"
[ -d "$dir" ] || die "$dir is not a directory"
for script in validate_collaboration.py append_event.py; do
	[ -f "$dir/$script" ] || die "$dir has no $script"
done
command -v python3 >/dev/null || die "python3 not found"
GO=${GO:-go}
command -v "$GO" >/dev/null || die "$GO not found"

dir=$(cd "$dir" && pwd)
cd "$(dirname "$0")/.."
# The test writes the file, then checks acpfs against it: a failure names
# the cases where acpfs and the reference now disagree.
ACPFS_REFERENCE_SCRIPTS=$dir "$GO" test ./protocol -count=1 -timeout 60m \
	-run '^TestParityGolden$' -update-parity
git diff --stat -- testdata/protocol/parity/ 2>/dev/null || true
