package grants

import (
	"fmt"
	"path"
	"strings"
)

// Rule texts used in Decision.Rule besides the grant's own entries.
const (
	RuleRoot   = "folder root"
	RuleRunDir = "run directory"
	// RuleGit hides a repository's .git from a grant that does not name
	// it: it holds every committed file, past and present.
	RuleGit       = ".git is shown only to a grant that names it"
	RuleRevoked   = "grant revoked"
	RuleNoMatch   = "no rule matches"
	ruleAncestorF = "%s (ancestor of a match)"
)

// matcherState is the compiled form of a grant. It is never modified
// after compile, which is what makes a Matcher safe for concurrent use.
type matcherState struct {
	revoked bool
	// namesGit is set when a may_read or may_write pattern names a
	// ".git" component: only then is a repository's .git shown (it holds
	// every committed file, past and present, whatever else is hidden).
	namesGit bool
	hidden   []string
	forbid   []compiled
	write    []compiled
	read     []compiled
	rules    []string // rule texts, indexed by compiled.rule
	// beside holds, at index k-1, the patterns with k leading ".."
	// segments, compiled from the rest: a name with k leading ".."
	// segments is judged by that state alone (see at).
	beside []*matcherState
}

// level returns the state of the patterns with up leading ".."
// segments, making it (and those between) as needed.
func (st *matcherState) level(up int) *matcherState {
	for len(st.beside) < up {
		st.beside = append(st.beside, &matcherState{})
	}
	return st.beside[up-1]
}

// at returns the state that judges rel and the name it judges: rel
// itself in the folder, and beside it (leading ".." segments) the state
// of its level with those segments taken off. A name made only of ".."
// segments, an ancestor of the folder, is then "": always visible, on
// the way to the folder.
func (m *Matcher) at(rel string) (*matcherState, string) {
	st := m.st
	if st == nil || len(rel) < 2 || rel[0] != '.' || rel[1] != '.' || (len(rel) > 2 && rel[2] != '/') {
		return st, rel
	}
	if st.revoked {
		return st, rel
	}
	up, rest := SplitUp(rel)
	if up > len(st.beside) {
		// No pattern reaches this far beside the folder: only the
		// way to the folder is visible.
		if rest == "" {
			return &nothingBeside, ""
		}
		return &nothingBeside, rel
	}
	return st.beside[up-1], rest
}

// nothingBeside judges names beside the folder that no pattern reaches.
var nothingBeside = matcherState{}

func compileMatcher(g *Grant, opts MatcherOptions) (*Matcher, error) {
	if g == nil {
		return nil, fmt.Errorf("compile: nil grant")
	}
	st, problems := buildState(g)
	if len(problems) > 0 {
		return nil, fmt.Errorf("compile: %w", &ValidationError{GrantID: g.GrantID, Problems: problems})
	}
	st.revoked = g.Revoked
	st.shareLevels()
	for _, h := range opts.Hidden {
		clean, err := cleanRel(h)
		if err != nil {
			return nil, fmt.Errorf("compile %s: hidden directory %q: %w", g.GrantID, h, err)
		}
		if clean == "" {
			return nil, fmt.Errorf("compile %s: hidden directory %q is the folder root", g.GrantID, h)
		}
		st.hidden = append(st.hidden, clean)
	}
	return &Matcher{st: st}, nil
}

// buildState compiles the three glob lists of g, reporting every pattern
// that does not compile. Patterns with leading ".." segments go to the
// state of their level (matcherState.beside). Revocation and hidden
// directories are left to the caller.
func buildState(g *Grant) (*matcherState, []Problem) {
	st := &matcherState{}
	var problems []Problem
	lists := []struct {
		field      string
		pats       []string
		closeBelow bool
		dst        func(*matcherState) *[]compiled
	}{
		{"forbidden_read", g.ForbiddenRead, true, func(s *matcherState) *[]compiled { return &s.forbid }},
		{"may_write", g.MayWrite, false, func(s *matcherState) *[]compiled { return &s.write }},
		{"may_read", g.MayRead, false, func(s *matcherState) *[]compiled { return &s.read }},
	}
	for _, l := range lists {
		for i, p := range l.pats {
			st.rules = append(st.rules, fmt.Sprintf("%s %q", l.field, p))
			cs, err := compilePattern(p, l.closeBelow, len(st.rules)-1)
			if err != nil {
				problems = append(problems, Problem{Field: fmt.Sprintf("%s[%d]", l.field, i), Message: fmt.Sprintf("%q: %v", p, err)})
				continue
			}
			for _, c := range cs {
				c.src = i
				lv := st
				if c.up > 0 {
					lv = st.level(c.up)
				}
				dst := l.dst(lv)
				*dst = append(*dst, c)
			}
		}
	}
	for _, p := range append(append([]string(nil), g.MayRead...), g.MayWrite...) {
		if hasGitComponent(strings.TrimPrefix(p, "/")) {
			st.namesGit = true
		}
	}
	st.shareLevels()
	return st, problems
}

