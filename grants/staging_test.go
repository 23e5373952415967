package grants

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMayWriteIn(t *testing.T) {
	g := &Grant{GrantID: "G-t", AgentID: "a", Role: "r", Objective: "o",
		MayRead:       []string{"**"},
		MayWrite:      []string{"proposal.md", "deliverables/**", "notes/*.md"},
		ForbiddenRead: []string{"oracle/**"}}
	m, err := Compile(g, MatcherOptions{})
	require.NoError(t, err)
	for dir, want := range map[string]bool{
		"": true, "deliverables": true, "deliverables/a/b": true, "notes": true,
		"docs": false, "oracle": false, "notes/sub": false,
	} {
		assert.Equal(t, want, m.MayWriteIn(dir), dir)
	}
	g.Revoked = true
	m, err = Compile(g, MatcherOptions{})
	require.NoError(t, err)
	assert.False(t, m.MayWriteIn(""))
}
