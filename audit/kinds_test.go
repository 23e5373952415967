package audit

import (
	"bytes"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/ledger"
)

// at is a record time on the test day, seconds after noon.
func at(sec int) string { return fmt.Sprintf("2026-03-01T12:00:%02d.000000000Z", sec) }

func read(seq int64, agent, grant, path, sha string) ledger.Record {
	r := rec(seq, ledger.KindRead, agent, grant, path)
	r.SHA256 = sha
	return r
}

// readRepeat is an aggregate of n repeats of a read, between first and
// last (seconds after noon).
func readRepeat(seq int64, agent, grant, path, sha string, n int64, first, last int) ledger.Record {
	r := read(seq, agent, grant, path, sha)
	r.Kind, r.Count, r.First, r.Last = ledger.KindReadRepeat, n, at(first), at(last)
	r.At = at(last + 1)
	return r
}

func refusal(seq int64, kind ledger.Kind, path, op string) ledger.Record {
	r := rec(seq, kind, "alice", "G-alice", path)
	r.Op, r.Detail = ledger.Op(op), "refused "+path
	return r
}

func deniedRepeat(seq int64, path, op string, n int64) ledger.Record {
	r := refusal(seq, ledger.KindDeniedRepeat, path, op)
	r.Count, r.First, r.Last = n, at(1), at(2)
	return r
}

func byAgent(rep *Report) map[string]*Agent {
	m := map[string]*Agent{}
	for _, ag := range rep.Agents {
		m[ag.Agent] = ag
	}
	return m
}

// TestAuditReadRepeats: a read_repeat counts its repeats as reads of the
// path it repeats, with the content hashes kept per path, and is judged
// like the read.
func TestAuditReadRepeats(t *testing.T) {
	const shaA, shaB = "aaaa", "bbbb"
	tests := []struct {
		name       string
		records    []ledger.Record
		agent      string
		want       Access
		verdict    string
		violations []int64 // counts of the violation entries
	}{
		{
			name: "repeats add to the read",
			records: []ledger.Record{
				read(1, "alice", "G-alice", "docs/a.md", shaA),
				readRepeat(2, "alice", "G-alice", "docs/a.md", shaA, 5, 1, 9),
			},
			agent:   "alice",
			want:    Access{Path: "docs/a.md", Grant: "G-alice", Count: 6, FirstSeq: 1, LastSeq: 2, Allowed: true, Judged: true, Rule: "read docs", Hashes: []string{shaA}},
			verdict: VerdictIsolated,
		},
		{
			name: "another content of the same path is another hash of the same path",
			records: []ledger.Record{
				read(1, "alice", "G-alice", "docs/a.md", shaA),
				readRepeat(2, "alice", "G-alice", "docs/a.md", shaA, 2, 1, 2),
				read(3, "alice", "G-alice", "docs/a.md", shaB),
				readRepeat(4, "alice", "G-alice", "docs/a.md", shaB, 3, 3, 4),
			},
			agent:   "alice",
			want:    Access{Path: "docs/a.md", Grant: "G-alice", Count: 7, FirstSeq: 1, LastSeq: 4, Allowed: true, Judged: true, Rule: "read docs", Hashes: []string{shaA, shaB}},
			verdict: VerdictIsolated,
		},
		{
			name: "repeats whose full read was not fed still count",
			records: []ledger.Record{
				readRepeat(7, "alice", "G-alice", "docs/a.md", shaA, 4, 1, 2),
			},
			agent:   "alice",
			want:    Access{Path: "docs/a.md", Grant: "G-alice", Count: 4, FirstSeq: 7, LastSeq: 7, Allowed: true, Judged: true, Rule: "read docs", Hashes: []string{shaA}},
			verdict: VerdictIsolated,
		},
		{
			name: "a count below one is one repeat",
			records: []ledger.Record{
				read(1, "alice", "G-alice", "docs/a.md", shaA),
				readRepeat(2, "alice", "G-alice", "docs/a.md", shaA, 0, 1, 2),
			},
			agent:   "alice",
			want:    Access{Path: "docs/a.md", Grant: "G-alice", Count: 2, FirstSeq: 1, LastSeq: 2, Allowed: true, Judged: true, Rule: "read docs", Hashes: []string{shaA}},
			verdict: VerdictIsolated,
		},
		{
			name: "repeats of a forbidden read join its violation",
			records: []ledger.Record{
				read(1, "bob", "G-bob", "oracle/answers.md", shaA),
				readRepeat(2, "bob", "G-bob", "oracle/answers.md", shaA, 9, 1, 5),
			},
			agent:      "bob",
			want:       Access{Path: "oracle/answers.md", Grant: "G-bob", Count: 10, FirstSeq: 1, LastSeq: 2, Allowed: false, Judged: true, Rule: "no rule matches", Hashes: []string{shaA}},
			verdict:    VerdictViolated,
			violations: []int64{10},
		},
		{
			name: "repeats flushed after a revocation but made before it are allowed",
			records: []ledger.Record{
				read(1, "alice", "G-alice", "docs/a.md", shaA),
				withAt(rec(2, ledger.KindGrantRevoked, "alice", "G-alice", ""), at(10)),
				readRepeat(3, "alice", "G-alice", "docs/a.md", shaA, 3, 1, 9),
			},
			agent:   "alice",
			want:    Access{Path: "docs/a.md", Grant: "G-alice", Count: 4, FirstSeq: 1, LastSeq: 3, Allowed: true, Judged: true, Rule: "read docs", Hashes: []string{shaA}},
			verdict: VerdictIsolated,
		},
		{
			name: "repeats that go on after a revocation are a violation",
			records: []ledger.Record{
				read(1, "alice", "G-alice", "docs/a.md", shaA),
				withAt(rec(2, ledger.KindGrantRevoked, "alice", "G-alice", ""), at(10)),
				readRepeat(3, "alice", "G-alice", "docs/a.md", shaA, 3, 9, 11),
			},
			agent:      "alice",
			want:       Access{Path: "docs/a.md", Grant: "G-alice", Count: 4, FirstSeq: 1, LastSeq: 3, Allowed: false, Judged: true, Rule: "grant revoked at seq 2", Hashes: []string{shaA}},
			verdict:    VerdictViolated,
			violations: []int64{3},
		},
		{
			name: "repeats under a grant not given are unjudged",
			records: []ledger.Record{
				readRepeat(1, "dave", "G-dave", "docs/a.md", shaA, 2, 1, 2),
			},
			agent:   "dave",
			want:    Access{Path: "docs/a.md", Grant: "G-dave", Count: 2, FirstSeq: 1, LastSeq: 1, Allowed: true, Judged: false, Rule: "grant G-dave not found", Hashes: []string{shaA}},
			verdict: VerdictUnverified,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := mustBuild(t, tt.records, fakeGrants(), nil)
			ag := byAgent(rep)[tt.agent]
			require.NotNil(t, ag)
			require.Len(t, ag.Reads, 1)
			assert.Equal(t, tt.want, ag.Reads[0])
			assert.Equal(t, tt.verdict, ag.Verdict, ag.Reason)
			var counts []int64
			for _, v := range ag.Violations {
				counts = append(counts, v.Count)
			}
			assert.Equal(t, tt.violations, counts)
			assert.Equal(t, int64(len(tt.records)), rep.Records)
		})
	}
}

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	tm, err := time.Parse(time.RFC3339Nano, s)
	require.NoError(t, err)
	return tm
}

