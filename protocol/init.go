package protocol

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/acpfs/acpfs/internal/pycompat"
)

// InitOptions are the inputs of Init, one per flag of `acpfs init`.
type InitOptions struct {
	Folder        string
	Participants  []string // the first one initializes and owns the proposal
	Objective     string
	Completion    []string // objective completion gates
	PrimaryType   string
	PrimaryFile   string   // default: the type's file; required for custom
	PrimaryChecks []string // custom type: required sections
	Mode          string   // "internal" (default) or "external"
	Dir           string   // default "deliverables"
	RepoRoot      string   // external mode: relative to the folder
	Resume        bool     // succeed if protocol.json already exists
	Now           time.Time
}

// InitResult tells what Init did.
type InitResult struct {
	Folder  string // absolute, symlinks resolved
	Resumed bool   // the folder already held protocol.json
	Kept    string // an existing primary deliverable that was kept, if any
}

// UsageError is an invalid combination of Init options.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

func usage(format string, args ...any) error { return &UsageError{Msg: fmt.Sprintf(format, args...)} }

// initPlan is InitOptions checked and normalised: blanks and repeated
// participants dropped, defaults filled in. It is what Init writes.
type initPlan struct {
	objective    string
	participants []string // the first one owns the proposal
	objGates     []string
	primaryType  string
	primaryFile  string
	checks       []string // custom type: required sections
	mode         string   // "internal" or "external"
	dir          string
	repoRoot     string
}

// checkInitOptions checks the options of Init and returns what Init
// writes, or the first problem as a *UsageError. It does not look at the
// disk.
func checkInitOptions(o InitOptions) (initPlan, error) {
	p := initPlan{
		objective:    pycompat.Strip(o.Objective),
		participants: stripUnique(o.Participants),
		objGates:     stripNonBlank(o.Completion),
		primaryType:  o.PrimaryType,
		primaryFile:  o.PrimaryFile,
		mode:         cmp.Or(o.Mode, "internal"),
		dir:          cmp.Or(o.Dir, "deliverables"),
		repoRoot:     o.RepoRoot,
	}
	switch {
	case p.objective == "":
		return p, usage("--objective must not be blank")
	case len(p.participants) < 2:
		return p, usage("at least two distinct non-blank --participant values are required")
	case len(p.objGates) == 0:
		return p, usage("at least one non-blank --completion is required")
	case !knownType(p.primaryType):
		return p, usage("--primary-deliverable-type must be one of %s", strings.Join(DeliverableTypes(), ", "))
	case p.mode != "internal" && p.mode != "external":
		return p, usage("--deliverables-mode must be internal or external")
	}
	if p.primaryFile == "" {
		if p.primaryType == CustomType {
			return p, usage("custom deliverables require --primary-deliverable-file")
		}
		p.primaryFile = deliverableTypes[p.primaryType].file
	}
	p.checks = stripNonBlank(o.PrimaryChecks)
	return p, p.checkFiles()
}

// checkFiles checks the primary deliverable's file and where the
// deliverables live.
func (p initPlan) checkFiles() error {
	external := p.mode == "external"
	switch {
	case p.primaryType == CustomType && len(p.checks) == 0:
		return usage("custom deliverables require at least one --primary-deliverable-check")
	case !strings.HasSuffix(p.primaryFile, ".md"):
		return usage("the primary deliverable file must end with .md")
	case pathEscapes(p.primaryFile):
		return usage("the primary deliverable file must be relative and must not contain ..")
	case pathEscapes(p.dir):
		return usage("--deliverables-dir must be relative and must not contain ..")
	case external && p.repoRoot == "":
		return usage("--repo-root is required with --deliverables-mode external")
	case external && strings.HasPrefix(p.repoRoot, "/"):
		return usage("--repo-root must be relative to the collaboration folder")
	case !external && p.repoRoot != "":
		return usage("--repo-root is only allowed with --deliverables-mode external")
	}
	return nil
}

