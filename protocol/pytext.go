package protocol

import (
	"regexp"
	"strings"
	"sync"
	"unicode"
)

// The document rules are regular expressions over Markdown. They are
// evaluated with Python's semantics, which differ from Go's RE2 defaults
// in what counts as whitespace, a digit and a word boundary; the helpers
// here close those gaps so both implementations accept the same files.

// pyWS is the class of characters Python's \s matches in str patterns.
const pyWS = `[\t\n\v\f\r \x{1c}-\x{1f}\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}]`

var reCache sync.Map // pattern -> *regexp.Regexp

// pyRe compiles pattern after replacing every `\s` with pyWS.
func pyRe(pattern string) *regexp.Regexp {
	if re, ok := reCache.Load(pattern); ok {
		return re.(*regexp.Regexp)
	}
	re := regexp.MustCompile(strings.ReplaceAll(pattern, `\s`, pyWS))
	reCache.Store(pattern, re)
	return re
}

// pyIsSpace is Python's str.isspace for one character.
func pyIsSpace(r rune) bool {
	switch {
	case r == ' ', r >= '\t' && r <= '\r', r >= 0x1c && r <= 0x1f, r == 0x85, r == 0xa0,
		r == 0x1680, r >= 0x2000 && r <= 0x200a, r == 0x2028, r == 0x2029, r == 0x202f, r == 0x205f, r == 0x3000:
		return true
	}
	return false
}

// pyStrip is Python's str.strip().
func pyStrip(s string) string { return strings.TrimFunc(s, pyIsSpace) }

// pyText converts file bytes to text the way Python's text mode reads
// them: "\r\n" and "\r" become "\n".
func pyText(b []byte) string {
	s := string(b)
	if strings.IndexByte(s, '\r') < 0 {
		return s
	}
	s = strings.ReplaceAll(s, "\r\n", "\n")
	return strings.ReplaceAll(s, "\r", "\n")
}

// pySplitLines is Python's str.splitlines() on text without "\r".
func pySplitLines(s string) []string {
	var out []string
	start := 0
	for i, r := range s {
		switch r {
		case '\n', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x85, 0x2028, 0x2029:
			out = append(out, s[start:i])
			start = i + len(string(r))
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// pyWord is Python's \w for one character.
func pyWord(r rune) bool { return r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) }

// foldEq compares two characters with simple case folding.
func foldEq(a, b rune) bool {
	if a == b {
		return true
	}
	for f := unicode.SimpleFold(a); f != a; f = unicode.SimpleFold(f) {
		if f == b {
			return true
		}
	}
	return false
}

// containsWordFold reports whether any of words occurs in text as a whole
// word (Unicode word boundaries), ignoring case: Python's
// re.search(r"\b(?:w1|w2)\b", text, re.IGNORECASE).
func containsWordFold(text string, words ...string) bool {
	runes := []rune(text)
	isWord := func(i int) bool { return i >= 0 && i < len(runes) && pyWord(runes[i]) }
	boundary := func(i int) bool { return isWord(i-1) != isWord(i) }
	for i := 0; i < len(runes); i++ {
		if !boundary(i) {
			continue
		}
	next:
		for _, w := range words {
			wr := []rune(w)
			if i+len(wr) > len(runes) {
				continue
			}
			for k, c := range wr {
				if !foldEq(runes[i+k], c) {
					continue next
				}
			}
			if boundary(i + len(wr)) {
				return true
			}
		}
	}
	return false
}

// pyDecimal converts a run of Unicode decimal digits to its ASCII decimal
// form without leading zeros, as Python's int() reads it.
func pyDecimal(s string) string {
	var b strings.Builder
	for _, r := range s {
		start := r
		for unicode.IsDigit(start - 1) {
			start--
		}
		b.WriteByte(byte('0' + (r-start)%10))
	}
	out := strings.TrimLeft(b.String(), "0")
	if out == "" {
		return "0"
	}
	return out
}
