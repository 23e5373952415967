// Package bench is the benchmark harness of acpfs. It measures, in one
// run on one machine state, what a view costs compared with the native
// folder and with a plain go-fuse loopback (bench/loopback): sequential
// reads, listings, appends to events.jsonl, the ledger record of an open,
// the coordinator's memory and the start-up of a mount.
//
// Everything here lives in test files and does nothing unless
// ACPFS_BENCH=1: without it the tests skip and nothing is mounted, so
// `go test ./...` stays fast. scripts/bench.sh runs the whole harness and
// prints a Markdown report.
package bench
