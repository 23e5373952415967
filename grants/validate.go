package grants

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Problem is one reason a grant is invalid, naming the field at fault
// ("may_read[2]", "named_inputs.spec", "grant_id").
type Problem struct {
	Field   string
	Message string
}

func (p Problem) String() string { return p.Field + ": " + p.Message }

// ValidationError lists every problem found in one grant, so that a
// coordinator fixes them all in one pass.
type ValidationError struct {
	GrantID  string // as written, possibly empty
	Problems []Problem
}

func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		parts[i] = p.String()
	}
	name := e.GrantID
	if name == "" {
		name = "(no grant_id)"
	}
	return fmt.Sprintf("invalid grant %s: %s", name, strings.Join(parts, "; "))
}

// UnmarshalJSON accepts a slot written as a bare path ("spec":
// "deliverables/spec.md", the draft protocol's form, which counts as a
// filled required slot) or as an object {"path": ..., "required": ...}.
func (n *NamedInput) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] == '"' {
		var p string
		if err := json.Unmarshal(data, &p); err != nil {
			return err
		}
		*n = NamedInput{Path: p, Required: true}
		return nil
	}
	type plain NamedInput // no UnmarshalJSON: avoids recursion
	var v plain
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return err
	}
	*n = NamedInput(v)
	return nil
}

func parseGrant(data []byte) (*Grant, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var g Grant
	if err := dec.Decode(&g); err != nil {
		return nil, fmt.Errorf("decode grant: %w", locateDecodeError(data, err))
	}
	end := dec.InputOffset()
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		off := end + int64(len(data[end:])-len(bytes.TrimLeft(data[end:], " \t\r\n")))
		return nil, fmt.Errorf("decode grant: %w", newDecodeError(data, off, errors.New("unexpected data after the grant object")))
	}
	if err := Validate(&g); err != nil {
		return nil, err
	}
	return &g, nil
}

// DecodeError is a grant file that is not JSON, or whose JSON does not
// fit the grant's fields, with the place of the problem: Line and Column
// count from 1, and the column counts characters.
type DecodeError struct {
	Line, Column int
	Err          error
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("line %d, column %d: %v", e.Line, e.Column, e.Err)
}

func (e *DecodeError) Unwrap() error { return e.Err }

// newDecodeError places err at the byte offset off of data.
func newDecodeError(data []byte, off int64, err error) *DecodeError {
	off = max(0, min(off, int64(len(data))))
	before := data[:off]
	lineStart := bytes.LastIndexByte(before, '\n') + 1
	return &DecodeError{
		Line:   bytes.Count(before, []byte{'\n'}) + 1,
		Column: utf8.RuneCount(before[lineStart:]) + 1,
		Err:    err,
	}
}

// locateDecodeError turns an error of encoding/json into a DecodeError
// that says where in data the problem is, with a message in terms of the
// grant's fields rather than Go types.
func locateDecodeError(data []byte, err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		// Offset is just past the offending byte.
		return newDecodeError(data, syn.Offset-1, fmt.Errorf("invalid JSON: %s", syn.Error()))
	case errors.As(err, &typ):
		off, inArray := typeErrorOffset(data, typ)
		return newDecodeError(data, off, typeErrorMessage(typ, inArray))
	case errors.Is(err, io.EOF) && len(bytes.TrimSpace(data)) == 0:
		return errors.New("the file is empty")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return newDecodeError(data, int64(len(data)), errors.New("invalid JSON: the file ends before the grant object does"))
	}
	msg := err.Error()
	if q, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		if name, uerr := strconv.Unquote(q); uerr == nil {
			off := int64(-1)
			walkJSON(data, func(t jsonToken) bool {
				if t.key && t.tok == name {
					off = t.start
					return false
				}
				return true
			})
			unknown := fmt.Errorf("unknown field %q", name)
			if off < 0 {
				return unknown
			}
			return newDecodeError(data, off, unknown)
		}
	}
	return err
}

// typeErrorOffset finds where the value that did not fit starts. The
// decoder's own offset is only right for values outside named_inputs,
// which are decoded on their own; so the value is looked up by its field
// path and its JSON kind, the decoder's offset picking among several.
// inArray tells that the value is an entry of an array.
func typeErrorOffset(data []byte, e *json.UnmarshalTypeError) (off int64, inArray bool) {
	want := strings.Split(e.Field, ".")
	var first, best *jsonToken
	walkJSON(data, func(t jsonToken) bool {
		if t.key || t.kind != e.Value || !isSubsequence(want, t.path) {
			return true
		}
		if first == nil {
			first = &t
		}
		if t.end == e.Offset {
			best = &t
			return false
		}
		return true
	})
	switch {
	case best != nil:
		return best.start, best.inArray
	case first != nil:
		return first.start, first.inArray
	}
	return e.Offset, false
}

