package grants

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRenderSections(t *testing.T) {
	g, err := Load("../testdata/grants/valid/G-owner.json")
	require.NoError(t, err)
	out := Render(g)
	for _, want := range []string{
		"# Context grant G-owner",
		"agent `claude`", "**proposal owner**", "participant `server`",
		"## Objective", "Draft the design spec",
		"## Named inputs", "`primary`: `deliverables/design-spec.md`",
		"## You may read", "- `protocol.json`",
		"## You may write", "- `events.jsonl`",
		"## Guidance", "Keep the spec under 400 lines.",
		"## Output contract", "## Decision authority", "## Stop conditions",
		"recorded, with its content hash", // reads are logged
		"enforced by the filesystem",      // events.jsonl appends are validated
		"`.acpfs/last-error`",
	} {
		assert.Contains(t, out, want)
	}
	assert.NotContains(t, out, "oracle")
}

func TestRenderReadOnlyGrant(t *testing.T) {
	g := testGrant([]string{"proposal.md"}, nil, nil)
	out := Render(g)
	assert.Contains(t, out, "read-only")
	assert.Contains(t, out, "Named inputs\n\nNone.")
}

// TestRenderNeverNamesForbidden renders grants whose forbidden lists hold
// distinctive names and checks that none of them appears anywhere, in any
// letter case, even where a may_read entry, a named input, a slot name,
// the guidance or the objective mention them.
func TestRenderNeverNamesForbidden(t *testing.T) {
	tests := []struct {
		name      string
		grant     *Grant
		secrets   []string
		mustKeep  []string
		mustNotBe []string
	}{
		{
			name: "plain forbidden directories",
			grant: &Grant{
				GrantID: "G-r", AgentID: "rev", Role: "reviewer", Objective: "Review the spec",
				MayRead:       []string{"deliverables/**", "proposal.md"},
				ForbiddenRead: []string{"zanzibar-oracle/**", "deliverables/quetzal-drafts/", "**/private-trace-*.log"},
			},
			secrets:  []string{"zanzibar-oracle", "quetzal-drafts", "private-trace-", "zanzibar", "quetzal"},
			mustKeep: []string{"`deliverables/**`", "`proposal.md`"},
		},
		{
			name: "may_read entries and named inputs that contain a forbidden name",
			grant: &Grant{
				GrantID: "G-r", AgentID: "rev", Role: "reviewer", Objective: "Review",
				NamedInputs: map[string]NamedInput{
					"spec":              {Path: "deliverables/spec.md"},
					"xylophone_summary": {Path: "notes/xylophone-summary.md"},
				},
				MayRead:       []string{"deliverables/**", "notes/xylophone-summary.md", "notes/**"},
				ForbiddenRead: []string{"notes/xylophone/**"},
			},
			secrets:  []string{"xylophone"},
			mustKeep: []string{"`spec`: `deliverables/spec.md`", "`notes/**`"},
		},
		{
			name: "free text, case variants and globs",
			grant: &Grant{
				GrantID: "G-r", AgentID: "rev", Role: "Grader of Marmalade answers",
				Objective:        "Do not look at MARMALADE keys; the Marmalade set is secret.",
				MayRead:          []string{"**"},
				ForbiddenRead:    []string{"{marmalade,quince-vault}/**", "answers-[0-9]*.json"},
				InjectedGuidance: []string{"The quince-vault holds nothing for you.", "Ignore answers-1.json."},
				StopConditions:   []string{"Stop if you see marmalade."},
				OutputContract:   "No Quince-Vault references.",
			},
			secrets:  []string{"marmalade", "quince-vault", "answers-", "{marmalade,quince-vault}/**"},
			mustKeep: []string{"`**`"},
		},
		{
			name: "unicode forbidden names",
			grant: &Grant{
				GrantID: "G-r", AgentID: "rev", Role: "reviewer", Objective: "审查设计",
				MayRead:       []string{"文档/**", "文档/机密答案-概要.md"},
				ForbiddenRead: []string{"文档/机密答案/**"},
			},
			secrets:  []string{"机密答案"},
			mustKeep: []string{"`文档/**`"},
		},
		{
			name: "forbidden name inside the template wording",
			grant: &Grant{
				GrantID: "G-r", AgentID: "rev", Role: "reviewer", Objective: "o",
				MayRead:       []string{"**"},
				ForbiddenRead: []string{"**/ledger"},
			},
			secrets: []string{"ledger"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.NoError(t, Validate(tt.grant))
			out := Render(tt.grant)
			lower := strings.ToLower(out)
			for _, s := range tt.secrets {
				assert.NotContains(t, lower, strings.ToLower(s), "secret %q leaked:\n%s", s, out)
			}
			for _, f := range tt.grant.ForbiddenRead {
				assert.NotContains(t, out, f)
			}
			for _, k := range tt.mustKeep {
				assert.Contains(t, out, k)
			}
		})
	}
}

func TestRenderRevoked(t *testing.T) {
	g := testGrant([]string{"a.md"}, nil, nil)
	g.Revoked, g.RevokedAt = true, "2026-05-21T10:00:00Z"
	assert.Contains(t, Render(g), "revoked")
}

func TestLiteralRuns(t *testing.T) {
	assert.Equal(t, []string{"oracle"}, literalRuns("oracle/**"))
	assert.Equal(t, []string{"private-trace-", ".log"}, literalRuns("**/private-trace-*.log"))
	assert.Equal(t, []string{"a", "b"}, literalRuns("{a,b}"))
	assert.Equal(t, []string{"x", "y"}, literalRuns("x[abc]y"))
}
