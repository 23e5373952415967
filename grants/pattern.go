package grants

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/bmatcuk/doublestar/v4"
)

// Glob semantics (doublestar/v4 syntax, documented here because grants are
// written by people):
//
//   - Patterns are relative to the collaboration folder, slash-separated.
//     A leading "/" is an error, and so is a ".." segment anywhere but at
//     the start; "." and empty segments ("./a", "a//b") are dropped.
//   - Leading ".." segments name what lies beside the folder, which only
//     a view rooted at the repository that holds it shows (external
//     deliverables): "../docs/report.md". Such a pattern matches only
//     names with as many leading ".." segments: "**" never reaches
//     beside the folder, and "../**" never inside it.
//   - "*" matches any run of characters inside one name, "?" one character,
//     "[...]" a class, "{a,b}" alternatives, and a whole "**" segment any
//     number of directories (zero included: "a/**" matches "a" itself).
//   - "*" and "**" match names that start with a dot: "*" matches ".env".
//     Hide dotfiles explicitly with a forbidden_read ".*" or "**/.*".
//   - A trailing slash means the directory and everything below it:
//     "deliverables/" is "deliverables/**".
//   - Matching is case-sensitive and works on UTF-8 names ("?" is one rune).
//   - may_read and may_write entries match exactly what they say: the
//     literal "deliverables" grants the directory entry, not its contents.
//     forbidden_read entries also cover everything below what they match:
//     "oracle" hides "oracle" and "oracle/x", as does "oracle/**".

// segKind classifies one segment of a compiled pattern.
type segKind uint8

const (
	segLiteral  segKind = iota // compared with ==
	segGlob                    // matched with doublestar inside one name
	segGlobstar                // "**": any number of names
)

type segment struct {
	text string
	kind segKind
}

// patKind selects the matching strategy of a compiled pattern.
type patKind uint8

const (
	patExact        patKind = iota // the path equals lit
	patUnder                       // the path is lit or below it (lit/**)
	patAll                         // "**": everything
	patAnyName                     // "**/n/**": some name of the path matches n
	patLastName                    // "**/n": the last name matches n
	patGeneral                     // doublestar match of glob, after a literal prefix check
	patGeneralUnder                // "stem/**": doublestar match of the stem on the path or an ancestor
)

// compiled is one brace-free alternative of a grant pattern, ready for
// allocation-free matching.
type compiled struct {
	kind   patKind
	lit    string      // patExact, patUnder: the literal path
	name   nameMatcher // patAnyName, patLastName
	glob   string      // patGeneral: the normalized pattern; patGeneralUnder: its stem
	litDir string      // patGeneral: literal leading directories ("" when none)
	segs   []segment
	rule   int // index of the rule text in matcherState.rules
	src    int // index of the entry in its grant list
	up     int // leading ".." segments, taken off the rest (see SplitUp)
}

// matches reports whether rel matches the pattern.
func (p *compiled) matches(rel string) bool {
	if rel == "" {
		// The folder root is always visible; only "**" grants it as such.
		return p.kind == patAll
	}
	switch p.kind {
	case patExact:
		return rel == p.lit
	case patUnder:
		return isSelfOrBelow(rel, p.lit)
	case patAll:
		return true
	case patAnyName:
		return p.anyName(rel)
	case patLastName:
		return p.name.matches(rel[strings.LastIndexByte(rel, '/')+1:])
	}
	if p.litDir != "" && !isSelfOrBelow(rel, p.litDir) {
		return false
	}
	if p.kind == patGeneral {
		return doublestar.MatchUnvalidated(p.glob, rel)
	}
	// "stem/**" is matched as "the stem matches rel or an ancestor":
	// doublestar itself misses the case where a "*" right before the
	// final "/**" matches nothing ("a*/**" and "a").
	for a := rel; len(a) >= len(p.litDir); {
		if doublestar.MatchUnvalidated(p.glob, a) {
			return true
		}
		i := strings.LastIndexByte(a, '/')
		if i < 0 {
			return false
		}
		a = a[:i]
	}
	return false
}

