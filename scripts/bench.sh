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
#   ACPFS_SOAK_SECONDS       how long the daemon memory load runs (default
#                            60; 1800 for the 30-minute soak); the run's
#                            timeout grows with it
#   ACPFS_SOAK_EVENTS        the history it starts from (default 100000)
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

# Everything else takes well under 20 minutes on a 2-core machine; the
# daemon memory soak adds its own length.
soak=${ACPFS_SOAK_SECONDS:-60}
case $soak in
''|*[!0-9]*)
	echo "bench: ACPFS_SOAK_SECONDS=$soak: want a whole number of seconds" >&2
	exit 2
	;;
esac
timeout=$((20 * 60 + soak))s

"$GO" test -count=1 -timeout "$timeout" -run '^Test' -bench . -benchtime "${ACPFS_BENCHTIME:-10x}" ./bench/
echo "report written to $ACPFS_BENCH_REPORT"
