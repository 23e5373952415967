// Package audit judges what agents did, as a ledger recorded it, against
// the grants they held: per agent, every path it read or listed (each
// checked against its grant), every refused attempt, and a verdict, with
// an agent × file matrix; rendered as Markdown, JSON or HTML.
//
// The audit reads records; it does not check the chain. Its caller passes
// the chain check (ledger.Verify) in Options.Chain, and feeds the records
// of every segment in order through Auditor.Add or Auditor.AddFile.
package audit

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/ledger"
)

// Audit verdicts.
const (
	VerdictIsolated   = "isolated"   // every read and listing was allowed by the grant in force
	VerdictViolated   = "violated"   // at least one read or listing its grant does not allow
	VerdictUnverified = "unverified" // no violation seen, but something could not be judged: a grant not given, a broken chain, records lost
)

// Explainer is what the audit needs from a compiled grant; *grants.Matcher
// is one.
type Explainer interface {
	Explain(rel string) grants.Decision
}

// Grant is one grant as the audit judges it.
type Grant struct {
	GrantID string
	AgentID string
	// Rules are the grant's rules without its revocation, so that what an
	// agent did before a revocation is judged by the rules it had then.
	Rules     Explainer
	Revoked   bool
	RevokedAt time.Time // zero when unknown
	// Hash is grants.Grant.Hash of the grant file judged with; views
	// record the hash of the grant they apply (grant_applied), and a
	// different one means the audit judges with rules that were not
	// the ones in force.
	Hash string
}

// LoadGrants loads and compiles every G-*.json grant file in dir.
func LoadGrants(dir string) ([]Grant, error) {
	files, err := filepath.Glob(filepath.Join(dir, "G-*.json"))
	if err != nil {
		return nil, fmt.Errorf("list grants in %s: %w", dir, err)
	}
	if len(files) == 0 {
		if _, err := statDir(dir); err != nil {
			return nil, err
		}
	}
	sort.Strings(files)
	out := make([]Grant, 0, len(files))
	for _, f := range files {
		g, err := grants.Load(f)
		if err != nil {
			return nil, fmt.Errorf("load grant %s: %w", f, err)
		}
		ag, err := NewGrant(g)
		if err != nil {
			return nil, fmt.Errorf("grant %s: %w", f, err)
		}
		out = append(out, ag)
	}
	return out, nil
}

// NewGrant compiles g for the audit.
func NewGrant(g *grants.Grant) (Grant, error) {
	active := *g
	active.Revoked = false
	m, err := grants.Compile(&active, grants.MatcherOptions{})
	if err != nil {
		return Grant{}, err
	}
	ag := Grant{GrantID: g.GrantID, AgentID: g.AgentID, Rules: m, Revoked: g.Revoked, Hash: g.Hash()}
	if g.RevokedAt != "" {
		if t, err := time.Parse(time.RFC3339Nano, g.RevokedAt); err == nil {
			ag.RevokedAt = t
		}
	}
	return ag, nil
}

// Options adjusts an audit.
type Options struct {
	// Ledger names what was audited in the report: the ledger's path, or
	// its segments'.
	Ledger string
	// Chain is the chain check of the records fed to the audit. A broken
	// chain makes an otherwise isolated verdict unverified. Nil means not
	// checked: the report says so, and the verdict is the records' alone.
	Chain *ledger.VerifyReport
	// Live judges the records after the last signature too: views are
	// still mounted, and their writers sign within a second.
	Live bool
	// Folder, when set, is the collaboration folder: its files become rows
	// of the matrix even if nobody touched them.
	Folder string
	// Files are more matrix rows (folder-relative paths), as Folder adds.
	Files []string
	// Now stamps the report (default time.Now).
	Now func() time.Time
}

// Report is what an audit found, ready to render.
type Report struct {
	Ledger      string               `json:"ledger"`
	GeneratedAt string               `json:"generated_at"`
	Verdict     string               `json:"verdict"` // isolated only when every agent is, the chain is valid and no record was lost
	Chain       *ledger.VerifyReport `json:"chain"`
	// Signatures says, at the top of the report, what the signatures
	// vouch for: the records judged are those they cover.
	Signatures Signatures `json:"signatures"`
	// Untrusted counts the records after the last one the chain check
	// vouches for: not judged for anyone.
	Untrusted int64 `json:"untrusted,omitempty"`
	Records   int64 `json:"records"` // records read (up to the first unreadable line)
	// Gaps are the operators' acknowledgements of lost records (gap
	// records). While any is present no agent is isolated: what it did
	// in the lost records is unknown.
	Gaps   []Gap       `json:"gaps,omitempty"`
	Lost   int64       `json:"lost,omitempty"` // records acknowledged lost, all gaps together
	Agents []*Agent    `json:"agents"`
	Matrix []MatrixRow `json:"matrix"`
	// Turns are the turns acpfs drive recorded (turn records), in ledger
	// order: who acted when, and what each turn read and wrote.
	Turns []Turn `json:"turns,omitempty"`
}

// Turn is one turn record: the driver's summary of a participant's turn,
// with the record's seq and grant.
type Turn struct {
	Seq      int64  `json:"seq"`
	Agent    string `json:"agent"`
	Grant    string `json:"grant"`
	GrantSHA string `json:"grant_sha256,omitempty"`
	ledger.Turn
}

