// Package drive runs a whole ACP collaboration from a collaboration file:
// it initializes (or resumes) the folder, creates the grants, serves the
// views and wakes every participant at its turn in its own `acpfs run`
// sandbox, with a receipt for every turn (docs/drive.md).
package drive

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bmatcuk/doublestar/v4"
	"go.yaml.in/yaml/v3"

	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/internal/limits"
	"github.com/acpfs/acpfs/protocol"
)

// Defaults of a collaboration file.
const (
	DefaultFolder   = "collab"
	DefaultRuns     = "agent_runs"
	DefaultRoot     = "mnt"
	DefaultDeadline = 30 * time.Minute
	DefaultTimeout  = 10 * time.Minute
	DefaultRetries  = 1
)

// What the driver does once a participant's retries are used up.
const (
	ExhaustedStop    = "stop"    // stop the collaboration, saying why
	ExhaustedBlocked = "blocked" // append blocked on the participant's behalf, through its view
)

// Network modes of a participant's sandbox.
const (
	NetNone  = "none"
	NetHost  = "host"
	NetAllow = "allow" // an allow-list, passed to acpfs run as --net allow=HOST,...
)

// Config is a parsed and checked collaboration file. Paths are absolute.
type Config struct {
	Path        string
	Objective   string
	Completion  []string
	Deliverable Deliverable
	Folder      string
	Runs        string
	Root        string
	// Deadline bounds the whole collaboration, from the driver's start.
	Deadline     time.Duration
	Participants []Participant
}

// Deliverable is the primary deliverable: a built-in type, or custom
// with its file and required sections.
type Deliverable struct {
	Type  string
	File  string
	Check []string
}

// Participant is one participant and how its turns run.
type Participant struct {
	ID    string
	Grant GrantSpec
	// Command is the argv of a turn; a shell string in the file becomes
	// sh -c STRING.
	Command []string
	// Env names variables of the driver's environment the command gets.
	Env     []string
	Network Network
	// RO and RW are host paths the sandbox also shows.
	RO, RW      []string
	Limits      Limits
	Timeout     time.Duration
	Retries     int
	OnExhausted string
	// Line is where the participant is in the file, for messages.
	Line int
}

// GrantSpec is what the participant's grant holds.
type GrantSpec struct {
	Preset    string
	Role      string
	Objective string
	Forbid    []string
	MayRead   []string
	MayWrite  []string
}

// Network is a participant's network: none, the host's, or an
// allow-list.
type Network struct {
	Mode  string
	Allow []string
}

// Limits are the sandbox's control-group limits; zero values keep acpfs
// run's defaults.
type Limits struct {
	Memory string
	Pids   int64
	CPU    float64
}

// Participant returns the participant with id, or nil.
func (c *Config) Participant(id string) *Participant {
	for i := range c.Participants {
		if c.Participants[i].ID == id {
			return &c.Participants[i]
		}
	}
	return nil
}

// IDs are the participant ids in file order (the first initializes).
func (c *Config) IDs() []string {
	ids := make([]string, len(c.Participants))
	for i, p := range c.Participants {
		ids[i] = p.ID
	}
	return ids
}

// FileError lists every problem of a collaboration file, each as
// FILE:LINE:COLUMN: message.
type FileError struct {
	Problems []string
}

func (e *FileError) Error() string {
	return strings.Join(e.Problems, "\n")
}

// Load reads and checks the collaboration file at path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read collaboration file: %w", err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	// Messages name the file as the user did.
	return parse(abs, path, data)
}

// Parse checks data, the collaboration file at path (absolute: relative
// paths in the file are relative to its directory). Every problem is
// reported with its line and column; unknown fields are problems.
func Parse(path string, data []byte) (*Config, error) { return parse(path, path, data) }

