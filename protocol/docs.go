package protocol

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/acpfs/acpfs/internal/pycompat"
)

// Readiness is what readiness.md says about the open questions.
type Readiness struct {
	Blocking              []string // bodies of "- [blocking]" items
	Unresolved            []string // "- [unresolved]" items and status items mentioning TBD
	DeferredMissingReason []string // "- [deferred_nonblocking]" items without "Reason:"
	ReadyToImplement      bool     // "- [x] Ready to implement" is present
	Text                  string
}

// Clear reports no blocking, unresolved or reasonless deferred items.
func (r Readiness) Clear() bool {
	return len(r.Blocking) == 0 && len(r.Unresolved) == 0 && len(r.DeferredMissingReason) == 0
}

// readDoc reads a folder document as text. A missing file reads as "".
func readDoc(path string) (string, bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", false, nil
		}
		return "", false, err
	}
	return pycompat.Text(b), true, nil
}

// ScanReadiness reads folder/readiness.md.
func ScanReadiness(folder string) (Readiness, error) {
	text, _, err := readDoc(filepath.Join(folder, ReadinessFile))
	if err != nil {
		return Readiness{}, fmt.Errorf("read readiness.md: %w", err)
	}
	return scanReadinessText(text), nil
}

func scanReadinessText(text string) Readiness {
	r := Readiness{Text: text}
	for _, m := range pycompat.Re(`(?m)^\s*-\s*\[([A-Za-z_]+)\]\s*(.*)$`).FindAllStringSubmatch(text, -1) {
		status, body := m[1], m[2]
		switch status {
		case "blocking", "unresolved", "resolved", "deferred_nonblocking":
		default:
			continue
		}
		if status == "blocking" {
			r.Blocking = append(r.Blocking, body)
		}
		if status == "unresolved" || strings.Contains(body, "TBD") {
			r.Unresolved = append(r.Unresolved, body)
		}
		if status == "deferred_nonblocking" && !strings.Contains(strings.ToLower(body), "reason:") {
			r.DeferredMissingReason = append(r.DeferredMissingReason, body)
		}
	}
	r.ReadyToImplement = pycompat.Re(`(?m)^\s*-\s*\[[xX]\]\s*Ready to implement`).MatchString(text)
	return r
}

// MissingGates returns the completion gate texts that readiness.md does
// not show as checked ("- [x] <text>" on a line of its own).
func MissingGates(p *Protocol, readinessText string) []string {
	var missing []string
	for _, g := range p.GateTexts() {
		re := pycompat.Re(`(?m)^\s*-\s*\[[xX]\]\s*` + regexp.QuoteMeta(g) + `\s*$`)
		if !re.MatchString(readinessText) {
			missing = append(missing, g)
		}
	}
	return missing
}

// ConclusionHeadings are the "## " sections conclusion.md must have.
var ConclusionHeadings = []string{
	"Decision Outcome", "Rationale", "Deliverable Receipt", "Accepted Decisions Summary",
	"Readiness Result", "Assumptions", "Deferred Follow-ups", "Implementation Blockers", "Next Action",
}

// Outcomes that allow completion.
var completableOutcomes = map[string]bool{"proceed": true, "do_not_proceed": true, "defer": true}

// ConclusionProblems lists why conclusion.md does not allow completed
// yet; nil when it does. p may be nil to skip the deliverable reference.
func ConclusionProblems(folder string, p *Protocol) ([]string, error) {
	text, _, err := readDoc(filepath.Join(folder, ConclusionFile))
	if err != nil {
		return nil, fmt.Errorf("read conclusion.md: %w", err)
	}
	return conclusionProblemsText(text, p), nil
}

func conclusionProblemsText(text string, p *Protocol) []string {
	var out []string
	var missing []string
	for _, h := range ConclusionHeadings {
		if !headingPresent(text, h) {
			missing = append(missing, h)
		}
	}
	if len(missing) > 0 {
		out = append(out, "conclusion.md lacks the sections: "+strings.Join(missing, ", "))
	}
	var finals []string
	for _, m := range pycompat.Re(`(?m)^\s*-\s*\[([A-Za-z_]+)\]\s+(.+)$`).FindAllStringSubmatch(text, -1) {
		if completableOutcomes[m[1]] || m[1] == "blocked" {
			finals = append(finals, m[1])
		}
	}
	switch {
	case len(finals) != 1:
		out = append(out, fmt.Sprintf("conclusion.md must state exactly one outcome line - [proceed|do_not_proceed|defer] (found %d)", len(finals)))
	case !completableOutcomes[finals[0]]:
		out = append(out, "conclusion.md outcome is [blocked], which cannot complete the collaboration")
	}
	if pycompat.ContainsWordFold(text, "TBD", "TODO", "unresolved", "待定") {
		out = append(out, "conclusion.md still contains a placeholder (TBD, TODO, unresolved)")
	}
	if p != nil {
		if ref := p.PrimaryRef(); ref != "" && !strings.Contains(text, ref) {
			out = append(out, fmt.Sprintf("conclusion.md does not mention the primary deliverable %s", ref))
		}
	}
	return out
}

