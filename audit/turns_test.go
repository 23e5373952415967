package audit

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/ledger"
)

// TestAuditTurns: turn records become the report's timeline, in ledger
// order, in every format; they are the driver's account, not accesses,
// so they change no verdict and add no matrix row.
func TestAuditTurns(t *testing.T) {
	turn := func(seq int64, agent string, tr ledger.Turn) ledger.Record {
		r := ledger.TurnRecord(agent, "G-"+agent, "abcd", tr)
		r.Seq, r.At = seq, at(int(seq))
		return r
	}
	records := []ledger.Record{
		read(1, "alice", "G-alice", "docs/a.md", "aa"),
		turn(2, "alice", ledger.Turn{ID: "000001-alice-1", Wake: 1, Attempt: 1, Participant: "alice", Start: at(0), End: at(2),
			Outcome: "appended", Events: []string{"2 deliverable_drafted"}, Reads: []string{"docs/a.md"}}),
		turn(3, "mallory", ledger.Turn{ID: "000002-mallory-1", Wake: 2, Attempt: 1, Participant: "mallory", Start: at(2), End: at(3),
			Outcome: "timeout", Exit: 143, Signal: "SIGTERM", Refusals: []string{"lookup oracle/answers.md: denied"}, Limits: []string{"timeout"}}),
	}
	rep := mustBuild(t, records, fakeGrants()[:1], nil)
	require.Len(t, rep.Turns, 2)
	assert.Equal(t, int64(2), rep.Turns[0].Seq)
	assert.Equal(t, "G-alice", rep.Turns[0].Grant)
	assert.Equal(t, "abcd", rep.Turns[0].GrantSHA)
	assert.Equal(t, []string{"2 deliverable_drafted"}, rep.Turns[0].Events)
	assert.Equal(t, "timeout", rep.Turns[1].Outcome)
	assert.Equal(t, VerdictIsolated, rep.Verdict, "a turn record is no access")
	assert.NotContains(t, byAgent(rep), "mallory")
	assert.Len(t, rep.Matrix, 1)

	var md, html bytes.Buffer
	require.NoError(t, rep.WriteMarkdown(&md))
	require.NoError(t, rep.WriteHTML(&html))
	assert.Contains(t, md.String(), "## Turns")
	assert.Contains(t, md.String(), "| 3 | "+at(2)+" | "+at(3)+" | mallory | G-mallory | 2 | timeout | 143 (SIGTERM) | - | - | - | lookup oracle/answers.md: denied | timeout |")
	assert.Contains(t, html.String(), "<h2>Turns</h2>")
	assert.Contains(t, html.String(), "2 deliverable_drafted")
}
