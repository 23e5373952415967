package audit

import (
	"bufio"
	_ "embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"strings"
	"sync"

	"github.com/acpfs/acpfs/internal/textsafe"
)

// Render writes the report in format "md" (or "markdown"), "json" or
// "html".
func (r *Report) Render(w io.Writer, format string) error {
	switch strings.ToLower(format) {
	case "md", "markdown", "":
		return r.WriteMarkdown(w)
	case "json":
		return r.WriteJSON(w)
	case "html":
		return r.WriteHTML(w)
	}
	return fmt.Errorf("unknown report format %q (want md, json or html)", format)
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("write audit JSON: %w", err)
	}
	return nil
}

// ChainSummary is one sentence on the ledger's integrity.
func (r *Report) ChainSummary() string {
	c := r.Chain
	if c == nil {
		return "not checked"
	}
	if c.Problem != nil {
		return fmt.Sprintf("BROKEN at seq %d (line %d): %s: %s — %d sound records before it",
			c.Problem.Seq, c.Problem.Line, c.Problem.Kind, c.Problem.Reason, c.Records)
	}
	s := fmt.Sprintf("valid — %d records, last seq %d, last hash %s", c.Records, c.LastSeq, c.LastHash)
	if !c.SignaturesChecked {
		// Hashes and links anyone can recompute: say so where the word
		// "valid" is.
		s = fmt.Sprintf("hashes and links consistent, signatures NOT checked (no public key) — %d records, last seq %d, last hash %s", c.Records, c.LastSeq, c.LastHash)
	}
	if n := len(c.Repairs); n > 0 {
		seqs := make([]string, n)
		for i, rp := range c.Repairs {
			seqs[i] = fmt.Sprint(rp.Seq)
		}
		s += fmt.Sprintf("; %d repair(s) recorded at seq %s", n, strings.Join(seqs, ", "))
	}
	return s
}

// Judged is how many of the records read the audit judged: those the
// chain check and its signatures vouch for.
func (r *Report) Judged() int64 { return r.Records - r.Untrusted }

// gapDetail is the operator's note on a gap, as a clause.
func gapDetail(g Gap) string {
	if g.Detail == "" {
		return ""
	}
	return ": " + g.Detail
}

// displayPath shows the folder root as ".".
func displayPath(p string) string {
	if p == "" {
		return "."
	}
	return p
}

// md escapes text for a Markdown table cell or paragraph: Markdown
// punctuation is backslash-escaped, HTML-significant characters become
// entities, and line breaks become spaces.
func md(s string) string {
	var b strings.Builder
	for _, c := range s {
		switch c {
		case '\\', '`', '*', '_', '[', ']', '|', '~':
			b.WriteByte('\\')
			b.WriteRune(c)
		case '<':
			b.WriteString("&lt;")
		case '>':
			b.WriteString("&gt;")
		case '&':
			b.WriteString("&amp;")
		case '\n', '\r', '\t':
			b.WriteByte(' ')
		default:
			if textsafe.Invisible(c) {
				// A bidi override in a path would show it as another.
				fmt.Fprintf(&b, "\\u{%04x}", c)
				continue
			}
			b.WriteRune(c)
		}
	}
	return b.String()
}