// typeErrorMessage says what the field wanted, in JSON terms.
func typeErrorMessage(e *json.UnmarshalTypeError, inArray bool) error {
	want := e.Type.String()
	switch k := e.Type.Kind(); {
	case k == reflect.String:
		want = "a string"
	case k == reflect.Bool:
		want = "true or false"
	case k == reflect.Slice && e.Type.Elem().Kind() == reflect.String:
		want = "an array of strings"
	case k == reflect.Map || k == reflect.Struct:
		want = "an object"
	}
	field := e.Field
	switch {
	case field == "":
		field = "the grant"
	case inArray:
		field = "each entry of " + field
	}
	return fmt.Errorf("%s must be %s, not %s %s", field, want, article(e.Value), e.Value)
}

func article(word string) string {
	if word != "" && strings.ContainsRune("aeiou", rune(word[0])) {
		return "an"
	}
	return "a"
}

// isSubsequence reports whether every element of sub appears in s, in
// order.
func isSubsequence(sub, s []string) bool {
	i := 0
	for _, x := range s {
		if i < len(sub) && x == sub[i] {
			i++
		}
	}
	return i == len(sub)
}

// jsonToken is one token of a JSON document, with where it starts and
// ends and the object keys that lead to it.
type jsonToken struct {
	tok        any
	key        bool   // an object key (tok is its string)
	inArray    bool   // an entry of an array
	kind       string // of a value: "object", "array", "string", "number", "bool", "null"
	path       []string
	start, end int64
}

// walkJSON calls fn with each token of data (closing delimiters left
// out) until fn returns false or the JSON ends or breaks.
func walkJSON(data []byte, fn func(jsonToken) bool) {
	type level struct {
		object  bool
		wantKey bool
		key     string
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var stack []level
	for {
		before := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			return
		}
		start := before
		for start < int64(len(data)) && strings.IndexByte(" \t\r\n,:", data[start]) >= 0 {
			start++
		}
		t := jsonToken{tok: tok, start: start, end: dec.InputOffset()}
		for _, l := range stack {
			if l.object && l.key != "" {
				t.path = append(t.path, l.key)
			}
		}
		var top *level
		if len(stack) > 0 {
			top = &stack[len(stack)-1]
			t.inArray = !top.object
		}
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			stack = stack[:len(stack)-1]
			if len(stack) > 0 && stack[len(stack)-1].object {
				stack[len(stack)-1].wantKey = true
			}
			continue
		}
		if top != nil && top.object && top.wantKey {
			t.key = true
			t.tok, _ = tok.(string)
			top.key, top.wantKey = t.tok.(string), false
			if !fn(t) {
				return
			}
			continue
		}
		switch v := tok.(type) {
		case json.Delim:
			t.kind = "array"
			if v == '{' {
				t.kind = "object"
			}
		case string:
			t.kind = "string"
		case json.Number:
			t.kind = "number"
		case bool:
			t.kind = "bool"
		default:
			t.kind = "null"
		}
		if !fn(t) {
			return
		}
		if d, ok := tok.(json.Delim); ok {
			stack = append(stack, level{object: d == '{', wantKey: d == '{'})
		} else if top != nil && top.object {
			top.wantKey = true
		}
	}
}

func loadGrant(path string) (*Grant, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load grant: %w", err)
	}
	g, err := parseGrant(data)
	if err != nil {
		return nil, fmt.Errorf("load grant %s: %w", path, err)
	}
	return g, nil
}

// Validate checks one grant on its own (Parse calls it; use it for grants
// built in code). The error is a *ValidationError listing every problem.
func Validate(g *Grant) error {
	v := &validator{g: g}
	v.identity()
	compiled := v.patterns()
	v.namedInputs(compiled)
	if compiled != nil {
		v.deadEntries(compiled)
	}
	v.timestamps()
	if len(v.problems) == 0 {
		return nil
	}
	return &ValidationError{GrantID: g.GrantID, Problems: v.problems}
}

type validator struct {
	g        *Grant
	problems []Problem
}

func (v *validator) add(field, format string, args ...any) {
	v.problems = append(v.problems, Problem{Field: field, Message: fmt.Sprintf(format, args...)})
}

