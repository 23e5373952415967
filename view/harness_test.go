package view

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/internal/digest"
	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/protocol"
)

// collab is a collaboration folder (participants alice, the owner, and
// bob) with one ledger, for views made on it by newView.
type collab struct {
	t          testing.TB
	root       string
	folder     string
	ledgerPath string
	lw         *ledger.Writer
}

// newCollab initializes a folder and opens its ledger. Everything it
// makes lies in a temporary directory the test owns: no root needed.
func newCollab(t testing.TB) *collab {
	t.Helper()
	root := t.TempDir()
	folder := filepath.Join(root, "collab")
	_, err := protocol.Init(protocol.InitOptions{Folder: folder, Participants: []string{"alice", "bob"},
		Objective: "Design a rate limiter", Completion: []string{"Limits are specified"}, PrimaryType: "design-spec"})
	require.NoError(t, err)
	c := &collab{t: t, root: root, folder: folder, ledgerPath: filepath.Join(root, "runs", "communication_ledger.jsonl")}
	require.NoError(t, os.MkdirAll(filepath.Dir(c.ledgerPath), 0o700))
	c.lw, err = ledger.Open(c.ledgerPath, ledger.Options{Sync: ledger.SyncOff})
	require.NoError(t, err)
	t.Cleanup(func() { c.lw.Close() })
	// What the grants of the tests show, write and hide.
	c.write("docs/a.md", "a document everyone may read\n")
	c.write("oracle/answer.md", "the expected answer\n")
	require.NoError(t, os.MkdirAll(c.in("scratch"), 0o755))
	return c
}

// in is the backing path of the folder-relative name rel.
func (c *collab) in(rel string) string { return filepath.Join(c.folder, filepath.FromSlash(rel)) }

// write writes a file on the backing side, making its directories.
func (c *collab) write(rel, content string) {
	c.t.Helper()
	require.NoError(c.t, os.MkdirAll(filepath.Dir(c.in(rel)), 0o755))
	require.NoError(c.t, os.WriteFile(c.in(rel), []byte(content), 0o644))
}

func (c *collab) read(rel string) string {
	c.t.Helper()
	b, err := os.ReadFile(c.in(rel))
	require.NoError(c.t, err)
	return string(b)
}

// newView is a view (never mounted) of the folder under g, with its own
// protocol log, as a second daemon would have.
func (c *collab) newView(g *grants.Grant, mod ...func(*Options)) *View {
	c.t.Helper()
	log, err := protocol.OpenLog(c.folder)
	require.NoError(c.t, err)
	o := Options{Folder: c.folder, Grant: g, Log: log, Ledger: c.lw}
	for _, m := range mod {
		m(&o)
	}
	f, err := New(o)
	require.NoError(c.t, err)
	c.t.Cleanup(func() { f.Close(); log.Close() })
	return f
}

// records is the whole ledger.
func (c *collab) records() []ledger.Record {
	c.t.Helper()
	var out []ledger.Record
	require.NoError(c.t, ledger.Scan(c.ledgerPath, ledger.Filter{}, func(r ledger.Record) error { out = append(out, r); return nil }))
	return out
}

// since is the records after seq.
func (c *collab) since(seq int64) []ledger.Record {
	var out []ledger.Record
	for _, r := range c.records() {
		if r.Seq > seq {
			out = append(out, r)
		}
	}
	return out
}

func (c *collab) lastSeq() int64 {
	rs := c.records()
	if len(rs) == 0 {
		return 0
	}
	return rs[len(rs)-1].Seq
}

// hasRecord reports whether recs hold a record of kind for agent and
// path (op and sha when not empty).
func hasRecord(recs []ledger.Record, kind ledger.Kind, agent, path, op, sha string) bool {
	for _, r := range recs {
		if r.Kind == kind && r.Agent == agent && r.Path == path && (op == "" || r.Op == ledger.Op(op)) && (sha == "" || r.SHA256 == sha) {
			return true
		}
	}
	return false
}

func kinds(recs []ledger.Record) []string {
	var out []string
	for _, r := range recs {
		out = append(out, string(r.Kind)+" "+string(r.Op)+" "+r.Path)
	}
	return out
}

// grantOf is a grant of agent (its participant too) with the given
// patterns.
func grantOf(agent string, read, forbid, write []string) *grants.Grant {
	return &grants.Grant{GrantID: "G-" + agent, AgentID: agent, Role: "r", Objective: "o",
		MayRead: read, ForbiddenRead: forbid, MayWrite: write}
}

// ownerGrant and reviewerGrant are the presets' shapes.
func ownerGrant() *grants.Grant {
	return grantOf("alice", []string{"**"}, []string{"oracle/**"},
		[]string{"events.jsonl", "protocol.json", "proposal.md", "decisions.md", "readiness.md", "conclusion.md", "deliverables/**", "scratch/**"})
}

func reviewerGrant() *grants.Grant {
	return grantOf("bob", []string{"*.md", "events.jsonl", "protocol.json", "deliverables/**", "docs/**"}, []string{"oracle/**"},
		[]string{"events.jsonl", "protocol.json", "review.md", "notes.md"})
}

// acpStep is one event of the path from initialized to completed, for
// two participants alice (the owner) and bob, with the documents it
// needs written on the backing side first (prep).
type acpStep struct {
	from, event, doc, role string
	sha                    bool // the event carries the primary's SHA-256
	prep                   func(c *collab, seq int)
}

const primaryRef = "deliverables/design-spec.md"

func acpSteps() []acpStep {
	return []acpStep{
		{from: "alice", event: "deliverable_drafted", doc: primaryRef, role: "primary"},
		{from: "alice", event: "proposal_submitted", doc: "proposal.md"},
		{from: "bob", event: "review_submitted", doc: "review.md", prep: func(c *collab, seq int) {
			c.write("review.md", c.read("review.md")+fmt.Sprintf("\n## 2026-01-02T03:04:%02dZ - bob - seq %d\n\nContext:\n- Reviewed primary deliverable: `%s`\n\nReview Scope:\n- Primary deliverable completeness\n- Accepted decision traceability\n\nPosition:\n- Accept.\n", seq%60, seq, primaryRef))
		}},
		{from: "alice", event: "proposal_revised", doc: "proposal.md"},
		{from: "alice", event: "question_classified", doc: "readiness.md", prep: func(c *collab, seq int) {
			c.write("decisions.md", "# Decisions\n\n## Accepted Decisions\n\n### D1. Token bucket per key\n\n- Decision: One bucket per API key.\n- Reflected in: `"+primaryRef+"#proposed-design`\n")
			p, err := protocol.LoadProtocol(c.folder)
			require.NoError(c.t, err)
			var gates []string
			for _, g := range p.GateTexts() {
				gates = append(gates, "- [x] "+g)
			}
			c.write("readiness.md", "# Readiness\n\n## Open Question Classification\n\n- [resolved] Bucket size chosen.\n\n## Gates\n\n"+strings.Join(gates, "\n")+"\n\n## Ready to Implement\n\n- [x] Ready to implement\n")
		}},
		{from: "alice", event: "decision_accepted", doc: "decisions.md"},
		{from: "bob", event: "decision_accepted", doc: "decisions.md"},
		{from: "alice", event: "deliverable_frozen", doc: primaryRef, role: "primary", sha: true, prep: func(c *collab, seq int) {
			p, err := protocol.LoadProtocol(c.folder)
			require.NoError(c.t, err)
			var b strings.Builder
			b.WriteString("# Design Spec\n\nStatus: Frozen\n")
			for _, s := range p.Primary.Sections() {
				fmt.Fprintf(&b, "\n## %s\n\nContent for %s.\n", s, s)
			}
			c.write(primaryRef, b.String())
		}},
		{from: "alice", event: "readiness_passed", doc: "readiness.md"},
		{from: "alice", event: "completed", doc: "conclusion.md", prep: func(c *collab, seq int) {
			c.write("conclusion.md", "# Conclusion\n\n## Decision Outcome\n\n- [proceed] Build it.\n\n## Rationale\n\nAgreed.\n\n## Deliverable Receipt\n\n- Primary: `"+primaryRef+"`\n\n## Accepted Decisions Summary\n\n- D1.\n\n## Readiness Result\n\n- All gates passed.\n\n## Assumptions\n\n- None.\n\n## Deferred Follow-ups\n\n- None.\n\n## Implementation Blockers\n\n- None.\n\n## Next Action\n\nStart.\n")
		}},
	}
}

