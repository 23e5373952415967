package grants

import (
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The prompt must never name what a grant forbids: naming the oracle is
// already a leak. Redaction works on "forbidden names", the literal runs
// of the forbidden_read patterns ("oracle/**" gives "oracle",
// "**/private-trace-*.log" gives "private-trace-" and ".log"), compared
// without regard to case. Leading directories that the grant shows anyway
// are not secret and are kept ("deliverables/drafts/**" with may_read
// "deliverables/**" withholds "drafts", not "deliverables"). A run counts
// when it has at least two runes and a letter or digit: single characters
// and punctuation would blank out the whole prompt. Over-redaction is the
// accepted price.

// withheldMark replaces a forbidden name inside free text. It holds no
// letter or digit, so it can never contain a forbidden name itself.
const withheldMark = "…"

// withheldEntry replaces a whole path entry that contains a forbidden name.
const withheldEntry = "(an entry withheld by the coordinator)"

type redactor struct {
	tokens []string // longest first, so that a longer name is removed whole
}

func newRedactor(g *Grant) *redactor {
	seen := map[string]bool{}
	var toks []string
	add := func(t string) {
		k := strings.ToLower(t)
		if utf8.RuneCountInString(t) < 2 || !strings.ContainsFunc(t, isAlnumRune) || seen[k] {
			return
		}
		seen[k] = true
		toks = append(toks, t)
	}
	var m *Matcher
	if st, problems := buildState(g); len(problems) == 0 {
		m = &Matcher{st: st}
	}
	for _, p := range g.ForbiddenRead {
		add(p)
		add(strings.TrimSuffix(p, "/"))
		for _, run := range secretRuns(p, m) {
			add(run)
		}
	}
	sort.Slice(toks, func(i, j int) bool {
		if len(toks[i]) != len(toks[j]) {
			return len(toks[i]) > len(toks[j])
		}
		return toks[i] < toks[j]
	})
	return &redactor{tokens: toks}
}

// secretRuns returns the literal runs of a forbidden pattern, leaving out
// its leading literal directories that m shows anyway. Without a matcher
// (a grant that does not compile) every run is secret.
func secretRuns(p string, m *Matcher) []string {
	alts, err := expandBraces(p, 0)
	if err != nil || m == nil {
		return literalRuns(p)
	}
	var runs []string
	for _, alt := range alts {
		segs := strings.Split(alt, "/")
		prefix := ""
		i := 0
		for ; i < len(segs); i++ {
			s := segs[i]
			if s == "" || s == "." {
				continue
			}
			if !isLiteral(s) {
				break
			}
			next := s
			if prefix != "" {
				next = prefix + "/" + s
			}
			if !m.visible(next) {
				break
			}
			prefix = next
		}
		runs = append(runs, literalRuns(strings.Join(segs[i:], "/"))...)
	}
	return runs
}

func isAlnumRune(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }

// literalRuns splits a glob on separators and syntax, skipping the
// content of character classes.
func literalRuns(p string) []string {
	var runs []string
	start := 0
	flush := func(end int) {
		if end > start {
			runs = append(runs, p[start:end])
		}
	}
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '/', '*', '?', '{', '}', ',', ']', '\\':
			flush(i)
			start = i + 1
		case '[':
			flush(i)
			i = skipClass(p, i)
			start = i + 1
		}
	}
	flush(len(p))
	return runs
}

// mentions reports whether s contains a forbidden name.
func (r *redactor) mentions(s string) bool {
	for _, t := range r.tokens {
		if i, _ := foldIndex(s, t); i >= 0 {
			return true
		}
	}
	return false
}

// text replaces every forbidden name in s. It loops until nothing is left,
// because a replacement could join two fragments into a new name; each
// round removes letters or digits and adds none, so it terminates.
func (r *redactor) text(s string) string {
	for {
		changed := false
		for _, t := range r.tokens {
			for {
				i, j := foldIndex(s, t)
				if i < 0 {
					break
				}
				s = s[:i] + withheldMark + s[j:]
				changed = true
			}
		}
		if !changed {
			return s
		}
	}
}

// foldIndex finds tok in s under simple Unicode case folding and returns
// the byte range of the match, or -1, -1.
func foldIndex(s, tok string) (int, int) {
	for i := 0; i < len(s); {
		if n, ok := foldPrefix(s[i:], tok); ok {
			return i, i + n
		}
		_, w := utf8.DecodeRuneInString(s[i:])
		i += w
	}
	return -1, -1
}

func foldPrefix(s, tok string) (int, bool) {
	n := 0
	for _, tr := range tok {
		if n >= len(s) {
			return 0, false
		}
		sr, w := utf8.DecodeRuneInString(s[n:])
		if !equalFoldRune(sr, tr) {
			return 0, false
		}
		n += w
	}
	return n, true
}

func equalFoldRune(a, b rune) bool {
	if a == b {
		return true
	}
	for r := unicode.SimpleFold(a); r != a; r = unicode.SimpleFold(r) {
		if r == b {
			return true
		}
	}
	return false
}
