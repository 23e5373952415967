package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
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
	return ledgerTestRunOf(t, cheat, "")
}

// ledgerTestRunOf is ledgerTestRun with only agent's records in the
// ledger, unless agent is "".
func ledgerTestRunOf(t *testing.T, cheat bool, agent string) string {
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
		if agent != "" && r.Agent != agent {
			continue
		}
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
	// A version 3 line leaves out what the record before says; --json
	// prints the record whole, its chain as the next record links to it.
	assert.Equal(t, "bob", r.Agent)
	assert.Equal(t, "G-bob", r.Grant)
	out, _, err = ledgerRunCLI(t, "ledger", "show", "--ledger", l, "--kind", "checkpoint", "--json")
	require.NoError(t, err)
	var cp ledger.Record
	require.NoError(t, json.Unmarshal([]byte(out), &cp))
	assert.Equal(t, r.Hash, cp.Prev, "the hash --json prints is the one the chain holds")
	raw, err := os.ReadFile(l)
	require.NoError(t, err)
	assert.Contains(t, string(raw), out, "a signed record is printed exactly as stored")
	assert.Contains(t, string(raw), `"path":"oracle/answers.md","mac":"`, "the record is a version 3 line in the file")

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

// ledgerSoundCode is what verify exits with for a sound ledger in runs:
// 0 when the writer left a public key to check its signatures with,
// exitUnchecked when it did not.
func ledgerSoundCode(runs string) int {
	if _, err := os.Stat(filepath.Join(runs, ledger.PublicKeyFile)); err != nil {
		return exitUnchecked
	}
	return exitOK
}

func TestLedgerVerifyAndRepair(t *testing.T) {
	runs := ledgerTestRun(t, false)
	l := filepath.Join(runs, "communication_ledger.jsonl")
	out, code, _ := ledgerRunCLI(t, "ledger", "verify", "--ledger", l)
	assert.Equal(t, ledgerSoundCode(runs), code)
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

	out, code, _ = ledgerRunCLI(t, "ledger", "verify", "--ledger", l, "--repair")
	assert.Equal(t, ledgerSoundCode(runs), code)
	assert.Contains(t, out, "repaired: cut 14 torn byte(s)")
	assert.Contains(t, out, "repair recorded at seq 7")

	out, code, _ = ledgerRunCLI(t, "ledger", "verify", "--ledger", l, "--json")
	assert.Equal(t, ledgerSoundCode(runs), code)
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
	// Seq 3 carries no hash: the edit shows where the chain is next
	// stated, at the checkpoint, and is located to the records before it.
	require.ErrorContains(t, err, "first bad seq 6")
	assert.ErrorContains(t, err, ledger.ProblemPrev)
	assert.ErrorContains(t, err, "one of seq 1–5")
}

// ledgerSignedCopy copies the signed golden ledger (a sealed segment, the
// live file, its head and ledger.pub) into a fresh run directory and
// returns the live file's path.
func ledgerSignedCopy(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.CopyFS(dir, os.DirFS(filepath.Join("..", "..", "testdata", "ledger", "signed"))))
	return filepath.Join(dir, "communication_ledger.jsonl")
}

// ledgerRewrite reads the records of the file, lets edit change them,
// then renumbers and relinks them from first (seq) and prev in the file's
// format, recomputing every hash, as someone without the key would;
// signatures and batch seals are kept (and no longer match what changed).
func ledgerRewrite(t *testing.T, file string, first int64, prev string, edit func([]ledger.Record) []ledger.Record) {
	t.Helper()
	var recs []ledger.Record
	rd := ledger.NewReader(bytes.NewReader(fileContent(t, file)))
	for {
		r, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		recs = append(recs, r)
	}
	le := ledger.NewLineEncoder(max(recs[0].Version, ledger.Version1))
	recs = edit(recs)
	if prev != "" {
		// What the file's first record links to; it states every field.
		le.After(ledger.Record{Seq: first - 1, Hash: prev})
	}
	var buf bytes.Buffer
	for i := range recs {
		r := &recs[i]
		r.Seq = first + int64(i)
		line, err := le.Encode(r)
		require.NoError(t, err)
		buf.Write(line)
	}
	require.NoError(t, os.WriteFile(file, buf.Bytes(), 0o600))
}

func fileContent(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	require.NoError(t, err)
	return b
}

// The golden ledger's sealed segment holds seq 1–4 (its segment_end has
// this hash); the live file holds 5–9, its last record a checkpoint.
const ledgerGoldenSegmentEnd = "7d577acd192bf4caaa51d83d8320ea18e0cb8958124a9456ae0a8dfa7a3e8d90"

