package protocol

import (
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

// Init creates an ACP schema v2 collaboration folder: protocol.json, the
// protocol documents, the primary deliverable skeleton and events.jsonl
// holding the initialized event.
func Init(o InitOptions) (InitResult, error) {
	objective := pycompat.Strip(o.Objective)
	var participants []string
	for _, p := range o.Participants {
		p = pycompat.Strip(p)
		if p != "" && !contains(participants, p) {
			participants = append(participants, p)
		}
	}
	var objGates []string
	for _, g := range o.Completion {
		if g = pycompat.Strip(g); g != "" {
			objGates = append(objGates, g)
		}
	}
	mode := o.Mode
	if mode == "" {
		mode = "internal"
	}
	dir := o.Dir
	if dir == "" {
		dir = "deliverables"
	}
	switch {
	case objective == "":
		return InitResult{}, usage("--objective must not be blank")
	case len(participants) < 2:
		return InitResult{}, usage("at least two distinct non-blank --participant values are required")
	case len(objGates) == 0:
		return InitResult{}, usage("at least one non-blank --completion is required")
	case !knownType(o.PrimaryType):
		return InitResult{}, usage("--primary-deliverable-type must be one of %s", strings.Join(DeliverableTypes(), ", "))
	case mode != "internal" && mode != "external":
		return InitResult{}, usage("--deliverables-mode must be internal or external")
	}
	primaryFile := o.PrimaryFile
	if primaryFile == "" {
		if o.PrimaryType == CustomType {
			return InitResult{}, usage("custom deliverables require --primary-deliverable-file")
		}
		primaryFile = deliverableTypes[o.PrimaryType].file
	}
	var checks []string
	for _, c := range o.PrimaryChecks {
		if c = pycompat.Strip(c); c != "" {
			checks = append(checks, c)
		}
	}
	switch {
	case o.PrimaryType == CustomType && len(checks) == 0:
		return InitResult{}, usage("custom deliverables require at least one --primary-deliverable-check")
	case !strings.HasSuffix(primaryFile, ".md"):
		return InitResult{}, usage("the primary deliverable file must end with .md")
	case pathEscapes(primaryFile):
		return InitResult{}, usage("the primary deliverable file must be relative and must not contain ..")
	case pathEscapes(dir):
		return InitResult{}, usage("--deliverables-dir must be relative and must not contain ..")
	case mode == "external" && o.RepoRoot == "":
		return InitResult{}, usage("--repo-root is required with --deliverables-mode external")
	case mode == "external" && strings.HasPrefix(o.RepoRoot, "/"):
		return InitResult{}, usage("--repo-root must be relative to the collaboration folder")
	case mode != "external" && o.RepoRoot != "":
		return InitResult{}, usage("--repo-root is only allowed with --deliverables-mode external")
	}

	folder := resolvePath(expandHome(o.Folder))
	res := InitResult{Folder: folder}
	if _, err := os.Stat(filepath.Join(folder, protocolFile)); err == nil {
		if o.Resume {
			res.Resumed = true
			return res, nil
		}
		return res, usage("%s already contains protocol.json; pass --resume to accept an existing collaboration", folder)
	}
	if fi, err := os.Stat(filepath.Join(folder, eventsFile)); err == nil && fi.Size() > 0 {
		return res, fmt.Errorf("%s already holds a non-empty events.jsonl but no protocol.json; refusing to mix histories", folder)
	}
	now := o.Now
	if now.IsZero() {
		now = time.Now()
	}
	stamp := formatTime(now)
	owner := participants[0]
	primaryRef := pyJoin(dir, primaryFile)
	if mode == "external" {
		primaryRef = "external:" + primaryFile
	}
	genGates := generatedGates(primaryRef, o.PrimaryType)

	partList := make([]any, len(participants))
	for i, p := range participants {
		partList[i] = map[string]any{"id": p}
	}
	var gates []any
	for _, g := range objGates {
		gates = append(gates, map[string]any{"source": "objective", "text": g})
	}
	for _, g := range genGates {
		gates = append(gates, map[string]any{"source": "generated", "text": g})
	}
	checkList := make([]any, len(checks))
	for i, c := range checks {
		checkList[i] = c
	}
	objList := make([]any, len(objGates))
	for i, g := range objGates {
		objList[i] = g
	}
	raw := map[string]any{
		"protocol":        ProtocolName,
		"schemaVersion":   SchemaVersion,
		"objective":       objective,
		"objectiveGates":  objList,
		"participants":    partList,
		"completionGates": gates,
		"deliverables": map[string]any{
			"mode":        mode,
			"dir":         dir,
			"owner":       owner,
			"coAuthors":   []any{},
			"primary":     map[string]any{"type": o.PrimaryType, "file": primaryFile, "checklist": checkList},
			"supporting":  []any{},
			"attachments": []any{},
		},
		"currentPhase":  PhaseDrafting,
		"proposalOwner": owner,
		"waitingFor":    []any{owner},
		"createdAt":     stamp,
		"updatedAt":     stamp,
	}
	if mode == "external" {
		raw["repoRoot"] = o.RepoRoot
	}
	protoBytes, err := pycompat.MarshalIndent(raw)
	if err != nil {
		return res, fmt.Errorf("encode protocol.json: %w", err)
	}
	if err := os.MkdirAll(folder, 0o755); err != nil {
		return res, fmt.Errorf("create folder: %w", err)
	}
	if err := writeFileAtomic(filepath.Join(folder, protocolFile), protoBytes); err != nil {
		return res, fmt.Errorf("write protocol.json: %w", err)
	}

	base := pyJoin(folder, dir)
	if mode == "external" {
		base = resolvePath(pyJoin(pyJoin(folder, o.RepoRoot), dir))
	}
	primary := Deliverable{Type: o.PrimaryType, File: primaryFile, sections: checks}
	if o.PrimaryType != CustomType {
		primary.sections = deliverableTypes[o.PrimaryType].sections
	}
	primaryPath := pyJoin(base, primaryFile)
	if _, err := os.Stat(primaryPath); err == nil {
		res.Kept = primaryPath
	} else if err := writeDoc(primaryPath, renderDeliverable(primary)); err != nil {
		return res, err
	}

	t := templateData{objective: objective, participants: participants, objGates: objGates, genGates: genGates,
		primaryType: o.PrimaryType, primaryRef: primaryRef, dir: dir}
	docs := []struct{ name, text string }{
		{"README.md", renderReadme(t)},
		{proposalFile, renderProposal(t)},
		{reviewFile, renderReview(t)},
		{decisionsFile, renderDecisions(t)},
		{readinessFile, renderReadiness(t)},
		{conclusionFile, renderConclusion(t)},
	}
	for _, d := range docs {
		if err := writeDoc(filepath.Join(folder, d.name), d.text); err != nil {
			return res, err
		}
	}
	line := encodeLine(Event{Seq: 1, From: owner, Event: EvInitialized, At: stamp,
		Summary: "Initialized the ACP schema v2 collaboration folder.", Doc: protocolFile})
	f, err := os.OpenFile(filepath.Join(folder, eventsFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return res, fmt.Errorf("create events.jsonl: %w", err)
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		f.Close()
		return res, fmt.Errorf("write events.jsonl: %w", err)
	}
	if err := f.Close(); err != nil {
		return res, fmt.Errorf("write events.jsonl: %w", err)
	}
	return res, nil
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