// Gap is one gap record: records acknowledged lost.
type Gap struct {
	Seq   int64  `json:"seq"` // the gap record's own seq
	At    string `json:"at"`  // when the loss was acknowledged
	Count int64  `json:"count"`
	// FirstSeq and LastSeq are the seqs the lost records had: the Count
	// seqs after the last record the audit read before the gap record.
	// LastSeq is 0 when Count is unknown.
	FirstSeq int64 `json:"first_seq"`
	LastSeq  int64 `json:"last_seq,omitempty"`
	// After is the time of the last record before the gap: the lost
	// records were written between After and At.
	After  string `json:"after,omitempty"`
	Detail string `json:"detail,omitempty"`
	// SetAside is set for records an operator's repair moved out of the
	// ledger because no writer had sealed them (a repair record of op
	// cut_foreign, not a gap record).
	SetAside bool `json:"set_aside,omitempty"`
}

// Record names the record that stands for the loss: a gap record, or
// an operator's repair that set unsealed records aside.
func (g Gap) Record() string {
	if g.SetAside {
		return "repair record"
	}
	return "gap record"
}

// String is the sentence the reports show: "N records acknowledged lost
// (seq A–B)".
func (g Gap) String() string {
	how := "acknowledged lost"
	if g.SetAside {
		how = "set aside by a repair, unsealed"
	}
	if g.LastSeq == 0 {
		return fmt.Sprintf("an unknown number of records %s (from seq %d, %s seq %d)", how, g.FirstSeq, g.Record(), g.Seq)
	}
	if g.Count == 1 {
		return fmt.Sprintf("1 record %s (seq %d)", how, g.FirstSeq)
	}
	return fmt.Sprintf("%d records %s (seq %d–%d)", g.Count, how, g.FirstSeq, g.LastSeq)
}

// Period says when the lost records were written, as far as the ledger
// tells.
func (g Gap) Period() string {
	if g.After == "" {
		return "before " + g.At
	}
	return "between " + g.After + " and " + g.At
}

// Agent is one agent's part of the report. Reads, Lists, Refused, Noise
// and Violations are aggregated: one entry per distinct path (and kind,
// operation and grant), with a count, so that a report's size follows
// what agents did, not how often.
type Agent struct {
	Agent      string   `json:"agent"`
	Grants     []string `json:"grants"`
	Verdict    string   `json:"verdict"`
	Reason     string   `json:"reason"`
	Reads      []Access `json:"reads"`   // paths read (read, read_request, read_repeat)
	Lists      []Access `json:"lists"`   // directories listed
	Refused    []Event  `json:"refused"` // denied, frozen_refused, append_rejected (and their denied_repeat), but for noise
	Noise      []Event  `json:"noise"`   // refusals of temporary/tool noise, not of real paths (see IsToolNoise)
	Violations []Event  `json:"violations"`
	Writes     int64    `json:"writes"` // write, append_accepted and append_recovered records, and the repeats write_repeat counts
	// RepeatedReads counts the reads of content the agent's view had
	// recorded in full before (reads_repeated records): they teach no
	// new content, so the ledger keeps their number, not their paths.
	RepeatedReads int64 `json:"repeated_reads,omitempty"`
	// NetAllowed and NetRefused count the connections of the agent's
	// `acpfs run --net allow=` egress proxy (net_allowed, net_refused).
	NetAllowed int64 `json:"net_allowed,omitempty"`
	NetRefused int64 `json:"net_refused,omitempty"`

	lastGrant string
	// hashDue maps the seq of each read recorded without its content
	// hash, whose read_hash has not come yet, to its path.
	hashDue    map[int64]string
	reads      map[string]*Access
	lists      map[string]*Access
	refused    events
	noise      events
	violations events
	unknown    int // accesses that could not be judged
}

// Access is one path an agent read or listed, with the judgement.
type Access struct {
	Path     string `json:"path"`
	Grant    string `json:"grant"`
	Count    int64  `json:"count"` // reads including aggregated repeats
	FirstSeq int64  `json:"first_seq"`
	LastSeq  int64  `json:"last_seq"`
	Allowed  bool   `json:"allowed"`
	Judged   bool   `json:"judged"` // false when the grant was unknown
	Rule     string `json:"rule"`
	// Hashes are the distinct content SHA-256s read, in the order first
	// seen (empty for listings and for records without one). A read
	// recorded at open before its hash was known gets it from the
	// read_hash record that follows.
	Hashes []string `json:"sha256,omitempty"`
	// Unhashed counts the reads of the path whose content hash the
	// ledger does not hold: the file changed while it was hashed, or
	// the read_hash never came (the daemon was killed first).
	Unhashed int64 `json:"unhashed,omitempty"`
}

// Event is a refusal or a violation quoted in the report: the first
// record of its kind, operation, path and grant, with how many there were.
type Event struct {
	Seq     int64       `json:"seq"` // the first record's
	At      string      `json:"at"`
	Kind    ledger.Kind `json:"kind"`
	Grant   string      `json:"grant,omitempty"`
	Path    string      `json:"path,omitempty"`
	Op      ledger.Op   `json:"op,omitempty"`
	Detail  string      `json:"detail,omitempty"` // the first record's
	Rule    string      `json:"rule,omitempty"`
	Count   int64       `json:"count"`              // records, repeats included
	LastSeq int64       `json:"last_seq,omitempty"` // the last record's seq
}

