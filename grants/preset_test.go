package grants

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func presetGrant(t *testing.T, name, deliv string) *Matcher {
	t.Helper()
	p, err := Preset(name, deliv)
	require.NoError(t, err)
	g := &Grant{GrantID: "G-p", AgentID: "a", Role: name, Objective: "o", MayRead: p.MayRead, MayWrite: p.MayWrite}
	require.NoError(t, Validate(g))
	return mustCompile(t, g, "agent_runs")
}

func TestPresetOwner(t *testing.T) {
	m := presetGrant(t, PresetOwner, "")
	checkPaths(t, m, []vrw{
		{"protocol.json", true, true, true},
		{"events.jsonl", true, true, true},
		{"proposal.md", true, true, true},
		{"review.md", true, true, false},
		{"decisions.md", true, true, true},
		{"readiness.md", true, true, true},
		{"conclusion.md", true, true, true},
		{"deliverables", true, true, true},
		{"deliverables/design-spec.md", true, true, true},
		{"deliverables/attachments/diagram.png", true, true, true},
		{"state.log", false, false, false},
		{"oracle/answers.md", false, false, false},
		{"agent_runs/communication_ledger.jsonl", false, false, false},
	})
}

func TestPresetReviewer(t *testing.T) {
	m := presetGrant(t, PresetReviewer, "docs/architecture")
	checkPaths(t, m, []vrw{
		{"protocol.json", true, true, true},
		{"events.jsonl", true, true, true},
		{"review.md", true, true, true},
		{"proposal.md", true, true, false},
		{"decisions.md", true, true, false},
		{"readiness.md", true, true, false},
		{"conclusion.md", true, true, false},
		{"docs", true, false, false},
		{"docs/architecture/adr.md", true, true, false},
		{"deliverables/design-spec.md", false, false, false},
	})
}

func TestPresetExternalDeliverables(t *testing.T) {
	p, err := Preset(PresetOwner, "-")
	require.NoError(t, err)
	assert.NotContains(t, p.MayRead, "deliverables/")
	assert.Contains(t, p.MayWrite, "proposal.md")
}

func TestPresetErrors(t *testing.T) {
	_, err := Preset("admin", "")
	assert.ErrorContains(t, err, "unknown preset")
	_, err = Preset(PresetOwner, "a/../../outside")
	assert.ErrorContains(t, err, "escapes")
	_, err = Preset(PresetOwner, "..")
	assert.ErrorContains(t, err, "above it")
	p, err := Preset(PresetOwner, "../docs")
	require.NoError(t, err)
	assert.Contains(t, p.MayRead, "../docs/")
	assert.Contains(t, p.MayWrite, "../docs/")
	_, err = Preset(PresetOwner, ".")
	assert.ErrorContains(t, err, "folder root")
	assert.Equal(t, []string{"owner", "reviewer"}, Presets())
}
