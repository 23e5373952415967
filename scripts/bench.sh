#!/usr/bin/env bash
# Runs the whole acpfs benchmark harness (package bench) in one go test
# process, so every ratio compares the same machine state, and writes the
# Markdown report to $ACPFS_BENCH_REPORT (default bin/benchmarks.md).
#
# Needs root and /dev/fuse. Optional:
#   ACPFS_REFERENCE_SCRIPTS  directory of the reference implementation's
#                            scripts, for the CLI comparison (python3)
#   ACPFS_BENCH_READ_MB      size of the sequential-read files (default 512)
#   ACPFS_BENCHTIME          go test -benchtime (default 10x: ten timed
#                            rounds per benchmark, after one warm-up round)
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
export ACPFS_BENCH=1
export ACPFS_BENCH_REPORT=${ACPFS_BENCH_REPORT:-$PWD/bin/benchmarks.md}
mkdir -p "$(dirname "$ACPFS_BENCH_REPORT")"

if [ "$(id -u)" != 0 ] || [ ! -c /dev/fuse ]; then
	echo "bench: needs root and /dev/fuse (acpfs doctor explains)" >&2
	exit 4
fi

"$GO" test -count=1 -timeout 20m -run '^Test' -bench . -benchtime "${ACPFS_BENCHTIME:-10x}" ./bench/
echo "report written to $ACPFS_BENCH_REPORT"
