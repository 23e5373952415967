package protocol

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/internal/pycompat"
)

// editJSON rewrites protocol.json through f.
func (k *kit) editJSON(f func(m map[string]any)) {
	var m map[string]any
	require.NoError(k.t, json.Unmarshal([]byte(k.read(ProtocolFile)), &m))
	f(m)
	b, err := pycompat.MarshalIndent(m)
	require.NoError(k.t, err)
	k.write(ProtocolFile, string(b))
}

func (k *kit) replace(name, old, new string) {
	text := k.read(name)
	require.Contains(k.t, text, old, name)
	k.write(name, strings.Replace(text, old, new, 1))
}

// editLine rewrites line n (1-based) of events.jsonl.
func (k *kit) editLine(n int, f func(string) string) {
	lines := strings.Split(strings.TrimSuffix(k.read(EventsFile), "\n"), "\n")
	lines[n-1] = f(lines[n-1])
	k.write(EventsFile, strings.Join(lines, "\n")+"\n")
}

func deliverables(m map[string]any) map[string]any { return m["deliverables"].(map[string]any) }

// validateCases are folders at a state, edited, with the verdict and the
// rules expected; the parity test checks the verdicts against the
// reference implementation.
var validateCases = []struct {
	name  string
	state string // "fresh" or a states key
	edit  func(k *kit)
	code  int
	rules []string // every one must be reported
}{
	{"fresh folder", "init", nil, 0, nil},
	{"completed", "completed", nil, 0, nil},
	{"reasonless deferral warns", "init", func(k *kit) {
		k.replace(ReadinessFile, "## Blocking Issues", "- [deferred_nonblocking] Tune later.\n\n## Blocking Issues")
	}, 1, nil},
	{"missing proposal", "init", func(k *kit) { require.NoError(k.t, os.Remove(filepath.Join(k.dir, ProposalFile))) }, 2, []string{"required-file"}},
	{"missing events", "init", func(k *kit) { require.NoError(k.t, os.Remove(filepath.Join(k.dir, EventsFile))) }, 2, []string{"required-file"}},
	{"obsolete file", "init", func(k *kit) { k.write("state.log", "x") }, 2, []string{"forbidden-file"}},
	{"missing protocol", "init", func(k *kit) { require.NoError(k.t, os.Remove(filepath.Join(k.dir, ProtocolFile))) }, 2, []string{"protocol-json", "required-file"}},
	{"invalid protocol", "init", func(k *kit) { k.write(ProtocolFile, "{") }, 2, []string{"protocol-json"}},
	{"protocol not an object", "init", func(k *kit) { k.write(ProtocolFile, "[]") }, 2, []string{"protocol-json"}},
	{"wrong protocol name", "init", func(k *kit) { k.editJSON(func(m map[string]any) { m["protocol"] = "acp1" }) }, 2, []string{"protocol-name"}},
	{"wrong schema", "init", func(k *kit) { k.editJSON(func(m map[string]any) { m["schemaVersion"] = 1 }) }, 2, []string{"schema-version"}},
	{"unknown phase", "init", func(k *kit) { k.editJSON(func(m map[string]any) { m["currentPhase"] = "done" }) }, 2, []string{"phase-name", "derived-state"}},
	{"blank objective", "init", func(k *kit) { k.editJSON(func(m map[string]any) { m["objective"] = "" }) }, 2, []string{"objective"}},
	{"no participants", "init", func(k *kit) { k.editJSON(func(m map[string]any) { m["participants"] = []any{} }) }, 2, []string{"participants", "participant"}},
	{"no gates", "init", func(k *kit) { k.editJSON(func(m map[string]any) { m["completionGates"] = []any{} }) }, 2, []string{"completion-gates"}},
	{"gate without source", "init", func(k *kit) {
		k.editJSON(func(m map[string]any) { m["completionGates"] = []any{map[string]any{"text": "x"}} })
	}, 2, []string{"completion-gates"}},
	{"gate naming an obsolete file", "init", func(k *kit) {
		k.editJSON(func(m map[string]any) {
			m["completionGates"] = []any{map[string]any{"source": "objective", "text": "opinions.md is empty"}}
		})
	}, 2, []string{"completion-gates"}},
	{"no waitingFor", "init", func(k *kit) { k.editJSON(func(m map[string]any) { delete(m, "waitingFor") }) }, 2, []string{"derived-state"}},
	{"stale phase", "reviewing", func(k *kit) { k.editJSON(func(m map[string]any) { m["currentPhase"] = "drafting" }) }, 2, []string{"derived-state"}},
	{"stale waiting", "reviewing", func(k *kit) { k.editJSON(func(m map[string]any) { m["waitingFor"] = []any{"server"} }) }, 2, []string{"derived-state"}},
	{"no deliverables", "init", func(k *kit) { k.editJSON(func(m map[string]any) { delete(m, "deliverables") }) }, 2, []string{"deliverables"}},
	{"bad mode", "init", func(k *kit) { k.editJSON(func(m map[string]any) { deliverables(m)["mode"] = "shared" }) }, 2, []string{"deliverables"}},
	{"repoRoot in internal mode", "init", func(k *kit) { k.editJSON(func(m map[string]any) { m["repoRoot"] = "." }) }, 2, []string{"deliverables"}},
	{"escaping dir", "init", func(k *kit) { k.editJSON(func(m map[string]any) { deliverables(m)["dir"] = "../out" }) }, 2, []string{"deliverables"}},
	{"bad primary type", "init", func(k *kit) {
		k.editJSON(func(m map[string]any) { deliverables(m)["primary"].(map[string]any)["type"] = "novel" })
	}, 2, []string{"deliverables"}},
	{"primary not markdown", "init", func(k *kit) {
		k.editJSON(func(m map[string]any) { deliverables(m)["primary"].(map[string]any)["file"] = "design-spec.txt" })
	}, 2, []string{"deliverables"}},
	{"custom without checklist", "init", func(k *kit) {
		k.editJSON(func(m map[string]any) { deliverables(m)["primary"].(map[string]any)["type"] = "custom" })
	}, 2, []string{"deliverables"}},
	{"supporting twice", "init", func(k *kit) {
		k.editJSON(func(m map[string]any) {
			s := map[string]any{"type": "adr", "file": "adr.md"}
			deliverables(m)["supporting"] = []any{s, s}
		})
	}, 2, []string{"deliverables"}},
	{"attachment not an object", "init", func(k *kit) {
		k.editJSON(func(m map[string]any) { deliverables(m)["attachments"] = []any{"a.png"} })
	}, 2, []string{"deliverables"}},
	{"attachment missing", "init", func(k *kit) {
		k.editJSON(func(m map[string]any) { deliverables(m)["attachments"] = []any{map[string]any{"file": "a.png"}} })
	}, 2, []string{"attachment-missing"}},
	{"supporting marked frozen without event", "init", func(k *kit) {
		k.editJSON(func(m map[string]any) {
			deliverables(m)["supporting"] = []any{map[string]any{"type": "adr", "file": "adr.md", "frozen": true}}
		})
		k.write("deliverables/adr.md", renderDeliverable(Deliverable{Type: "adr", sections: TypeSections("adr")}))
	}, 2, []string{"supporting-frozen", "deliverable-status"}},
	{"seq gap", "reviewing", func(k *kit) {
		k.editLine(3, func(s string) string { return strings.Replace(s, `"seq":3`, `"seq":4`, 1) })
	}, 2, []string{"seq-continuous"}},
	{"time going back", "reviewing", func(k *kit) {
		k.editLine(3, func(s string) string { return strings.Replace(s, `"at":"2026-`, `"at":"2025-`, 1) })
	}, 2, []string{"at-order"}},
	{"all errors collected", "reviewing", func(k *kit) {
		k.editLine(2, func(s string) string { return strings.Replace(s, `"seq":2`, `"seq":7`, 1) })
		k.editLine(3, func(s string) string {
			return strings.Replace(strings.Replace(s, `"at":"2026-`, `"at":"2025-`, 1), `"reply_to":2`, `"reply_to":9`, 1)
		})
	}, 2, []string{"seq-continuous", "at-order", "reply-to-range"}},
	{"reply_to missing", "reviewing", func(k *kit) {
		k.editLine(3, func(s string) string { return strings.Replace(s, `,"reply_to":2`, ``, 1) })
	}, 2, []string{"reply-to-required"}},
	{"array line", "init", func(k *kit) { k.write(EventsFile, k.read(EventsFile)+"[1]\n") }, 2, []string{"json-object"}},
	{"broken line", "init", func(k *kit) { k.write(EventsFile, k.read(EventsFile)+"{\"seq\":\n") }, 2, []string{"json"}},
	{"unknown event", "drafted", func(k *kit) {
		k.editLine(2, func(s string) string { return strings.Replace(s, `deliverable_drafted`, `deliverable_started`, 1) })
	}, 2, []string{"event-unknown"}},
	{"missing summary", "drafted", func(k *kit) {
		k.editLine(2, func(s string) string { return strings.Replace(s, `"summary":"step deliverable_drafted",`, ``, 1) })
	}, 2, []string{"field-missing"}},
	{"phase violation in history", "drafted", func(k *kit) {
		k.editLine(2, func(s string) string { return strings.Replace(s, `deliverable_drafted`, `deliverable_frozen`, 1) })
	}, 2, []string{"phase", "sha256-format"}},
	{"review without heading", "revising", func(k *kit) { k.write(ReviewFile, "# Review\n\nReview Scope:\n") }, 2, []string{"review-heading", "review-content"}},
	{"review heading of the wrong participant", "revising", func(k *kit) { k.replace(ReviewFile, "- reader - seq 4", "- server - seq 4") }, 2, []string{"review-heading"}},
	{"review heading for another event", "revising", func(k *kit) {
		k.write(ReviewFile, k.read(ReviewFile)+"\n## 2026-01-02T00:00:00Z - server - seq 2\n")
	}, 2, []string{"review-heading"}},
	{"review heading for no event", "revising", func(k *kit) {
		k.write(ReviewFile, k.read(ReviewFile)+"\n## 2026-01-02T00:00:00Z - server - seq 99\n")
	}, 2, []string{"review-heading"}},
	{"deliverable changed after freeze", "completed", func(k *kit) {
		k.write(k.primaryPath(), strings.Replace(string(mustRead(k.t, k.primaryPath())), "Content for Goals.", "Other goals.", 1))
	}, 2, []string{"sha256-mismatch"}},
	{"primary deliverable removed", "init", func(k *kit) { require.NoError(k.t, os.Remove(k.primaryPath())) }, 2, []string{"deliverable-missing"}},
	{"primary without status", "init", func(k *kit) { k.write(k.primaryPath(), "# Spec\n\n## Problem\n") }, 2, []string{"deliverable-status", "deliverable-section"}},
	{"frozen primary with empty section", "completed", func(k *kit) {
		k.write(k.primaryPath(), strings.Replace(string(mustRead(k.t, k.primaryPath())), "Content for Goals.", "", 1))
	}, 2, []string{"deliverable-section", "sha256-mismatch"}},
	{"frozen primary back to draft", "frozen", func(k *kit) {
		k.write(k.primaryPath(), strings.Replace(string(mustRead(k.t, k.primaryPath())), "Status: Frozen", "Status: Draft", 1))
	}, 2, []string{"deliverable-status"}},
	{"decision heading without id", "init", func(k *kit) { k.replace(DecisionsFile, "### D1. ", "### 1. ") }, 2, []string{"decisions"}},
	{"decision without reflected in", "init", func(k *kit) { k.replace(DecisionsFile, "- Reflected in:", "- Seen in:") }, 2, []string{"decisions"}},
	{"decision ids out of order", "classified", func(k *kit) { k.replace(DecisionsFile, "### D2.", "### D3.") }, 2, []string{"decisions"}},
	{"decision reflected elsewhere", "classified", func(k *kit) {
		k.write(DecisionsFile, "# Decisions\n\n### D1. X\n\n- Decision: x\n- Reflected in: proposal.md\n")
	}, 2, []string{"decisions"}},
	{"blocking after acceptance", "readiness", func(k *kit) {
		k.write(ReadinessFile, k.read(ReadinessFile)+"\n- [blocking] Quota.\n")
	}, 2, []string{"readiness-blocking"}},
	{"unchecked ready box after readiness", "passed", func(k *kit) {
		k.replace(ReadinessFile, "- [x] Ready to implement", "- [ ] Ready to implement")
	}, 2, []string{"ready-to-implement"}},
	{"unchecked gate after completion", "completed", func(k *kit) {
		k.replace(ReadinessFile, "- [x] Readiness passes", "- [ ] Readiness passes")
	}, 2, []string{"completion-gates"}},
	{"placeholder in conclusion", "completed", func(k *kit) {
		k.write(ConclusionFile, k.read(ConclusionFile)+"\nStill 待定 here.\n")
	}, 2, []string{"conclusion"}},
	{"conclusion without the deliverable", "completed", func(k *kit) {
		k.replace(ConclusionFile, "`deliverables/design-spec.md`", "the spec")
	}, 2, []string{"conclusion"}},
}