func parse(path, name string, data []byte) (*Config, error) {
	p := &parser{name: name, dir: filepath.Dir(path)}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		// yaml's own messages carry "line N"; keep them as they are.
		return nil, &FileError{Problems: []string{fmt.Sprintf("%s: %v", name, err)}}
	}
	if len(doc.Content) == 0 {
		return nil, &FileError{Problems: []string{fmt.Sprintf("%s:1:1: the file is empty", name)}}
	}
	cfg := p.config(doc.Content[0])
	cfg.Path = path
	if len(p.problems) > 0 {
		return nil, &FileError{Problems: p.problems}
	}
	return cfg, nil
}

type parser struct {
	name, dir string
	problems  []string
}

func (p *parser) errorf(n *yaml.Node, format string, args ...any) {
	p.problems = append(p.problems, fmt.Sprintf("%s:%d:%d: %s", p.name, n.Line, n.Column, fmt.Sprintf(format, args...)))
}

// fields walks a mapping node: each key must be one of known, and its
// value is handed to set. It returns the key nodes by name, for
// messages about missing or conflicting fields.
func (p *parser) fields(n *yaml.Node, what string, known []string, set func(key string, v *yaml.Node)) map[string]*yaml.Node {
	seen := map[string]*yaml.Node{}
	if n.Kind != yaml.MappingNode {
		p.errorf(n, "%s: want a mapping of fields (%s)", what, strings.Join(known, ", "))
		return seen
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if prev, dup := seen[k.Value]; dup {
			p.errorf(k, "%s: %s given twice (first at line %d)", what, k.Value, prev.Line)
			continue
		}
		seen[k.Value] = k
		if !slices.Contains(known, k.Value) {
			p.errorf(k, "%s: unknown field %q (known: %s)", what, k.Value, strings.Join(known, ", "))
			continue
		}
		set(k.Value, v)
	}
	return seen
}

func (p *parser) str(n *yaml.Node, what string) string {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		p.errorf(n, "%s: want a string", what)
		return ""
	}
	return n.Value
}

func (p *parser) strs(n *yaml.Node, what string) []string {
	if n.Kind == yaml.ScalarNode && n.Tag != "!!null" {
		return []string{n.Value}
	}
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, "%s: want a list of strings", what)
		return nil
	}
	var out []string
	for _, e := range n.Content {
		if e.Kind != yaml.ScalarNode || e.Tag == "!!null" {
			p.errorf(e, "%s: want a string", what)
			continue
		}
		out = append(out, e.Value)
	}
	return out
}

func (p *parser) duration(n *yaml.Node, what string) time.Duration {
	s := p.str(n, what)
	if s == "" {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		p.errorf(n, "%s: %q is not a positive duration (e.g. 90s, 10m, 1h)", what, s)
		return 0
	}
	return d
}

func (p *parser) int(n *yaml.Node, what string) int64 {
	v, err := strconv.ParseInt(p.str(n, what), 10, 64)
	if err != nil || v < 0 {
		p.errorf(n, "%s: want a whole number, 0 or more", what)
		return 0
	}
	return v
}

// path makes a path of the file absolute, relative to the file's
// directory.
func (p *parser) path(s string) string {
	if s == "" || filepath.IsAbs(s) {
		return filepath.Clean(s)
	}
	return filepath.Join(p.dir, s)
}

var (
	topFields         = []string{"objective", "completion", "deliverable", "folder", "runs", "root", "deadline", "participants"}
	deliverableFields = []string{"type", "file", "check"}
	participantFields = []string{"id", "grant", "command", "env", "network", "ro", "rw", "limits", "timeout", "retries", "on_exhausted"}
	grantFields       = []string{"preset", "role", "objective", "forbid", "may_read", "may_write"}
	limitFields       = []string{"memory", "pids", "cpu"}
	networkFields     = []string{"allow"}
	// The patterns are compiled at first use: every acpfs command links
	// this package, and the bounded repeat alone costs a fraction of a
	// millisecond of each process's start (`acpfs append` runs once per
	// event).
	idPattern  = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`) })
	envPattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`) })
)

