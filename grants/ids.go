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

// idHint reduces s to id-safe characters (at most 48 bytes), with
// anything else turned into "-" and separators trimmed at both ends.
func idHint(s string) string {
	var b strings.Builder
	for i := 0; i < len(s) && b.Len() < 48; i++ {
		c := s[i]
		switch {
		case isAlnum(c) || c == '.' || c == '_' || c == '-':
			b.WriteByte(c)
		default:
			b.WriteByte('-')
		}
	}
	return strings.Trim(b.String(), "-._")
}

// NewID returns a fresh id "<prefix>-<hint>-<8 hex digits>", with the
// hint reduced to id-safe characters (it may be empty).
func NewID(prefix, hint string) string {
	h := idHint(hint)
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

// GrantIDFor is the default grant id of an agent: "G-<agent>", with the
// agent id reduced to id-safe characters, so that a run directory's
// grants are named after their agents ("G-bob"). It is "" when nothing
// of the agent id is usable.
func GrantIDFor(agent string) string {
	h := idHint(agent)
	if h == "" {
		return ""
	}
	return "G-" + h
}

// NormalizeGrantID accepts a grant id with or without its "G-" prefix:
// "bob" and "G-bob" both give "G-bob". Anything else is left for CheckID
// to judge.
func NormalizeGrantID(id string) string {
	if id == "" || strings.HasPrefix(id, "G-") {
		return id
	}
	return "G-" + id
}
