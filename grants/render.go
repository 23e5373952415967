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
	pw := &promptWriter{g: g, r: newRedactor(g)}
	pw.header()
	pw.namedInputs()
	pw.paths()
	pw.instructions()
	pw.howItWorks()
	return pw.r.text(pw.b.String())
}

// promptWriter builds one grant's prompt, a section per method.
type promptWriter struct {
	g *Grant
	r *redactor
	b strings.Builder
}

func (pw *promptWriter) w(format string, args ...any) { fmt.Fprintf(&pw.b, format, args...) }

// header names the grant, says whether it is revoked, who the agent is and
// its objective.
func (pw *promptWriter) header() {
	g, r := pw.g, pw.r
	pw.w("# Context grant %s\n\n", r.text(g.GrantID))
	if g.Revoked {
		pw.w("**This grant has been revoked**")
		if g.RevokedAt != "" {
			pw.w(" (%s)", r.text(g.RevokedAt))
		}
		pw.w(". The collaboration folder now shows you nothing; stop working.\n\n")
	}
	pw.w("You are agent `%s`, working as **%s**. In the collaboration protocol you are participant `%s`.\n\n",
		r.text(g.AgentID), r.text(oneLine(g.Role)), r.text(g.ParticipantID()))

	pw.w("## Objective\n\n%s\n\n", r.text(strings.TrimSpace(g.Objective)))
}

// namedInputs lists the named input slots that name a path, by slot.
func (pw *promptWriter) namedInputs() {
	g := pw.g
	pw.w("## Named inputs\n\n")
	slots := make([]string, 0, len(g.NamedInputs))
	for s, in := range g.NamedInputs {
		if in.Path != "" {
			slots = append(slots, s)
		}
	}
	sort.Strings(slots)
	if len(slots) == 0 {
		pw.w("None.\n\n")
		return
	}
	for _, s := range slots {
		line := fmt.Sprintf("`%s`: `%s`", s, g.NamedInputs[s].Path)
		if pw.r.mentions(line) {
			line = withheldEntry
		}
		pw.w("- %s\n", line)
	}
	pw.w("\n")
}

// paths lists what the agent may read and what it may write.
func (pw *promptWriter) paths() {
	g, r := pw.g, pw.r
	pw.w("## You may read\n\n")
	for _, p := range g.MayRead {
		pw.w("- %s\n", codeEntry(r, p))
	}
	for _, p := range g.MayWrite {
		if !slices.Contains(g.MayRead, p) {
			pw.w("- %s (writable, so readable)\n", codeEntry(r, p))
		}
	}
	pw.w("\nPaths are relative to the collaboration folder. Anything not covered here does not exist in your view of it.\n\n")

	pw.w("## You may write\n\n")
	if len(g.MayWrite) == 0 {
		pw.w("Nothing: your view of the folder is read-only.\n\n")
		return
	}
	for _, p := range g.MayWrite {
		pw.w("- %s\n", codeEntry(r, p))
	}
	pw.w("\n")
}

// instructions writes the grant's guidance, output contract, decision
// authority and stop conditions, each section only when the grant has it.
func (pw *promptWriter) instructions() {
	g := pw.g
	pw.list("Guidance", g.InjectedGuidance)
	pw.section("Output contract", g.OutputContract)
	pw.section("Decision authority", g.DecisionAuthority)
	pw.list("Stop conditions", g.StopConditions)
}

func (pw *promptWriter) section(title, body string) {
	if strings.TrimSpace(body) == "" {
		return
	}
	pw.w("## %s\n\n%s\n\n", title, pw.r.text(strings.TrimSpace(body)))
}

func (pw *promptWriter) list(title string, items []string) {
	if len(items) == 0 {
		return
	}
	pw.w("## %s\n\n", title)
	for _, s := range items {
		pw.w("- %s\n", pw.r.text(indentItem(s)))
	}
	pw.w("\n")
}

// howItWorks explains the view the agent works in.
func (pw *promptWriter) howItWorks() {
	pw.w("## How this folder works\n\n")
	pw.w("- The folder you see is a filesystem view bound to this grant; ordinary tools (cat, grep, editors, shell redirection) work on it.\n")
	pw.w("- Every file you open for reading is recorded, with its content hash, in a tamper-evident ledger that reviewers audit.\n")
	pw.w("- Writing outside the paths you may write fails with \"permission denied\" and is recorded too.\n")
	pw.w("- The collaboration protocol is enforced by the filesystem: each line you append to `events.jsonl` is validated against the protocol state machine before it reaches disk, and its `from` must be `%s`. A refused append fails; the reason is in `.acpfs/last-error`.\n", pw.r.text(pw.g.ParticipantID()))
	pw.w("- `protocol.json` is maintained for you from the events.\n")
	pw.w("- A frozen deliverable is read-only.\n")
	pw.w("- `.acpfs/status` shows the phase, whose turn it is and your next action; reading `.acpfs/wait` blocks until it is your turn or the collaboration ends.\n")
	pw.w("- Information from other agents reaches you only as files and recorded handoffs, never through hidden context.\n")
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