func (p *parser) config(n *yaml.Node) *Config {
	c := &Config{Deadline: DefaultDeadline}
	folder, runs, root := DefaultFolder, DefaultRuns, DefaultRoot
	var partsNode *yaml.Node
	seen := p.fields(n, "collaboration file", topFields, func(k string, v *yaml.Node) {
		switch k {
		case "objective":
			c.Objective = strings.TrimSpace(p.str(v, k))
			if c.Objective == "" {
				p.errorf(v, "objective: must not be empty")
			}
		case "completion":
			c.Completion = p.strs(v, k)
		case "deliverable":
			c.Deliverable = p.deliverable(v)
		case "folder":
			folder = p.str(v, k)
		case "runs":
			runs = p.str(v, k)
		case "root":
			root = p.str(v, k)
		case "deadline":
			c.Deadline = p.duration(v, k)
		case "participants":
			partsNode = v
		}
	})
	for _, req := range []string{"objective", "completion", "deliverable", "participants"} {
		if seen[req] == nil && n.Kind == yaml.MappingNode {
			p.errorf(n, "collaboration file: %s is required", req)
		}
	}
	c.Folder, c.Runs, c.Root = p.path(folder), p.path(runs), p.path(root)
	if n.Kind == yaml.MappingNode {
		p.checkPlaces(n, seen, c)
	}
	if partsNode != nil {
		c.Participants = p.participants(partsNode)
	}
	return c
}

// checkPlaces refuses a run directory or mount root inside the folder
// (a view would show it) and places that coincide.
func (p *parser) checkPlaces(n *yaml.Node, seen map[string]*yaml.Node, c *Config) {
	at := func(k string) *yaml.Node {
		if s := seen[k]; s != nil {
			return s
		}
		return n
	}
	within := func(a, b string) bool { return a == b || strings.HasPrefix(a, b+string(filepath.Separator)) }
	if within(c.Runs, c.Folder) || within(c.Folder, c.Runs) {
		p.errorf(at("runs"), "runs: the run directory %s and the folder %s must lie apart (no view may show the run directory)", c.Runs, c.Folder)
	}
	if within(c.Root, c.Folder) || within(c.Folder, c.Root) {
		p.errorf(at("root"), "root: the mount root %s and the folder %s must lie apart", c.Root, c.Folder)
	}
	if within(c.Root, c.Runs) || within(c.Runs, c.Root) {
		p.errorf(at("root"), "root: the mount root %s and the run directory %s must lie apart", c.Root, c.Runs)
	}
}

func (p *parser) deliverable(n *yaml.Node) Deliverable {
	var d Deliverable
	var typeNode *yaml.Node
	seen := p.fields(n, "deliverable", deliverableFields, func(k string, v *yaml.Node) {
		switch k {
		case "type":
			d.Type, typeNode = p.str(v, "deliverable.type"), v
		case "file":
			d.File = p.str(v, "deliverable.file")
		case "check":
			d.Check = p.strs(v, "deliverable.check")
		}
	})
	if n.Kind != yaml.MappingNode {
		return d
	}
	types := protocol.DeliverableTypes()
	if !slices.Contains(types, protocol.CustomType) {
		types = append(types, protocol.CustomType)
	}
	switch {
	case typeNode == nil:
		p.errorf(n, "deliverable: type is required (%s)", strings.Join(types, ", "))
	case !slices.Contains(types, d.Type):
		p.errorf(typeNode, "deliverable.type: unknown type %q (known: %s)", d.Type, strings.Join(types, ", "))
	case d.Type == protocol.CustomType && (d.File == "" || len(d.Check) == 0):
		p.errorf(typeNode, "deliverable: a custom deliverable needs file and check (its required sections)")
	case d.Type != protocol.CustomType && (seen["file"] != nil || seen["check"] != nil):
		p.errorf(typeNode, "deliverable: file and check are for type custom; %s has its own", d.Type)
	}
	return d
}