// MatrixRow is one file (or directory) of the agent × file matrix.
type MatrixRow struct {
	Path  string       `json:"path"`
	Cells []MatrixCell `json:"cells"` // one per agent, in the order of Agents
}

// MatrixCell says what one agent did with one path.
type MatrixCell struct {
	Read      bool   `json:"read,omitempty"`
	Listed    bool   `json:"listed,omitempty"`
	Refused   bool   `json:"refused,omitempty"`
	Written   bool   `json:"written,omitempty"`
	Violation bool   `json:"violation,omitempty"`
	Grant     string `json:"grant"` // what the agent's grant says of the path: read-write, readable, visible, hidden, unknown
}

// State is the cell's label: the accesses seen, or "never touched".
func (c MatrixCell) State() string {
	var parts []string
	if c.Read {
		parts = append(parts, "read")
	}
	if c.Listed {
		parts = append(parts, "listed")
	}
	if c.Written {
		parts = append(parts, "written")
	}
	if c.Refused {
		parts = append(parts, "refused")
	}
	if len(parts) == 0 {
		return "never touched"
	}
	return strings.Join(parts, ", ")
}

// Auditor judges ledger records one at a time, so that a ledger of any
// length (and of several segments, fed in order) can be audited in memory
// proportional to what it found, not to the records it read: one entry
// per distinct (agent, path, content hash) read, per distinct refusal and
// per distinct violation. Grants revoked in the ledger (a grant_revoked
// record) or with a revoked_at time deny everything after that point; a
// grant revoked with no known time is judged by its rules. An Auditor is
// not safe for concurrent use.
type Auditor struct {
	opts      Options
	grants    map[string]*Grant
	byAgent   map[string][]*Grant
	revokedAt map[string]revocation // grant -> its first grant_revoked record
	agents    map[string]*Agent
	cells     map[string]map[string]*MatrixCell // path -> agent -> cell
	gaps      []Gap
	turns     []Turn
	records   int64
	lastSeq   int64  // seq of the last record fed
	lastAt    string // and its time
	// trusted is the last seq the chain check vouches for (-1: all);
	// later records are counted in untrusted and judged for nobody.
	trusted   int64
	untrusted int64
	applied   map[string][]string // grant -> hashes views recorded applying, in order
}

// revocation is where a grant_revoked record stands in the ledger.
type revocation struct {
	seq int64
	at  string
}

// New returns an Auditor judging against gs.
func New(gs []Grant, opts Options) *Auditor {
	a := &Auditor{
		opts:      opts,
		grants:    map[string]*Grant{},
		byAgent:   map[string][]*Grant{},
		revokedAt: map[string]revocation{},
		agents:    map[string]*Agent{},
		cells:     map[string]map[string]*MatrixCell{},
		trusted:   trustedThrough(opts.Chain, opts.Live),
		applied:   map[string][]string{},
	}
	for i := range gs {
		g := &gs[i]
		a.grants[g.GrantID] = g
		a.byAgent[g.AgentID] = append(a.byAgent[g.AgentID], g)
		a.agent(g.AgentID).addGrant(g.GrantID)
	}
	return a
}

// grantDrift says how the grants the views recorded applying for ag
// differ from the grant files given to the audit ("" when they do not).
func (a *Auditor) grantDrift(ag *Agent) string {
	var out []string
	for _, id := range ag.Grants {
		g, ok := a.grants[id]
		if !ok || g.Hash == "" {
			continue
		}
		for _, h := range a.applied[id] {
			if h != g.Hash {
				out = append(out, fmt.Sprintf("grant %s was in force in a version (%s) other than the file judged with (%s)", id, shortHash(h), shortHash(g.Hash)))
				break
			}
		}
	}
	return strings.Join(out, "; ")
}