func withAt(r ledger.Record, t string) ledger.Record {
	r.At = t
	return r
}

// TestAuditRevokedAtTimeRepeats: against a grant file's revoked_at, an
// aggregate is judged by its last repeat, not by when it was flushed.
func TestAuditRevokedAtTimeRepeats(t *testing.T) {
	tests := []struct {
		name        string
		first, last int
		want        string
	}{
		{"all repeats before", 1, 4, VerdictIsolated},
		{"the last repeat after", 1, 6, VerdictViolated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gs := fakeGrants()
			gs[0].Revoked = true
			gs[0].RevokedAt = mustTime(t, at(5))
			rep := mustBuild(t, []ledger.Record{readRepeat(1, "alice", "G-alice", "docs/a.md", "aa", 2, tt.first, tt.last)}, gs, nil)
			assert.Equal(t, tt.want, byAgent(rep)["alice"].Verdict)
		})
	}
}

// TestAuditRefusalRepeats: a denied_repeat counts as refusals of the
// refusal it repeats, and the audit lists every distinct refused path
// once, with its count.
func TestAuditRefusalRepeats(t *testing.T) {
	type entry struct {
		kind     ledger.Kind
		path, op string
		count    int64
		seq      int64
	}
	tests := []struct {
		name           string
		records        []ledger.Record
		refused, noise []entry
	}{
		{
			name: "repeats add to the refusal",
			records: []ledger.Record{
				refusal(1, ledger.KindDenied, "oracle/answers.md", "lookup"),
				deniedRepeat(2, "oracle/answers.md", "lookup", 4),
			},
			refused: []entry{{ledger.KindDenied, "oracle/answers.md", "lookup", 5, 1}},
		},
		{
			name: "every distinct path once, in the order first refused",
			records: []ledger.Record{
				refusal(1, ledger.KindDenied, "oracle/b.md", "lookup"),
				refusal(2, ledger.KindDenied, "oracle/a.md", "lookup"),
				refusal(3, ledger.KindDenied, "oracle/b.md", "lookup"),
				deniedRepeat(4, "oracle/a.md", "lookup", 2),
				refusal(5, ledger.KindDenied, "oracle/a.md", "create"),
			},
			refused: []entry{
				{ledger.KindDenied, "oracle/b.md", "lookup", 2, 1},
				{ledger.KindDenied, "oracle/a.md", "lookup", 3, 2},
				{ledger.KindDenied, "oracle/a.md", "create", 1, 5},
			},
		},
		{
			name: "repeats of a frozen refusal join it",
			records: []ledger.Record{
				refusal(1, ledger.KindFrozenRefused, "deliverables/spec.md", "write"),
				deniedRepeat(2, "deliverables/spec.md", "write", 7),
			},
			refused: []entry{{ledger.KindFrozenRefused, "deliverables/spec.md", "write", 8, 1}},
		},
		{
			name: "repeats of tool noise stay noise",
			records: []ledger.Record{
				refusal(1, ledger.KindDenied, "docs/.spec.md.swp", "create"),
				deniedRepeat(2, "docs/.spec.md.swp", "create", 3),
			},
			noise: []entry{{ledger.KindDenied, "docs/.spec.md.swp", "create", 4, 1}},
		},
		{
			name: "repeats whose refusal was not fed stand for denied records",
			records: []ledger.Record{
				deniedRepeat(9, "oracle/answers.md", "open", 3),
				deniedRepeat(10, "docs/sedICqm3N", "create", 2),
			},
			refused: []entry{{ledger.KindDeniedRepeat, "oracle/answers.md", "open", 3, 9}},
			noise:   []entry{{ledger.KindDeniedRepeat, "docs/sedICqm3N", "create", 2, 10}},
		},
	}
	entries := func(evs []Event) []entry {
		var out []entry
		for _, e := range evs {
			out = append(out, entry{e.Kind, e.Path, string(e.Op), e.Count, e.Seq})
		}
		return out
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := mustBuild(t, tt.records, fakeGrants(), nil)
			alice := byAgent(rep)["alice"]
			assert.Equal(t, tt.refused, entries(alice.Refused))
			assert.Equal(t, tt.noise, entries(alice.Noise))
			assert.Equal(t, VerdictIsolated, alice.Verdict, "refusals are not violations")
			for _, e := range tt.refused {
				assert.True(t, rep.cell(t, e.path, "alice").Refused, e.path)
			}
		})
	}
}

// cell finds one cell of the matrix.
func (r *Report) cell(t *testing.T, path, agent string) MatrixCell {
	t.Helper()
	col := -1
	for i, ag := range r.Agents {
		if ag.Agent == agent {
			col = i
		}
	}
	require.GreaterOrEqual(t, col, 0, agent)
	for _, row := range r.Matrix {
		if row.Path == path {
			return row.Cells[col]
		}
	}
	t.Fatalf("no matrix row %q", path)
	return MatrixCell{}
}

// TestAuditKindsThatAreNotActivity: append_recovered counts as a write;
// the ledger's bookkeeping records are nobody's activity, whatever fields
// they carry.
func TestAuditKindsThatAreNotActivity(t *testing.T) {
	tests := []struct {
		kind       ledger.Kind
		writes     int64
		matrixRows int
	}{
		{ledger.KindAppendRecovered, 1, 1},
		{ledger.KindAppendAccepted, 1, 1},
		{ledger.KindSignedCheckpoint, 0, 0},
		{ledger.KindSegmentStart, 0, 0},
		{ledger.KindSegmentEnd, 0, 0},
		{ledger.KindLedgerRecovered, 0, 0},
	}
	for _, tt := range tests {
		t.Run(string(tt.kind), func(t *testing.T) {
			// Bookkeeping naming an agent the grants do not know must not
			// make that agent appear (unverified) in the report.
			records := []ledger.Record{
				rec(1, tt.kind, "alice", "G-alice", "events.jsonl"),
				rec(2, tt.kind, "mallory", "G-mallory", "oracle/answers.md"),
			}
			rep := mustBuild(t, records, fakeGrants()[:1], nil)
			assert.Equal(t, int64(2), rep.Records)
			ags := byAgent(rep)
			assert.Equal(t, tt.writes, ags["alice"].Writes)
			if tt.writes == 0 {
				assert.NotContains(t, ags, "mallory")
				assert.Equal(t, VerdictIsolated, rep.Verdict)
			}
			assert.Len(t, rep.Matrix, tt.matrixRows*2)
			if tt.writes > 0 {
				assert.True(t, rep.cell(t, "events.jsonl", "alice").Written)
			}
		})
	}
}

// TestAuditGaps: a gap record shows the records lost, and no agent is
// isolated while one is present.
func TestAuditGaps(t *testing.T) {
	gap := func(seq, count int64) ledger.Record {
		r := withAt(rec(seq, ledger.KindGap, "", "", ""), at(30))
		r.Count, r.Detail = count, "ledger truncated; restored by the operator"
		return r
	}
	before := []ledger.Record{
		withAt(read(1, "alice", "G-alice", "docs/a.md", "aa"), at(1)),
		withAt(read(2, "bob", "G-bob", "oracle/answers.md", "bb"), at(2)),
		withAt(read(3, "carol", "G-carol", "docs/a.md", "aa"), at(3)),
	}
	tests := []struct {
		name     string
		records  []ledger.Record
		want     []Gap
		sentence []string
		verdict  string
	}{
		{
			name:     "the gap record takes the next seq",
			records:  append(slices.Clone(before), gap(4, 20), withAt(read(5, "alice", "G-alice", "docs/b.md", "cc"), at(31))),
			want:     []Gap{{Seq: 4, At: at(30), Count: 20, FirstSeq: 4, LastSeq: 23, After: at(3), Detail: "ledger truncated; restored by the operator"}},
			sentence: []string{"20 records acknowledged lost (seq 4–23)"},
			verdict:  VerdictViolated,
		},
		{
			name:     "the gap record follows the lost seqs",
			records:  append(slices.Clone(before), gap(24, 20)),
			want:     []Gap{{Seq: 24, At: at(30), Count: 20, FirstSeq: 4, LastSeq: 23, After: at(3), Detail: "ledger truncated; restored by the operator"}},
			sentence: []string{"20 records acknowledged lost (seq 4–23)"},
			verdict:  VerdictViolated,
		},
		{
			name:     "two gaps",
			records:  []ledger.Record{before[0], gap(2, 1), before[2], gap(4, 2)},
			want:     []Gap{{Seq: 2, At: at(30), Count: 1, FirstSeq: 2, LastSeq: 2, After: at(1), Detail: "ledger truncated; restored by the operator"}, {Seq: 4, At: at(30), Count: 2, FirstSeq: 4, LastSeq: 5, After: at(3), Detail: "ledger truncated; restored by the operator"}},
			sentence: []string{"1 record acknowledged lost (seq 2)", "2 records acknowledged lost (seq 4–5)"},
			verdict:  VerdictUnverified,
		},
		{
			// An operator's repair set aside records no writer sealed:
			// a writer's with the seal stripped, say (an oracle read).
			name: "unsealed records set aside by a repair",
			records: func() []ledger.Record {
				r := withAt(rec(2, ledger.KindRepair, "", "", ""), at(30))
				r.Op, r.Count, r.Detail = ledger.OpCutForeign, 2, "moved 2 record(s) after seq 1"
				return []ledger.Record{before[0], r}
			}(),
			want:     []Gap{{Seq: 2, At: at(30), Count: 2, FirstSeq: 2, LastSeq: 3, After: at(1), Detail: "moved 2 record(s) after seq 1", SetAside: true}},
			sentence: []string{"2 records set aside by a repair, unsealed (seq 2–3)"},
			verdict:  VerdictUnverified,
		},
		{
			name:     "a gap of unknown size",
			records:  []ledger.Record{before[0], gap(2, 0)},
			want:     []Gap{{Seq: 2, At: at(30), FirstSeq: 2, After: at(1), Detail: "ledger truncated; restored by the operator"}},
			sentence: []string{"an unknown number of records acknowledged lost (from seq 2, gap record seq 2)"},
			verdict:  VerdictUnverified,
		},
		{
			name:     "a gap first",
			records:  []ledger.Record{gap(1, 5)},
			want:     []Gap{{Seq: 1, At: at(30), Count: 5, FirstSeq: 1, LastSeq: 5, Detail: "ledger truncated; restored by the operator"}},
			sentence: []string{"5 records acknowledged lost (seq 1–5)"},
			verdict:  VerdictUnverified,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := mustBuild(t, tt.records, fakeGrants(), nil)
			assert.Equal(t, tt.want, rep.Gaps)
			var sentences []string
			var lost int64
			for _, g := range rep.Gaps {
				sentences = append(sentences, g.String())
				lost += g.Count
			}
			assert.Equal(t, tt.sentence, sentences)
			assert.Equal(t, lost, rep.Lost)
			assert.Equal(t, tt.verdict, rep.Verdict)
			// Every agent is qualified: none is isolated, a violation stays one.
			for _, ag := range rep.Agents {
				assert.NotEqual(t, VerdictIsolated, ag.Verdict, ag.Agent)
				for _, s := range tt.sentence {
					assert.Contains(t, ag.Reason, s, ag.Agent)
				}
				if ag.Agent == "bob" && len(ag.Reads) > 0 {
					assert.Equal(t, VerdictViolated, ag.Verdict)
				}
			}
			var md, html bytes.Buffer
			require.NoError(t, rep.Render(&md, "md"))
			require.NoError(t, rep.Render(&html, "html"))
			for _, s := range tt.sentence {
				assert.Contains(t, md.String(), "> **Records lost: "+s+"**")
				assert.Contains(t, html.String(), "<strong>Records lost: "+s+"</strong>")
			}
			summary, _, _ := strings.Cut(md.String(), "## Summary")
			assert.Contains(t, summary, "Records lost", "shown before the summary")
		})
	}

	// Without a gap the same records leave the clean agents isolated.
	rep := mustBuild(t, before, fakeGrants(), nil)
	assert.Equal(t, VerdictIsolated, byAgent(rep)["alice"].Verdict)
	assert.Empty(t, rep.Gaps)
}

