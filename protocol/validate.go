package protocol

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/acpfs/acpfs/internal/digest"
	"github.com/acpfs/acpfs/internal/pycompat"
)

// requiredFiles must exist in every collaboration folder.
var requiredFiles = []string{ProtocolFile, EventsFile, ProposalFile, ReviewFile, DecisionsFile, ReadinessFile, ConclusionFile}

// forbiddenFiles belong to older protocol versions and must not exist.
var forbiddenFiles = []string{"state.log", "discussion.md", "opinions.md"}

// validator collects the findings of one Validate run.
type validator struct {
	folder string
	res    Result
}

func (v *validator) err(file, rule, format string, args ...any) {
	v.res.Errors = append(v.res.Errors, Violation{File: file, Rule: rule, Msg: fmt.Sprintf(format, args...)}.String())
}

func (v *validator) warn(file, rule, format string, args ...any) {
	v.res.Warnings = append(v.res.Warnings, Violation{File: file, Rule: rule, Msg: fmt.Sprintf(format, args...)}.String())
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// readText reads a document for a rule; a file that is not UTF-8 is an
// error of its own (the rules are defined on text).
func (v *validator) readText(path, name string) (string, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", false
	}
	if !utf8.Valid(b) {
		v.err(name, "utf8", "%s is not valid UTF-8", name)
	}
	return pycompat.Text(b), true
}

// historyFacts are what the folder-level rules need from the replay.
type historyFacts struct {
	state         core
	reviewSeqs    []string          // seqs of review_submitted events
	headingEvents map[string]evInfo // events whose seq has a review.md heading
	frozenEvents  []frozenEvent
}

type evInfo struct {
	name, from string
	fromOK     bool
}

type frozenEvent struct {
	line, seq       int
	doc, role, hash string
}

func validateFolder(folder string) Result {
	abs := resolvePath(expandHome(folder))
	v := &validator{folder: abs}
	v.files()
	// review.md is read first: the replay notes the events its headings
	// name. Its findings are reported after protocol.json's, as before.
	docs := &validator{folder: abs}
	reviewText, _ := docs.readText(filepath.Join(abs, ReviewFile), ReviewFile)
	headings := reviewHeadings(reviewText)

	// protocol.json and events.jsonl are read as one consistent pair,
	// under the shared lock every appender excludes (see readPair).
	events := &validator{folder: abs}
	p, facts, err := events.readPair(headings)
	if err != nil {
		var pe *Error
		msg := err.Error()
		if errors.As(err, &pe) {
			msg = fmt.Sprintf("%s [%s]", pe.Msg, pe.Rule)
		}
		v.res.Errors = append([]string{ProtocolFile + ": " + msg}, v.res.Errors...)
		return v.res
	}
	v.protocolFields(p)
	schemaOK := v.deliverablesSchema(p)
	v.res.Errors = append(v.res.Errors, docs.res.Errors...)
	v.res.Errors = append(v.res.Errors, events.res.Errors...)
	v.res.Warnings = append(v.res.Warnings, events.res.Warnings...)
	v.reviewLinks(p, reviewText, headings, facts)
	frozenDocs := v.frozenEvents(p, facts.frozenEvents)
	st := &facts.state
	v.derivedState(p, st)

	readinessText, _ := v.readText(filepath.Join(abs, ReadinessFile), ReadinessFile)
	rd := scanReadinessText(readinessText)
	if schemaOK {
		v.content(p, st, frozenDocs)
	}
	v.readiness(rd, st)
	v.completion(p, rd, st)
	return v.res
}

// files checks that the folder holds every required file and none of the
// files of the schema before v2.
func (v *validator) files() {
	for _, name := range requiredFiles {
		if !exists(filepath.Join(v.folder, name)) {
			v.err(name, "required-file", "%s is missing", name)
		}
	}
	for _, name := range forbiddenFiles {
		if exists(filepath.Join(v.folder, name)) {
			v.err(name, "forbidden-file", "%s is not part of ACP schema v2; remove it and use events.jsonl and readiness.md", name)
		}
	}
}