// leadsBelow reports whether some path strictly below the directory rel
// could match the pattern, which makes rel visible as a way to reach it.
func (p *compiled) leadsBelow(rel string) bool {
	i := 0
	for start := 0; ; {
		end := strings.IndexByte(rel[start:], '/')
		var name string
		if end < 0 {
			name = rel[start:]
		} else {
			name = rel[start : start+end]
		}
		if i >= len(p.segs) {
			return false
		}
		s := &p.segs[i]
		switch s.kind {
		case segGlobstar:
			return true
		case segLiteral:
			if s.text != name {
				return false
			}
		default:
			if !doublestar.MatchUnvalidated(s.text, name) {
				return false
			}
		}
		i++
		if end < 0 {
			break
		}
		start += end + 1
	}
	return i < len(p.segs)
}

// anyName reports whether one of the slash-separated names of rel
// matches p.name.
func (p *compiled) anyName(rel string) bool {
	for {
		i := strings.IndexByte(rel, '/')
		if i < 0 {
			return p.name.matches(rel)
		}
		if p.name.matches(rel[:i]) {
			return true
		}
		rel = rel[i+1:]
	}
}

// nameMatcher matches one name (no slash): literally, by suffix ("*.key")
// or with doublestar.
type nameMatcher struct {
	kind segKind // segLiteral, segGlob; segGlobstar stands for "suffix"
	text string
}

func (n *nameMatcher) matches(name string) bool {
	switch n.kind {
	case segLiteral:
		return name == n.text
	case segGlobstar:
		return strings.HasSuffix(name, n.text)
	}
	return doublestar.MatchUnvalidated(n.text, name)
}

// isSelfOrBelow reports whether rel is dir or a path below it.
func isSelfOrBelow(rel, dir string) bool {
	if len(rel) == len(dir) {
		return rel == dir
	}
	return len(rel) > len(dir) && rel[len(dir)] == '/' && rel[:len(dir)] == dir
}

// errPatternEmpty and friends are wrapped with the field name by callers.
var (
	errPatternEmpty = errors.New("empty pattern")
	errAbsolute     = errors.New("absolute path: patterns are relative to the collaboration folder")
	errUpInBraces   = errors.New(`a ".." segment inside braces: write the leading ".." segments before them ("../{a,b}/**")`)
	errEscapes      = errors.New(`escapes the collaboration folder (".." segment after a name)`)
	errRootOnly     = errors.New(`names the folder root itself; use "**" for everything`)
)

// maxAlternatives bounds brace expansion so that a hostile grant cannot
// make compilation explode.
const maxAlternatives = 1024

// compilePattern validates a grant pattern and returns its brace-free,
// normalized alternatives. closeBelow extends each alternative to the
// paths below what it matches (used for forbidden_read). An
// alternative's leading ".." segments are counted in its up and taken
// off what it matches.
func compilePattern(pat string, closeBelow bool, rule int) ([]compiled, error) {
	if pat == "" {
		return nil, errPatternEmpty
	}
	if !utf8.ValidString(pat) {
		return nil, errors.New("not valid UTF-8")
	}
	if !doublestar.ValidatePattern(pat) {
		return nil, fmt.Errorf("invalid glob syntax")
	}
	alts, err := expandBraces(pat, 0)
	if err != nil {
		return nil, err
	}
	literalUp, _ := SplitUp(pat)
	out := make([]compiled, 0, len(alts))
	for _, alt := range alts {
		norm, err := normalizePattern(alt)
		if err != nil {
			return nil, err
		}
		up, rest := SplitUp(norm)
		if up != literalUp {
			// "{..,x}/f" would reach beside the folder through one
			// alternative only: what lies beside is named by leading
			// ".." segments written as such, so a reader of the grant
			// sees it.
			return nil, errUpInBraces
		}
		if closeBelow && rest != "**" && !strings.HasSuffix(rest, "/**") {
			rest += "/**"
		}
		c := classify(rest, rule)
		c.up = up
		out = append(out, c)
	}
	return out, nil
}