func (v *validator) identity() {
	g := v.g
	if strings.TrimSpace(g.GrantID) == "" {
		v.add("grant_id", "missing")
	} else if err := CheckID(g.GrantID, "G"); err != nil {
		v.add("grant_id", "%v", err)
	}
	v.name("agent_id", g.AgentID, true)
	v.fileName("agent_id", g.AgentID)
	v.name("participant", g.Participant, false)
	if strings.TrimSpace(g.Role) == "" {
		v.add("role", "missing")
	}
	if strings.TrimSpace(g.Objective) == "" {
		v.add("objective", "missing")
	}
	if g.MaxWriteBytes < 0 {
		v.add("max_write_bytes", "must not be negative (leave it out for the mount's default)")
	}
	if g.MaxFiles < 0 {
		v.add("max_files", "must not be negative (leave it out for the mount's default)")
	}
}

// name checks an identifier that ends up in ledger records and prompts.
func (v *validator) name(field, s string, required bool) {
	switch {
	case s == "" && required:
		v.add(field, "missing")
	case s == "":
	case strings.TrimSpace(s) != s || strings.TrimSpace(s) == "":
		v.add(field, "%q has leading or trailing white space", s)
	case strings.IndexFunc(s, unicode.IsControl) >= 0:
		v.add(field, "%q contains control characters", s)
	}
}

// fileName checks an id that names a file or a directory (the agent's
// mountpoint under acpfs up's root): one path element, not "." or "..",
// of letters, digits and "._-", so that it can never lead elsewhere.
func (v *validator) fileName(field, s string) {
	if s == "" {
		return
	}
	if s == "." || s == ".." || strings.HasPrefix(s, ".") {
		v.add(field, "%q may not start with a dot", s)
		return
	}
	for _, r := range s {
		if !(r == '-' || r == '_' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			v.add(field, "%q may hold only letters, digits, '.', '_' and '-' (it names the agent's mountpoint)", s)
			return
		}
	}
}

// patterns compiles every glob list; it returns the compiled state used
// by the cross-checks, or nil when a list did not compile.
func (v *validator) patterns() *matcherState {
	if len(v.g.MayRead) == 0 {
		v.add("may_read", "must list at least one pattern")
	}
	st, problems := buildState(v.g)
	v.problems = append(v.problems, problems...)
	if len(problems) > 0 {
		return nil
	}
	return st
}

// namedInputs checks that required slots are filled and that every named
// path is inside the folder, readable and not forbidden (a path both named
// and forbidden is a contradiction the coordinator must resolve).
func (v *validator) namedInputs(st *matcherState) {
	slots := make([]string, 0, len(v.g.NamedInputs))
	for s := range v.g.NamedInputs {
		slots = append(slots, s)
	}
	sort.Strings(slots)
	for _, slot := range slots {
		in := v.g.NamedInputs[slot]
		field := "named_inputs." + slot
		if strings.TrimSpace(slot) == "" {
			v.add("named_inputs", "a slot has an empty name")
			continue
		}
		if in.Path == "" {
			if in.Required {
				v.add(field, "required slot is not filled")
			}
			continue
		}
		rel, err := cleanRel(in.Path)
		if err != nil {
			v.add(field, "path %q: %v", in.Path, err)
			continue
		}
		if rel == "" {
			v.add(field, "path %q names the folder root", in.Path)
			continue
		}
		if st == nil {
			continue
		}
		if i := first(st.forbid, rel); i >= 0 {
			v.add(field, "path %q is also forbidden by %s", in.Path, st.rules[st.forbid[i].rule])
			continue
		}
		m := &Matcher{st: st}
		isDir := strings.HasSuffix(in.Path, "/")
		if (isDir && !m.visible(rel)) || (!isDir && !m.readable(rel)) {
			v.add(field, "path %q is not covered by may_read or may_write", in.Path)
		}
	}
}

// deadEntries refuses may_read and may_write entries naming a literal path
// (or a literal directory and everything below it) that forbidden_read
// hides entirely.
func (v *validator) deadEntries(st *matcherState) {
	check := func(field string, pats []compiled, src []string) {
		for _, c := range pats {
			if c.kind != patExact && c.kind != patUnder {
				continue
			}
			if i := first(st.forbid, c.lit); i >= 0 {
				v.add(fmt.Sprintf("%s[%d]", field, c.src), "%q is also forbidden by %s", src[c.src], st.rules[st.forbid[i].rule])
			}
		}
	}
	check("may_read", st.read, v.g.MayRead)
	check("may_write", st.write, v.g.MayWrite)
}

func (v *validator) timestamps() {
	for _, f := range []struct{ field, val string }{{"created_at", v.g.CreatedAt}, {"revoked_at", v.g.RevokedAt}} {
		if f.val == "" {
			continue
		}
		if _, err := time.Parse(time.RFC3339, f.val); err != nil {
			v.add(f.field, "%q is not an RFC 3339 time", f.val)
		}
	}
	if v.g.RevokedAt != "" && !v.g.Revoked {
		v.add("revoked_at", "set on a grant that is not revoked")
	}
}