// derivedState checks the fields of protocol.json the events decide
// (phase, proposal owner, waiting list) against the replay.
func (v *validator) derivedState(p *Protocol, st *core) {
	raw := p.Raw
	if st.Phase != "" && raw["currentPhase"] != st.Phase {
		v.err(ProtocolFile, "derived-state", "currentPhase is %s but the events give %s", pyRepr(raw["currentPhase"]), st.Phase)
	}
	if val, ok := raw["proposalOwner"]; ok && st.OwnerSet && val != st.Owner {
		v.err(ProtocolFile, "derived-state", "proposalOwner is %s but the events give %q", pyRepr(val), st.Owner)
	}
	if val, ok := raw["waitingFor"]; ok {
		want := make([]any, len(st.Waiting))
		for i, w := range st.Waiting {
			want[i] = w
		}
		if !pycompat.Equal(val, want) {
			v.err(ProtocolFile, "derived-state", "waitingFor is %s but the events give %s", pyRepr(val), pyRepr(want))
		}
	}
}

// content checks the deliverables' content, decisions.md and the
// attachments, once the deliverables' declaration is sound; the primary
// deliverable must be frozen once the events say it was.
func (v *validator) content(p *Protocol, st *core, frozenDocs map[string]bool) {
	requireFrozen := st.HasPrimaryFrozenEvent || st.HasReadinessPassed || st.HasCompleted
	v.primaryContent(p, requireFrozen)
	v.supportingContent(p, frozenDocs)
	if text, ok := v.readText(filepath.Join(v.folder, DecisionsFile), DecisionsFile); !ok {
		v.err(DecisionsFile, "required-file", "decisions.md is missing")
	} else {
		for _, pr := range decisionProblems(text, p) {
			v.err(DecisionsFile, "decisions", "%s", strings.TrimPrefix(pr, "decisions.md "))
		}
	}
	v.attachments(p)
}

// readiness checks readiness.md against the milestones the events logged:
// nothing blocking or unresolved once a decision is accepted, and a
// checked "Ready to implement" and a frozen primary once readiness passed.
func (v *validator) readiness(rd Readiness, st *core) {
	if st.HasDecisionAccepted {
		if len(rd.Blocking) > 0 {
			v.err(ReadinessFile, "readiness-blocking", "%d [blocking] item(s) remain after decision_accepted", len(rd.Blocking))
		}
		if len(rd.Unresolved) > 0 {
			v.err(ReadinessFile, "readiness-unresolved", "%d unresolved item(s) ([unresolved] or TBD) remain after decision_accepted", len(rd.Unresolved))
		}
		if len(rd.DeferredMissingReason) > 0 {
			v.err(ReadinessFile, "readiness-reason", "%d [deferred_nonblocking] item(s) lack \"Reason:\" after decision_accepted", len(rd.DeferredMissingReason))
		}
	}
	if st.HasReadinessPassed || st.HasCompleted {
		if len(rd.Blocking) > 0 {
			v.err(ReadinessFile, "readiness-blocking", "%d [blocking] item(s) remain after readiness_passed or completed", len(rd.Blocking))
		}
		if len(rd.Unresolved) > 0 {
			v.err(ReadinessFile, "readiness-unresolved", "%d unresolved item(s) remain after readiness_passed or completed", len(rd.Unresolved))
		}
		if len(rd.DeferredMissingReason) > 0 {
			v.err(ReadinessFile, "readiness-reason", "%d [deferred_nonblocking] item(s) lack \"Reason:\"", len(rd.DeferredMissingReason))
		}
		if !rd.ReadyToImplement {
			v.err(ReadinessFile, "ready-to-implement", "\"- [x] Ready to implement\" must be checked once readiness_passed or completed is logged")
		}
		if !st.HasPrimaryFrozenEvent {
			v.err(EventsFile, "freeze-required", "readiness_passed or completed is logged but the primary deliverable was never frozen")
		}
	}
}

// completion checks, once completed is logged, the completion gates and
// conclusion.md; before that, a deferred item without a reason is only a
// warning.
func (v *validator) completion(p *Protocol, rd Readiness, st *core) {
	if st.HasCompleted {
		if missing := MissingGates(p, rd.Text); len(missing) > 0 {
			v.err(ReadinessFile, "completion-gates", "completed is logged but these completion gates are not checked: %s", strings.Join(missing, "; "))
		}
		text, _ := v.readText(filepath.Join(v.folder, ConclusionFile), ConclusionFile)
		for _, pr := range conclusionProblemsText(text, p) {
			v.err(ConclusionFile, "conclusion", "%s", strings.TrimPrefix(pr, "conclusion.md "))
		}
	} else if len(rd.DeferredMissingReason) > 0 {
		v.warn(ReadinessFile, "readiness-reason", "%d [deferred_nonblocking] item(s) should give a \"Reason:\"", len(rd.DeferredMissingReason))
	}
}

func (v *validator) protocolFields(p *Protocol) {
	raw := p.Raw
	if raw["protocol"] != ProtocolName {
		v.err(ProtocolFile, "protocol-name", "protocol must be %q", ProtocolName)
	}
	if !pycompat.Equal(raw["schemaVersion"], json.Number(strconv.Itoa(SchemaVersion))) {
		v.err(ProtocolFile, "schema-version", "schemaVersion must be %d", SchemaVersion)
	}
	if ph, ok := raw["currentPhase"].(string); !ok || !knownPhase(ph) {
		v.err(ProtocolFile, "phase-name", "currentPhase must be one of %s", strings.Join(Phases, ", "))
	}
	if !truthy(raw["objective"]) {
		v.err(ProtocolFile, "objective", "objective must not be blank")
	}
	if len(p.participants) == 0 {
		v.err(ProtocolFile, "participants", "participants must not be empty")
	}
	gates, ok := raw["completionGates"].([]any)
	if !ok || len(gates) == 0 {
		v.err(ProtocolFile, "completion-gates", "completionGates must not be empty")
	} else {
		for i, g := range gates {
			m, ok := g.(map[string]any)
			src, _ := m["source"].(string)
			text, textOK := m["text"].(string)
			if !ok || (src != "objective" && src != "generated") || !textOK || pycompat.Strip(text) == "" {
				v.err(ProtocolFile, "completion-gates", "completionGates[%d] needs source (objective or generated) and a text", i+1)
				continue
			}
			for _, f := range forbiddenFiles {
				if strings.Contains(text, f) {
					v.err(ProtocolFile, "completion-gates", "completionGates[%d] refers to the obsolete file %s", i+1, f)
				}
			}
		}
	}
	if _, ok := raw["waitingFor"]; !ok {
		v.err(ProtocolFile, "derived-state", "waitingFor must be present")
	}
	if _, ok := raw["proposalOwner"]; !ok {
		v.err(ProtocolFile, "derived-state", "proposalOwner must be present")
	}
}

// deliverablesSchema checks the deliverables declaration and reports
// whether it is sound enough to check the deliverables' content.
func (v *validator) deliverablesSchema(p *Protocol) bool {
	before := len(v.res.Errors)
	d, _ := p.Raw["deliverables"].(map[string]any)
	if len(d) == 0 {
		v.deliverablesErr("deliverables.primary is required")
		return false
	}
	mode := d["mode"]
	if mode != "internal" && mode != "external" {
		v.deliverablesErr("deliverables.mode must be internal or external")
	}
	if _, has := p.Raw["repoRoot"]; mode == "internal" && has {
		v.deliverablesErr("repoRoot is only allowed with external deliverables")
	}
	if mode == "external" {
		v.repoRoot(p.Raw["repoRoot"])
	}
	if dir, ok := d["dir"].(string); !ok || pycompat.Strip(dir) == "" {
		v.deliverablesErr("deliverables.dir is required")
	} else if pathEscapes(dir) {
		v.deliverablesErr("deliverables.dir must be relative and must not contain ..")
	}
	prim, ok := d["primary"].(map[string]any)
	if !ok {
		v.deliverablesErr("deliverables.primary is required")
		return false
	}
	v.primarySchema(p, prim)
	primFile, primFileOK := prim["file"].(string)
	if sup, ok := d["supporting"].([]any); ok {
		v.supportingSchema(sup, primFile, primFileOK)
	}
	if att, ok := d["attachments"].([]any); ok {
		v.attachmentsSchema(att)
	}
	return len(v.res.Errors) == before
}

