// Package grants models context grants and handoffs and answers, for a
// path inside a collaboration folder, whether a grant makes it visible,
// readable or writable. It knows nothing of FUSE.
package grants

import (
	"encoding/json"
	"github.com/acpfs/acpfs/internal/digest"
)

// This file is the contract between grants/ and its users (the CLI, fs/,
// ledger audit). Signatures here are stable; bodies are filled in by the
// grants implementation.

// NamedInput is one slot of a grant's named inputs.
type NamedInput struct {
	Path     string `json:"path"`
	Required bool   `json:"required,omitempty"`
}

// Grant is an AgentContextGrant plus the acpfs fields participant and
// may_write. Paths and globs are relative to the collaboration folder,
// slash-separated.
type Grant struct {
	GrantID           string                `json:"grant_id"`
	AgentID           string                `json:"agent_id"`
	Participant       string                `json:"participant,omitempty"` // ACP participant id; defaults to AgentID
	Role              string                `json:"role"`
	Objective         string                `json:"objective"`
	NamedInputs       map[string]NamedInput `json:"named_inputs,omitempty"`
	MayRead           []string              `json:"may_read"`
	ForbiddenRead     []string              `json:"forbidden_read,omitempty"`
	MayWrite          []string              `json:"may_write,omitempty"`
	InjectedGuidance  []string              `json:"injected_guidance,omitempty"`
	OutputContract    string                `json:"output_contract,omitempty"`
	DecisionAuthority string                `json:"decision_authority,omitempty"`
	StopConditions    []string              `json:"stop_conditions,omitempty"`
	// MaxWriteBytes and MaxFiles cap what the agent may add through its
	// view: bytes that make files longer, and new names. Zero leaves the
	// mount's default (see acpfs up --max-write-bytes).
	MaxWriteBytes int64  `json:"max_write_bytes,omitempty"`
	MaxFiles      int64  `json:"max_files,omitempty"`
	Revoked       bool   `json:"revoked,omitempty"`
	RevokedAt     string `json:"revoked_at,omitempty"`
	CreatedAt     string `json:"created_at,omitempty"`
}

// ParticipantID is the ACP participant this grant's agent writes as.
func (g *Grant) ParticipantID() string {
	if g.Participant != "" {
		return g.Participant
	}
	return g.AgentID
}

// Hash is the hex SHA-256 of the grant's rules as JSON, revocation left
// out: what a view records when it applies the grant, so that an audit
// can tell whether the grant it judges with is the one that was in force.
func (g *Grant) Hash() string {
	c := *g
	c.Revoked, c.RevokedAt = false, ""
	b, err := json.Marshal(&c)
	if err != nil {
		return ""
	}
	return digest.Bytes(b)
}

// Parse decodes and validates a grant (unknown fields are an error).
func Parse(data []byte) (*Grant, error) { return parseGrant(data) }

// Load reads and validates a grant file.
func Load(path string) (*Grant, error) { return loadGrant(path) }

// Decision explains how a grant treats one path.
type Decision struct {
	Visible  bool   // shown in lookups and listings (itself or something below it is readable or writable)
	Readable bool   // may be opened for reading
	Writable bool   // may be created, written, renamed, removed
	Rule     string // the rule that decided, e.g. `forbidden_read "oracle/**"`, `may_read "*.md"`, `run directory`, `no rule matches`
}

// Matcher answers grant questions for paths relative to the folder root
// ("" is the root itself, always visible). Paths must be clean: slash-
// separated, no leading or trailing slash, no "." or ".." segments. Its
// methods other than Explain do not allocate and are safe for concurrent
// use. The glob semantics are documented in pattern.go: doublestar/v4
// syntax, "*" matches dotfiles, a trailing "/" means the directory and
// everything below it, forbidden_read also hides everything below what it
// matches, matching is case-sensitive.
type Matcher struct {
	st *matcherState // immutable after Compile
}

// MatcherOptions adjusts compilation.
type MatcherOptions struct {
	// Hidden lists folder-relative directories that are never visible,
	// whatever the globs say (the run directory when it lies inside the
	// folder).
	Hidden []string
}

// Compile builds the matcher for g. A revoked grant compiles to a matcher
// that shows nothing.
func Compile(g *Grant, opts MatcherOptions) (*Matcher, error) { return compileMatcher(g, opts) }

// Visible reports whether rel appears in lookups and listings: it is
// readable or writable, or it is a directory on the way to something that
// could be ("deliverables" for may_read "deliverables/a.md"; every
// directory for "**/*.md"), and neither forbidden nor in a hidden
// directory. Because it cannot know whether rel is a directory, it answers
// true for any name that could lead further down; use VisibleEntry when
// the type is known.
func (m *Matcher) Visible(rel string) bool { return m.visible(rel) }

// NamesGit reports whether a may_read or may_write pattern names a
// ".git" component: only then does a view show a git repository's
// directory, whatever it is called.
func (m *Matcher) NamesGit() bool { return m.st != nil && m.st.namesGit }

// ShowsAll reports whether the grant shows everything at or below the
// directory rel, so that nothing hidden can lie there. It errs towards
// false.
func (m *Matcher) ShowsAll(rel string) bool { return m.showsAll(rel) }

// Readable reports whether rel may be opened for reading.
func (m *Matcher) Readable(rel string) bool { return m.readable(rel) }

// Writable reports whether rel may be created, written, renamed or removed.
func (m *Matcher) Writable(rel string) bool { return m.writable(rel) }

// Explain returns the full decision for rel, naming the rule.
func (m *Matcher) Explain(rel string) Decision { return m.explain(rel) }

// Render returns the grant's prompt (G-<id>.prompt.md). It never names a
// forbidden path or pattern.
func Render(g *Grant) string { return renderPrompt(g) }
