package audit

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/ledger"
)

// TestAuditWriteRepeats: a write_repeat (repeats of an open for writing
// that wrote nothing, or of a change of times only) counts as that many
// writes of its path, and leaves the verdict alone.
func TestAuditWriteRepeats(t *testing.T) {
	w := rec(1, ledger.KindWrite, "alice", "G-alice", "scratch/a.md")
	w.Op = "open"
	wr := rec(2, ledger.KindWriteRepeat, "alice", "G-alice", "scratch/a.md")
	wr.Op, wr.Count, wr.First, wr.Last = "open", 19999, at(1), at(9)
	rep := mustBuild(t, []ledger.Record{w, wr}, fakeGrants(), nil)
	ag := byAgent(rep)["alice"]
	require.NotNil(t, ag)
	assert.EqualValues(t, 20000, ag.Writes)
	assert.Empty(t, ag.Violations)
	assert.Empty(t, ag.Refused)
}
