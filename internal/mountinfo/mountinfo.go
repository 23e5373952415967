// Package mountinfo holds what the daemon (mount/), the sandbox's first
// process (internal/sandbox) and the control groups (internal/limits)
// share about /proc/*/mountinfo.
package mountinfo

import (
	"strconv"
	"strings"
)

// Entry is one line of a mountinfo file:
//
//	ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER-OPTIONS
type Entry struct {
	ID, Parent int
	Dev        string // major:minor
	Root       string // the mount's root in its filesystem, unescaped
	Point      string // the mountpoint, unescaped
	FSType     string
	Source     string // unescaped; "" when the line has none
	// SuperOptions are the filesystem's options (for a cgroup v1
	// hierarchy, its controllers among them); "" when the line has none.
	SuperOptions string
}

// Parse reads one mountinfo line; ok is false for a line that is not one
// (too few fields, no separator, no filesystem type after it).
func Parse(line string) (e Entry, ok bool) {
	f := strings.Fields(line)
	sep := -1
	// The separator comes after the six fixed fields and the optional
	// ones, none of which is a lone "-".
	for i := 6; i < len(f); i++ {
		if f[i] == "-" {
			sep = i
			break
		}
	}
	if sep < 0 || sep+1 >= len(f) {
		return Entry{}, false
	}
	e = Entry{Dev: f[2], Root: Unescape(f[3]), Point: Unescape(f[4]), FSType: f[sep+1]}
	if sep+2 < len(f) {
		e.Source = Unescape(f[sep+2])
	}
	if sep+3 < len(f) {
		e.SuperOptions = f[sep+3]
	}
	// Numbers the kernel writes; a line that garbles them keeps 0.
	e.ID, _ = strconv.Atoi(f[0])
	e.Parent, _ = strconv.Atoi(f[1])
	return e, true
}

// ParseAll reads the lines of a mountinfo file in order, skipping those
// that are not mountinfo lines.
func ParseAll(text string) []Entry {
	var out []Entry
	for line := range strings.Lines(text) {
		if e, ok := Parse(line); ok {
			out = append(out, e)
		}
	}
	return out
}

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
