// Package textsafe makes text that hostile parties chose safe to show a
// person: the characters that change how the text around them reads
// without showing themselves are written out as visible escapes.
package textsafe

import (
	"fmt"
	"strings"
	"unicode"
)

// Invisible reports a character that changes how the text around it is
// shown without showing itself: Unicode's format characters (Cf: the
// bidirectional controls U+061C, U+200E-U+200F, U+202A-U+202E,
// U+2066-U+2069, the zero-width ones U+200B-U+200D, U+2060-U+2064,
// U+FEFF, the tags), the line and paragraph separators, and the other
// default-ignorable code points (fillers that show as nothing). A path
// holding U+202E would otherwise show, in a report, as another path.
func Invisible(r rune) bool {
	return r >= 0x80 && unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp, unicode.Other_Default_Ignorable_Code_Point)
}

// Escape writes every Invisible character of s as \u{XXXX}; s comes back
// as it is when it holds none.
func Escape(s string) string {
	i := strings.IndexFunc(s, Invisible)
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	b.WriteString(s[:i])
	for _, r := range s[i:] {
		if Invisible(r) {
			fmt.Fprintf(&b, "\\u{%04x}", r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