// TestAuditSegments: records fed from several files, in order, make one
// report, as from one ledger.
func TestAuditSegments(t *testing.T) {
	dir := t.TempDir()
	seg := func(name string, rs ...ledger.Record) string {
		path := filepath.Join(dir, name)
		w, err := ledger.Open(path, ledger.Options{Sync: ledger.SyncOff, Clock: fixedClock()})
		require.NoError(t, err)
		for _, r := range rs {
			_, err := w.Append(r)
			require.NoError(t, err)
		}
		require.NoError(t, w.Close())
		return path
	}
	one := seg("1.jsonl",
		ledger.Record{Kind: ledger.KindRead, Agent: "alice", Grant: "G-alice", Path: "docs/a.md", SHA256: "aa"},
		ledger.Record{Kind: ledger.KindDenied, Agent: "alice", Grant: "G-alice", Path: "oracle/answers.md", Op: "lookup"})
	two := seg("2.jsonl",
		ledger.Record{Kind: ledger.KindReadRepeat, Agent: "alice", Grant: "G-alice", Path: "docs/a.md", SHA256: "aa", Count: 41},
		ledger.Record{Kind: ledger.KindDeniedRepeat, Agent: "alice", Grant: "G-alice", Path: "oracle/answers.md", Op: "lookup", Count: 9},
		ledger.Record{Kind: ledger.KindGrantRevoked, Agent: "alice", Grant: "G-alice"},
		ledger.Record{Kind: ledger.KindRead, Agent: "alice", Grant: "G-alice", Path: "docs/b.md", SHA256: "bb"})
	a := New(fakeGrants(), Options{Ledger: one + ", " + two})
	require.NoError(t, a.AddFile(one))
	require.NoError(t, a.AddFile(two))
	rep, err := a.Report()
	require.NoError(t, err)
	assert.Equal(t, int64(8), rep.Records, "six records and each file's closing checkpoint")
	alice := byAgent(rep)["alice"]
	require.Len(t, alice.Reads, 2)
	assert.Equal(t, int64(42), alice.Reads[0].Count)
	require.Len(t, alice.Refused, 1)
	assert.Equal(t, int64(10), alice.Refused[0].Count)
	// The revocation in the second segment applies to what follows it.
	assert.Equal(t, VerdictViolated, alice.Verdict)
	require.Len(t, alice.Violations, 1)
	assert.Equal(t, "docs/b.md", alice.Violations[0].Path)

	require.Error(t, a.AddFile(filepath.Join(dir, "missing.jsonl")))
}

// TestAuditMemoryFollowsDistinct: what the audit keeps grows with the
// distinct (agent, path, hash) and refusals, not with the records.
func TestAuditMemoryFollowsDistinct(t *testing.T) {
	a := New(fakeGrants(), Options{})
	const paths, rounds = 10, 5000
	seq := int64(0)
	for i := 0; i < rounds; i++ {
		for p := 0; p < paths; p++ {
			seq++
			path := fmt.Sprintf("docs/%d.md", p)
			if i == 0 {
				a.Add(read(seq, "alice", "G-alice", path, "aa"))
			} else {
				a.Add(readRepeat(seq, "alice", "G-alice", path, "aa", 3, 1, 2))
			}
			seq++
			a.Add(refusal(seq, ledger.KindDenied, fmt.Sprintf("oracle/%d.md", p), "lookup"))
			seq++
			a.Add(read(seq, "bob", "G-bob", fmt.Sprintf("oracle/%d.md", p), "bb"))
		}
	}
	rep, err := a.Report()
	require.NoError(t, err)
	ags := byAgent(rep)
	require.Len(t, ags["alice"].Reads, paths)
	assert.Equal(t, int64(1+3*(rounds-1)), ags["alice"].Reads[0].Count)
	require.Len(t, ags["alice"].Refused, paths)
	assert.Equal(t, int64(rounds), ags["alice"].Refused[0].Count)
	require.Len(t, ags["bob"].Violations, paths)
	assert.Equal(t, int64(rounds), ags["bob"].Violations[0].Count)
	assert.Contains(t, ags["bob"].Reason, fmt.Sprintf("%d access(es)", paths*rounds))
	assert.Len(t, rep.Matrix, 2*paths)
}