func TestLedgerVerifySignatures(t *testing.T) {
	bobRead := ledger.Record{At: "2026-03-01T12:00:00.009500000Z", Kind: ledger.KindRead, Agent: "bob", Grant: "G-bob", Path: "oracle/answer.md"}
	tests := []struct {
		name   string
		tamper func(t *testing.T, l string) []string // returns extra CLI arguments
		code   int
		out    []string // substrings of stdout
		err    string   // substring of the error
	}{
		{"sound", func(t *testing.T, l string) []string { return nil }, exitOK, []string{
			"valid chain, 9 record(s) in 2 files",
			"key b600306cfa76723f: signed seq 1–9 in 4 checkpoint(s)",
			"signatures checked against key(s) b600306cfa76723f; the head's checkpoint at seq 9 is in the ledger",
		}, ""},
		{"record inserted with the chain recomputed", func(t *testing.T, l string) []string {
			ledgerRewrite(t, l, 5, ledgerGoldenSegmentEnd, func(rs []ledger.Record) []ledger.Record {
				return append(rs[:2:2], append([]ledger.Record{bobRead}, rs[2:]...)...)
			})
			return nil
		}, exitFailed, []string{"BROKEN after 8 sound record(s)"}, "rewritten: the record at seq 9"},
		{"record inserted with the chain recomputed, head removed", func(t *testing.T, l string) []string {
			ledgerRewrite(t, l, 5, ledgerGoldenSegmentEnd, func(rs []ledger.Record) []ledger.Record {
				return append(rs[:2:2], append([]ledger.Record{bobRead}, rs[2:]...)...)
			})
			require.NoError(t, os.Remove(ledger.HeadPath(l)))
			return nil
		}, exitFailed, []string{"BROKEN after 9 sound record(s)", "key b600306cfa76723f: signed seq 1–5 in 3 checkpoint(s)"}, "forged: the signature does not match"},
		{"record appended with the chain recomputed", func(t *testing.T, l string) []string {
			ledgerRewrite(t, l, 5, ledgerGoldenSegmentEnd, func(rs []ledger.Record) []ledger.Record { return append(rs, bobRead) })
			return nil
		}, exitFailed, nil, "unsigned_tail: the last 1 record(s) (seq 10–10) carry no signature"},
		{"unsigned tail of a live ledger", func(t *testing.T, l string) []string {
			ledgerRewrite(t, l, 5, ledgerGoldenSegmentEnd, func(rs []ledger.Record) []ledger.Record { return append(rs, bobRead) })
			return []string{"--live"}
		}, exitOK, []string{"warning: the last 1 record(s) (seq 10–10) carry no signature", "1 record(s) after the last signature"}, ""},
		{"truncated", func(t *testing.T, l string) []string {
			ledgerRewrite(t, l, 5, ledgerGoldenSegmentEnd, func(rs []ledger.Record) []ledger.Record { return rs[:len(rs)-1] })
			return nil
		}, exitFailed, nil, "truncated: the ledger ends at seq 8 but its head records a signed checkpoint at seq 9"},
		{"sealed segment missing", func(t *testing.T, l string) []string {
			require.NoError(t, os.Remove(ledger.SegmentName(l, 1)))
			return nil
		}, exitFailed, nil, "the segment holding them (communication_ledger.000000000001.jsonl) is missing"},
		{"no public key", func(t *testing.T, l string) []string {
			require.NoError(t, os.Remove(filepath.Join(filepath.Dir(l), ledger.PublicKeyFile)))
			return nil
		}, exitUnchecked, []string{"valid chain, 9 record(s)", "signatures not checked: no public key (ledger.pub) found"}, "pass --pubkey FILE"},
		{"public key kept apart", func(t *testing.T, l string) []string {
			kept := filepath.Join(t.TempDir(), "reviewer.pub")
			require.NoError(t, os.Rename(filepath.Join(filepath.Dir(l), ledger.PublicKeyFile), kept))
			return []string{"--pubkey", kept}
		}, exitOK, []string{"key b600306cfa76723f: signed seq 1–9"}, ""},
		{"someone else's key", func(t *testing.T, l string) []string {
			dir := t.TempDir()
			_, err := ledger.LoadOrCreateKey(dir)
			require.NoError(t, err)
			return []string{"--pubkey", filepath.Join(dir, ledger.PublicKeyFile)}
		}, exitFailed, nil, "unknown_key: signed by key b600306cfa76723f"},
		{"unreadable --pubkey", func(t *testing.T, l string) []string {
			return []string{"--pubkey", filepath.Join(t.TempDir(), "missing.pub")}
		}, exitFailed, nil, "--pubkey"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := ledgerSignedCopy(t)
			args := append([]string{"ledger", "verify", "--ledger", l}, tt.tamper(t, l)...)
			out, code, err := ledgerRunCLI(t, args...)
			assert.Equal(t, tt.code, code, "%v\n%s", err, out)
			for _, want := range tt.out {
				assert.Contains(t, out, want)
			}
			if tt.err == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.err)
		})
	}
}