// normalizePattern checks one brace-free alternative for escapes from the
// folder and applies the trailing-slash rule.
func normalizePattern(p string) (string, error) {
	if strings.HasPrefix(p, "/") {
		return "", errAbsolute
	}
	if err := checkSlashes(p); err != nil {
		return "", err
	}
	dirAll := strings.HasSuffix(p, "/")
	parts := strings.Split(p, "/")
	kept := parts[:0]
	for _, s := range parts {
		switch {
		case s == "" || s == ".":
			continue
		case s == ".." && len(kept) > 0 && kept[len(kept)-1] != "..":
			return "", errEscapes
		case s == "..":
		case s == "**" && len(kept) > 0 && kept[len(kept)-1] == "**":
			continue // "**/**" is "**"
		case s != "**":
			s = collapseStars(s)
		}
		kept = append(kept, s)
	}
	if len(kept) == 0 || kept[len(kept)-1] == ".." {
		return "", errRootOnly
	}
	if dirAll && kept[len(kept)-1] != "**" {
		kept = append(kept, "**")
	}
	return strings.Join(kept, "/"), nil
}

// SplitUp takes the leading ".." segments off a clean name or pattern
// and counts them: "../../docs/a" is 2 and "docs/a", ".." is 1 and "".
func SplitUp(rel string) (int, string) {
	up := 0
	for len(rel) >= 2 && rel[0] == '.' && rel[1] == '.' && (len(rel) == 2 || rel[2] == '/') {
		up++
		if len(rel) == 2 {
			return up, ""
		}
		rel = rel[3:]
	}
	return up, rel
}

// collapseStars turns runs of "*" inside a name into one "*": they mean
// the same, and doublestar fails to let "a**" match "a".
func collapseStars(seg string) string {
	if !strings.Contains(seg, "**") {
		return seg
	}
	var b strings.Builder
	prevStar := false
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		switch {
		case c == '*':
			if !prevStar {
				b.WriteByte(c)
			}
			prevStar = true
			continue
		case c == '\\' && i+1 < len(seg):
			b.WriteString(seg[i : i+2])
			i++
		case c == '[':
			j := min(skipClass(seg, i), len(seg)-1)
			b.WriteString(seg[i : j+1])
			i = j
		default:
			b.WriteByte(c)
		}
		prevStar = false
	}
	return b.String()
}

// checkSlashes refuses a "/" inside a character class or after a
// backslash: segments are split on "/", so such a pattern could not mean
// what it says.
func checkSlashes(p string) error {
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '\\':
			if i+1 < len(p) && p[i+1] == '/' {
				return errors.New(`an escaped "/" is not supported`)
			}
			i++
		case '[':
			for i++; i < len(p) && p[i] != ']'; i++ {
				if p[i] == '\\' {
					i++
				} else if p[i] == '/' {
					return errors.New(`a "/" inside a character class is not supported`)
				}
			}
		}
	}
	return nil
}

// classify picks the cheapest strategy for a normalized pattern.
func classify(norm string, rule int) compiled {
	parts := strings.Split(norm, "/")
	segs := make([]segment, len(parts))
	for i, s := range parts {
		switch {
		case s == "**":
			segs[i] = segment{text: s, kind: segGlobstar}
		case isLiteral(s):
			segs[i] = segment{text: s, kind: segLiteral}
		default:
			segs[i] = segment{text: s, kind: segGlob}
		}
	}
	if norm == "**" {
		return compiled{kind: patAll, glob: norm, segs: segs, rule: rule}
	}
	if fast, ok := classifyAnywhere(segs); ok {
		fast.segs, fast.rule, fast.glob = segs, rule, norm
		return fast
	}
	c := compiled{kind: patGeneral, glob: norm, segs: segs, rule: rule}
	stem := parts
	if segs[len(segs)-1].kind == segGlobstar {
		stem = parts[:len(parts)-1]
		c.kind = patGeneralUnder
		c.glob = strings.Join(stem, "/")
	}
	nlit := 0
	for nlit < len(stem) && segs[nlit].kind == segLiteral {
		nlit++
	}
	c.litDir = strings.Join(stem[:nlit], "/")
	if nlit == len(stem) {
		if c.kind == patGeneralUnder {
			c.kind, c.lit = patUnder, c.glob
		} else {
			c.kind, c.lit = patExact, norm
		}
		c.litDir = ""
	}
	return c
}

