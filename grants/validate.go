package grants

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
	"unicode"
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
		return nil, fmt.Errorf("decode grant: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("decode grant: unexpected data after the grant object")
	}
	if err := Validate(&g); err != nil {
		return nil, err
	}
	return &g, nil
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
	v.name("participant", g.Participant, false)
	if strings.TrimSpace(g.Role) == "" {
		v.add("role", "missing")
	}
	if strings.TrimSpace(g.Objective) == "" {
		v.add("objective", "missing")
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
