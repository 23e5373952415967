// Package mountinfo holds what the daemon (mount/) and the sandbox's
// first process (internal/sandbox) share about /proc/*/mountinfo.
package mountinfo

import "strings"

// Unescape undoes the kernel's octal escapes in a mountinfo path (\040
// for a space, \011, \012, \134); a backslash not followed by three
// octal digits stays as it is.
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }
