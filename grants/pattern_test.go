package grants

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/bmatcuk/doublestar/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The compiled fast paths must agree with doublestar on every pattern the
// normalization leaves unchanged. These tests compare them on random
// patterns and paths drawn from small alphabets that exercise dotfiles,
// unicode, classes, braces and globstars.

var (
	diffNames = []string{"a", "b", "c", "ab", ".x", "é", "x.md", "b.md"}
	diffSegs  = []string{"a", "b", "ab", ".x", "é", "x.md", "*", "?", "a*", "*b", "*.md", "[ab]", "[!a]*", "{a,b}", "{a,b/c}", "**", "?.md"}
)

func randomPattern(r *rand.Rand, maxSegs int) string {
	n := 1 + r.IntN(maxSegs)
	segs := make([]string, n)
	for i := range segs {
		segs[i] = diffSegs[r.IntN(len(diffSegs))]
	}
	return strings.Join(segs, "/")
}

// allPaths lists every path of 1..depth names from diffNames.
func allPaths(depth int) []string {
	var out, level []string
	level = []string{""}
	for d := 0; d < depth; d++ {
		var next []string
		for _, p := range level {
			for _, n := range diffNames {
				if p == "" {
					next = append(next, n)
				} else {
					next = append(next, p+"/"+n)
				}
			}
		}
		out = append(out, next...)
		level = next
	}
	return out
}

// refMatch is the documented meaning of a pattern in terms of doublestar:
// a final "/**" matches the stem's matches and everything below them.
func refMatch(pat, rel string) bool {
	if ok, _ := doublestar.Match(pat, rel); ok {
		return true
	}
	stem, ok := strings.CutSuffix(pat, "/**")
	if !ok {
		return false
	}
	for a := rel; ; {
		if ok, _ := doublestar.Match(stem, a); ok {
			return true
		}
		i := strings.LastIndexByte(a, '/')
		if i < 0 {
			return false
		}
		a = a[:i]
	}
}

func anyMatches(cs []compiled, rel string) bool {
	for i := range cs {
		if cs[i].matches(rel) {
			return true
		}
	}
	return false
}

func anyLeads(cs []compiled, rel string) bool {
	for i := range cs {
		if cs[i].leadsBelow(rel) {
			return true
		}
	}
	return false
}

func TestCompiledAgreesWithDoublestar(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	paths := allPaths(3)
	for n := 0; n < 400; n++ {
		pat := randomPattern(r, 4)
		cs, err := compilePattern(pat, false, 0)
		require.NoError(t, err, pat)
		for _, p := range paths {
			want := refMatch(pat, p)
			if got := anyMatches(cs, p); got != want {
				t.Fatalf("pattern %q path %q: compiled %v, doublestar %v", pat, p, got, want)
			}
		}
	}
}

func TestForbiddenCoversDescendants(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	paths := allPaths(3)
	for n := 0; n < 300; n++ {
		pat := randomPattern(r, 3)
		cs, err := compilePattern(pat, true, 0)
		require.NoError(t, err, pat)
		for _, p := range paths {
			want := false
			for a := p; ; {
				if refMatch(pat, a) {
					want = true
					break
				}
				i := strings.LastIndexByte(a, '/')
				if i < 0 {
					break
				}
				a = a[:i]
			}
			if got := anyMatches(cs, p); got != want {
				t.Fatalf("forbidden %q path %q: compiled %v, want %v", pat, p, got, want)
			}
		}
	}
}

// TestLeadsBelowIsExact checks that a directory is shown as a way to a
// match exactly when some path below it matches (with patterns of at most
// three names, a witness of at most three more names always exists in
// the alphabet).
func TestLeadsBelowIsExact(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	rels := allPaths(2)
	suffixes := allPaths(3)
	for n := 0; n < 150; n++ {
		pat := randomPattern(r, 3)
		if strings.Contains(pat, "{a,b/c}") {
			continue // adds a name: the witness could need four
		}
		cs, err := compilePattern(pat, false, 0)
		require.NoError(t, err, pat)
		for _, rel := range rels {
			want := false
			for _, s := range suffixes {
				if refMatch(pat, rel+"/"+s) {
					want = true
					break
				}
			}
			if got := anyLeads(cs, rel); got != want {
				t.Fatalf("pattern %q dir %q: leadsBelow %v, want %v", pat, rel, got, want)
			}
		}
	}
}

func TestCompilePatternErrors(t *testing.T) {
	tests := []struct{ pat, msg string }{
		{"", "empty"},
		{"/etc/passwd", "absolute"},
		{"a/../x", "escapes"},
		{"a/../../x", "escapes"},
		{"{a,b/../c}", "escapes"},
		{"{..,x}/oracle.txt", "inside braces"},
		{"{../a,../b}/**", "inside braces"},
		{"..{,}/x", "inside braces"},
		{"../{..,x}/y", "inside braces"},
		{"..", "folder root"},
		{"../", "folder root"},
		{"{/a,b}", "absolute"},
		{"[", "invalid glob"},
		{"a/[]", "invalid glob"},
		{"{a,b", "invalid glob"},
		{"a}", "invalid glob"},
		{"x\\", "invalid glob"},
		{".", "folder root"},
		{"./", "folder root"},
		{"a[/]b", "character class"},
		{`a\/b`, "escaped"},
	}
	for _, tt := range tests {
		_, err := compilePattern(tt.pat, false, 0)
		if assert.Error(t, err, tt.pat) {
			assert.Contains(t, err.Error(), tt.msg, tt.pat)
		}
	}
}

// TestLeadingUpsBeforeBraces: leading ".." segments written before the
// braces compile; the same spelled inside them does not (see above).
func TestLeadingUpsBeforeBraces(t *testing.T) {
	for _, pat := range []string{"../{a,b}/**", "../../{x,y}.md", "{a,b}/c"} {
		_, err := compilePattern(pat, false, 0)
		assert.NoError(t, err, pat)
	}
}

func TestBraceExpansion(t *testing.T) {
	got, err := expandBraces("{a,b{c,d}}/{x,[{]}", 0)
	require.NoError(t, err)
	assert.Equal(t, []string{"a/x", "a/[{]", "bc/x", "bc/[{]", "bd/x", "bd/[{]"}, got)
	_, err = expandBraces(strings.Repeat("{a,b,c}", 8), 0)
	assert.ErrorContains(t, err, "alternatives")
}

func TestNormalizeTrailingSlash(t *testing.T) {
	for in, want := range map[string]string{
		"dir/":     "dir/**",
		"dir/**/":  "dir/**",
		"./a//b/":  "a/b/**",
		"a/./b.md": "a/b.md",
		"**/":      "**",
		"a***/**":  "a*/**",
		"x/**b**":  "x/*b*",
		`a\**`:     `a\**`,
		"[*]**":    "[*]*",
	} {
		got, err := normalizePattern(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
}
