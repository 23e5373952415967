package protocol

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/acpfs/acpfs/internal/atomicfile"
	"github.com/acpfs/acpfs/internal/pycompat"
)

// File names inside a collaboration folder: the two files acpfs maintains
// and the protocol documents (see ProtocolDocs). They are defined here
// only; the filesystem, the CLI and the grant presets use these names.
const (
	ProtocolFile   = "protocol.json"
	EventsFile     = "events.jsonl"
	ProposalFile   = "proposal.md"
	ReviewFile     = "review.md"
	DecisionsFile  = "decisions.md"
	ReadinessFile  = "readiness.md"
	ConclusionFile = "conclusion.md"
)

// ProtocolDocs returns the Markdown documents every collaboration folder
// holds (the validator fails without them), in the order the protocol
// uses them. The slice is the caller's.
func ProtocolDocs() []string {
	return []string{ProposalFile, ReviewFile, DecisionsFile, ReadinessFile, ConclusionFile}
}

// ProtocolName and SchemaVersion identify ACP schema v2.
const (
	ProtocolName  = "acp"
	SchemaVersion = 2
)

// Phases of the state machine.
const (
	PhaseDrafting       = "drafting"
	PhaseReviewing      = "reviewing"
	PhaseRevising       = "revising"
	PhaseDecisionReview = "decision_review"
	PhaseReadinessCheck = "readiness_check"
	PhaseCompleted      = "completed"
	PhaseBlocked        = "blocked"
)

// Phases lists every phase, sorted.
var Phases = []string{
	PhaseBlocked, PhaseCompleted, PhaseDecisionReview, PhaseDrafting,
	PhaseReadinessCheck, PhaseReviewing, PhaseRevising,
}

func knownPhase(p string) bool {
	for _, x := range Phases {
		if x == p {
			return true
		}
	}
	return false
}

// Deliverable is one declared deliverable of protocol.json.
type Deliverable struct {
	Type      string
	File      string
	Frozen    bool // supporting deliverables: "frozen" is truthy
	typeOK    bool // "type" is a string
	fileOK    bool // "file" is a string
	sections  []string
	hasFields bool
}

// Sections returns the required "## " sections of the deliverable: the
// built-in list for its type, or the checklist for custom deliverables.
func (d Deliverable) Sections() []string { return d.sections }

// Protocol is a typed view of protocol.json. Raw keeps every field as
// decoded (numbers as json.Number) so that rewrites preserve unknown keys.
type Protocol struct {
	Raw          map[string]any
	participants []string
	Supporting   []Deliverable
	Primary      Deliverable
	hasPrimary   bool
	external     bool
	dirRaw       any
	hasDir       bool
	repoRoot     string
	repoRootOK   bool
	gateTexts    []string
}

// LoadProtocol reads and parses folder/protocol.json. A missing or
// unparsable file is an *Error of kind Unavailable.
func LoadProtocol(folder string) (*Protocol, error) {
	data, err := readNoFollow(filepath.Join(folder, ProtocolFile))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, &Error{Kind: Unavailable, Rule: "protocol-json", Msg: fmt.Sprintf("missing protocol.json in %s", folder)}
		}
		return nil, &Error{Kind: Unavailable, Rule: "protocol-json", Msg: fmt.Sprintf("cannot read protocol.json: %v", err)}
	}
	return ParseProtocol(data)
}

// ParseProtocol parses the content of a protocol.json file.
func ParseProtocol(data []byte) (*Protocol, error) {
	v, err := pycompat.Decode(data)
	if err != nil {
		return nil, &Error{Kind: Unavailable, Rule: "protocol-json", Msg: fmt.Sprintf("protocol.json is not valid JSON: %v", err)}
	}
	raw, ok := v.(map[string]any)
	if !ok {
		return nil, &Error{Kind: Unavailable, Rule: "protocol-json", Msg: "protocol.json is not a JSON object"}
	}
	p := &Protocol{Raw: raw}
	if list, ok := raw["participants"].([]any); ok {
		for _, item := range list {
			switch x := item.(type) {
			case string:
				p.participants = append(p.participants, x)
			case map[string]any:
				if id, ok := x["id"].(string); ok {
					p.participants = append(p.participants, id)
				}
			}
		}
	}
	if gates, ok := raw["completionGates"].([]any); ok {
		for _, g := range gates {
			text := g
			if m, ok := g.(map[string]any); ok {
				text = m["text"]
			}
			if s, ok := text.(string); ok {
				p.gateTexts = append(p.gateTexts, s)
			}
		}
	}
	p.repoRoot, p.repoRootOK = raw["repoRoot"].(string)
	d, _ := raw["deliverables"].(map[string]any)
	if d != nil {
		p.external = d["mode"] == "external"
		p.dirRaw, p.hasDir = d["dir"]
		if prim, ok := d["primary"].(map[string]any); ok {
			p.Primary = parseDeliverable(prim)
			p.hasPrimary = true
		}
		if sup, ok := d["supporting"].([]any); ok {
			for _, item := range sup {
				if m, ok := item.(map[string]any); ok {
					p.Supporting = append(p.Supporting, parseDeliverable(m))
				}
			}
		}
	}
	return p, nil
}

