package audit

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

	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/ledger"
)

// fakeRules grants by path prefix: write prefixes are writable (and
// readable), read prefixes are readable, their ancestors visible.
type fakeRules struct{ read, write []string }

func (f fakeRules) Explain(rel string) grants.Decision {
	if rel == "" {
		return grants.Decision{Visible: true, Rule: "root"}
	}
	for _, p := range f.write {
		if rel == p || strings.HasPrefix(rel, p+"/") {
			return grants.Decision{Visible: true, Readable: true, Writable: true, Rule: "write " + p}
		}
	}
	for _, p := range f.read {
		if rel == p || strings.HasPrefix(rel, p+"/") {
			return grants.Decision{Visible: true, Readable: true, Rule: "read " + p}
		}
		if strings.HasPrefix(p, rel+"/") {
			return grants.Decision{Visible: true, Rule: "ancestor of " + p}
		}
	}
	return grants.Decision{Rule: "no rule matches"}
}

func fakeGrants() []Grant {
	return []Grant{
		{GrantID: "G-alice", AgentID: "alice", Rules: fakeRules{read: []string{"docs", "events.jsonl"}}},
		{GrantID: "G-bob", AgentID: "bob", Rules: fakeRules{read: []string{"docs/public"}}},
		{GrantID: "G-carol", AgentID: "carol", Rules: fakeRules{read: []string{"docs"}}},
	}
}

func rec(seq int64, kind ledger.Kind, agent, grant, path string) ledger.Record {
	return ledger.Record{Seq: seq, At: "2026-03-01T12:00:00.000000000Z", Kind: kind, Agent: agent, Grant: grant, Path: path}
}

func TestAuditVerdicts(t *testing.T) {
	records := []ledger.Record{
		rec(1, ledger.KindGrantCreated, "alice", "G-alice", ""),
		rec(2, ledger.KindList, "alice", "G-alice", ""),
		rec(3, ledger.KindList, "alice", "G-alice", "docs"),
		rec(4, ledger.KindRead, "alice", "G-alice", "docs/spec.md"),
		rec(5, ledger.KindRead, "alice", "G-alice", "docs/spec.md"),
		rec(6, ledger.KindDenied, "alice", "G-alice", "oracle/answers.md"),
		rec(7, ledger.KindRead, "bob", "G-bob", "docs/public/a.md"),
		rec(8, ledger.KindRead, "bob", "G-bob", "oracle/answers.md"), // the grant never allowed it
		rec(9, ledger.KindList, "bob", "G-bob", "oracle"),
		rec(10, ledger.KindReadRequest, "carol", "G-carol", "docs/a.md"),
		rec(11, ledger.KindGrantRevoked, "carol", "G-carol", ""),
		rec(12, ledger.KindRead, "carol", "G-carol", "docs/a.md"), // after revocation
		rec(13, ledger.KindRead, "dave", "G-dave", "docs/a.md"),   // grant not given
		rec(14, ledger.KindRepair, "", "", ""),
		rec(15, ledger.KindAppendAccepted, "alice", "G-alice", "events.jsonl"),
		rec(16, ledger.KindFrozenRefused, "alice", "G-alice", "docs/spec.md"),
	}
	rep := mustBuild(t, records, fakeGrants(), []string{"oracle/answers.md", "oracle/other.md"})
	assert.Equal(t, VerdictViolated, rep.Verdict)
	assert.Equal(t, int64(16), rep.Records)
	byAgent := map[string]*Agent{}
	var order []string
	for _, ag := range rep.Agents {
		byAgent[ag.Agent] = ag
		order = append(order, ag.Agent)
	}
	assert.Equal(t, []string{"alice", "bob", "carol", "dave"}, order)

	alice := byAgent["alice"]
	assert.Equal(t, VerdictIsolated, alice.Verdict, alice.Reason)
	require.Len(t, alice.Reads, 1)
	assert.Equal(t, Access{Path: "docs/spec.md", Grant: "G-alice", Count: 2, FirstSeq: 4, LastSeq: 5, Allowed: true, Judged: true, Rule: "read docs"}, alice.Reads[0])
	assert.Len(t, alice.Lists, 2)
	require.Len(t, alice.Refused, 2)
	assert.Equal(t, int64(6), alice.Refused[0].Seq)
	assert.Equal(t, int64(1), alice.Writes)

	bob := byAgent["bob"]
	assert.Equal(t, VerdictViolated, bob.Verdict)
	require.Len(t, bob.Violations, 2)
	assert.Equal(t, int64(8), bob.Violations[0].Seq)
	assert.Equal(t, "no rule matches", bob.Violations[0].Rule)
	assert.Equal(t, ledger.KindList, bob.Violations[1].Kind)

	carol := byAgent["carol"]
	assert.Equal(t, VerdictViolated, carol.Verdict)
	require.Len(t, carol.Violations, 1)
	assert.Equal(t, int64(12), carol.Violations[0].Seq)
	assert.Contains(t, carol.Violations[0].Rule, "revoked at seq 11")

	dave := byAgent["dave"]
	assert.Equal(t, VerdictUnverified, dave.Verdict)
	assert.False(t, dave.Reads[0].Judged)

	// Matrix: every touched path plus the folder's files, one cell per agent.
	paths := map[string]MatrixRow{}
	for _, row := range rep.Matrix {
		paths[row.Path] = row
		require.Len(t, row.Cells, 4)
	}
	assert.Contains(t, paths, "oracle/other.md")
	other := paths["oracle/other.md"].Cells
	assert.Equal(t, "never touched", other[0].State())
	assert.Equal(t, "hidden", other[0].Grant)
	ans := paths["oracle/answers.md"].Cells
	assert.True(t, ans[0].Refused)
	assert.False(t, ans[0].Read)
	assert.True(t, ans[1].Read)
	assert.True(t, ans[1].Violation)
	assert.Equal(t, "read", ans[1].State())
	assert.Equal(t, "unknown", ans[3].Grant, "dave's grant was not given")
	spec := paths["docs/spec.md"].Cells
	assert.Equal(t, "read, refused", spec[0].State())
}