func TestValidate(t *testing.T) {
	cases := validateCases

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			k := kitAt(t, c.state)
			if c.edit != nil {
				c.edit(k)
			}
			res := Validate(k.dir)
			assert.Equal(t, c.code, res.ExitCode(), "errors: %v\nwarnings: %v", res.Errors, res.Warnings)
			got := rulesOf(res.Errors)
			for _, r := range c.rules {
				assert.Contains(t, got, r, "errors: %v", res.Errors)
			}
			for _, e := range res.Errors {
				assert.Regexp(t, `^[^ ]+(\.json|\.jsonl|\.md|\.log)( line \d+)?: `, e)
			}
		})
	}
}

func mustRead(t testing.TB, path string) []byte {
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

func TestValidateExternal(t *testing.T) {
	mk := func(t *testing.T) *kit {
		root := t.TempDir()
		o := kitOptions(filepath.Join(root, "repo", ".acp", "run"), "decision-memo")
		o.Mode, o.RepoRoot, o.Dir = "external", "../..", "docs/acp-output"
		return newKit(t, o)
	}
	t.Run("fresh", func(t *testing.T) {
		k := mk(t)
		assert.Equal(t, 0, Validate(k.dir).ExitCode(), Validate(k.dir).Errors)
		assert.FileExists(t, filepath.Join(k.dir, "..", "..", "docs", "acp-output", "decision-memo.md"))
	})
	for name, rr := range map[string]string{"absolute": "/", "missing": "../../nope", "not an ancestor": "../../docs"} {
		t.Run(name, func(t *testing.T) {
			k := mk(t)
			k.editJSON(func(m map[string]any) { m["repoRoot"] = rr })
			res := Validate(k.dir)
			assert.Equal(t, 2, res.ExitCode())
			assert.Contains(t, rulesOf(res.Errors), "deliverables", res.Errors)
		})
	}
}