func parseDeliverable(m map[string]any) Deliverable {
	d := Deliverable{hasFields: true}
	d.Type, d.typeOK = m["type"].(string)
	if f, ok := m["file"]; ok {
		d.File = pyStr(f)
		_, d.fileOK = f.(string)
	}
	d.Frozen = truthy(m["frozen"])
	if d.Type == CustomType {
		switch c := m["checklist"].(type) {
		case []any:
			for _, item := range c {
				if s, ok := item.(string); ok && pycompat.Strip(s) != "" {
					d.sections = append(d.sections, pycompat.Strip(s))
				}
			}
		case string:
			// Iterating a string yields its characters.
			for _, r := range c {
				if s := pycompat.Strip(string(r)); s != "" {
					d.sections = append(d.sections, s)
				}
			}
		}
	} else if spec, ok := deliverableTypes[d.Type]; ok {
		d.sections = spec.sections
	}
	return d
}

// ParticipantIDs returns the participant ids protocol.json lists, in its
// order: plain strings and the "id" of objects, as the reference reads
// them. The slice is the caller's.
func (p *Protocol) ParticipantIDs() []string { return slices.Clone(p.participants) }

// Objective returns the objective protocol.json states, or "" when it is
// missing or not a string.
func (p *Protocol) Objective() string {
	s, _ := p.Raw["objective"].(string)
	return s
}

// External reports whether deliverables live outside the folder.
func (p *Protocol) External() bool { return p.external }

// Dir returns deliverables.dir as the reference reads it when building
// document references (default "deliverables").
func (p *Protocol) Dir() string {
	if !p.hasDir {
		return "deliverables"
	}
	return pyStr(p.dirRaw)
}

// Ref returns how events and documents refer to a deliverable file:
// "<dir>/<file>" in internal mode, "external:<file>" in external mode.
func (p *Protocol) Ref(file string) string {
	if p.external {
		return "external:" + file
	}
	return pyJoin(p.Dir(), file)
}

// PrimaryRef returns the reference of the primary deliverable.
func (p *Protocol) PrimaryRef() string { return p.Ref(p.Primary.File) }

// GateTexts returns the completion gate texts.
func (p *Protocol) GateTexts() []string { return p.gateTexts }

// RepoRoot returns the repository root of external deliverables, as
// protocol.json gives it (relative to the folder), and false when there
// is none.
func (p *Protocol) RepoRoot() (string, bool) {
	if !p.external || !p.repoRootOK || p.repoRoot == "" {
		return "", false
	}
	return p.repoRoot, true
}

// ExternalDir returns the external deliverables' directory relative to
// the folder, slash-separated and clean ("../deliverables" for repoRoot
// ".." and dir "deliverables"), as DeliverablesBase finds it, and false
// when it cannot be named so (internal deliverables, an absolute
// repoRoot or dir).
func (p *Protocol) ExternalDir() (string, bool) {
	rr, ok := p.RepoRoot()
	if !ok || strings.HasPrefix(rr, "/") {
		return "", false
	}
	dir := ""
	if p.hasDir {
		dir = pyStr(p.dirRaw)
	}
	if strings.HasPrefix(dir, "/") {
		return "", false
	}
	return path.Clean(rr + "/" + dir), true
}

// DeliverablesBase returns the directory that holds the deliverables.
func (p *Protocol) DeliverablesBase(folder string) (string, error) {
	if p.external {
		if !p.repoRootOK {
			return "", errors.New("repoRoot is required for external deliverables")
		}
		dir := ""
		if p.hasDir {
			dir = pyStr(p.dirRaw)
		}
		return resolvePath(pyJoin(pyJoin(folder, p.repoRoot), dir)), nil
	}
	return pyJoin(folder, p.Dir()), nil
}