// TestAuditReportIsASnapshot: records fed after Report leave that report
// alone.
func TestAuditReportIsASnapshot(t *testing.T) {
	a := New(fakeGrants(), Options{})
	a.Add(read(1, "alice", "G-alice", "docs/a.md", "aa"))
	first, err := a.Report()
	require.NoError(t, err)
	a.Add(read(2, "alice", "G-alice", "oracle/answers.md", "bb"))
	second, err := a.Report()
	require.NoError(t, err)
	assert.Equal(t, VerdictIsolated, first.Agents[0].Verdict)
	assert.Len(t, first.Agents[0].Reads, 1)
	assert.Equal(t, VerdictViolated, second.Agents[0].Verdict)
	assert.Len(t, second.Agents[0].Reads, 2)
}

// readPending is a read recorded at open before its content hash was
// known; readHash is the read_hash that follows it.
func readPending(seq int64, path string) ledger.Record {
	r := read(seq, "alice", "G-alice", path, "")
	r.Detail = "sha256 follows in a read_hash record; size=1073741824 mtime=2026-03-01T12:00:00.000000000Z ctime=2026-03-01T12:00:00.000000000Z inode=12"
	return r
}

func readHash(seq, readSeq int64, path, sha, why string) ledger.Record {
	r := rec(seq, ledger.KindReadHash, "alice", "G-alice", path)
	r.Op, r.SHA256, r.Detail = "open", sha, fmt.Sprintf("read seq %d", readSeq)
	if why != "" {
		r.Detail += ": " + why
	}
	return r
}

// TestAuditReadHash: a read recorded before its hash was known gets the
// hash of its read_hash record; a read_hash without one, or none at all,
// leaves the read of unknown content, and the reason says so.
func TestAuditReadHash(t *testing.T) {
	const shaA = "aaaa"
	tests := []struct {
		name    string
		records []ledger.Record
		want    Access
		unknown bool // the reason names reads of unknown content
		verdict string
	}{
		{
			name:    "the hash follows the read",
			records: []ledger.Record{readPending(1, "docs/big.bin"), readHash(2, 1, "docs/big.bin", shaA, "")},
			want:    Access{Path: "docs/big.bin", Grant: "G-alice", Count: 1, FirstSeq: 1, LastSeq: 1, Allowed: true, Judged: true, Rule: "read docs", Hashes: []string{shaA}},
			verdict: VerdictIsolated,
		},
		{
			name: "repeats counted before the hash came",
			records: []ledger.Record{
				readPending(1, "docs/big.bin"), readRepeat(2, "alice", "G-alice", "docs/big.bin", "", 3, 1, 2), readHash(3, 1, "docs/big.bin", shaA, ""),
			},
			want:    Access{Path: "docs/big.bin", Grant: "G-alice", Count: 4, FirstSeq: 1, LastSeq: 2, Allowed: true, Judged: true, Rule: "read docs", Hashes: []string{shaA}},
			verdict: VerdictIsolated,
		},
		{
			name:    "the file changed while it was hashed",
			records: []ledger.Record{readPending(1, "docs/big.bin"), readHash(2, 1, "docs/big.bin", "", "the file changed while it was hashed: the content read is unknown")},
			want:    Access{Path: "docs/big.bin", Grant: "G-alice", Count: 1, FirstSeq: 1, LastSeq: 1, Allowed: true, Judged: true, Rule: "read docs", Unhashed: 1},
			unknown: true,
			verdict: VerdictIsolated,
		},
		{
			name:    "the read_hash never came",
			records: []ledger.Record{readPending(1, "docs/big.bin")},
			want:    Access{Path: "docs/big.bin", Grant: "G-alice", Count: 1, FirstSeq: 1, LastSeq: 1, Allowed: true, Judged: true, Rule: "read docs", Unhashed: 1},
			unknown: true,
			verdict: VerdictIsolated,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := mustBuild(t, tt.records, fakeGrants(), nil)
			ag := byAgent(rep)["alice"]
			require.NotNil(t, ag)
			require.Len(t, ag.Reads, 1)
			assert.Equal(t, tt.want, ag.Reads[0])
			assert.Equal(t, tt.verdict, ag.Verdict, ag.Reason)
			assert.Equal(t, tt.unknown, strings.Contains(ag.Reason, "whose SHA-256 the ledger does not hold"), ag.Reason)
		})
	}
}