// stripUnique returns the non-blank items stripped, each once, in order.
func stripUnique(items []string) []string {
	var out []string
	for _, s := range items {
		if s = pycompat.Strip(s); s != "" && !contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// stripNonBlank returns the non-blank items stripped, in order.
func stripNonBlank(items []string) []string {
	var out []string
	for _, s := range items {
		if s = pycompat.Strip(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func (p initPlan) owner() string { return p.participants[0] }

// primaryRef is how events and documents refer to the primary
// deliverable.
func (p initPlan) primaryRef() string {
	if p.mode == "external" {
		return "external:" + p.primaryFile
	}
	return pyJoin(p.dir, p.primaryFile)
}

// Init creates an ACP schema v2 collaboration folder: protocol.json, the
// protocol documents, the primary deliverable skeleton and events.jsonl
// holding the initialized event.
func Init(o InitOptions) (InitResult, error) {
	plan, err := checkInitOptions(o)
	if err != nil {
		return InitResult{}, err
	}
	folder := resolvePath(expandHome(o.Folder))
	res := InitResult{Folder: folder}
	if _, err := os.Stat(filepath.Join(folder, ProtocolFile)); err == nil {
		if o.Resume {
			res.Resumed = true
			return res, nil
		}
		return res, usage("%s already contains protocol.json; pass --resume to accept an existing collaboration", folder)
	}
	if fi, err := os.Stat(filepath.Join(folder, EventsFile)); err == nil && fi.Size() > 0 {
		return res, fmt.Errorf("%s already holds a non-empty events.jsonl but no protocol.json; refusing to mix histories", folder)
	}
	now := o.Now
	if now.IsZero() {
		now = time.Now()
	}
	stamp := FormatTime(now)
	if err := plan.writeProtocol(folder, stamp); err != nil {
		return res, err
	}
	if res.Kept, err = plan.writePrimary(folder); err != nil {
		return res, err
	}
	if err := plan.writeDocs(folder); err != nil {
		return res, err
	}
	return res, plan.writeInitialized(folder, stamp)
}

// protocolJSON is the protocol.json of a new collaboration, created and
// last updated at stamp.
func (p initPlan) protocolJSON(stamp string) map[string]any {
	owner := p.owner()
	partList := make([]any, len(p.participants))
	for i, id := range p.participants {
		partList[i] = map[string]any{"id": id}
	}
	var gates []any
	for _, g := range p.objGates {
		gates = append(gates, map[string]any{"source": "objective", "text": g})
	}
	for _, g := range generatedGates(p.primaryRef(), p.primaryType) {
		gates = append(gates, map[string]any{"source": "generated", "text": g})
	}
	raw := map[string]any{
		"protocol":        ProtocolName,
		"schemaVersion":   SchemaVersion,
		"objective":       p.objective,
		"objectiveGates":  anySlice(p.objGates),
		"participants":    partList,
		"completionGates": gates,
		"deliverables": map[string]any{
			"mode":        p.mode,
			"dir":         p.dir,
			"owner":       owner,
			"coAuthors":   []any{},
			"primary":     map[string]any{"type": p.primaryType, "file": p.primaryFile, "checklist": anySlice(p.checks)},
			"supporting":  []any{},
			"attachments": []any{},
		},
		"currentPhase":  PhaseDrafting,
		"proposalOwner": owner,
		"waitingFor":    []any{owner},
		"createdAt":     stamp,
		"updatedAt":     stamp,
	}
	if p.mode == "external" {
		raw["repoRoot"] = p.repoRoot
	}
	return raw
}

// anySlice is items as a JSON array, [] when empty.
func anySlice(items []string) []any {
	out := make([]any, len(items))
	for i, s := range items {
		out[i] = s
	}
	return out
}

// writeProtocol creates the folder and its protocol.json.
func (p initPlan) writeProtocol(folder, stamp string) error {
	data, err := pycompat.MarshalIndent(p.protocolJSON(stamp))
	if err != nil {
		return fmt.Errorf("encode protocol.json: %w", err)
	}
	if err := os.MkdirAll(folder, 0o755); err != nil {
		return fmt.Errorf("create folder: %w", err)
	}
	if err := writeFileAtomic(filepath.Join(folder, ProtocolFile), data); err != nil {
		return fmt.Errorf("write protocol.json: %w", err)
	}
	return nil
}

// writePrimary writes the primary deliverable's skeleton, unless a file
// is already there: then it returns that file's path.
func (p initPlan) writePrimary(folder string) (kept string, err error) {
	base := pyJoin(folder, p.dir)
	if p.mode == "external" {
		base = resolvePath(pyJoin(pyJoin(folder, p.repoRoot), p.dir))
	}
	primary := Deliverable{Type: p.primaryType, File: p.primaryFile, sections: p.checks}
	if p.primaryType != CustomType {
		primary.sections = deliverableTypes[p.primaryType].sections
	}
	path := pyJoin(base, p.primaryFile)
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	return "", writeDoc(path, renderDeliverable(primary))
}

// writeDocs writes the README and the protocol documents.
func (p initPlan) writeDocs(folder string) error {
	t := templateData{objective: p.objective, participants: p.participants, objGates: p.objGates,
		genGates: generatedGates(p.primaryRef(), p.primaryType), primaryType: p.primaryType,
		primaryRef: p.primaryRef(), dir: p.dir}
	docs := []struct{ name, text string }{
		{"README.md", renderReadme(t)},
		{ProposalFile, renderProposal(t)},
		{ReviewFile, renderReview(t)},
		{DecisionsFile, renderDecisions(t)},
		{ReadinessFile, renderReadiness(t)},
		{ConclusionFile, renderConclusion(t)},
	}
	for _, d := range docs {
		if err := writeDoc(filepath.Join(folder, d.name), d.text); err != nil {
			return err
		}
	}
	return nil
}

// writeInitialized starts events.jsonl with the initialized event.
func (p initPlan) writeInitialized(folder, stamp string) error {
	line := encodeLine(Event{Seq: 1, From: p.owner(), Event: EvInitialized, At: stamp,
		Summary: "Initialized the ACP schema v2 collaboration folder.", Doc: ProtocolFile})
	f, err := os.OpenFile(filepath.Join(folder, EventsFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return fmt.Errorf("create events.jsonl: %w", err)
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("write events.jsonl: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write events.jsonl: %w", err)
	}
	return nil
}

func writeDoc(path, text string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(path), err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	return nil
}

func expandHome(p string) string {
	if p == "~" || strings.HasPrefix(p, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, strings.TrimPrefix(p, "~"))
		}
	}
	return p
}