func TestAuditIsolatedWhenAllAllowed(t *testing.T) {
	rep := mustBuild(t, []ledger.Record{
		rec(1, ledger.KindRead, "alice", "G-alice", "docs/x.md"),
		rec(2, ledger.KindRead, "", "G-bob", "docs/public/y.md"), // agent from the grant
		rec(3, ledger.KindRead, "carol", "", "docs/z.md"),        // grant from the agent
	}, fakeGrants(), nil)
	assert.Equal(t, VerdictIsolated, rep.Verdict)
	for _, ag := range rep.Agents {
		assert.Equal(t, VerdictIsolated, ag.Verdict, ag.Agent)
	}
}

func TestAuditRevokedAtTime(t *testing.T) {
	read := func(seq int64, at string) ledger.Record {
		r := rec(seq, ledger.KindRead, "alice", "G-alice", "docs/a.md")
		r.At = at
		return r
	}
	tests := []struct {
		name      string
		revokedAt time.Time
		records   []ledger.Record
		want      string
	}{
		{"read before", time.Date(2026, 3, 1, 12, 0, 1, 0, time.UTC),
			[]ledger.Record{read(1, "2026-03-01T12:00:00.000000000Z")}, VerdictIsolated},
		{"read after", time.Date(2026, 3, 1, 12, 0, 1, 0, time.UTC),
			[]ledger.Record{read(1, "2026-03-01T12:00:00.000000000Z"), read(2, "2026-03-01T12:00:02.000000000Z")}, VerdictViolated},
		// revoked_at written to the second: within that second, only the
		// grant_revoked record tells before from after.
		{"read in the second of a revocation written to the second", time.Date(2026, 3, 1, 12, 0, 1, 0, time.UTC),
			[]ledger.Record{read(1, "2026-03-01T12:00:01.400000000Z")}, VerdictIsolated},
		{"read after the grant_revoked record in that second", time.Date(2026, 3, 1, 12, 0, 1, 0, time.UTC),
			[]ledger.Record{rec(1, ledger.KindGrantRevoked, "alice", "G-alice", ""), read(2, "2026-03-01T12:00:01.400000000Z")}, VerdictViolated},
		{"read just after a revocation written to the nanosecond", time.Date(2026, 3, 1, 12, 0, 1, 300_000_000, time.UTC),
			[]ledger.Record{read(1, "2026-03-01T12:00:01.200000000Z"), read(2, "2026-03-01T12:00:01.400000000Z")}, VerdictViolated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gs := fakeGrants()
			gs[0].Revoked = true
			gs[0].RevokedAt = tt.revokedAt
			rep := mustBuild(t, tt.records, gs, nil)
			assert.Equal(t, tt.want, rep.Verdict)
		})
	}
}

