package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/audit"
	"github.com/acpfs/acpfs/ledger"
)

// ledgerRunCLI runs the CLI in-process and returns stdout, the exit code
// execute would return, and the error it would print.
func ledgerRunCLI(t *testing.T, args ...string) (string, int, error) {
	t.Helper()
	r := runCLI(t, args...)
	return r.out, r.code, r.err
}

// ledgerTestRun makes a run directory with the test grants and a ledger
// where alice stays in her grant and bob, when cheat is set, reads the
// oracle.
func ledgerTestRun(t *testing.T, cheat bool) string {
	t.Helper()
	runs := t.TempDir()
	grantsDir := filepath.Join(runs, "context_grants")
	require.NoError(t, os.MkdirAll(grantsDir, 0o755))
	src := filepath.Join("..", "..", "testdata", "audit", "run", "context_grants")
	for _, name := range []string{"G-alice.json", "G-bob.json"} {
		data, err := os.ReadFile(filepath.Join(src, name))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(grantsDir, name), data, 0o644))
	}
	w, err := ledger.Open(filepath.Join(runs, "communication_ledger.jsonl"), ledger.Options{Sync: ledger.SyncOff})
	require.NoError(t, err)
	rs := []ledger.Record{
		{Kind: ledger.KindMountStarted, Agent: "alice", Grant: "G-alice"},
		{Kind: ledger.KindList, Agent: "alice", Grant: "G-alice"},
		{Kind: ledger.KindRead, Agent: "alice", Grant: "G-alice", Path: "docs/brief.md"},
		{Kind: ledger.KindDenied, Agent: "alice", Grant: "G-alice", Path: "oracle/answers.md", Op: "create", Detail: "tab\there \x1b[31mred"},
		{Kind: ledger.KindRead, Agent: "bob", Grant: "G-bob", Path: "deliverables/design-spec.md"},
	}
	if cheat {
		rs = append(rs, ledger.Record{Kind: ledger.KindRead, Agent: "bob", Grant: "G-bob", Path: "oracle/answers.md"})
	}
	for _, r := range rs {
		_, err := w.Append(r)
		require.NoError(t, err)
	}
	require.NoError(t, w.Close())
	return runs
}

func TestLedgerShow(t *testing.T) {
	runs := ledgerTestRun(t, true)
	l := filepath.Join(runs, "communication_ledger.jsonl")

	out, code, err := ledgerRunCLI(t, "ledger", "show", "--ledger", l)
	require.NoError(t, err)
	assert.Equal(t, exitOK, code)
	assert.Contains(t, out, "SEQ")
	assert.Contains(t, out, "7 record(s)", "six records and the closing checkpoint")
	assert.Contains(t, out, `tab\there \x1b[31mred`, "control characters are escaped for the terminal")
	assert.NotContains(t, out, "\x1b")

	out, _, err = ledgerRunCLI(t, "ledger", "show", "--ledger", l, "--agent", "bob", "--kind", "read", "--path", "oracle/**", "--json")
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 1)
	var r ledger.Record
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &r))
	assert.Equal(t, int64(6), r.Seq)
	raw, err := os.ReadFile(l)
	require.NoError(t, err)
	assert.Contains(t, string(raw), lines[0]+"\n", "--json prints records exactly as stored")

	out, _, err = ledgerRunCLI(t, "ledger", "show", "--ledger", l, "--kind", "denied,list")
	require.NoError(t, err)
	assert.Contains(t, out, "2 record(s)")

	out, _, err = ledgerRunCLI(t, "ledger", "show", "--ledger", l, "--since", "1h")
	require.NoError(t, err)
	assert.Contains(t, out, "7 record(s)", "six records and the closing checkpoint")
	out, _, err = ledgerRunCLI(t, "ledger", "show", "--ledger", l, "--until", "2000-01-01")
	require.NoError(t, err)
	assert.Contains(t, out, "0 record(s)")

	_, code, err = ledgerRunCLI(t, "ledger", "show", "--ledger", l, "--since", "yesterday")
	require.Error(t, err)
	assert.Equal(t, exitFailed, code)
	_, code, _ = ledgerRunCLI(t, "ledger", "show", "--ledger", filepath.Join(runs, "missing"))
	assert.Equal(t, exitFailed, code)
}

func TestLedgerVerifyAndRepair(t *testing.T) {
	runs := ledgerTestRun(t, false)
	l := filepath.Join(runs, "communication_ledger.jsonl")
	out, code, err := ledgerRunCLI(t, "ledger", "verify", "--ledger", l)
	require.NoError(t, err)
	assert.Equal(t, exitOK, code)
	assert.Contains(t, out, "valid chain, 6 record(s)")
	assert.Contains(t, out, "last hash ")

	// Torn tail: exit 2 with the first bad seq, then --repair fixes it.
	f, err := os.OpenFile(l, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.WriteString(`{"seq":7,"at":`)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	_, code, err = ledgerRunCLI(t, "ledger", "verify", "--ledger", l)
	assert.Equal(t, exitFailed, code)
	require.ErrorContains(t, err, "first bad seq 7")
	assert.ErrorContains(t, err, "torn_tail")

	out, code, err = ledgerRunCLI(t, "ledger", "verify", "--ledger", l, "--repair")
	require.NoError(t, err)
	assert.Equal(t, exitOK, code)
	assert.Contains(t, out, "repaired: cut 14 torn byte(s)")
	assert.Contains(t, out, "repair recorded at seq 7")

	out, code, err = ledgerRunCLI(t, "ledger", "verify", "--ledger", l, "--json")
	require.NoError(t, err)
	assert.Equal(t, exitOK, code)
	var rep ledger.VerifyReport
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	assert.Equal(t, int64(7), rep.LastSeq)
	assert.Len(t, rep.Repairs, 1)

	// An edited record cannot be repaired.
	raw, err := os.ReadFile(l)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(l, bytes.Replace(raw, []byte("docs/brief.md"), []byte("docs/other.md"), 1), 0o600))
	_, code, err = ledgerRunCLI(t, "ledger", "verify", "--ledger", l, "--repair")
	assert.Equal(t, exitFailed, code)
	require.ErrorContains(t, err, "first bad seq 3")
	assert.ErrorContains(t, err, "hash_mismatch")
}