// deliverablesErr reports a problem of the deliverables declaration.
func (v *validator) deliverablesErr(format string, args ...any) {
	v.err(ProtocolFile, "deliverables", format, args...)
}

// repoRoot checks the repoRoot of external deliverables: a relative path
// to an existing directory, not the filesystem root, that holds the
// collaboration folder.
func (v *validator) repoRoot(val any) {
	rr, ok := val.(string)
	switch {
	case !ok || pycompat.Strip(rr) == "":
		v.deliverablesErr("repoRoot is required for external deliverables")
		return
	case strings.HasPrefix(rr, "/"):
		v.deliverablesErr("repoRoot must be relative to the folder")
		return
	}
	resolved := resolvePath(pyJoin(v.folder, rr))
	fi, err := os.Stat(resolved)
	switch {
	case err != nil || !fi.IsDir():
		v.deliverablesErr("repoRoot %q does not resolve to an existing directory", rr)
	case resolved == "/":
		v.deliverablesErr("repoRoot %q resolves to the filesystem root", rr)
	case !isAncestorOrSelf(resolved, v.folder):
		v.deliverablesErr("the collaboration folder must be inside repoRoot %q", rr)
	}
}

// primarySchema checks the primary deliverable's type and file, and that
// a custom one has a checklist.
func (v *validator) primarySchema(p *Protocol, prim map[string]any) {
	if t, ok := prim["type"].(string); !ok || !knownType(t) {
		v.deliverablesErr("deliverables.primary.type must be one of %s", strings.Join(DeliverableTypes(), ", "))
	}
	if f, ok := prim["file"].(string); !ok || !strings.HasSuffix(f, ".md") {
		v.deliverablesErr("deliverables.primary.file must be a Markdown (.md) file")
	} else if pathEscapes(f) {
		v.deliverablesErr("deliverables.primary.file must be relative and must not contain ..")
	}
	if p.Primary.Type == CustomType && len(p.Primary.Sections()) == 0 {
		v.deliverablesErr("a custom primary deliverable needs a checklist")
	}
}

// supportingSchema checks each supporting deliverable's type and file: a
// Markdown file inside the folder, declared once and not the primary's.
func (v *validator) supportingSchema(sup []any, primFile string, primFileOK bool) {
	seen := map[string]bool{}
	for i, item := range sup {
		m, ok := item.(map[string]any)
		if !ok {
			continue
		}
		if t, ok := m["type"].(string); !ok || !knownType(t) {
			v.deliverablesErr("deliverables.supporting[%d].type is not a deliverable type", i+1)
		}
		f, ok := m["file"].(string)
		switch {
		case !ok || !strings.HasSuffix(f, ".md"):
			v.deliverablesErr("deliverables.supporting[%d].file must be a Markdown (.md) file", i+1)
		case pathEscapes(f):
			v.deliverablesErr("deliverables.supporting[%d].file must be relative and must not contain ..", i+1)
		case seen[f]:
			v.deliverablesErr("deliverables.supporting[%d].file %q is declared twice", i+1, f)
		case primFileOK && f == primFile:
			v.deliverablesErr("deliverables.supporting[%d].file reuses the primary deliverable file", i+1)
		default:
			seen[f] = true
		}
	}
}