// classifyAnywhere recognizes the patterns that match a name at any depth
// ("**/.git", "**/*.key", and forbidden "**/.git/**"), which doublestar
// would otherwise answer by backtracking over every name of the path.
func classifyAnywhere(segs []segment) (compiled, bool) {
	if len(segs) < 2 || len(segs) > 3 || segs[0].kind != segGlobstar || segs[1].kind == segGlobstar {
		return compiled{}, false
	}
	seg := segs[1]
	n := nameMatcher{kind: seg.kind, text: seg.text}
	if seg.kind == segGlob && len(seg.text) > 1 && seg.text[0] == '*' && isLiteral(seg.text[1:]) {
		n = nameMatcher{kind: segGlobstar, text: seg.text[1:]}
	}
	switch {
	case len(segs) == 2:
		return compiled{kind: patLastName, name: n}, true
	case segs[2].kind == segGlobstar:
		return compiled{kind: patAnyName, name: n}, true
	}
	return compiled{}, false
}

// isLiteral reports whether a segment contains no glob syntax at all.
func isLiteral(s string) bool {
	return !strings.ContainsAny(s, `*?[]{}\`)
}

// expandBraces turns "{a,b}" alternatives into separate patterns, so that
// matching never builds strings (doublestar concatenates at match time).
func expandBraces(p string, depth int) ([]string, error) {
	open := nextSyntax(p, 0, "{")
	if open < 0 {
		return []string{p}, nil
	}
	if depth > 32 {
		return nil, errors.New("too many brace groups")
	}
	alts, closeAt := braceAlternatives(p, open)
	if closeAt < 0 {
		return nil, errors.New("invalid glob syntax: unclosed {")
	}
	var out []string
	for _, a := range alts {
		more, err := expandBraces(p[:open]+a+p[closeAt+1:], depth+1)
		if err != nil {
			return nil, err
		}
		out = append(out, more...)
		if len(out) > maxAlternatives {
			return nil, fmt.Errorf("more than %d brace alternatives", maxAlternatives)
		}
	}
	return out, nil
}

// braceAlternatives splits the brace group opened at open into its
// top-level alternatives, and returns them with the index of the "}"
// closing the group, or -1 when nothing closes it.
func braceAlternatives(p string, open int) ([]string, int) {
	var alts []string
	nest, from := 0, open+1
	for i := nextSyntax(p, open+1, "{},"); i >= 0; i = nextSyntax(p, i+1, "{},") {
		switch p[i] {
		case '{':
			nest++
		case '}':
			if nest == 0 {
				return append(alts, p[from:i]), i
			}
			nest--
		case ',':
			if nest == 0 {
				alts = append(alts, p[from:i])
				from = i + 1
			}
		}
	}
	return nil, -1
}

// nextSyntax returns the index of the first byte of p at or after i that
// is one of chars and neither escaped nor inside a character class, or
// -1.
func nextSyntax(p string, i int, chars string) int {
	for ; i < len(p); i++ {
		switch c := p[i]; {
		case c == '\\':
			i++
		case c == '[':
			i = skipClass(p, i)
		case strings.IndexByte(chars, c) >= 0:
			return i
		}
	}
	return -1
}

// skipClass returns the index of the "]" closing the class opened at i.
func skipClass(p string, i int) int {
	for i++; i < len(p); i++ {
		if p[i] == '\\' {
			i++
		} else if p[i] == ']' {
			return i
		}
	}
	return len(p)
}