// writeRunLedger writes the ledger of a small run: alice stays within her
// grant, bob (when cheat is set) reads the oracle.
func writeRunLedger(t *testing.T, path string, cheat bool) {
	t.Helper()
	w, err := ledger.Open(path, ledger.Options{Sync: ledger.SyncOff, Clock: fixedClock()})
	require.NoError(t, err)
	rs := []ledger.Record{
		{Kind: ledger.KindMountStarted, Agent: "alice", Grant: "G-alice"},
		{Kind: ledger.KindList, Agent: "alice", Grant: "G-alice", Path: ""},
		{Kind: ledger.KindRead, Agent: "alice", Grant: "G-alice", Path: "docs/brief.md", SHA256: strings.Repeat("a", 64)},
		{Kind: ledger.KindWrite, Agent: "alice", Grant: "G-alice", Path: "deliverables/design-spec.md"},
		{Kind: ledger.KindDenied, Agent: "alice", Grant: "G-alice", Path: "oracle/answers.md", Op: "create", Detail: `not in may_write <"oracle/**">`},
		{Kind: ledger.KindMountStarted, Agent: "bob", Grant: "G-bob"},
		{Kind: ledger.KindRead, Agent: "bob", Grant: "G-bob", Path: "deliverables/design-spec.md"},
		{Kind: ledger.KindAppendRejected, Agent: "bob", Grant: "G-bob", Path: "events.jsonl", Detail: "not your turn"},
	}
	if cheat {
		rs = append(rs, ledger.Record{Kind: ledger.KindRead, Agent: "bob", Grant: "G-bob", Path: "oracle/answers.md"})
	}
	for _, r := range rs {
		_, err := w.Append(r)
		require.NoError(t, err)
	}
	require.NoError(t, w.Close())
}

func TestAuditWithRealGrants(t *testing.T) {
	gs, err := LoadGrants(filepath.Join("..", "testdata", "audit", "run", "context_grants"))
	require.NoError(t, err)
	require.Len(t, gs, 2)
	dir := t.TempDir()
	for _, cheat := range []bool{false, true} {
		path := filepath.Join(dir, "ledger-"+map[bool]string{false: "clean", true: "cheat"}[cheat]+".jsonl")
		writeRunLedger(t, path, cheat)
		rep, err := auditFile(path, gs, Options{})
		require.NoError(t, err)
		require.True(t, rep.Chain.OK())
		require.Len(t, rep.Agents, 2)
		assert.Equal(t, VerdictIsolated, rep.Agents[0].Verdict, rep.Agents[0].Reason)
		if !cheat {
			assert.Equal(t, VerdictIsolated, rep.Verdict)
			assert.Equal(t, VerdictIsolated, rep.Agents[1].Verdict, rep.Agents[1].Reason)
			continue
		}
		assert.Equal(t, VerdictViolated, rep.Verdict)
		bob := rep.Agents[1]
		assert.Equal(t, VerdictViolated, bob.Verdict)
		require.Len(t, bob.Violations, 1)
		assert.Equal(t, "oracle/answers.md", bob.Violations[0].Path)
		assert.Contains(t, bob.Violations[0].Rule, "forbidden_read")
	}

	// A broken chain makes an otherwise clean audit unverified.
	path := filepath.Join(dir, "ledger-clean.jsonl")
	appendRaw(t, path, "garbage\n")
	rep, err := auditFile(path, gs, Options{})
	require.NoError(t, err)
	assert.Equal(t, VerdictUnverified, rep.Verdict)
	assert.Contains(t, rep.ChainSummary(), "BROKEN at seq 10", "9 records and the closing checkpoint")

	_, err = LoadGrants(filepath.Join(dir, "nope"))
	require.Error(t, err)
}

func TestAuditFolderListing(t *testing.T) {
	folder := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(folder, "oracle"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(folder, ".acpfs"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(folder, "oracle", "answers.md"), nil, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(folder, ".acpfs", "status"), nil, 0o644))
	path := filepath.Join(t.TempDir(), "l.jsonl")
	writeRunLedger(t, path, false)
	rep, err := auditFile(path, fakeGrants(), Options{Folder: folder, Now: func() time.Time { return time.Unix(0, 0) }})
	require.NoError(t, err)
	assert.Equal(t, "1970-01-01T00:00:00Z", rep.GeneratedAt)
	var rows []string
	for _, r := range rep.Matrix {
		rows = append(rows, r.Path)
	}
	assert.Contains(t, rows, "oracle/answers.md")
	assert.NotContains(t, rows, ".acpfs/status")
}