func TestLedgerVerifyJSON(t *testing.T) {
	l := ledgerSignedCopy(t)
	out, code, err := ledgerRunCLI(t, "ledger", "verify", "--ledger", l, "--json")
	require.NoError(t, err)
	assert.Equal(t, exitOK, code)
	var rep ledger.VerifyReport
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	assert.True(t, rep.SignaturesChecked)
	assert.Equal(t, []ledger.Signer{{Key: "b600306cfa76723f", FirstSeq: 1, LastSeq: 9, SignedCheckpoints: 4}}, rep.Signers)
	assert.Equal(t, []string{ledger.SegmentName(l, 1), l}, rep.Files)
	assert.Equal(t, int64(9), rep.HeadSeq)
}

func TestLedgerShowReadsSegments(t *testing.T) {
	l := ledgerSignedCopy(t)
	out, code, err := ledgerRunCLI(t, "ledger", "show", "--ledger", l)
	require.NoError(t, err)
	assert.Equal(t, exitOK, code)
	assert.Contains(t, out, "9 record(s)")
	assert.Contains(t, out, "mount_started")
}

func TestLedgerGroup(t *testing.T) {
	for in, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 52113: "52,113", 1234567: "1,234,567", -1234: "-1,234"} {
		assert.Equal(t, want, ledgerGroup(in))
	}
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
				{Kind: ledger.KindSignedCheckpoint},
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

// TestLedgerAuditKeylessLedger: a ledger rebuilt without the key, its
// ledger.pub and head deleted, is a sound chain that ledger verify cannot
// vouch for (exit 5); the audit cannot either: every agent unverified,
// exit 2, in Markdown and HTML, and the error says to pass --pubkey. With
// the reviewer's copy of the key, the rebuilt ledger is forged.
func TestLedgerAuditKeylessLedger(t *testing.T) {
	runs := ledgerTestRun(t, true)
	l := filepath.Join(runs, "communication_ledger.jsonl")
	kept := filepath.Join(t.TempDir(), "reviewer.pub")
	require.NoError(t, os.Rename(filepath.Join(runs, ledger.PublicKeyFile), kept))
	require.NoError(t, os.Remove(filepath.Join(runs, ledger.KeyFile)))
	require.NoError(t, os.Remove(ledger.HeadPath(l)))
	// Rebuilt without the key: bob's read of the oracle is gone, and no
	// record carries a signature.
	ledgerRewrite(t, l, 1, "", func(rs []ledger.Record) []ledger.Record {
		var out []ledger.Record
		for _, r := range rs {
			if r.Path == "oracle/answers.md" && r.Agent == "bob" {
				continue
			}
			r.Sig, r.Key, r.MAC = "", "", ""
			out = append(out, r)
		}
		return out
	})

	_, code, err := ledgerRunCLI(t, "ledger", "verify", "--ledger", l)
	assert.Equal(t, exitUnchecked, code, "%v", err)

	for _, format := range []string{"md", "html"} {
		t.Run(format, func(t *testing.T) {
			out, code, err := ledgerRunCLI(t, "audit", "--runs", runs, "--format", format)
			assert.Equal(t, exitFailed, code)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "audit unverified: signatures: no public key")
			assert.Contains(t, err.Error(), "--pubkey FILE")
			assert.NotContains(t, out, "**isolated**")
			assert.NotContains(t, out, "badge v-isolated")
			assert.Contains(t, out, "unverified")
			assert.Contains(t, out, "no public key")
			assert.Contains(t, out, "0 of 6 records covered by signed checkpoints")
			assert.Contains(t, out, "0 of 6 read")
			if format == "md" {
				assert.Contains(t, out, "Verdict: **unverified**")
				assert.Contains(t, out, "## Agent alice: unverified")
				assert.Contains(t, out, "## Agent bob: unverified")
			} else {
				assert.Contains(t, out, `<title>Ledger audit: unverified</title>`)
				assert.Contains(t, out, `<dt>Key</dt><dd><code>none</code></dd>`)
			}
		})
	}

	out, code, err := ledgerRunCLI(t, "audit", "--runs", runs, "--pubkey", kept)
	assert.Equal(t, exitFailed, code)
	require.ErrorContains(t, err, "audit unverified: signatures: forged")
	assert.Contains(t, out, "- Signatures: **forged**")

	_, code, err = ledgerRunCLI(t, "audit", "--runs", runs, "--pubkey", filepath.Join(runs, "missing.pub"))
	assert.Equal(t, exitFailed, code)
	assert.ErrorContains(t, err, "--pubkey")
}