// DeliverablePath returns the file system path of a deliverable file.
func (p *Protocol) DeliverablePath(folder, file string) (string, error) {
	base, err := p.DeliverablesBase(folder)
	if err != nil {
		return "", err
	}
	return pyJoin(base, file), nil
}

// deliverableFile maps an event's doc and role to the declared file, or
// returns a reason why the doc is not a declared deliverable.
func (p *Protocol) deliverableFile(doc, role string) (string, string) {
	if role == RolePrimary {
		if doc != p.PrimaryRef() {
			return "", fmt.Sprintf("doc %q is not the primary deliverable %q", doc, p.PrimaryRef())
		}
		return p.Primary.File, ""
	}
	for _, s := range p.Supporting {
		if doc == p.Ref(s.File) {
			return s.File, ""
		}
	}
	return "", fmt.Sprintf("doc %q is not a declared supporting deliverable", doc)
}

// dynamicFields are the protocol.json keys that appends rewrite.
var dynamicFields = map[string]bool{"currentPhase": true, "proposalOwner": true, "waitingFor": true, "updatedAt": true}

// sameStatic reports whether two protocols agree on every key except the
// ones appends rewrite.
func sameStatic(a, b map[string]any) bool {
	for k, v := range a {
		if dynamicFields[k] {
			continue
		}
		w, ok := b[k]
		if !ok || !pycompat.Equal(v, w) {
			return false
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok && !dynamicFields[k] {
			return false
		}
	}
	return true
}

// pyStr renders a decoded JSON value as Python's str() would.
func pyStr(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case nil:
		return "None"
	case bool:
		if x {
			return "True"
		}
		return "False"
	case json.Number:
		return x.String()
	default:
		b, _ := json.Marshal(x)
		return string(b)
	}
}

// truthy is Python's truth value of a decoded JSON value.
func truthy(v any) bool {
	switch x := v.(type) {
	case nil:
		return false
	case bool:
		return x
	case string:
		return x != ""
	case json.Number:
		f, err := x.Float64()
		return err != nil || f != 0
	case []any:
		return len(x) > 0
	case map[string]any:
		return len(x) > 0
	}
	return true
}

// pyNorm normalizes a path the way Python's PurePosixPath does: empty and
// "." components vanish, ".." is kept.
func pyNorm(p string) string {
	abs := strings.HasPrefix(p, "/")
	parts := strings.Split(p, "/")
	out := parts[:0]
	for _, s := range parts {
		if s != "" && s != "." {
			out = append(out, s)
		}
	}
	s := strings.Join(out, "/")
	switch {
	case abs:
		return "/" + s
	case s == "":
		return "."
	}
	return s
}

// pyJoin is Python's Path(a) / b.
func pyJoin(a, b string) string {
	if strings.HasPrefix(b, "/") {
		return pyNorm(b)
	}
	if a == "" {
		return pyNorm(b)
	}
	return pyNorm(a + "/" + b)
}

// pathEscapes reports an absolute path or one with a ".." component.
func pathEscapes(v string) bool {
	if strings.HasPrefix(v, "/") {
		return true
	}
	for _, s := range strings.Split(v, "/") {
		if s == ".." {
			return true
		}
	}
	return false
}

// resolvePath makes p absolute and resolves symbolic links as far as the
// path exists, then applies the remaining components lexically (Python's
// Path.resolve(strict=False)).
func resolvePath(p string) string {
	if !filepath.IsAbs(p) {
		if abs, err := filepath.Abs(p); err == nil {
			p = abs
		}
	}
	return resolveDepth(p, 0)
}

func resolveDepth(p string, depth int) string {
	parts := strings.Split(p, "/")
	cur := "/"
	for i, part := range parts {
		switch part {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, part)
		fi, err := os.Lstat(next)
		if err != nil {
			rest := append([]string{next}, parts[i+1:]...)
			return filepath.Clean(strings.Join(rest, "/"))
		}
		if fi.Mode()&os.ModeSymlink != 0 && depth < 40 {
			target, err := os.Readlink(next)
			if err == nil {
				if !filepath.IsAbs(target) {
					target = filepath.Join(cur, target)
				}
				next = resolveDepth(target, depth+1)
			}
		}
		cur = next
	}
	return cur
}

// readNoFollow reads a protocol file without following a symlink in its
// place: whoever can write the folder could otherwise point acpfs, which
// may run as root, at any file on the host.
func readNoFollow(path string) ([]byte, error) {
	f, err := atomicfile.OpenFile(path, syscall.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}