// hostileReport has agent ids, paths and details that try to break out of
// every output format.
func hostileReport(t *testing.T) *Report {
	t.Helper()
	evil := `<script>alert(1)</script>"'&|*_[x](javascript:alert(2))` + "\n# heading"
	records := []ledger.Record{
		rec(1, ledger.KindRead, evil, "G-evil", evil),
		{Seq: 2, At: "t", Kind: ledger.KindDenied, Agent: evil, Grant: "G-evil", Path: "p", Detail: evil},
	}
	gs := []Grant{{GrantID: "G-evil", AgentID: evil, Rules: fakeRules{read: []string{"docs"}}}}
	rep := mustBuild(t, records, gs, nil)
	rep.Ledger = evil
	rep.Chain = &ledger.VerifyReport{Records: 2, LastSeq: 2, LastHash: strings.Repeat("f", 64)}
	return rep
}

func TestRenderHTMLEscapes(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, hostileReport(t).Render(&buf, "html"))
	out := buf.String()
	assert.NotContains(t, out, "<script>")
	assert.Contains(t, out, "&lt;script&gt;alert(1)&lt;/script&gt;")
	assert.NotContains(t, out, "<script src")
	assert.Contains(t, out, "Content-Security-Policy")
	assert.Contains(t, out, "<style>")
	assert.NotContains(t, out, "http://")
	assert.NotContains(t, out, "https://")
	assert.Contains(t, out, "VIOLATION")
	// Only our own tags: the page parses back as our template's structure.
	assert.Equal(t, 1, strings.Count(out, "<body>"))
}

func TestRenderMarkdownEscapes(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, hostileReport(t).Render(&buf, "md"))
	out := buf.String()
	assert.NotContains(t, out, "<script>")
	assert.Contains(t, out, `&lt;script&gt;`)
	assert.Contains(t, out, `\|\*\_\[x\]`)
	for _, line := range strings.Split(out, "\n") {
		assert.False(t, strings.HasPrefix(line, "# heading"), "a newline in data must not start a heading")
	}
	assert.Contains(t, out, "# Ledger audit")
	assert.Contains(t, out, "## Agent × file matrix")
}

func TestRenderJSON(t *testing.T) {
	var buf bytes.Buffer
	rep := hostileReport(t)
	require.NoError(t, rep.Render(&buf, "json"))
	var back Report
	require.NoError(t, json.Unmarshal(buf.Bytes(), &back))
	assert.Equal(t, rep.Verdict, back.Verdict)
	assert.Equal(t, rep.Agents[0].Agent, back.Agents[0].Agent)
	require.Error(t, rep.Render(&buf, "pdf"))
}

func TestIsToolNoise(t *testing.T) {
	tests := []struct {
		op, path string
		noise    bool
	}{
		// Editors' and tools' temporary files, created or renamed.
		{"create", "deliverables/.design-spec.md.swp", true},
		{"create", ".proposal.md.swpx", true},
		{"create", "4913", true},
		{"create", "proposal.md~", true},
		{"create", "#proposal.md#", true},
		{"symlink", ".#proposal.md", true},
		{"create", "sedICqm3N", true},
		{"create", "deliverables/XXPmGYU2", true}, // perl -pi
		{"create", "tmpk3j_x9qz", true},           // Python mkstemp
		{"create", "tmpk3j_x9qz.json", true},
		{"create", ".goutputstream-AB12CD", true},
		{"create", ".~lock.review.md#", true},
		{"rename", "review.md.tmp", true},
		{"mkdir", "notes.TMP.42", true},
		// git links a new object into place, then renames instead.
		{"link", ".git/objects/ab/" + strings.Repeat("c", 38), true},
		{"link", "repo/.git/objects/pack/pack-" + strings.Repeat("d", 40) + ".pack", true},
		// Real paths.
		{"create", "oracle/answers.md", false},
		{"create", "Makefile", false}, // eight letters, no digit
		{"create", "README12", false}, // no lower case
		{"create", "sed.conf", false},
		{"create", "tmp", false},
		{"link", "review.md", false},
		{"unlink", "proposal.md~", false},
		// Reads and lookups are never noise, whatever the name.
		{"open", "oracle/.answers.md.swp", false},
		{"lookup", "answers.md~", false},
		{"readdir", "tmpk3j_x9qz", false},
	}
	for _, tt := range tests {
		t.Run(tt.op+" "+tt.path, func(t *testing.T) {
			r := ledger.Record{Kind: ledger.KindDenied, Agent: "a", Grant: "G-a", Path: tt.path, Op: ledger.Op(tt.op)}
			assert.Equal(t, tt.noise, IsToolNoise(r))
		})
	}
	// Only denied records: a frozen deliverable or a rejected append is
	// always a refusal of a real path.
	for _, kind := range []ledger.Kind{ledger.KindFrozenRefused, ledger.KindAppendRejected} {
		assert.False(t, IsToolNoise(ledger.Record{Kind: kind, Path: "deliverables/x.md~", Op: "create"}), kind)
	}
}

// TestAuditCountsToolNoiseApart: refusals of temporary files and git's
// link attempts are counted as noise, not as refused attempts, and put
// nothing in the matrix; the Markdown and HTML say so.
func TestAuditCountsToolNoiseApart(t *testing.T) {
	den := func(seq int64, path, op string) ledger.Record {
		r := rec(seq, ledger.KindDenied, "alice", "G-alice", path)
		r.Op = ledger.Op(op)
		return r
	}
	records := []ledger.Record{
		den(1, "docs/.spec.md.swp", "create"),
		den(2, "docs/sedICqm3N", "create"),
		den(3, ".git/objects/ab/"+strings.Repeat("c", 38), "link"),
		den(4, "oracle/answers.md", "lookup"),
		den(5, "oracle/new.md", "create"),
	}
	rep := mustBuild(t, records, fakeGrants(), nil)
	alice := rep.Agents[0]
	require.Equal(t, "alice", alice.Agent)
	assert.Equal(t, VerdictIsolated, alice.Verdict)
	var refused, noise []int64
	for _, e := range alice.Refused {
		refused = append(refused, e.Seq)
	}
	for _, e := range alice.Noise {
		noise = append(noise, e.Seq)
	}
	assert.Equal(t, []int64{4, 5}, refused)
	assert.Equal(t, []int64{1, 2, 3}, noise)
	assert.Contains(t, alice.Reason, "3 refusal(s) of temporary/tool noise")
	var rows []string
	for _, r := range rep.Matrix {
		rows = append(rows, r.Path)
	}
	assert.Equal(t, []string{"oracle/answers.md", "oracle/new.md"}, rows, "noise makes no matrix rows")

	var md bytes.Buffer
	require.NoError(t, rep.Render(&md, "md"))
	assert.Contains(t, md.String(), "| Refused | Temporary/tool noise | Violations |")
	assert.Contains(t, md.String(), "| 0 | 2 | 3 | 0 |")
	assert.Contains(t, md.String(), "### Temporary/tool noise")

	var html bytes.Buffer
	require.NoError(t, rep.Render(&html, "html"))
	page := html.String()
	assert.Contains(t, page, "3 refusal(s) of temporary/tool noise")
	_, refusedTable, ok := strings.Cut(page, "<h3>Refused attempts</h3>")
	require.True(t, ok)
	refusedTable, _, _ = strings.Cut(refusedTable, "</table>")
	assert.Contains(t, refusedTable, "oracle/new.md")
	assert.NotContains(t, refusedTable, "sedICqm3N", "the HTML lists only the real refusals as refused")
	assert.NotContains(t, refusedTable, ".spec.md.swp")
}

// TestMatrixGrantLabels: the matrix says what the grant allows, and a
// path the agent may write is not labelled "readable".
func TestMatrixGrantLabels(t *testing.T) {
	gs := []Grant{{GrantID: "G-alice", AgentID: "alice", Rules: fakeRules{read: []string{"docs"}, write: []string{"docs/review.md"}}}}
	records := []ledger.Record{
		rec(1, ledger.KindWrite, "alice", "G-alice", "docs/review.md"),
		rec(2, ledger.KindRead, "alice", "G-alice", "docs/spec.md"),
	}
	rep := mustBuild(t, records, gs, []string{"oracle/answers.md"})
	tests := []struct{ path, state, grant string }{
		{"docs/review.md", "written", "read-write"},
		{"docs/spec.md", "read", "readable"},
		{"oracle/answers.md", "never touched", "hidden"},
	}
	cells := map[string]MatrixCell{}
	for _, row := range rep.Matrix {
		cells[row.Path] = row.Cells[0]
	}
	for _, tt := range tests {
		c, ok := cells[tt.path]
		require.True(t, ok, tt.path)
		assert.Equal(t, tt.state, c.State(), tt.path)
		assert.Equal(t, tt.grant, c.Grant, tt.path)
	}
	var html bytes.Buffer
	require.NoError(t, rep.Render(&html, "html"))
	assert.Contains(t, html.String(), "written<small>read-write</small>")
	assert.NotContains(t, html.String(), "written<small>readable</small>")
}
