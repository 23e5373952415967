package grants

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzCompilePattern feeds arbitrary patterns and paths to the compiler
// and matcher: bad input must give an error, never a panic, and a pattern
// that normalization leaves alone must match as doublestar does.
func FuzzCompilePattern(f *testing.F) {
	for _, s := range []string{"a/**", "**/*.md", "{a,b/c}/**", "[!a]*", "x\\*", "a/../b", "{a,{b,c}}", "**/.git/**", "é?/*"} {
		f.Add(s, "a/b.md", false)
	}
	f.Fuzz(func(t *testing.T, pat, rel string, closeBelow bool) {
		cs, err := compilePattern(pat, closeBelow, 0)
		if err != nil {
			return
		}
		rel = strings.Trim(rel, "/")
		got := anyMatches(cs, rel)
		anyLeads(cs, rel)
		if closeBelow || rel == "" || !utf8.ValidString(rel) || strings.HasSuffix(pat, "/") || strings.Contains(pat, "{") {
			return
		}
		for _, s := range strings.Split(pat, "/") {
			if s == "" || s == "." || (s != "**" && strings.Contains(s, "**")) {
				return // normalized on purpose: "." dropped, "a**" is "a*"
			}
		}
		for _, s := range strings.Split(rel, "/") {
			if s == "" {
				return
			}
		}
		if want := refMatch(pat, rel); got != want {
			t.Fatalf("pattern %q path %q: compiled %v, reference %v", pat, rel, got, want)
		}
	})
}

// FuzzParse checks that no grant document makes Parse or Render panic.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"grant_id":"G-1","agent_id":"a","role":"r","objective":"o","may_read":["**"],"forbidden_read":["x/**"]}`))
	f.Add([]byte(`{"grant_id":"G-1","named_inputs":{"s":"a"}}`))
	f.Add([]byte("{\n \"may_read\": [\"a\", 7],\n \"named_inputs\": {\"s\": {\"path\": 3, \"x\": 1}}\n}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := Parse(data)
		var de *DecodeError
		if errors.As(err, &de) {
			// The place of a decoding problem lies within the document.
			lines := strings.Split(string(data), "\n")
			if de.Line < 1 || de.Line > len(lines) || de.Column < 1 || de.Column > utf8.RuneCountInString(lines[de.Line-1])+1 {
				t.Fatalf("%v: outside the %d-line document", err, len(lines))
			}
		}
		if err != nil {
			return
		}
		_ = Render(g)
		if _, err := Compile(g, MatcherOptions{}); err != nil {
			t.Fatalf("a parsed grant must compile: %v", err)
		}
	})
}