// Records the chain check does not vouch for convict no one and clear no
// one.
func TestAuditJudgesOnlyVouchedRecords(t *testing.T) {
	recs := []ledger.Record{
		{Seq: 1, Kind: ledger.KindRead, Agent: "alice", Grant: "G-alice", Path: "docs/a.md"},
		{Seq: 2, Kind: ledger.KindSignedCheckpoint},
		{Seq: 3, Kind: ledger.KindRead, Agent: "bob", Grant: "G-bob", Path: "oracle/answers.md"}, // forged
	}
	chain := &ledger.VerifyReport{Records: 3, LastSeq: 3, SignaturesChecked: true, SignedThrough: 2, Unsigned: 1,
		Problem: &ledger.Problem{Seq: 3, Kind: ledger.ProblemUnsignedTail, Reason: "unsigned"}}
	rep, err := Build(recs, fakeGrants(), Options{Chain: chain})
	require.NoError(t, err)
	assert.Equal(t, VerdictUnverified, rep.Verdict)
	assert.Equal(t, int64(1), rep.Untrusted)
	for _, ag := range rep.Agents {
		assert.Equal(t, VerdictUnverified, ag.Verdict, ag.Agent)
		assert.Empty(t, ag.Violations, "%s is not convicted by a record no signature covers", ag.Agent)
	}
}

// A grant file that is not the version the views applied cannot clear an
// agent: the audit would judge with rules that were not in force.
func TestAuditSeesAChangedGrant(t *testing.T) {
	gs := fakeGrants()
	for i := range gs {
		gs[i].Hash = "h-now-" + gs[i].GrantID
	}
	recs := []ledger.Record{
		{Seq: 1, Kind: ledger.KindGrantApplied, Agent: "alice", Grant: "G-alice", SHA256: "h-then"},
		{Seq: 2, Kind: ledger.KindRead, Agent: "alice", Grant: "G-alice", Path: "docs/a.md"},
		{Seq: 3, Kind: ledger.KindGrantApplied, Agent: "bob", Grant: "G-bob", SHA256: "h-now-G-bob"},
	}
	rep, err := Build(recs, gs, Options{})
	require.NoError(t, err)
	ags := byAgent(rep)
	assert.Equal(t, VerdictUnverified, ags["alice"].Verdict)
	assert.Contains(t, ags["alice"].Reason, "other than the file judged with")
	assert.Equal(t, VerdictIsolated, ags["bob"].Verdict, "the version in force is the one judged with")
}

// TestAuditCountsNetRecords: the egress proxy's records count per agent
// and are neither reads, writes nor refusals of a path.
func TestAuditCountsNetRecords(t *testing.T) {
	records := []ledger.Record{
		rec(1, ledger.KindNetAllowed, "alice", "G-alice", ""),
		rec(2, ledger.KindNetAllowed, "alice", "G-alice", ""),
		rec(3, ledger.KindNetRefused, "alice", "G-alice", ""),
		withCount(rec(4, ledger.KindNetRefused, "alice", "G-alice", ""), 5),
	}
	rep := mustBuild(t, records, fakeGrants()[:1], nil)
	ag := byAgent(rep)["alice"]
	require.NotNil(t, ag)
	assert.Equal(t, int64(2), ag.NetAllowed)
	assert.Equal(t, int64(6), ag.NetRefused)
	assert.Zero(t, ag.Writes)
	assert.Empty(t, ag.Refused)
	assert.Empty(t, ag.Reads)
	assert.Equal(t, VerdictIsolated, rep.Verdict)
	var md bytes.Buffer
	require.NoError(t, rep.WriteMarkdown(&md))
	assert.Contains(t, md.String(), "2 connections allowed, 6 refused")
}

func withCount(r ledger.Record, n int64) ledger.Record {
	r.Count = n
	return r
}

// readsRepeated is a view's count of n repeated reads of files, between
// first and last (seconds after noon).
func readsRepeated(seq int64, agent, grant string, n int64, files, first, last int) ledger.Record {
	r := rec(seq, ledger.KindReadsRepeated, agent, grant, "")
	r.Op, r.Count, r.First, r.Last = ledger.OpOpen, n, at(first), at(last)
	r.Detail = fmt.Sprintf("%d files", files)
	r.At = at(last + 1)
	return r
}

