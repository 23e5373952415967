package grants

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"time"
)

// maxIDLen keeps ids usable as file names everywhere.
const maxIDLen = 128

// CheckID reports whether id has the form "<prefix>-<id>" ("G-reviewer-1",
// "H-20260521-ab12"), where <id> starts with a letter or digit and uses
// only letters, digits, ".", "_" and "-". Ids name files in the run
// directory, so anything else is refused.
func CheckID(id, prefix string) error {
	rest, ok := strings.CutPrefix(id, prefix+"-")
	switch {
	case !ok:
		return fmt.Errorf("%q does not start with %q", id, prefix+"-")
	case rest == "":
		return fmt.Errorf("%q has nothing after %q", id, prefix+"-")
	case len(id) > maxIDLen:
		return fmt.Errorf("%q is longer than %d bytes", id, maxIDLen)
	case !isAlnum(rest[0]):
		return fmt.Errorf("%q: the part after %q must start with a letter or digit", id, prefix+"-")
	}
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		if !isAlnum(c) && c != '.' && c != '_' && c != '-' {
			return fmt.Errorf("%q: character %q is not allowed (letters, digits, '.', '_', '-')", id, c)
		}
	}
	return nil
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// NewID returns a fresh id "<prefix>-<hint>-<8 hex digits>", with the
// hint reduced to id-safe characters (it may be empty).
func NewID(prefix, hint string) string {
	var b strings.Builder
	for i := 0; i < len(hint) && b.Len() < 48; i++ {
		c := hint[i]
		switch {
		case isAlnum(c) || c == '.' || c == '_' || c == '-':
			b.WriteByte(c)
		default:
			b.WriteByte('-')
		}
	}
	h := strings.Trim(b.String(), "-._")
	var rnd [4]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		// crypto/rand does not fail on Linux; the clock keeps ids distinct
		// should it ever do so.
		copy(rnd[:], fmt.Sprintf("%04x", time.Now().UnixNano()&0xffff))
	}
	if h == "" {
		return prefix + "-" + hex.EncodeToString(rnd[:])
	}
	return prefix + "-" + h + "-" + hex.EncodeToString(rnd[:])
}