func shortHash(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// trustedThrough is the last seq the chain check vouches for: the sound
// records before its first problem and, when signatures were checked,
// only those a valid signature covers. A record past it may have been
// forged or edited: it can convict no one and clear no one. -1 when the
// check vouches for everything (or was not given).
//
// A chain checked without a public key vouches for nothing (0): anyone
// who can write the ledger can rebuild a sound chain of any records, so
// without a signature to check there is nothing to tell the writers'
// records from theirs, live or not.
func trustedThrough(c *ledger.VerifyReport, live bool) int64 {
	if c == nil {
		return -1
	}
	if !c.SignaturesChecked {
		return 0
	}
	if live && c.Problem == nil {
		return -1
	}
	switch {
	case c.SignaturesChecked && (c.Problem != nil || c.Unsigned > 0):
		// A signature covers everything before it, and nothing after.
		return c.SignedThrough
	case c.Problem != nil:
		return c.LastSeq
	}
	return -1
}

// Build judges records already in memory: New, Add for each, Report.
func Build(records []ledger.Record, gs []Grant, opts Options) (*Report, error) {
	a := New(gs, opts)
	for _, r := range records {
		a.Add(r)
	}
	return a.Report()
}

// AddFile feeds every record of the ledger file (or segment) at path, in
// order. It stops quietly at the first line that is not a record: the
// chain check (Options.Chain) reports that line, and what precedes it is
// still judged.
func (a *Auditor) AddFile(path string) error {
	err := ledger.Scan(path, ledger.Filter{}, func(r ledger.Record) error {
		a.Add(r)
		return nil
	})
	var le *ledger.LineError
	if err != nil && !errors.As(err, &le) {
		return fmt.Errorf("audit ledger %s: %w", path, err)
	}
	return nil
}

func (a *Auditor) agent(id string) *Agent {
	ag := a.agents[id]
	if ag == nil {
		ag = &Agent{Agent: id, reads: map[string]*Access{}, lists: map[string]*Access{}}
		a.agents[id] = ag
	}
	return ag
}

func (ag *Agent) addGrant(id string) {
	if id != "" && !slices.Contains(ag.Grants, id) {
		ag.Grants = append(ag.Grants, id)
	}
	if id != "" {
		ag.lastGrant = id
	}
}

func (a *Auditor) cell(path, agent string) *MatrixCell {
	row := a.cells[path]
	if row == nil {
		row = map[string]*MatrixCell{}
		a.cells[path] = row
	}
	c := row[agent]
	if c == nil {
		c = &MatrixCell{}
		row[agent] = c
	}
	return c
}

// grantFor finds the grant a record was made under.
func (a *Auditor) grantFor(r ledger.Record) (*Grant, string) {
	if r.Grant != "" {
		if g := a.grants[r.Grant]; g != nil {
			return g, ""
		}
		return nil, fmt.Sprintf("grant %s not found", r.Grant)
	}
	switch cands := a.byAgent[r.Agent]; len(cands) {
	case 1:
		return cands[0], ""
	case 0:
		return nil, fmt.Sprintf("no grant for agent %s", r.Agent)
	default:
		return nil, fmt.Sprintf("record names no grant and agent %s has %d", r.Agent, len(cands))
	}
}

// isRepeat reports whether r aggregates repeats of a record already
// written in full.
func isRepeat(r ledger.Record) bool {
	switch r.Kind {
	case ledger.KindReadRepeat, ledger.KindReadsRepeated, ledger.KindDeniedRepeat, ledger.KindWriteRepeat:
		return true
	}
	return false
}

// repeats is how many accesses r stands for: its Count for an aggregate
// (at least one: the record says there was a repeat), one otherwise.
func repeats(r ledger.Record) int64 {
	if isRepeat(r) && r.Count > 1 {
		return r.Count
	}
	return 1
}

// latest is the time of the last access r stands for: Last for an
// aggregate of repeats, At otherwise.
func latest(r ledger.Record) string {
	if isRepeat(r) && r.Last != "" {
		return r.Last
	}
	return r.At
}

// judge decides whether r's access was allowed by the grant in force.
func (a *Auditor) judge(r ledger.Record, g *Grant, wantRead bool) (allowed bool, rule string) {
	if rule, revoked := a.revoked(r, g); revoked {
		return false, rule
	}
	if coordinatorPath(r.Path) {
		// No grant may show a coordinator's file, whatever its globs
		// say: one read means the view showed what it must conceal.
		return false, ruleCoordinator
	}
	d := g.Rules.Explain(r.Path)
	if wantRead {
		return d.Readable, d.Rule
	}
	return d.Visible, d.Rule
}

// ruleCoordinator is the rule of an access to a coordinator's file.
const ruleCoordinator = "a coordinator's file (a run or ledger directory's), which no grant may show"

// coordinatorPath reports whether a path of the ledger names, or lies in,
// an entry only a coordinator makes (context_grants, ledger.key, a
// ledger file of that name): the views' own test of such paths.
func coordinatorPath(p string) bool { return grants.HasReservedSegment(p) }

// revoked reports whether r stands for an access after g was revoked,
// and the rule that says so.
func (a *Auditor) revoked(r ledger.Record, g *Grant) (string, bool) {
	if rev, ok := a.revokedAt[g.GrantID]; ok && a.afterRevocation(r, rev) {
		return fmt.Sprintf("%s at seq %d", grants.RuleRevoked, rev.seq), true
	}
	if g.Revoked && !g.RevokedAt.IsZero() {
		// A revoked_at written to the second (as acpfs did before it
		// wrote nanoseconds) stands for any time in that second: within
		// it, the grant_revoked record decides, as above.
		limit := g.RevokedAt
		if limit.Nanosecond() == 0 {
			limit = limit.Add(time.Second)
		}
		if at, err := time.Parse(time.RFC3339Nano, latest(r)); err == nil && !at.Before(limit) {
			return fmt.Sprintf("%s at %s", grants.RuleRevoked, g.RevokedAt.UTC().Format(time.RFC3339Nano)), true
		}
	}
	return "", false
}

// afterRevocation reports whether r, fed after the grant_revoked record
// rev, stands for an access after it. A record written in full is, by its
// place in the chain. An aggregate of repeats is flushed later than the
// repeats it counts, so its place proves nothing: its last repeat's time
// decides, and a time that cannot be compared counts as after.
func (a *Auditor) afterRevocation(r ledger.Record, rev revocation) bool {
	if !isRepeat(r) {
		return true
	}
	last, err1 := time.Parse(time.RFC3339Nano, latest(r))
	revAt, err2 := time.Parse(time.RFC3339Nano, rev.at)
	if err1 != nil || err2 != nil {
		return true
	}
	return !last.Before(revAt)
}

// Add judges one record. Records must come in ledger order (seq order,
// across segments): a revocation applies to the records after it, and a
// gap record stands for the records between it and the one before.
func (a *Auditor) Add(r ledger.Record) {
	a.records++
	if a.trusted >= 0 && r.Seq > a.trusted {
		a.untrusted++
		return
	}
	prevSeq, prevAt := a.lastSeq, a.lastAt
	a.lastSeq, a.lastAt = r.Seq, r.At
	switch r.Kind {
	case ledger.KindSignedCheckpoint, ledger.KindSegmentStart, ledger.KindSegmentEnd, ledger.KindLedgerRecovered:
		return // the ledger's own bookkeeping, not anyone's activity
	case ledger.KindGap, ledger.KindRepair:
		a.addGap(r, prevSeq, prevAt)
		return
	case ledger.KindGrantApplied:
		if h := a.applied[r.Grant]; len(h) == 0 || h[len(h)-1] != r.SHA256 {
			a.applied[r.Grant] = append(h, r.SHA256)
		}
		return
	case ledger.KindTurn:
		// The driver's account of a turn, not an access: its reads and
		// writes are judged from the views' own records.
		if t, err := ledger.ParseTurn(r); err == nil {
			a.turns = append(a.turns, Turn{Seq: r.Seq, Agent: r.Agent, Grant: r.Grant, GrantSHA: r.SHA256, Turn: t})
		}
		return
	case ledger.KindGrantRevoked:
		if _, seen := a.revokedAt[r.Grant]; !seen && r.Grant != "" {
			a.revokedAt[r.Grant] = revocation{seq: r.Seq, at: r.At}
		}
	}
	if r.Agent == "" && r.Grant == "" {
		return // system records: mounts of no agent, repairs
	}
	g, why := a.grantFor(r)
	agentID := r.Agent
	if agentID == "" && g != nil {
		agentID = g.AgentID
	}
	if agentID == "" {
		agentID = "(grant " + r.Grant + ")"
	}
	ag := a.agent(agentID)
	ag.addGrant(r.Grant)
	if g != nil {
		ag.addGrant(g.GrantID)
	}
	switch r.Kind {
	case ledger.KindRead, ledger.KindReadRequest, ledger.KindReadRepeat, ledger.KindList:
		a.addAccess(ag, r, g, why)
		if r.Kind == ledger.KindRead && r.SHA256 == "" && strings.Contains(r.Detail, hashFollows) {
			if ag.hashDue == nil {
				ag.hashDue = map[int64]string{}
			}
			ag.hashDue[r.Seq] = r.Path
		}
	case ledger.KindReadsRepeated:
		a.addRepeatedReads(ag, r, g)
	case ledger.KindReadHash:
		a.addReadHash(ag, r)
	case ledger.KindDenied, ledger.KindFrozenRefused, ledger.KindAppendRejected, ledger.KindDeniedRepeat:
		a.addRefusal(ag, r)
	case ledger.KindWrite, ledger.KindAppendAccepted, ledger.KindAppendRecovered, ledger.KindWriteRepeat:
		ag.Writes += repeats(r)
		if r.Path != "" {
			a.cell(r.Path, ag.Agent).Written = true
		}
	case ledger.KindNetAllowed:
		ag.NetAllowed += netConnections(r)
	case ledger.KindNetRefused:
		ag.NetRefused += netConnections(r)
	}
}

// netConnections is how many connections a net_allowed or net_refused
// record stands for: one, or the repeats it counts.
func netConnections(r ledger.Record) int64 {
	if r.Count > 1 {
		return r.Count
	}
	return 1
}

// hashFollows is in the detail of a read recorded before its content hash
// was known (see fs/deferhash.go).
const hashFollows = "sha256 follows in a read_hash record"

// addReadHash attaches a read_hash record's content hash to the read it
// names ("read seq N"), or counts that read as of unknown content when
// the record carries none.
func (a *Auditor) addReadHash(ag *Agent, r ledger.Record) {
	var seq int64
	if _, err := fmt.Sscanf(r.Detail, "read seq %d", &seq); err == nil {
		delete(ag.hashDue, seq)
	}
	acc := ag.reads[r.Path]
	if acc == nil {
		return // its read is in a segment not given to the audit
	}
	switch {
	case r.SHA256 == "":
		acc.Unhashed++
	case !slices.Contains(acc.Hashes, r.SHA256):
		acc.Hashes = append(acc.Hashes, r.SHA256)
	}
}

// addGap notes a gap record: the Count records after the one fed before
// it (prevSeq, at prevAt) are lost. So are those an operator's repair
// set aside for want of a writer's seal (op cut_foreign): made up by
// someone, or a writer's with the seal stripped; no one can tell which.
// Other repairs lose nothing.
func (a *Auditor) addGap(r ledger.Record, prevSeq int64, prevAt string) {
	setAside := r.Kind == ledger.KindRepair
	if setAside && r.Op != ledger.OpCutForeign {
		return
	}
	g := Gap{Seq: r.Seq, At: r.At, Count: r.Count, FirstSeq: prevSeq + 1, After: prevAt, Detail: r.Detail, SetAside: setAside}
	if r.Count > 0 {
		g.LastSeq = prevSeq + r.Count
	}
	a.gaps = append(a.gaps, g)
}

// addAccess counts a read (in full, per request, or repeats) or a listing
// and judges it.
func (a *Auditor) addAccess(ag *Agent, r ledger.Record, g *Grant, why string) {
	isRead := r.Kind != ledger.KindList
	m := ag.lists
	if isRead {
		m = ag.reads
	}
	acc := m[r.Path]
	if acc == nil {
		acc = &Access{Path: r.Path, FirstSeq: r.Seq, Allowed: true, Judged: true}
		m[r.Path] = acc
	}
	n := repeats(r)
	acc.Count += n
	acc.LastSeq = r.Seq
	if isRead && r.SHA256 != "" && !slices.Contains(acc.Hashes, r.SHA256) {
		acc.Hashes = append(acc.Hashes, r.SHA256)
	}
	c := a.cell(r.Path, ag.Agent)
	if isRead {
		c.Read = true
	} else {
		c.Listed = true
	}
	if g == nil {
		if acc.Judged {
			ag.unknown++
		}
		acc.Judged, acc.Rule, acc.Grant = false, why, r.Grant
		return
	}
	allowed, rule := a.judge(r, g, isRead)
	if acc.Rule == "" || !allowed {
		acc.Rule, acc.Grant = rule, g.GrantID
	}
	if allowed {
		return
	}
	acc.Allowed = false
	c.Violation = true
	what := "read a path its grant does not make readable"
	kind := ledger.KindRead
	if !isRead {
		what, kind = "listed a directory its grant does not make visible", ledger.KindList
	}
	// Repeats of a read join the violation of the read they repeat.
	key := eventKey{kind: kind, grant: g.GrantID, path: r.Path, rule: rule}
	ag.violations.add(key, r, n, func() Event { return eventOf(r, g.GrantID, rule, what) })
}

// addRepeatedReads counts a view's repeated reads (reads_repeated). They
// name no path: each is of a content the view recorded in full before,
// where it was judged. What is left to judge is when they happened: a
// count whose last read is after its grant was revoked is a violation.
func (a *Auditor) addRepeatedReads(ag *Agent, r ledger.Record, g *Grant) {
	n := repeats(r)
	ag.RepeatedReads += n
	if g == nil {
		ag.unknown++
		return
	}
	rule, revoked := a.revoked(r, g)
	if !revoked {
		return
	}
	key := eventKey{kind: r.Kind, grant: g.GrantID, rule: rule}
	ag.violations.add(key, r, n, func() Event {
		return eventOf(r, g.GrantID, rule, "read again, after its grant was revoked, content its view had recorded in full before")
	})
}

// addRefusal counts a refusal, or repeats of one.
func (a *Auditor) addRefusal(ag *Agent, r ledger.Record) {
	n := repeats(r)
	key := eventKey{kind: r.Kind, grant: r.Grant, path: r.Path, op: r.Op}
	if r.Kind == ledger.KindDeniedRepeat {
		// Repeats join the refusal they repeat, of whichever kind; one
		// whose refusal was not read (lost, or in a segment not given)
		// stands for a denied record.
		key.kind = ledger.KindDenied
		for _, kind := range []ledger.Kind{ledger.KindDenied, ledger.KindFrozenRefused, ledger.KindAppendRejected} {
			k := key
			k.kind = kind
			if ag.refused.has(k) || ag.noise.has(k) {
				key = k
				break
			}
		}
	}
	full := r
	full.Kind = key.kind
	first := func() Event { return eventOf(r, r.Grant, "", r.Detail) }
	if IsToolNoise(full) {
		ag.noise.add(key, r, n, first)
		return
	}
	ag.refused.add(key, r, n, first)
	if r.Path != "" {
		a.cell(r.Path, ag.Agent).Refused = true
	}
}

func eventOf(r ledger.Record, grant, rule, detail string) Event {
	return Event{Seq: r.Seq, At: r.At, Kind: r.Kind, Grant: grant, Path: r.Path, Op: r.Op, Detail: detail, Rule: rule}
}

// eventKey is what makes two refusals (or two violations) the same entry.
type eventKey struct {
	kind              ledger.Kind
	grant, path, rule string
	op                ledger.Op
}

// events aggregates Events by key, in the order first seen.
type events struct {
	index map[eventKey]int
	list  []Event
}

func (e *events) has(k eventKey) bool {
	_, ok := e.index[k]
	return ok
}

// add counts n more records of k; first makes the entry of the first one.
func (e *events) add(k eventKey, r ledger.Record, n int64, first func() Event) {
	i, ok := e.index[k]
	if !ok {
		if e.index == nil {
			e.index = map[eventKey]int{}
		}
		i = len(e.list)
		e.index[k] = i
		e.list = append(e.list, first())
	}
	e.list[i].Count += n
	e.list[i].LastSeq = r.Seq
}

// total is how many records the entries stand for.
func (e *events) total() int64 {
	var n int64
	for _, ev := range e.list {
		n += ev.Count
	}
	return n
}

// Report returns what the records fed so far show. It fails only when
// Options.Folder cannot be listed.
func (a *Auditor) Report() (*Report, error) {
	folderFiles := slices.Clone(a.opts.Files)
	if a.opts.Folder != "" {
		files, err := listFolder(a.opts.Folder)
		if err != nil {
			return nil, err
		}
		folderFiles = append(folderFiles, files...)
	}
	now := time.Now
	if a.opts.Now != nil {
		now = a.opts.Now
	}
	rep := &Report{
		Ledger:      a.opts.Ledger,
		GeneratedAt: now().UTC().Format(time.RFC3339),
		Chain:       a.opts.Chain,
		Records:     a.records,
		Verdict:     VerdictIsolated,
		Gaps:        slices.Clone(a.gaps),
		Turns:       slices.Clone(a.turns),
	}
	for _, g := range rep.Gaps {
		rep.Lost += g.Count
	}
	ids := make([]string, 0, len(a.agents))
	for id := range a.agents {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		ag := judgeAgent(a.agents[id], rep.Gaps, a.untrusted, rep.Chain, a.grantDrift(a.agents[id]))
		switch {
		case ag.Verdict == VerdictViolated:
			rep.Verdict = VerdictViolated
		case ag.Verdict == VerdictUnverified && rep.Verdict == VerdictIsolated:
			rep.Verdict = VerdictUnverified
		}
		rep.Agents = append(rep.Agents, ag)
	}
	rep.Untrusted = a.untrusted
	rep.Matrix = a.matrix(rep.Agents, folderFiles)
	rep.Signatures = signatureStatus(rep.Chain, a.opts.Live, a.records)
	if rep.Verdict == VerdictIsolated && (len(rep.Gaps) > 0 || rep.Chain != nil && (!rep.Chain.OK() || !rep.Chain.SignaturesChecked)) {
		rep.Verdict = VerdictUnverified
	}
	return rep, nil
}

// judgeAgent returns the agent's part of a report: its lists and its
// verdict, in a copy that later records leave alone.
func judgeAgent(live *Agent, gaps []Gap, untrusted int64, chain *ledger.VerifyReport, drift string) *Agent {
	ag := new(Agent)
	*ag = *live
	ag.Reads = sortedAccesses(ag.reads)
	// Reads whose read_hash never came are of unknown content too.
	due := map[string]int64{}
	for _, p := range live.hashDue {
		due[p]++
	}
	var unhashed int64
	for i := range ag.Reads {
		ag.Reads[i].Unhashed += due[ag.Reads[i].Path]
		unhashed += ag.Reads[i].Unhashed
	}
	ag.Lists = sortedAccesses(ag.lists)
	ag.Refused = slices.Clone(ag.refused.list)
	ag.Noise = slices.Clone(ag.noise.list)
	ag.Violations = slices.Clone(ag.violations.list)
	switch {
	case len(ag.Violations) > 0:
		ag.Verdict = VerdictViolated
		ag.Reason = fmt.Sprintf("%d access(es) its grant does not allow, first at seq %d", ag.violations.total(), ag.Violations[0].Seq)
	case ag.unknown > 0:
		ag.Verdict = VerdictUnverified
		ag.Reason = fmt.Sprintf("%d path(s) accessed under a grant that was not given to the audit", ag.unknown)
	case drift != "":
		ag.Verdict = VerdictUnverified
		ag.Reason = fmt.Sprintf("all %d read path(s) and %d listing(s) allowed by the grant given to the audit, but %s", len(ag.Reads), len(ag.Lists), drift)
	case chain != nil && !chain.SignaturesChecked:
		// Nothing was judged: see trustedThrough.
		ag.Verdict = VerdictUnverified
		ag.Reason = fmt.Sprintf("signatures not checked, for want of a public key: none of the ledger's %d record(s) judged, since anyone who can write the ledger could have written them; pass the ledger.pub kept with the deliverables with --pubkey FILE", untrusted)
	case chain != nil && !chain.OK() || untrusted > 0:
		// Past the break, anything may have been removed or made up.
		ag.Verdict = VerdictUnverified
		ag.Reason = fmt.Sprintf("all %d read path(s) and %d listing(s) in the records the chain vouches for allowed by its grant, but the ledger is not sound", len(ag.Reads), len(ag.Lists))
		if untrusted > 0 {
			ag.Reason += fmt.Sprintf(" (%d record(s) after seq %d not judged)", untrusted, trustedThrough(chain, false))
		}
	case len(gaps) > 0:
		// The lost records may hold anything this agent did then.
		ag.Verdict = VerdictUnverified
		ag.Reason = fmt.Sprintf("all %d read path(s) and %d listing(s) in the records kept allowed by its grant, but unverified for the records lost", len(ag.Reads), len(ag.Lists))
	default:
		ag.Verdict = VerdictIsolated
		ag.Reason = fmt.Sprintf("all %d read path(s) and %d listing(s) allowed by its grant", len(ag.Reads), len(ag.Lists))
	}
	if drift != "" && ag.Verdict == VerdictViolated {
		ag.Reason += "; note: " + drift
	}
	for _, g := range gaps {
		ag.Reason += fmt.Sprintf("; %s, written %s: what it did then is unknown", g, g.Period())
	}
	if unhashed > 0 {
		ag.Reason += fmt.Sprintf("; %d read(s) of content whose SHA-256 the ledger does not hold (the file changed while it was hashed, or the view was killed before recording it)", unhashed)
	}
	if n := ag.noise.total(); n > 0 {
		ag.Reason += fmt.Sprintf("; %d refusal(s) of temporary/tool noise (editors' temporary files, git's link attempts) not counted as refused", n)
	}
	return ag
}

// matrix makes one row per path touched or listed in the folder.
func (a *Auditor) matrix(agents []*Agent, folderFiles []string) []MatrixRow {
	paths := make([]string, 0, len(a.cells)+len(folderFiles))
	for p := range a.cells {
		paths = append(paths, p)
	}
	for _, p := range folderFiles {
		if _, ok := a.cells[p]; !ok {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	paths = slices.Compact(paths)
	var rows []MatrixRow
	for _, p := range paths {
		row := MatrixRow{Path: p, Cells: make([]MatrixCell, len(agents))}
		for i, ag := range agents {
			var c MatrixCell
			if got := a.cells[p][ag.Agent]; got != nil {
				c = *got
			}
			c.Grant = "unknown"
			if g := a.grants[ag.lastGrant]; g != nil {
				d := g.Rules.Explain(p)
				switch {
				case d.Writable:
					c.Grant = "read-write"
				case d.Readable:
					c.Grant = "readable"
				case d.Visible:
					c.Grant = "visible"
				default:
					c.Grant = "hidden"
				}
			}
			row.Cells[i] = c
		}
		rows = append(rows, row)
	}
	return rows
}

func sortedAccesses(m map[string]*Access) []Access {
	out := make([]Access, 0, len(m))
	for _, acc := range m {
		out = append(out, *acc)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// listFolder returns the folder's regular files, folder-relative and
// slash-separated, skipping hidden control directories (".acpfs").
func listFolder(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".acpfs" {
			return filepath.SkipDir
		}
		if d.Type().IsRegular() {
			rel, err := filepath.Rel(dir, p)
			if err != nil {
				return err
			}
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list folder %s: %w", dir, err)
	}
	return out, nil
}

func statDir(dir string) (fs.FileInfo, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("grants directory: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("grants directory %s is not a directory", dir)
	}
	return st, nil
}

// IsToolNoise reports whether a refusal was not an attempt on a real
// path but tool noise: a denied creation (or rename) of a name shaped like
// an editor's or a tool's temporary file, or a denied link(2) into a git
// object store, which git retries as a rename. Refused reads, lookups
// and listings are never noise, whatever the name: those are what an
// audit is for.
func IsToolNoise(r ledger.Record) bool {
	if r.Kind != ledger.KindDenied {
		return false
	}
	switch r.Op {
	case ledger.OpLink:
		return gitObjectPath().MatchString(r.Path) || isTemporaryName(path.Base(r.Path))
	case ledger.OpCreate, ledger.OpMknod, ledger.OpMkdir, ledger.OpSymlink, ledger.OpRename:
		return isTemporaryName(path.Base(r.Path))
	}
	return false
}

// gitObjectPath matches where git links a new object or pack into place.
// The patterns here are compiled at first use: every acpfs command links
// this package, and `acpfs append` runs once per event.
var gitObjectPath = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(^|/)(\.git/|[^/]+\.git/)?objects/([0-9a-f]{2}/[0-9a-f]{38,62}|pack/(tmp_)?pack-[^/]+)$`)
})

// temporaryNames are the temporary files of common editors and of the
// tools that save by writing a new file and renaming it over the old.
var temporaryNames = sync.OnceValue(func() []*regexp.Regexp { return temporaryPatterns() })

func temporaryPatterns() []*regexp.Regexp {
	return []*regexp.Regexp{
		regexp.MustCompile(`^\..+\.sw[a-p]x?$`),                // vim swap files and vim's .swpx probe
		regexp.MustCompile(`^4913$`),                           // vim's probe of a directory
		regexp.MustCompile(`^.+~$`),                            // backups (vim, emacs, nano)
		regexp.MustCompile(`^#.+#$`),                           // emacs auto-save
		regexp.MustCompile(`^\.#.+$`),                          // emacs lock
		regexp.MustCompile(`^sed[A-Za-z0-9]{6}$`),              // sed -i
		regexp.MustCompile(`^tmp[a-z0-9_]{8}(\.[^/]*)?$`),      // Python tempfile (mkstemp, NamedTemporaryFile)
		regexp.MustCompile(`^\.goutputstream-[A-Za-z0-9]{6}$`), // GLib
		regexp.MustCompile(`^\.~lock\..+#$`),                   // LibreOffice
		regexp.MustCompile(`(?i)\.te?mp(\.[A-Za-z0-9]+)?$`),    // name.tmp, name.tmp.1234
	}
}

// isTemporaryName reports whether a file name is shaped like a temporary
// file of an editor or a tool.
func isTemporaryName(name string) bool {
	for _, re := range temporaryNames() {
		if re.MatchString(name) {
			return true
		}
	}
	return isPerlInPlaceName(name)
}

// isPerlInPlaceName matches the 8 random letters and digits of perl -i's
// temporary file ("XXPmGYU2"). To leave real names alone ("Makefile"),
// it asks for upper and lower case letters and a digit, which misses a
// quarter of perl's names: those then count as refusals.
func isPerlInPlaceName(name string) bool {
	if len(name) != 8 {
		return false
	}
	var upper, lower, digit bool
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case c >= 'A' && c <= 'Z':
			upper = true
		case c >= 'a' && c <= 'z':
			lower = true
		case c >= '0' && c <= '9':
			digit = true
		default:
			return false
		}
	}
	return upper && lower && digit
}