// shareLevels gives the states beside the folder what the grant as a
// whole decides: revocation, .git and the rule texts.
func (st *matcherState) shareLevels() {
	for _, lv := range st.beside {
		lv.revoked, lv.namesGit, lv.rules = st.revoked, st.namesGit, st.rules
	}
}

// cleanRel checks a folder-relative path (not a pattern) and returns it in
// canonical form: no leading or trailing slash, no "." segments.
func cleanRel(p string) (string, error) {
	if strings.HasPrefix(p, "/") {
		return "", errAbsolute
	}
	for _, s := range strings.Split(p, "/") {
		if s == ".." {
			return "", errEscapes
		}
	}
	c := path.Clean("./" + p)
	if c == "." {
		return "", nil
	}
	return c, nil
}

// cleanUpRel is cleanRel for a path that may start with ".." segments
// (a directory beside the folder); a ".." after a name is still refused.
func cleanUpRel(p string) (string, error) {
	up := ""
	for p == ".." || strings.HasPrefix(p, "../") {
		up += "../"
		p = strings.TrimPrefix(strings.TrimPrefix(p, ".."), "/")
	}
	rel, err := cleanRel(p)
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(up+rel, "/"), nil
}

// first returns the index of the first pattern in ps matching rel, or -1.
func first(ps []compiled, rel string) int {
	for i := range ps {
		if ps[i].matches(rel) {
			return i
		}
	}
	return -1
}

func firstLeading(ps []compiled, rel string) int {
	for i := range ps {
		if ps[i].leadsBelow(rel) {
			return i
		}
	}
	return -1
}

func (st *matcherState) isHidden(rel string) bool {
	for _, h := range st.hidden {
		if isSelfOrBelow(rel, h) {
			return true
		}
	}
	return false
}

// blocked covers what every question answers "no" to first: revocation,
// the run directory and forbidden_read.
func (st *matcherState) blocked(rel string) bool {
	return st.revoked || st.isHidden(rel) || first(st.forbid, rel) >= 0 || (!st.namesGit && hasGitComponent(rel))
}

// GitDir is the name of a git repository's directory, shown only to a
// grant that names it (see matcherState.namesGit).
const GitDir = ".git"

// hasGitComponent reports whether a component of rel is ".git".
func hasGitComponent(rel string) bool {
	for rest := rel; rest != ""; {
		c, after, _ := strings.Cut(rest, "/")
		if strings.EqualFold(c, GitDir) {
			// .GIT too: a case-insensitive file system leads it to .git.
			return true
		}
		rest = after
	}
	return false
}

// ConflictMark is what the document sync of several hosts puts between a
// file's name and the rest of the name of a conflict copy of it
// ("notes/a.md.conflict-HOST-TAG").
const ConflictMark = ".conflict-"

// conflictOriginal returns the file a conflict copy at rel keeps a
// version of. A copy holds that file's content, so it is shown only to
// a grant that may read the file itself: a forbidden file's copy stays
// forbidden, whatever the patterns say of the copy's own name.
//
// The sync cuts the file's part of a copy's name when the whole would not
// fit in a name (255 bytes): a copy whose name is that long may keep a
// version of a file this one cannot name, so it gives "" (hidden).
func conflictOriginal(rel string) (string, bool) {
	i := strings.LastIndex(rel, ConflictMark)
	slash := strings.LastIndexByte(rel, '/')
	if i <= 0 || slash >= i || rel[i-1] == '/' {
		return "", false
	}
	if len(rel)-slash-1 >= maxNameBytes-4 {
		return "", true
	}
	return rel[:i], true
}

// maxNameBytes is the longest file name Linux filesystems take.
const maxNameBytes = 255

// copyHidden reports whether rel is a conflict copy of a file the grant
// may not read.
func (m *Matcher) copyHidden(rel string) bool {
	orig, ok := conflictOriginal(rel)
	return ok && (orig == "" || !m.readable(orig))
}

func (m *Matcher) visible(name string) bool {
	st, rel := m.at(name)
	if rel == "" {
		return true
	}
	if st == nil || st.blocked(rel) || m.copyHidden(name) {
		return false
	}
	return first(st.write, rel) >= 0 || first(st.read, rel) >= 0 ||
		firstLeading(st.write, rel) >= 0 || firstLeading(st.read, rel) >= 0
}

// VisibleEntry is Visible for an entry whose type is known: a directory is
// visible as Visible says, anything else only when it is readable (nothing
// can lie below a file, so the way-to-a-match rule does not apply). It
// does not allocate.
func (m *Matcher) VisibleEntry(rel string, isDir bool) bool {
	if isDir {
		return m.visible(rel)
	}
	return rel == "" || m.readable(rel)
}

func (m *Matcher) readable(name string) bool {
	st, rel := m.at(name)
	if st == nil || st.blocked(rel) || m.copyHidden(name) {
		return false
	}
	return first(st.write, rel) >= 0 || first(st.read, rel) >= 0
}

func (m *Matcher) writable(name string) bool {
	st, rel := m.at(name)
	if st == nil || st.blocked(rel) || m.copyHidden(name) {
		return false
	}
	return first(st.write, rel) >= 0
}

func (m *Matcher) explain(name string) Decision {
	d := Decision{
		Visible:  m.visible(name),
		Readable: m.readable(name),
		Writable: m.writable(name),
	}
	st, rel := m.at(name)
	switch {
	case st == nil:
		d.Rule = RuleNoMatch
	case st.revoked:
		d.Rule = RuleRevoked
	case rel == "":
		d.Rule = RuleRoot
	case st.isHidden(rel):
		d.Rule = RuleRunDir
	case !st.namesGit && hasGitComponent(rel) && first(st.forbid, rel) < 0:
		d.Rule = RuleGit
	case m.copyHidden(name):
		orig, _ := conflictOriginal(name)
		d.Rule = fmt.Sprintf("conflict copy of %s, which the grant does not let read", orig)
	default:
		d.Rule = st.decidingRule(rel)
	}
	return d
}

// decidingRule names the entry that decided rel, in the order the
// questions are answered: forbidden first, then write, read, and finally
// the directories that only lead to something granted.
func (st *matcherState) decidingRule(rel string) string {
	if i := first(st.forbid, rel); i >= 0 {
		return st.rules[st.forbid[i].rule]
	}
	if i := first(st.write, rel); i >= 0 {
		return st.rules[st.write[i].rule]
	}
	if i := first(st.read, rel); i >= 0 {
		return st.rules[st.read[i].rule]
	}
	if i := firstLeading(st.write, rel); i >= 0 {
		return fmt.Sprintf(ruleAncestorF, st.rules[st.write[i].rule])
	}
	if i := firstLeading(st.read, rel); i >= 0 {
		return fmt.Sprintf(ruleAncestorF, st.rules[st.read[i].rule])
	}
	return RuleNoMatch
}

// overlaps reports whether a and b are the same path or one lies below
// the other ("" is the folder root, above everything).
func overlaps(a, b string) bool {
	return a == "" || b == "" || isSelfOrBelow(a, b) || isSelfOrBelow(b, a)
}

// mayMatchAtOrBelow reports, conservatively, whether the pattern could
// match dir or some path below it.
func (p *compiled) mayMatchAtOrBelow(dir string) bool {
	switch p.kind {
	case patExact:
		return dir == "" || isSelfOrBelow(p.lit, dir)
	case patUnder:
		return overlaps(p.lit, dir)
	case patGeneral, patGeneralUnder:
		return p.litDir == "" || overlaps(p.litDir, dir)
	}
	return true // patterns that match a name at any depth
}

// showsAll reports whether every path at or below dir is readable: a
// may_read or may_write "**" or "<ancestor>/**" covers it, and nothing
// forbidden or hidden can lie there. A view then has nothing to hide in
// the directory's own attributes. The answer is conservative: false
// means "may hide something".
func (m *Matcher) showsAll(name string) bool {
	st, dir := m.at(name)
	if st == nil || st.revoked || (dir == "" && name != "") {
		// An ancestor of the folder holds the folder, with its own
		// rules.
		return false
	}
	covered := false
	for _, list := range [][]compiled{st.read, st.write} {
		for i := range list {
			c := &list[i]
			if c.kind == patAll || (c.kind == patUnder && isSelfOrBelow(dir, c.lit)) {
				covered = true
			}
		}
	}
	if !covered {
		return false
	}
	for i := range st.forbid {
		if st.forbid[i].mayMatchAtOrBelow(dir) {
			return false
		}
	}
	for _, h := range st.hidden {
		if overlaps(h, dir) {
			return false
		}
	}
	return true
}