// WriteMarkdown writes the report as Markdown.
func (r *Report) WriteMarkdown(out io.Writer) error {
	w := bufio.NewWriter(out)
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("# Ledger audit\n\n")
	p("- Ledger: %s\n", md(r.Ledger))
	p("- Generated: %s\n", md(r.GeneratedAt))
	sg := r.Signatures
	p("- Signatures: **%s** — %s\n", md(sg.Status), md(sg.Detail))
	p("- Key: %s\n", md(sg.KeyList()))
	p("- Signed: %d of %d records covered by signed checkpoints\n", sg.Covered, sg.Total)
	p("- Chain: %s\n", md(r.ChainSummary()))
	p("- Records judged: %d of %d read\n", r.Judged(), r.Records)
	p("- Verdict: **%s**\n\n", md(r.Verdict))
	for _, g := range r.Gaps {
		p("> **Records lost: %s**, written %s (acknowledged by the %s at seq %d%s). No agent can be shown isolated for that period.\n\n",
			md(g.String()), md(g.Period()), g.Record(), g.Seq, md(gapDetail(g)))
	}

	p("## Summary\n\n")
	p("| Agent | Grants | Verdict | Paths read | Listings | Refused | Temporary/tool noise | Violations |\n")
	p("|---|---|---|---:|---:|---:|---:|---:|\n")
	for _, ag := range r.Agents {
		p("| %s | %s | **%s** | %d | %d | %d | %d | %d |\n", md(ag.Agent), md(strings.Join(ag.Grants, ", ")),
			md(ag.Verdict), len(ag.Reads), len(ag.Lists), len(ag.Refused), len(ag.Noise), len(ag.Violations))
	}
	writeTurns(p, r.Turns)
	for _, ag := range r.Agents {
		p("\n## Agent %s: %s\n\n%s\n", md(ag.Agent), md(ag.Verdict), md(ag.Reason))
		if ag.RepeatedReads > 0 {
			p("\nRepeated reads: %d, of content its view had recorded in full before (counted, not listed by path: see Paths read).\n", ag.RepeatedReads)
		}
		if ag.NetAllowed+ag.NetRefused > 0 {
			p("\nNetwork (egress proxy of `acpfs run --net allow=`): %d connections allowed, %d refused.\n", ag.NetAllowed, ag.NetRefused)
		}
		if len(ag.Violations) > 0 {
			p("\n### Violations\n\n| First seq | At | Kind | Path | Count | Grant | Rule |\n|---:|---|---|---|---:|---|---|\n")
			for _, e := range ag.Violations {
				p("| %d | %s | %s | %s | %d | %s | %s |\n", e.Seq, md(e.At), md(string(e.Kind)), md(displayPath(e.Path)), e.Count, md(e.Grant), md(e.Rule))
			}
		}
		writeAccessTable(p, "Paths read", ag.Reads, true)
		writeAccessTable(p, "Directories listed", ag.Lists, false)
		writeEventTable(p, "Refused attempts", "", ag.Refused)
		writeEventTable(p, "Temporary/tool noise",
			"Refused creations of editors' and tools' temporary files, and git's link attempts: not attempts on real paths.\n\n", ag.Noise)
	}
	if len(r.Matrix) > 0 {
		p("\n## Agent × file matrix\n\nEach cell: what the agent did, then what its grant says of the path.\n\n| Path |")
		for _, ag := range r.Agents {
			p(" %s |", md(ag.Agent))
		}
		p("\n|---|%s\n", strings.Repeat("---|", len(r.Agents)))
		for _, row := range r.Matrix {
			p("| %s |", md(displayPath(row.Path)))
			for _, c := range row.Cells {
				state := md(c.State()) + " (" + md(c.Grant) + ")"
				if c.Violation {
					state = "**VIOLATION: " + state + "**"
				}
				p(" %s |", state)
			}
			p("\n")
		}
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("write audit Markdown: %w", err)
	}
	return nil
}

func writeEventTable(p func(string, ...any), title, intro string, events []Event) {
	if len(events) == 0 {
		return
	}
	p("\n### %s\n\n%s| First seq | At | Kind | Op | Path | Count | Detail |\n|---:|---|---|---|---|---:|---|\n", title, intro)
	for _, e := range events {
		p("| %d | %s | %s | %s | %s | %d | %s |\n", e.Seq, md(e.At), md(string(e.Kind)), md(string(e.Op)), md(displayPath(e.Path)), e.Count, md(e.Detail))
	}
}

