package ledger

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Environment variables that turn the test binary into a child writer
// process (see runChild).
const (
	envChild   = "ACPFS_LEDGER_TEST_CHILD" // "append" or "forever"
	envPath    = "ACPFS_LEDGER_TEST_PATH"
	envCount   = "ACPFS_LEDGER_TEST_COUNT"
	envName    = "ACPFS_LEDGER_TEST_NAME"
	envSync    = "ACPFS_LEDGER_TEST_SYNC"
	childReady = "ready\n"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(envChild); mode != "" {
		os.Exit(runChild(mode))
	}
	// Tests count records: a checkpoint signed because a second went by
	// on a loaded machine would be one too many. TestQuietLedgerIsSigned
	// tests the timer itself.
	defaultSignAfter = time.Hour
	os.Exit(m.Run())
}

// childProgressEvery is how often a "forever" child says how far it got.
const childProgressEvery = 64

// runChild appends records as another process would: "append" writes
// envCount records and exits, "forever" writes until killed.
func runChild(mode string) int {
	sm, err := ParseSyncMode(os.Getenv(envSync))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	w, err := Open(os.Getenv(envPath), Options{Sync: sm})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	n, _ := strconv.Atoi(os.Getenv(envCount))
	name := os.Getenv(envName)
	fmt.Fprint(os.Stdout, childReady)
	for i := 0; mode == "forever" || i < n; i++ {
		if _, err := w.Append(Record{Kind: KindRead, Agent: name, Path: fmt.Sprintf("f/%d", i), Detail: fmt.Sprint(i)}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		if mode == "forever" && (i+1)%childProgressEvery == 0 {
			// The parent kills it somewhere after a number of these.
			fmt.Fprintln(os.Stdout, "appended", i+1)
		}
	}
	if err := w.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	return 0
}

// fixedClock returns a clock that starts at a fixed instant and advances
// one millisecond per call.
func fixedClock() func() time.Time {
	t := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	return func() time.Time {
		t = t.Add(time.Millisecond)
		return t
	}
}

// writeLedger writes n read records by agent "a" and returns the path.
func writeLedger(t testing.TB, n int) string { return writeLedgerV(t, n, CurrentVersion) }

// writeLedgerV is writeLedger in a format version.
func writeLedgerV(t testing.TB, n int, version int64) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "communication_ledger.jsonl")
	k := testKey(t, 7)
	require.NoError(t, writeKeyFile(filepath.Dir(path), k))
	w, err := Open(path, Options{Sync: SyncOff, Clock: fixedClock(), Key: k, version: version})
	require.NoError(t, err)
	for i := 1; i <= n; i++ {
		_, err := w.Append(Record{Kind: KindRead, Agent: "a", Grant: "G-a", Path: fmt.Sprintf("docs/%d.md", i), PID: 42})
		require.NoError(t, err)
	}
	require.NoError(t, w.Close())
	return path
}