// attachmentsSchema checks that each attachment is an object naming a
// file inside the folder.
func (v *validator) attachmentsSchema(att []any) {
	for i, item := range att {
		m, ok := item.(map[string]any)
		if !ok {
			v.deliverablesErr("deliverables.attachments[%d] must be an object", i+1)
			continue
		}
		if f, ok := m["file"].(string); !ok || f == "" {
			v.deliverablesErr("deliverables.attachments[%d].file is required", i+1)
		} else if pathEscapes(f) {
			v.deliverablesErr("deliverables.attachments[%d].file must be relative and must not contain ..", i+1)
		}
	}
}

func isAncestorOrSelf(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// readPair loads protocol.json and replays events.jsonl while holding a
// shared flock on the folder's LockFile. Every acpfs appender (Log, so every mount
// and `acpfs append`) holds the exclusive lock from before it reads the
// history until protocol.json is replaced, so the pair read here is one
// that some append left behind, never the new events with the old
// protocol.json. A folder without events.jsonl is read without a lock.
// err is set only when protocol.json cannot be used.
//
// The documents (review.md, readiness.md, the deliverables) are not part
// of the pair: an agent writes them before the event that needs them.
func (v *validator) readPair(headings map[string]string) (*Protocol, historyFacts, error) {
	facts := historyFacts{headingEvents: map[string]evInfo{}}
	f, err := os.Open(filepath.Join(v.folder, EventsFile))
	switch {
	case errors.Is(err, os.ErrNotExist):
		f = nil // reported as a missing required file
	case err != nil:
		v.err(EventsFile, "events-read", "cannot read events.jsonl: %v", err)
		f = nil
	default:
		defer f.Close()
		// A folder this process cannot lock (a lock file it may not
		// open, a filesystem without flock, a writer stuck with the
		// lock) is read without the lock rather than not validated.
		if release, err := sharedLock(v.folder); err == nil && release != nil {
			defer release()
		}
	}
	p, err := LoadProtocol(v.folder)
	if err != nil {
		return nil, facts, err
	}
	if f != nil {
		facts = v.replay(f, p, headings)
	}
	return p, facts, nil
}

// replay runs the state machine over the whole events.jsonl, collecting
// every problem (it does not stop at the first) and the facts the
// folder-level rules need. A last line without its newline is not read:
// it is an append in progress (by a writer that does not take the lock)
// or a torn write, and is reported as a warning. Fields the schema does
// not define are kept by every acpfs writer and reported here once per
// field name, as a warning.
func (v *validator) replay(f *os.File, p *Protocol, headings map[string]string) historyFacts {
	facts := historyFacts{headingEvents: map[string]evInfo{}}
	rs := newRules(p)
	var seen seqSet
	var scratch record
	intern := interner{}
	type unknownField struct{ line, seq, count int }
	unknown := map[string]*unknownField{}
	var unknownOrder []string
	lineNo := 0
	err := forEachLine(f, func(line []byte, complete bool) {
		lineNo++
		if !complete {
			v.res.Warnings = append(v.res.Warnings, Violation{File: EventsFile, Line: lineNo, Rule: "partial-line",
				Msg: "the last line has no newline yet, so it was not validated (an append in progress or a torn write; " +
					"appends are refused until it ends with a newline)"}.String())
			return
		}
		if utf8.Valid(line) && pycompat.IsBlank(line) {
			return
		}
		rec := &scratch
		parseLineInto(rec, line, lineNo, intern)
		for _, b := range rec.bad {
			v.res.Errors = append(v.res.Errors, b.String())
		}
		for _, name := range rec.unknown {
			if u, ok := unknown[name]; ok {
				u.count++
				continue
			}
			unknown[name] = &unknownField{line: lineNo, seq: rec.Seq, count: 1}
			unknownOrder = append(unknownOrder, name)
		}
		if !rec.object {
			return
		}
		viol, next := step(rs, &facts.state, &seen, rec)
		for _, x := range viol {
			v.res.Errors = append(v.res.Errors, x.String())
		}
		facts.state = next
		if !rec.has.has(fSeq) {
			return
		}
		seen.add(rec.Seq)
		key := strconv.Itoa(rec.Seq)
		if rec.Event.Event == EvReviewSubmitted {
			facts.reviewSeqs = append(facts.reviewSeqs, key)
		}
		if _, ok := headings[key]; ok {
			facts.headingEvents[key] = evInfo{name: rec.Event.Event, from: rec.From, fromOK: rec.has.has(fFrom)}
		}
		if rec.Event.Event == EvDeliverableFrozen && (rec.Role == RolePrimary || rec.Role == RoleSupporting) &&
			rec.has.has(fDoc) && IsSHA256(rec.SHA256) {
			facts.frozenEvents = append(facts.frozenEvents, frozenEvent{line: lineNo, seq: rec.Seq, doc: rec.Doc, role: rec.Role, hash: rec.SHA256})
		}
	})
	if err != nil {
		v.err(EventsFile, "events-read", "cannot read events.jsonl: %v", err)
	}
	for _, name := range unknownOrder {
		u := unknown[name]
		where := "this line only"
		if u.count > 1 {
			where = fmt.Sprintf("%d lines, the first here", u.count)
		}
		v.res.Warnings = append(v.res.Warnings, Violation{File: EventsFile, Line: u.line, Seq: u.seq, Rule: "field-unknown",
			Msg: fmt.Sprintf("field %q is not part of ACP schema v2; it is kept but not checked (%s)", name, where)}.String())
	}
	return facts
}

// reviewLinks ties review_submitted events and review.md headings.
func (v *validator) reviewLinks(p *Protocol, text string, headings map[string]string, facts historyFacts) {
	reviewed := map[string]bool{}
	for _, seq := range facts.reviewSeqs {
		if reviewed[seq] {
			continue
		}
		reviewed[seq] = true
		if _, ok := headings[seq]; !ok {
			v.err(ReviewFile, "review-heading", "no heading '## <time> - <participant> - seq %s' for review_submitted seq %s", seq, seq)
		}
	}
	for seq, who := range headings {
		ev, ok := facts.headingEvents[seq]
		switch {
		case !ok:
			v.err(ReviewFile, "review-heading", "heading for seq %s matches no event", seq)
		case ev.name != EvReviewSubmitted:
			v.err(ReviewFile, "review-heading", "heading for seq %s, but event %s is %s, not review_submitted", seq, seq, ev.name)
		case !ev.fromOK || ev.from != who:
			v.err(ReviewFile, "review-heading", "heading for seq %s names %q but the event is from %q", seq, who, ev.from)
		}
	}
	if len(facts.reviewSeqs) == 0 {
		return
	}
	for _, need := range []string{"Reviewed primary deliverable:", "Review Scope:", "Primary deliverable completeness"} {
		if !strings.Contains(text, need) {
			v.err(ReviewFile, "review-content", "review.md must contain %q", need)
		}
	}
	if ref := p.PrimaryRef(); ref != "" && !strings.Contains(text, ref) {
		v.err(ReviewFile, "review-content", "review.md must mention the primary deliverable %s", ref)
	}
}

// frozenEvents checks each freeze against the file as it is now and
// returns the frozen doc references.
func (v *validator) frozenEvents(p *Protocol, events []frozenEvent) map[string]bool {
	frozen := map[string]bool{}
	hashes := map[string]string{}
	for _, fe := range events {
		file, why := p.deliverableFile(fe.doc, fe.role)
		if why != "" {
			continue // reported by the replay
		}
		path, err := p.DeliverablePath(v.folder, file)
		if err != nil {
			v.err(EventsFile, "deliverable-doc", "line %d: seq %d: %v", fe.line, fe.seq, err)
			continue
		}
		if !exists(path) {
			v.res.Errors = append(v.res.Errors, Violation{File: EventsFile, Line: fe.line, Seq: fe.seq, Rule: "deliverable-missing", Msg: fmt.Sprintf("frozen deliverable %s does not exist", fe.doc)}.String())
			continue
		}
		sum, ok := hashes[path]
		if !ok {
			sum, err = digest.File(path)
			if err != nil {
				sum = "unreadable: " + err.Error()
			}
			hashes[path] = sum
		}
		if sum != fe.hash {
			v.res.Errors = append(v.res.Errors, Violation{File: EventsFile, Line: fe.line, Seq: fe.seq, Rule: "sha256-mismatch", Msg: fmt.Sprintf("%s changed after it was frozen: sha256 is now %s, the event recorded %s", fe.doc, sum, fe.hash)}.String())
		}
		frozen[fe.doc] = true
	}
	for _, s := range p.Supporting {
		ref := p.Ref(s.File)
		if s.Frozen && !frozen[ref] {
			v.err(ProtocolFile, "supporting-frozen", "supporting deliverable %s is marked frozen but has no deliverable_frozen event", ref)
		}
		if !s.Frozen && frozen[ref] {
			v.err(ProtocolFile, "supporting-frozen", "supporting deliverable %s has a deliverable_frozen event but is not marked frozen", ref)
		}
	}
	return frozen
}

func (v *validator) primaryContent(p *Protocol, requireFrozen bool) {
	ref := p.PrimaryRef()
	path, err := p.DeliverablePath(v.folder, p.Primary.File)
	if err != nil {
		v.err(ref, "deliverable", "%v", err)
		return
	}
	text, ok := v.readText(path, ref)
	if !ok {
		v.err(ref, "deliverable-missing", "the primary deliverable is missing")
		return
	}
	v.deliverableContent(ref, "the primary deliverable", text, p.Primary.Sections(), requireFrozen)
}

func (v *validator) supportingContent(p *Protocol, frozen map[string]bool) {
	for _, s := range p.Supporting {
		ref := p.Ref(s.File)
		path, err := p.DeliverablePath(v.folder, s.File)
		if err != nil {
			v.err(ref, "deliverable", "%v", err)
			continue
		}
		text, ok := v.readText(path, ref)
		if !ok {
			v.err(ref, "deliverable-missing", "the supporting deliverable is missing")
			continue
		}
		v.deliverableContent(ref, "the supporting deliverable", text, s.Sections(), s.Frozen || frozen[ref])
	}
}

func (v *validator) deliverableContent(ref, what, text string, sections []string, requireFrozen bool) {
	status := DeliverableStatus(text)
	if status == "" {
		v.err(ref, "deliverable-status", "%s needs a line \"Status: Draft\", \"Status: In Review\" or \"Status: Frozen\"", what)
	}
	if requireFrozen && status != "Frozen" {
		v.err(ref, "deliverable-status", "%s must be \"Status: Frozen\" once it is frozen", what)
	}
	for _, s := range sections {
		if !headingPresent(text, s) {
			v.err(ref, "deliverable-section", "%s lacks the section \"## %s\"", what, s)
		} else if requireFrozen && !sectionHasContent(text, s) {
			v.err(ref, "deliverable-section", "%s is frozen but its section \"## %s\" is empty", what, s)
		}
	}
}

func (v *validator) attachments(p *Protocol) {
	d, _ := p.Raw["deliverables"].(map[string]any)
	att, ok := d["attachments"].([]any)
	if !ok {
		return
	}
	for _, item := range att {
		m, ok := item.(map[string]any)
		if !ok {
			continue
		}
		f, ok := m["file"].(string)
		if !ok {
			continue
		}
		path, err := p.DeliverablePath(v.folder, f)
		if err != nil || !exists(path) {
			v.err(ProtocolFile, "attachment-missing", "attachment %s does not exist", f)
		}
	}
}

// pyRepr renders a decoded JSON value for messages.
func pyRepr(v any) string {
	if v == nil {
		return "null"
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