// TestAuditReadsRepeated: a reads_repeated record adds its count to the
// agent's repeated reads, lists no path, and is judged by when its reads
// happened: under a grant not given it leaves the agent unverified, and
// after a revocation it is a violation.
func TestAuditReadsRepeated(t *testing.T) {
	revoked := func(sec int) ledger.Record {
		return withAt(rec(2, ledger.KindGrantRevoked, "alice", "G-alice", ""), at(sec))
	}
	tests := []struct {
		name       string
		records    []ledger.Record
		agent      string
		repeated   int64
		reads      int
		verdict    string
		violations []int64
	}{
		{
			name:     "counted apart from the paths read",
			records:  []ledger.Record{read(1, "alice", "G-alice", "docs/a.md", "aa"), readsRepeated(2, "alice", "G-alice", 500, 1, 1, 9), readsRepeated(3, "alice", "G-alice", 7, 1, 20, 21)},
			agent:    "alice",
			repeated: 507, reads: 1,
			verdict: VerdictIsolated,
		},
		{
			name:     "a count below one is one repeat",
			records:  []ledger.Record{readsRepeated(1, "alice", "G-alice", 0, 1, 1, 2)},
			agent:    "alice",
			repeated: 1,
			verdict:  VerdictIsolated,
		},
		{
			name:     "flushed after a revocation, made before it",
			records:  []ledger.Record{read(1, "alice", "G-alice", "docs/a.md", "aa"), revoked(10), readsRepeated(3, "alice", "G-alice", 3, 1, 1, 9)},
			agent:    "alice",
			repeated: 3, reads: 1,
			verdict: VerdictIsolated,
		},
		{
			name:     "going on after a revocation",
			records:  []ledger.Record{read(1, "alice", "G-alice", "docs/a.md", "aa"), revoked(10), readsRepeated(3, "alice", "G-alice", 3, 1, 9, 11)},
			agent:    "alice",
			repeated: 3, reads: 1,
			verdict:    VerdictViolated,
			violations: []int64{3},
		},
		{
			name:     "under a grant not given",
			records:  []ledger.Record{readsRepeated(1, "dave", "G-dave", 4, 2, 1, 2)},
			agent:    "dave",
			repeated: 4,
			verdict:  VerdictUnverified,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := mustBuild(t, tt.records, fakeGrants(), nil)
			ag := byAgent(rep)[tt.agent]
			require.NotNil(t, ag)
			assert.Equal(t, tt.repeated, ag.RepeatedReads)
			assert.Len(t, ag.Reads, tt.reads)
			assert.Equal(t, tt.verdict, ag.Verdict, ag.Reason)
			var counts []int64
			for _, v := range ag.Violations {
				counts = append(counts, v.Count)
			}
			assert.Equal(t, tt.violations, counts)
			var md bytes.Buffer
			require.NoError(t, rep.Render(&md, "md"))
			assert.Contains(t, md.String(), fmt.Sprintf("Repeated reads: %d,", tt.repeated))
		})
	}
}

// TestAuditCoordinatorFilesAreNeverAllowed: a read of a ledger key, a
// ledger or a grant of a run directory convicts its reader whatever the
// grant's globs say: no view may show one, so the read is the view's
// failure and the agent saw what it must not.
func TestAuditCoordinatorFilesAreNeverAllowed(t *testing.T) {
	everything := []string{"docs", "logs", "runs", "ledger.key", "communication_ledger.jsonl"}
	gs := []Grant{{GrantID: "G-bob", AgentID: "bob", Rules: fakeRules{read: everything}}}
	for _, p := range []string{"ledger.key", "logs/ledger.key", "runs/context_grants/G-alice.json", "communication_ledger.jsonl"} {
		t.Run(p, func(t *testing.T) {
			rep, err := Build([]ledger.Record{rec(1, ledger.KindRead, "bob", "G-bob", p)}, gs, Options{})
			require.NoError(t, err)
			ags := byAgent(rep)
			assert.Equal(t, VerdictViolated, ags["bob"].Verdict)
			require.NotEmpty(t, ags["bob"].Violations)
			assert.Equal(t, ruleCoordinator, ags["bob"].Violations[0].Rule)
		})
	}
	rep, err := Build([]ledger.Record{rec(1, ledger.KindRead, "bob", "G-bob", "docs/ledger.md")}, gs, Options{})
	require.NoError(t, err)
	assert.Equal(t, VerdictIsolated, byAgent(rep)["bob"].Verdict, "a name that only looks alike")
}

// TestReportsShowInvisibleCharacters: a path holding a bidirectional
// override (U+202E) or a zero-width character is written out in both
// reports, so that it cannot pass for another path.
func TestReportsShowInvisibleCharacters(t *testing.T) {
	path := "docs/\u202egpj.md\u200b"
	rep := mustBuild(t, []ledger.Record{withAt(read(1, "alice", "G-alice", path, "aa"), at(1))}, fakeGrants(), nil)
	for _, format := range []string{"md", "html"} {
		var out bytes.Buffer
		require.NoError(t, rep.Render(&out, format))
		assert.NotContains(t, out.String(), "\u202e", format)
		assert.NotContains(t, out.String(), "\u200b", format)
		assert.Contains(t, out.String(), `gpj.md`, format)
		assert.Contains(t, out.String(), `u{202e}gpj.md`, format)
	}
}