func headingPresent(text, heading string) bool {
	return pycompat.Re(`(?m)^##\s+` + regexp.QuoteMeta(heading) + `\s*$`).MatchString(text)
}

// sectionHasContent reports whether the first "## heading" section has
// non-blank text before the next "## " heading.
func sectionHasContent(text, heading string) bool {
	loc := pycompat.Re(`(?m)^##\s+` + regexp.QuoteMeta(heading) + `\s*$`).FindStringIndex(text)
	if loc == nil {
		return false
	}
	rest := text[loc[1]:]
	if next := pycompat.Re(`(?m)^##\s+`).FindStringIndex(rest); next != nil {
		rest = rest[:next[0]]
	}
	return pycompat.Strip(rest) != ""
}

// DeliverableStatus returns the "Status:" value of a deliverable, or "".
func DeliverableStatus(text string) string {
	m := pycompat.Re(`(?m)^Status:\s*(Draft|In Review|Frozen)\s*$`).FindStringSubmatch(text)
	if m == nil {
		return ""
	}
	return m[1]
}

// reviewHeadings maps the seq (ASCII decimal) of each
// "## <time> - <participant> - seq <n>" heading of review.md to the
// participant; later headings win.
func reviewHeadings(text string) map[string]string {
	out := map[string]string{}
	re := pycompat.Re(`^##\s+.+?\s+-\s+(.+?)\s+-\s+seq\s+(\p{Nd}+)\s*$`)
	for _, line := range pycompat.SplitLines(text) {
		if m := re.FindStringSubmatch(line); m != nil {
			out[pycompat.Decimal(m[2])] = pycompat.Strip(m[1])
		}
	}
	return out
}

// decisionProblems checks decisions.md: "### D<n>. title" headings with
// sequential ids, each with "- Decision:" and a "- Reflected in:" that
// names a declared deliverable.
func decisionProblems(text string, p *Protocol) []string {
	var out []string
	seen := map[string]bool{}
	headRe := pycompat.Re(`(?m)^###\s+(.+)$`)
	idRe := pycompat.Re(`^(D[0-9]+)\.\s+.+`)
	refs := []string{p.PrimaryRef()}
	for _, s := range p.Supporting {
		refs = append(refs, p.Ref(s.File))
	}
	for i, m := range headRe.FindAllStringSubmatch(text, -1) {
		heading := m[1]
		index := i + 1
		id := fmt.Sprintf("D%d", index)
		if idm := idRe.FindStringSubmatch(heading); idm == nil {
			out = append(out, fmt.Sprintf("decisions.md heading %q does not start with D<number>.", heading))
		} else {
			id = idm[1]
			if seen[id] {
				out = append(out, fmt.Sprintf("decisions.md repeats decision id %s", id))
			}
			seen[id] = true
			if id != fmt.Sprintf("D%d", index) {
				out = append(out, fmt.Sprintf("decisions.md decision ids must be sequential: heading %d is %s", index, id))
			}
		}
		body := ""
		block := pycompat.Re(`(?m)^###\s+` + regexp.QuoteMeta(heading) + `\s*$`)
		if loc := block.FindStringIndex(text); loc != nil {
			body = text[loc[1]:]
			if next := pycompat.Re(`(?m)^###\s+`).FindStringIndex(body); next != nil {
				body = body[:next[0]]
			}
		}
		if !strings.Contains(body, "- Decision:") {
			out = append(out, fmt.Sprintf("decisions.md %s has no \"- Decision:\" line", id))
		}
		if !strings.Contains(body, "- Reflected in:") {
			out = append(out, fmt.Sprintf("decisions.md %s has no \"- Reflected in:\" line", id))
		} else {
			found := false
			for _, ref := range refs {
				if strings.Contains(body, ref) {
					found = true
					break
				}
			}
			if !found {
				out = append(out, fmt.Sprintf("decisions.md %s is not reflected in a declared deliverable", id))
			}
		}
	}
	return out
}
