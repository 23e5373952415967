package pycompat

import (
	"regexp"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// The document rules are regular expressions over Markdown. They are
// evaluated with Python's semantics, which differ from Go's RE2 defaults
// in what counts as whitespace, a digit and a word boundary; the helpers
// here close those gaps so both implementations accept the same files.

// ws is the class of characters Python's \s matches in str patterns.
const ws = `[\t\n\v\f\r \x{1c}-\x{1f}\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}]`

var reCache sync.Map // pattern -> *regexp.Regexp

// Re compiles pattern after replacing every `\s` with the characters
// Python's \s matches. Compiled patterns are cached: the document rules
// build theirs from constants on every check. It panics on an invalid
// pattern, as regexp.MustCompile does.
func Re(pattern string) *regexp.Regexp {
	if re, ok := reCache.Load(pattern); ok {
		return re.(*regexp.Regexp)
	}
	re := regexp.MustCompile(strings.ReplaceAll(pattern, `\s`, ws))
	reCache.Store(pattern, re)
	return re
}

// IsSpace is Python's str.isspace for one character.
func IsSpace(r rune) bool {
	switch {
	case r == ' ', r >= '\t' && r <= '\r', r >= 0x1c && r <= 0x1f, r == 0x85, r == 0xa0,
		r == 0x1680, r >= 0x2000 && r <= 0x200a, r == 0x2028, r == 0x2029, r == 0x202f, r == 0x205f, r == 0x3000:
		return true
	}
	return false
}

// IsBlank reports whether b is whitespace only (IsSpace), as Python's
// line.strip() == "" decides it; the empty line is blank. b must be
// valid UTF-8 for the answer to mean anything.
func IsBlank(b []byte) bool {
	for i := 0; i < len(b); {
		c := b[i]
		if c < utf8.RuneSelf {
			if !IsSpace(rune(c)) {
				return false
			}
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		if !IsSpace(r) {
			return false
		}
		i += n
	}
	return true
}

// Strip is Python's str.strip().
func Strip(s string) string { return strings.TrimFunc(s, IsSpace) }

// Text converts file bytes to text the way Python's text mode reads them
// (universal newlines): "\r\n" and "\r" become "\n".
func Text(b []byte) string {
	s := string(b)
	if strings.IndexByte(s, '\r') < 0 {
		return s
	}
	s = strings.ReplaceAll(s, "\r\n", "\n")
	return strings.ReplaceAll(s, "\r", "\n")
}

// SplitsLine reports the characters at which Python's str.splitlines
// breaks a line. A JSON line holding one of them raw would be read back
// as two lines by tools that split that way.
func SplitsLine(r rune) bool {
	switch r {
	case '\n', '\r', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x85, 0x2028, 0x2029:
		return true
	}
	return false
}

// LineBreakRune returns the first character of line at which
// str.splitlines would break it (SplitsLine), or 0.
func LineBreakRune(line []byte) rune {
	for i := 0; i < len(line); i++ {
		switch c := line[i]; {
		case c == '\n', c == '\r', c == '\v', c == '\f', c >= 0x1c && c <= 0x1e:
			return rune(c)
		case c == 0xC2 || c == 0xE2:
			// The lead bytes of U+0085 and U+2028/U+2029: decoding only
			// there keeps the scan of plain lines byte-wise.
			if r, _ := utf8.DecodeRune(line[i:]); SplitsLine(r) {
				return r
			}
		}
	}
	return 0
}

// SplitLines is Python's str.splitlines() on text without "\r" (as Text
// returns it).
func SplitLines(s string) []string {
	var out []string
	start := 0
	for i, r := range s {
		if r != '\r' && SplitsLine(r) {
			out = append(out, s[start:i])
			start = i + utf8.RuneLen(r)
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// isWord is Python's \w for one character.
func isWord(r rune) bool { return r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) }

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

// ContainsWordFold reports whether any of words occurs in text as a whole
// word (Unicode word boundaries), ignoring case: Python's
// re.search(r"\b(?:w1|w2)\b", text, re.IGNORECASE).
func ContainsWordFold(text string, words ...string) bool {
	runes := []rune(text)
	wordAt := func(i int) bool { return i >= 0 && i < len(runes) && isWord(runes[i]) }
	boundary := func(i int) bool { return wordAt(i-1) != wordAt(i) }
	for i := range runes {
		if !boundary(i) {
			continue
		}
		for _, w := range words {
			if end, ok := matchFoldAt(runes, i, []rune(w)); ok && boundary(end) {
				return true
			}
		}
	}
	return false
}

// matchFoldAt reports whether w occurs in runes at i, ignoring case, and
// where that occurrence ends.
func matchFoldAt(runes []rune, i int, w []rune) (int, bool) {
	if i+len(w) > len(runes) {
		return 0, false
	}
	for k, c := range w {
		if !foldEq(runes[i+k], c) {
			return 0, false
		}
	}
	return i + len(w), true
}

// Decimal converts a run of Unicode decimal digits to its ASCII decimal
// form without leading zeros, as Python's int() reads it.
func Decimal(s string) string {
	var b strings.Builder
	for _, r := range s {
		zero := r
		for unicode.IsDigit(zero - 1) {
			zero--
		}
		b.WriteByte(byte('0' + (r-zero)%10))
	}
	out := strings.TrimLeft(b.String(), "0")
	if out == "" {
		return "0"
	}
	return out
}