func TestLedgerAudit(t *testing.T) {
	clean := ledgerTestRun(t, false)
	out, code, err := ledgerRunCLI(t, "ledger", "audit",
		"--ledger", filepath.Join(clean, "communication_ledger.jsonl"), "--grants", filepath.Join(clean, "context_grants"))
	require.NoError(t, err)
	assert.Equal(t, exitOK, code)
	assert.Contains(t, out, "# Ledger audit")
	assert.Contains(t, out, "Verdict: **isolated**")

	cheat := ledgerTestRun(t, true)
	out, code, err = ledgerRunCLI(t, "audit", "--runs", cheat, "--format", "json")
	assert.Equal(t, exitFailed, code)
	require.ErrorContains(t, err, "bob violated")
	var rep audit.Report
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	assert.Equal(t, audit.VerdictViolated, rep.Verdict)

	html := filepath.Join(t.TempDir(), "audit.html")
	out, code, _ = ledgerRunCLI(t, "audit", "--runs", cheat, "--format", "html", "--out", html)
	assert.Equal(t, exitFailed, code)
	assert.Empty(t, out)
	page, err := os.ReadFile(html)
	require.NoError(t, err)
	assert.Contains(t, string(page), "<!DOCTYPE html>")
	assert.Contains(t, string(page), "VIOLATION")

	_, code, err = ledgerRunCLI(t, "audit", "--runs", cheat, "--format", "pdf")
	assert.Equal(t, exitFailed, code)
	require.Error(t, err)
	_, code, _ = ledgerRunCLI(t, "audit", "--runs", filepath.Join(cheat, "nope"))
	assert.Equal(t, exitFailed, code)
}

// TestLedgerAuditNewKinds: aggregated repeats count in the report, and a
// gap record leaves an otherwise clean run unverified, with exit 2.
func TestLedgerAuditNewKinds(t *testing.T) {
	tests := []struct {
		name    string
		records []ledger.Record
		code    int
		errHas  string
		outHas  []string
	}{
		{
			name: "repeats and bookkeeping",
			records: []ledger.Record{
				{Kind: ledger.KindReadRepeat, Agent: "alice", Grant: "G-alice", Path: "docs/brief.md", Count: 41},
				{Kind: ledger.KindDeniedRepeat, Agent: "alice", Grant: "G-alice", Path: "oracle/answers.md", Op: "create", Count: 2},
				{Kind: ledger.KindAppendRecovered, Agent: "alice", Grant: "G-alice", Path: "events.jsonl"},
				{Kind: ledger.KindCheckpoint},
			},
			code:   exitOK,
			outHas: []string{"Verdict: **isolated**", "| docs/brief.md | 42 |", "| oracle/answers.md | 3 |"},
		},
		{
			name: "a gap",
			records: []ledger.Record{
				{Kind: ledger.KindGap, Count: 7, Detail: "restored from backup"},
			},
			code:   exitFailed,
			errHas: "audit unverified: alice unverified",
			outHas: []string{"Verdict: **unverified**", "Records lost: 7 records acknowledged lost (seq 7–13)"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runs := ledgerTestRun(t, false)
			w, err := ledger.Open(filepath.Join(runs, "communication_ledger.jsonl"), ledger.Options{Sync: ledger.SyncOff})
			require.NoError(t, err)
			for _, r := range tt.records {
				_, err := w.Append(r)
				require.NoError(t, err)
			}
			require.NoError(t, w.Close())
			out, code, err := ledgerRunCLI(t, "audit", "--runs", runs)
			assert.Equal(t, tt.code, code)
			if tt.errHas == "" {
				require.NoError(t, err)
			} else {
				require.ErrorContains(t, err, tt.errHas)
				assert.ErrorContains(t, err, "7 records acknowledged lost (seq 7–13)")
			}
			for _, want := range tt.outHas {
				assert.Contains(t, out, want)
			}
		})
	}
}

func TestLedgerParseTime(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Time
		err  bool
	}{
		{"", time.Time{}, false},
		{"90m", now.Add(-90 * time.Minute), false},
		{"2026-02-01", time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC), false},
		{"2026-02-01T10:00:00+01:00", time.Date(2026, 2, 1, 9, 0, 0, 0, time.UTC), false},
		{"soon", time.Time{}, true},
	}
	for _, tt := range tests {
		got, err := ledgerParseTime(tt.in, now)
		if tt.err {
			assert.Error(t, err, tt.in)
			continue
		}
		require.NoError(t, err, tt.in)
		assert.True(t, tt.want.Equal(got), "%s: %v", tt.in, got)
	}
}
