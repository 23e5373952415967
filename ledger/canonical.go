package ledger

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/acpfs/acpfs/internal/digest"
)

const (
	// MaxLineBytes is the longest line the reader accepts. The writer keeps
	// lines far shorter by cutting Detail (see maxDetailBytes).
	MaxLineBytes = 16 << 20
	// maxDetailBytes bounds Detail: longer details are cut and marked, so
	// that an enormous refusal reason cannot make a record unreadable.
	maxDetailBytes = 16 << 10
	// timeLayout is RFC 3339 UTC with a fixed nine-digit fraction, so that
	// timestamps sort as strings.
	timeLayout = "2006-01-02T15:04:05.000000000Z"
)

// Stamp renders t as the ledger stamps its records (timeLayout). Whatever
// else goes into a record's time fields uses it, so that they all sort as
// strings with the records' own.
func Stamp(t time.Time) string { return t.UTC().Format(timeLayout) }

// hashTail is how every canonical encoding ends when Hash is empty.
var hashTail = []byte(`"hash":""}`)

// encoder produces canonical lines. It is not safe for concurrent use; the
// Writer owns one and uses it only from the goroutine holding the batch.
type encoder struct {
	buf     bytes.Buffer
	enc     *json.Encoder
	scratch []byte // hash and seal inputs of version 3 lines
}

func newEncoder() *encoder {
	e := &encoder{}
	e.enc = json.NewEncoder(&e.buf)
	e.enc.SetEscapeHTML(false)
	return e
}

// canonical returns the canonical encoding of r with Hash emptied (no
// newline). The slice is valid until the next call.
func (e *encoder) canonical(r *Record) ([]byte, error) {
	saved := r.Hash
	r.Hash = ""
	e.buf.Reset()
	err := e.enc.Encode(r)
	r.Hash = saved
	if err != nil {
		return nil, fmt.Errorf("encode record: %w", err)
	}
	b := bytes.TrimSuffix(e.buf.Bytes(), []byte("\n"))
	if !bytes.HasSuffix(b, hashTail) {
		// Only a change to the Record struct could cause this.
		return nil, errors.New("encode record: hash is not the last field")
	}
	return b, nil
}

// appendLine seals r (computing r.Hash from the canonical encoding) and
// appends its line, newline included, to dst.
func (e *encoder) appendLine(dst []byte, r *Record) ([]byte, error) {
	b, err := e.canonical(r)
	if err != nil {
		return dst, err
	}
	r.Hash = digest.Bytes(b)
	dst = append(dst, b[:len(b)-2]...) // up to and including `"hash":"`
	dst = append(dst, r.Hash...)
	dst = append(dst, "\"}\n"...)
	return dst, nil
}

// HashRecord returns the hash r would carry in a file of version 1 or 2,
// or as a signed record of any version: the hex SHA-256 of its canonical
// encoding with Hash emptied. r.Hash itself is ignored. (An unsigned
// record of a version 3 file is hashed as its line leaves it: see
// LineEncoder.)
func HashRecord(r Record) (string, error) {
	e := newEncoder()
	b, err := e.canonical(&r)
	if err != nil {
		return "", err
	}
	return digest.Bytes(b), nil
}

// sanitize makes every string valid UTF-8 (so that what is hashed is what
// is stored) and bounds Detail.
func sanitize(r *Record) {
	for i := range recordFields {
		if f := recordFields[i].str; f != nil {
			if s := f(r); !utf8.ValidString(*s) {
				*s = strings.ToValidUTF8(*s, "\uFFFD")
			}
		}
	}
	if len(r.Detail) > maxDetailBytes {
		cut := maxDetailBytes
		for cut > 0 && !utf8.RuneStart(r.Detail[cut]) {
			cut--
		}
		r.Detail = fmt.Sprintf("%s… [%d bytes cut]", r.Detail[:cut], len(r.Detail)-cut)
	}
}

// decodeLine parses one line (without its newline) strictly: one JSON
// object, no unknown fields, nothing after it.
func decodeLine(line []byte) (Record, error) {
	var r Record
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return Record{}, err
	}
	if dec.More() {
		return Record{}, errors.New("data after the JSON object")
	}
	if _, err := dec.Token(); err == nil {
		return Record{}, errors.New("data after the JSON object")
	}
	return r, nil
}

// checkLine decodes line and checks its own hash and canonical form (not
// its place in the chain). The reason is empty when the line is sound.
func (e *encoder) checkLine(line []byte) (r Record, problem, reason string) {
	r, err := decodeLine(line)
	if err != nil {
		return Record{}, ProblemGarbage, fmt.Sprintf("not a ledger record: %v", err)
	}
	b, err := e.canonical(&r)
	if err != nil {
		return r, ProblemGarbage, err.Error()
	}
	if want := digest.Bytes(b); want != r.Hash {
		return r, ProblemHash, fmt.Sprintf("hash mismatch: the record was edited (stored %s, computed %s)", short(r.Hash), short(want))
	}
	// Same hash, different bytes: duplicated keys, extra spaces, other
	// escapes. Harmless to the hash but not what a writer produces.
	if len(line) != len(b)+len(r.Hash) || !bytes.Equal(line[:len(b)-2], b[:len(b)-2]) ||
		string(line[len(b)-2:]) != r.Hash+`"}` {
		return r, ProblemNonCanonical, "the line is not in canonical form (re-encoding differs)"
	}
	return r, "", ""
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12] + "…"
	}
	if h == "" {
		return `""`
	}
	return h
}
