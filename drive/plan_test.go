package drive

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/grants"
)

func planConfig() *Config {
	return &Config{Participants: []Participant{
		{ID: "alice", Retries: 1}, {ID: "bob", Retries: 0}, {ID: "carol", Retries: 2},
	}}
}

func TestDecide(t *testing.T) {
	tests := []struct {
		name string
		s    State
		want Decision
	}{
		{"the owner's turn", State{Phase: "drafting", Waiting: []string{"alice"}, LastSeq: 1},
			Decision{Start: []Wake{{"alice", 1, 1}}}},
		{"two reviewers at once", State{Phase: "reviewing", Waiting: []string{"carol", "bob"}, LastSeq: 3},
			Decision{Start: []Wake{{"bob", 3, 1}, {"carol", 3, 1}}}},
		{"a running turn is not started again", State{Phase: "reviewing", Waiting: []string{"bob", "carol"}, LastSeq: 4, Running: map[string]bool{"carol": true}},
			Decision{Start: []Wake{{"bob", 4, 1}}}},
		{"nothing to start while a turn runs", State{Phase: "reviewing", Waiting: []string{"carol"}, LastSeq: 4, Running: map[string]bool{"carol": true}},
			Decision{}},
		{"a retry is the next attempt", State{Phase: "drafting", Waiting: []string{"alice"}, LastSeq: 1, Failures: map[string]int{"alice": 1}},
			Decision{Start: []Wake{{"alice", 1, 2}}}},
		{"retries used up", State{Phase: "drafting", Waiting: []string{"alice"}, LastSeq: 1, Failures: map[string]int{"alice": 2}},
			Decision{GiveUp: []string{"alice"}}},
		{"no retries at all", State{Phase: "reviewing", Waiting: []string{"bob"}, LastSeq: 3, Failures: map[string]int{"bob": 1}},
			Decision{GiveUp: []string{"bob"}}},
		{"completed", State{Phase: "completed", LastSeq: 11}, Decision{Done: true, Reason: "completed"}},
		{"blocked, with a turn still running: done once it ends", State{Phase: "blocked", Running: map[string]bool{"bob": true}},
			Decision{Done: true, Reason: "blocked"}},
		{"stopping starts nothing", State{Phase: "reviewing", Waiting: []string{"bob"}, Stopping: true},
			Decision{Done: true, Reason: "stopped"}},
		{"waiting for someone the file does not drive", State{Phase: "reviewing", Waiting: []string{"dave"}},
			Decision{Done: true, Reason: "waiting for [dave], whom the collaboration file does not drive"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, Decide(tt.s, planConfig()))
		})
	}
}

func TestWakeID(t *testing.T) {
	assert.Equal(t, "000042-bob-3", Wake{Participant: "bob", Seq: 42, Attempt: 3}.ID())
}

// TestFailures: a resumed driver counts retries from the receipts: the
// turns in a row since the participant's last accepted event.
func TestFailures(t *testing.T) {
	rs := []*Receipt{
		{Participant: "alice"},
		{Participant: "alice", Events: []EventRef{{2, "deliverable_drafted"}}},
		{Participant: "bob"},
		{Participant: "alice"},
		{Participant: "bob"},
		{Participant: "carol", Events: []EventRef{{5, "review_submitted"}}},
	}
	assert.Equal(t, map[string]int{"alice": 1, "bob": 2, "carol": 0}, Failures(rs))
}

// TestGrantMatches: a grant is kept only while it is what the file asks
// (the preset's globs and the extras, in any order); any change replaces
// it.
func TestGrantMatches(t *testing.T) {
	p := &Participant{ID: "bob", Grant: GrantSpec{Preset: "reviewer", Forbid: []string{"oracle/**"}, MayRead: []string{"notes/**"}}}
	read, write, err := wantedGrant(p)
	require.NoError(t, err)
	assert.Contains(t, read, "notes/**")
	assert.Contains(t, write, "review.md")
	base := func() *grants.Grant {
		return &grants.Grant{GrantID: "G-bob", AgentID: "bob", Role: "reviewer", MayRead: slices.Clone(read), MayWrite: slices.Clone(write), ForbiddenRead: []string{"oracle/**"}}
	}
	assert.True(t, grantMatches(base(), p, read, write))
	reordered := base()
	slices.Reverse(reordered.MayRead)
	assert.True(t, grantMatches(reordered, p, read, write), "order does not matter")
	for name, change := range map[string]func(g *grants.Grant){
		"another forbid":      func(g *grants.Grant) { g.ForbiddenRead = nil },
		"one more may_read":   func(g *grants.Grant) { g.MayRead = append(g.MayRead, "oracle/**") },
		"one less may_write":  func(g *grants.Grant) { g.MayWrite = g.MayWrite[1:] },
		"another participant": func(g *grants.Grant) { g.Participant = "carol" },
	} {
		g := base()
		change(g)
		assert.False(t, grantMatches(g, p, read, write), name)
	}
}
