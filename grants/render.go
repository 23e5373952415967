package grants

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// renderPrompt writes the agent's prompt. Every string that comes from the
// grant goes through the redactor, and the whole prompt goes through it
// once more, so that no forbidden name can appear even by accident (in a
// may_read entry, a slot name, the guidance or the template itself).
func renderPrompt(g *Grant) string {
	if g == nil {
		return ""
	}
	r := newRedactor(g)
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }

	w("# Context grant %s\n\n", r.text(g.GrantID))
	if g.Revoked {
		w("**This grant has been revoked**")
		if g.RevokedAt != "" {
			w(" (%s)", r.text(g.RevokedAt))
		}
		w(". The collaboration folder now shows you nothing; stop working.\n\n")
	}
	w("You are agent `%s`, working as **%s**. In the collaboration protocol you are participant `%s`.\n\n",
		r.text(g.AgentID), r.text(oneLine(g.Role)), r.text(g.ParticipantID()))

	w("## Objective\n\n%s\n\n", r.text(strings.TrimSpace(g.Objective)))

	w("## Named inputs\n\n")
	slots := make([]string, 0, len(g.NamedInputs))
	for s, in := range g.NamedInputs {
		if in.Path != "" {
			slots = append(slots, s)
		}
	}
	sort.Strings(slots)
	if len(slots) == 0 {
		w("None.\n\n")
	} else {
		for _, s := range slots {
			line := fmt.Sprintf("`%s`: `%s`", s, g.NamedInputs[s].Path)
			if r.mentions(line) {
				line = withheldEntry
			}
			w("- %s\n", line)
		}
		w("\n")
	}

	w("## You may read\n\n")
	for _, p := range g.MayRead {
		w("- %s\n", codeEntry(r, p))
	}
	for _, p := range g.MayWrite {
		if !slices.Contains(g.MayRead, p) {
			w("- %s (writable, so readable)\n", codeEntry(r, p))
		}
	}
	w("\nPaths are relative to the collaboration folder. Anything not covered here does not exist in your view of it.\n\n")

	w("## You may write\n\n")
	if len(g.MayWrite) == 0 {
		w("Nothing: your view of the folder is read-only.\n\n")
	} else {
		for _, p := range g.MayWrite {
			w("- %s\n", codeEntry(r, p))
		}
		w("\n")
	}

	if len(g.InjectedGuidance) > 0 {
		w("## Guidance\n\n")
		for _, s := range g.InjectedGuidance {
			w("- %s\n", r.text(indentItem(s)))
		}
		w("\n")
	}
	section := func(title, body string) {
		if strings.TrimSpace(body) == "" {
			return
		}
		w("## %s\n\n%s\n\n", title, r.text(strings.TrimSpace(body)))
	}
	section("Output contract", g.OutputContract)
	section("Decision authority", g.DecisionAuthority)
	if len(g.StopConditions) > 0 {
		w("## Stop conditions\n\n")
		for _, s := range g.StopConditions {
			w("- %s\n", r.text(indentItem(s)))
		}
		w("\n")
	}

	w("## How this folder works\n\n")
	w("- The folder you see is a filesystem view bound to this grant; ordinary tools (cat, grep, editors, shell redirection) work on it.\n")
	w("- Every file you open for reading is recorded, with its content hash, in a tamper-evident ledger that reviewers audit.\n")
	w("- Writing outside the paths you may write fails with \"permission denied\" and is recorded too.\n")
	w("- The collaboration protocol is enforced by the filesystem: each line you append to `events.jsonl` is validated against the protocol state machine before it reaches disk, and its `from` must be `%s`. A refused append fails; the reason is in `.acpfs/last-error`.\n", r.text(g.ParticipantID()))
	w("- `protocol.json` is maintained for you from the events.\n")
	w("- A frozen deliverable is read-only.\n")
	w("- `.acpfs/status` shows the phase, whose turn it is and your next action; reading `.acpfs/wait` blocks until it is your turn or the collaboration ends.\n")
	w("- Information from other agents reaches you only as files and recorded handoffs, never through hidden context.\n")

	return r.text(b.String())
}

// codeEntry shows a path or pattern as code, unless it names something
// forbidden.
func codeEntry(r *redactor, p string) string {
	if r.mentions(p) {
		return withheldEntry
	}
	return "`" + p + "`"
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// indentItem keeps a multi-line list item inside its bullet.
func indentItem(s string) string {
	return strings.ReplaceAll(strings.TrimSpace(s), "\n", "\n  ")
}