func (p *parser) participants(n *yaml.Node) []Participant {
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, "participants: want a list")
		return nil
	}
	if len(n.Content) < 2 {
		p.errorf(n, "participants: a collaboration needs at least two (the first one owns the proposal)")
	}
	var out []Participant
	ids := map[string]int{}
	for _, e := range n.Content {
		pt := p.participant(e)
		if pt.ID != "" {
			if line, dup := ids[pt.ID]; dup {
				p.errorf(e, "participants: %s is listed twice (first at line %d)", pt.ID, line)
			}
			ids[pt.ID] = e.Line
		}
		out = append(out, pt)
	}
	return out
}

func (p *parser) participant(n *yaml.Node) Participant {
	pt := Participant{Timeout: DefaultTimeout, Retries: DefaultRetries, OnExhausted: ExhaustedStop, Network: Network{Mode: NetNone}, Line: n.Line}
	var grantNode, exhaustedNode *yaml.Node
	seen := p.fields(n, "participant", participantFields, func(k string, v *yaml.Node) {
		what := "participant." + k
		switch k {
		case "id":
			pt.ID = p.str(v, what)
			if pt.ID != "" && !idPattern().MatchString(pt.ID) {
				p.errorf(v, "%s: %q: want letters, digits, '.', '_' or '-' (at most 64, not starting with a punctuation mark)", what, pt.ID)
			}
		case "grant":
			grantNode = v
			pt.Grant = p.grant(v)
		case "command":
			pt.Command = p.command(v)
		case "env":
			pt.Env = p.strs(v, what)
			for i, name := range pt.Env {
				if !envPattern().MatchString(name) || strings.HasPrefix(name, "ACPFS_") {
					p.errorf(elem(v, i), "%s: %q: want a variable name (ACPFS_* are the driver's own)", what, name)
				}
			}
		case "network":
			pt.Network = p.network(v)
		case "ro":
			pt.RO = p.paths(v, what)
		case "rw":
			pt.RW = p.paths(v, what)
		case "limits":
			pt.Limits = p.limits(v)
		case "timeout":
			pt.Timeout = p.duration(v, what)
		case "retries":
			pt.Retries = int(p.int(v, what))
		case "on_exhausted":
			exhaustedNode = v
			pt.OnExhausted = p.str(v, what)
			if pt.OnExhausted != ExhaustedStop && pt.OnExhausted != ExhaustedBlocked {
				p.errorf(v, "%s: %q: want stop or blocked", what, pt.OnExhausted)
			}
		}
	})
	if n.Kind != yaml.MappingNode {
		return pt
	}
	for _, req := range []string{"id", "grant", "command"} {
		if seen[req] == nil {
			p.errorf(n, "participant: %s is required", req)
		}
	}
	if grantNode != nil && exhaustedNode != nil && pt.OnExhausted == ExhaustedBlocked && !pt.Grant.writesEvents() {
		p.errorf(exhaustedNode, "participant.on_exhausted: blocked is appended through %s's own view, and its grant does not let it write events.jsonl", pt.ID)
	}
	return pt
}

// elem is the i-th element of a sequence node, or the node itself for a
// scalar given in place of a list.
func elem(n *yaml.Node, i int) *yaml.Node {
	if n.Kind == yaml.SequenceNode && i < len(n.Content) {
		return n.Content[i]
	}
	return n
}

func (p *parser) paths(n *yaml.Node, what string) []string {
	var out []string
	for i, s := range p.strs(n, what) {
		abs := p.path(s)
		if _, err := os.Stat(abs); err != nil {
			p.errorf(elem(n, i), "%s: %s: %v", what, s, errors.Unwrap(err))
			continue
		}
		out = append(out, abs)
	}
	return out
}