func writeAccessTable(p func(string, ...any), title string, accs []Access, hashes bool) {
	if len(accs) == 0 {
		return
	}
	if hashes {
		p("\n### %s\n\n| Path | Count | First seq | Grant | Allowed | Rule | SHA-256 |\n|---|---:|---:|---|---|---|---|\n", title)
	} else {
		p("\n### %s\n\n| Path | Count | First seq | Grant | Allowed | Rule |\n|---|---:|---:|---|---|---|\n", title)
	}
	for _, a := range accs {
		allowed := "yes"
		switch {
		case !a.Judged:
			allowed = "unknown"
		case !a.Allowed:
			allowed = "**NO**"
		}
		p("| %s | %d | %d | %s | %s | %s |", md(displayPath(a.Path)), a.Count, a.FirstSeq, md(a.Grant), allowed, md(a.Rule))
		if hashes {
			p(" %s |", md(a.HashSummary()))
		}
		p("\n")
	}
}

// HashSummary is the read's content hashes for a report cell: each
// SHA-256 in full, then how many reads are of content the ledger holds
// no hash of.
func (a Access) HashSummary() string {
	s := strings.Join(a.Hashes, ", ")
	if a.Unhashed > 0 {
		if s != "" {
			s += "; "
		}
		s += fmt.Sprintf("%d read(s) without a hash", a.Unhashed)
	}
	if s == "" {
		return "none recorded"
	}
	return s
}

//go:embed audit.html.tmpl
var auditHTML string

// auditTemplate is parsed at its first use, not when the program starts:
// every acpfs command links this package, and parsing costs half a
// millisecond of each one's start (`acpfs append` runs once per event).
var auditTemplate = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("audit").Funcs(template.FuncMap{
		"path":      displayPath,
		"gapDetail": gapDetail,
		"cellClass": func(c MatrixCell) string {
			switch {
			case c.Violation:
				return "violation"
			case c.Read:
				return "read"
			case c.Listed || c.Written:
				return "listed"
			case c.Refused:
				return "refused"
			}
			return "never"
		},
	}).Parse(auditHTML))
})

// WriteHTML writes the report as one self-contained HTML page (inline CSS,
// no scripts, everything escaped by html/template).
func (r *Report) WriteHTML(w io.Writer) error {
	var b strings.Builder
	if err := auditTemplate().Execute(&b, r); err != nil {
		return fmt.Errorf("write audit HTML: %w", err)
	}
	// The template's own text holds no invisible character: any in the
	// page came from the records (a path, a detail), and a bidi override
	// there would show one path as another. Written out, they show.
	if _, err := io.WriteString(w, textsafe.Escape(b.String())); err != nil {
		return fmt.Errorf("write audit HTML: %w", err)
	}
	return nil
}

// writeTurns writes the timeline of the turns acpfs drive ran.
func writeTurns(p func(string, ...any), turns []Turn) {
	if len(turns) == 0 {
		return
	}
	p("\n## Turns\n\nThe turns `acpfs drive` ran, in order: who acted when, what each turn appended, read, wrote and was refused. Receipts: RUNS/turns/.\n\n")
	p("| Ledger seq | Start | End | Participant | Grant | Woken by seq | Outcome | Exit | Appended | Read | Wrote | Refused | Limits |\n")
	p("|---:|---|---|---|---|---:|---|---:|---|---|---|---|---|\n")
	for _, t := range turns {
		exit := fmt.Sprint(t.Exit)
		if t.Signal != "" {
			exit += " (" + t.Signal + ")"
		}
		p("| %d | %s | %s | %s | %s | %d | %s | %s | %s | %s | %s | %s | %s |\n", t.Seq, md(t.Start), md(t.End), md(t.Participant),
			md(t.Grant), t.Wake, md(t.Outcome), md(exit), md(list(t.Events)), md(list(t.Reads)), md(list(t.Writes)), md(list(t.Refusals)), md(list(t.Limits)))
	}
}

// list joins a turn's list for a cell; "-" for none.
func list(l []string) string {
	if len(l) == 0 {
		return "-"
	}
	return strings.Join(l, ", ")
}
