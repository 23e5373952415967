package audit

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/ledger"
)

// fixedClock returns a clock that starts at a fixed instant and advances
// one millisecond per call.
func fixedClock() func() time.Time {
	t := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	return func() time.Time {
		t = t.Add(time.Millisecond)
		return t
	}
}

// appendRaw appends bytes to a file as an attacker or a crash would.
func appendRaw(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.WriteString(s)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

// mustBuild audits records in memory, with files as extra matrix rows.
func mustBuild(t *testing.T, records []ledger.Record, gs []Grant, files []string) *Report {
	t.Helper()
	rep, err := Build(records, gs, Options{Files: files})
	require.NoError(t, err)
	return rep
}

// auditFile audits one ledger file as the CLI does: its chain check, then
// its records.
func auditFile(path string, gs []Grant, opts Options) (*Report, error) {
	chain, err := ledger.Verify(path)
	if err != nil {
		return nil, err
	}
	opts.Ledger, opts.Chain = path, chain
	a := New(gs, opts)
	if err := a.AddFile(path); err != nil {
		return nil, err
	}
	return a.Report()
}