func (p *parser) command(n *yaml.Node) []string {
	if n.Kind == yaml.ScalarNode && n.Tag != "!!null" {
		if strings.TrimSpace(n.Value) == "" {
			p.errorf(n, "participant.command: must not be empty")
			return nil
		}
		return []string{"/bin/sh", "-c", n.Value}
	}
	argv := p.strs(n, "participant.command")
	if len(argv) == 0 || argv[0] == "" {
		p.errorf(n, "participant.command: want an argv list or a shell string")
		return nil
	}
	return argv
}

func (p *parser) grant(n *yaml.Node) GrantSpec {
	var g GrantSpec
	var presetNode *yaml.Node
	p.fields(n, "grant", grantFields, func(k string, v *yaml.Node) {
		what := "grant." + k
		switch k {
		case "preset":
			g.Preset, presetNode = p.str(v, what), v
		case "role":
			g.Role = p.str(v, what)
		case "objective":
			g.Objective = p.str(v, what)
		case "forbid":
			g.Forbid = p.globs(v, what)
		case "may_read":
			g.MayRead = p.globs(v, what)
		case "may_write":
			g.MayWrite = p.globs(v, what)
		}
	})
	if n.Kind != yaml.MappingNode {
		return g
	}
	switch {
	case presetNode != nil && !slices.Contains(grants.Presets(), g.Preset):
		p.errorf(presetNode, "grant.preset: unknown preset %q (known: %s)", g.Preset, strings.Join(grants.Presets(), ", "))
	case presetNode == nil && (g.Role == "" || len(g.MayRead) == 0):
		p.errorf(n, "grant: without a preset, give role and may_read")
	}
	return g
}

func (p *parser) globs(n *yaml.Node, what string) []string {
	gs := p.strs(n, what)
	for i, g := range gs {
		if !doublestar.ValidatePattern(g) || strings.HasPrefix(g, "/") {
			p.errorf(elem(n, i), "%s: %q is not a folder-relative glob", what, g)
		}
	}
	return gs
}

func (p *parser) network(n *yaml.Node) Network {
	if n.Kind == yaml.ScalarNode {
		switch n.Value {
		case NetNone, NetHost:
			return Network{Mode: n.Value}
		}
		p.errorf(n, "participant.network: %q: want none, host or {allow: [HOST[:PORT], ...]}", n.Value)
		return Network{Mode: NetNone}
	}
	nw := Network{Mode: NetAllow}
	p.fields(n, "participant.network", networkFields, func(k string, v *yaml.Node) {
		nw.Allow = p.strs(v, "participant.network.allow")
		if len(nw.Allow) == 0 {
			p.errorf(v, "participant.network.allow: list at least one host (or say network: none)")
		}
		for i, h := range nw.Allow {
			if h == "" || strings.ContainsAny(h, ", /") {
				p.errorf(elem(v, i), "participant.network.allow: %q: want HOST or HOST:PORT", h)
			}
		}
	})
	return nw
}

func (p *parser) limits(n *yaml.Node) Limits {
	var l Limits
	p.fields(n, "participant.limits", limitFields, func(k string, v *yaml.Node) {
		what := "participant.limits." + k
		switch k {
		case "memory":
			l.Memory = p.str(v, what)
			if b, err := limits.ParseBytes(l.Memory); err != nil || b <= 0 {
				p.errorf(v, "%s: %q: want a size such as 512M or 2G", what, l.Memory)
			}
		case "pids":
			l.Pids = p.int(v, what)
		case "cpu":
			f, err := strconv.ParseFloat(p.str(v, what), 64)
			if err != nil || f < 0 {
				p.errorf(v, "%s: want a number of CPUs such as 1.5", what)
			}
			l.CPU = f
		}
	})
	return l
}

// writesEvents reports whether the grant lets its participant append to
// events.jsonl.
func (g GrantSpec) writesEvents() bool {
	if g.Preset != "" {
		return true // both presets write events.jsonl
	}
	for _, w := range g.MayWrite {
		if ok, _ := doublestar.Match(w, protocol.EventsFile); ok {
			return true
		}
	}
	return false
}