// eventLine is the line of an event, as an agent would echo it.
type eventLine struct {
	Seq     int    `json:"seq"`
	From    string `json:"from"`
	Event   string `json:"event"`
	At      string `json:"at"`
	Summary string `json:"summary"`
	Doc     string `json:"doc,omitempty"`
	ReplyTo int    `json:"reply_to"`
	Role    string `json:"role,omitempty"`
	SHA256  string `json:"sha256,omitempty"`
}

// line is the event line of s at seq (without its newline), after its
// documents are written.
func (s acpStep) line(c *collab, seq int) []byte {
	c.t.Helper()
	if s.prep != nil {
		s.prep(c, seq)
	}
	e := eventLine{Seq: seq, From: s.from, Event: s.event, At: time.Now().UTC().Format(time.RFC3339),
		Summary: "step " + s.event, Doc: s.doc, ReplyTo: seq - 1, Role: s.role}
	if s.sha {
		sum, err := digest.File(c.in(primaryRef))
		require.NoError(c.t, err)
		e.SHA256 = sum
	}
	b, err := json.Marshal(e)
	require.NoError(c.t, err)
	return b
}

// appendVia appends line (with its newline) through f's events.jsonl as
// `echo >>` would: open, one write, close.
func appendVia(f *View, line []byte) (uint32, error) {
	ctx := context.Background()
	fh, _, errno := f.Open(ctx, nil, protocol.EventsFile, uint32(os.O_WRONLY|os.O_APPEND))
	if errno != 0 {
		return 0, errno
	}
	n, errno := fh.Write(ctx, append(append([]byte(nil), line...), '\n'), 0)
	ferr := fh.Flush(ctx)
	fh.Release(ctx)
	if errno != 0 {
		return n, errno
	}
	if ferr != 0 {
		return n, ferr
	}
	return n, nil
}

// fakeKernel records what a view asks of the kernel's caches.
type fakeKernel struct {
	mu          sync.Mutex
	invalidated []string
	drops       atomic.Int64
	rejudged    atomic.Int64
	kept        map[string]bool
	names       []string // names Rejudge asks keep about
	seen        chan string
}

func newFakeKernel(names ...string) *fakeKernel {
	return &fakeKernel{seen: make(chan string, 1024), names: names, kept: map[string]bool{}}
}

func (k *fakeKernel) Invalidate(vp string, entry, now bool) {
	k.mu.Lock()
	k.invalidated = append(k.invalidated, vp)
	k.mu.Unlock()
	select {
	case k.seen <- vp:
	default:
	}
}

// dropAll is what waitFor waits for to see a DropAll.
const dropAll = "\x00drop all"

func (k *fakeKernel) DropAll() {
	k.drops.Add(1)
	select {
	case k.seen <- dropAll:
	default:
	}
}

func (k *fakeKernel) Rejudge(keep func(name string) bool) {
	k.rejudged.Add(1)
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, n := range k.names {
		k.kept[n] = keep(n)
	}
}

// waitFor waits until the kernel was told to drop vp: the watcher's
// notification is the synchronisation, the deadline only a guard against
// a hang.
func (k *fakeKernel) waitFor(t testing.TB, vp string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case got := <-k.seen:
			if got == vp {
				return
			}
		case <-deadline:
			t.Fatalf("the kernel was never told to drop %q", vp)
		}
	}
}

// fakeNode is an adapter inode of an open file.
type fakeNode struct {
	vp    atomic.Pointer[string]
	drops atomic.Int64
	seen  Seen
}

func newFakeNode(vp string) *fakeNode {
	n := &fakeNode{}
	n.vp.Store(&vp)
	return n
}

func (n *fakeNode) ViewPath() string     { return *n.vp.Load() }
func (n *fakeNode) DropContent(now bool) { n.drops.Add(1) }
func (n *fakeNode) Seen() *Seen          { return &n.seen }
