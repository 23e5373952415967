package view

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/protocol"
)

// The contract as a model: random sequences of operations by three
// agents (views with different grants on one folder), interleaved with
// grant changes and changes made directly on disk, each answer checked
// against the model (model_world_test.go): the errno, the content read,
// the folder afterwards (a refused operation changes nothing), and the
// ledger (a record of each first read of a content, of each change
// before it is made, of each refusal).
//
// TestModel runs a few seeds in `make test`; ACPFS_MODEL_SEED replays
// one, ACPFS_MODEL_SEEDS, ACPFS_MODEL_FIRST and ACPFS_MODEL_OPS make the
// run longer (see docs/fuzzing.md).
// FuzzModel lets the fuzzer choose the operations (`make fuzz`).

// chooser makes the choices of a run.
type chooser interface {
	// intn is a choice among n (n <= 256).
	intn(n int) int
	// done reports that the choices ran out.
	done() bool
}

type seeded struct{ r *rand.Rand }

func (s seeded) intn(n int) int { return s.r.IntN(n) }
func (s seeded) done() bool     { return false }

// fuzzBytes chooses by the fuzzer's bytes, one per choice.
type fuzzBytes struct {
	b   []byte
	out bool
}

func (f *fuzzBytes) intn(n int) int {
	if len(f.b) == 0 {
		f.out = true
		return 0
	}
	v := int(f.b[0])
	f.b = f.b[1:]
	return v % n
}

func (f *fuzzBytes) done() bool { return f.out }

// agent is one view of the run, with what the model knows of it.
type agent struct {
	name     string
	view     *View
	variants []*grants.Grant
	cur      int
	g        mgrant
	staged   map[string][]byte // its private files
	handles  []*mhandle
	latest   map[string]string // path -> content hash of its last full read record
	lastErr  string
}

// mhandle is a file an agent holds open.
type mhandle struct {
	rel   string
	id    int
	ver   int // the version of the file the ledger holds for it
	write bool
	wrote bool
	fh    File
}

// refusalKey counts the refusals the ledger must hold.
type refusalKey struct {
	agent, path string
	op          ledger.Op
}

// run is one random sequence of operations.
type run struct {
	t        testing.TB
	ctx      context.Context
	c        *collab
	w        *world
	agents   []*agent
	ch       chooser
	audit    string
	steps    []acpStep
	next     int    // the next step of the collaboration
	events   []byte // events.jsonl as the model has it
	lt       ledgerTail
	refusals map[refusalKey]int
	log      []string
	what     string // how to replay the run
	failed   bool
	answers  map[string]int // how often each operation answered each errno
}

// agentGrants are the grants each agent takes turns at: as the presets
// give them, narrowed, and revoked.
func agentGrants() map[string][]*grants.Grant {
	carol := grantOf("carol", []string{"docs/**", "scratch/**", "events.jsonl", "protocol.json"}, []string{"scratch/secret/**"},
		[]string{"scratch/carol/**", "events.jsonl"})
	carolWide := grantOf("carol", []string{"**"}, []string{"oracle/**"}, []string{"scratch/**", "events.jsonl", "protocol.json"})
	aliceNarrow := ownerGrant()
	aliceNarrow.ForbiddenRead = append(aliceNarrow.ForbiddenRead, "scratch/**", "docs/**")
	aliceRO := ownerGrant()
	aliceRO.MayWrite = []string{"events.jsonl"}
	bobNarrow := grantOf("bob", []string{"events.jsonl", "protocol.json", "review.md"}, nil, []string{"events.jsonl", "review.md"})
	out := map[string][]*grants.Grant{
		"alice": {ownerGrant(), aliceNarrow, aliceRO, revoked(ownerGrant())},
		"bob":   {reviewerGrant(), bobNarrow, revoked(reviewerGrant())},
		"carol": {carol, carolWide, revoked(carol)},
	}
	for _, gs := range out {
		for i, g := range gs {
			g.GrantID += "-" + strconv.Itoa(i)
		}
	}
	return out
}

func revoked(g *grants.Grant) *grants.Grant {
	c := *g
	c.Revoked = true
	return &c
}

// newRun sets up a folder, its views and the model of it.
func newRun(t testing.TB, ch chooser, what string) *run {
	c := newCollab(t)
	r := &run{t: t, ctx: context.Background(), c: c, ch: ch, steps: acpSteps(), refusals: map[refusalKey]int{}, what: what, answers: map[string]int{}}
	if ch.intn(5) == 0 {
		r.audit = AuditOpens
	}
	c.write("docs/b.md", "another document\n")
	for _, name := range []string{"alice", "bob", "carol"} {
		a := &agent{name: name, variants: agentGrants()[name], staged: map[string][]byte{}, latest: map[string]string{}}
		a.view = c.newView(a.variants[0], func(o *Options) { o.Audit = r.audit })
		a.g = modelGrant(a.variants[0])
		r.agents = append(r.agents, a)
	}
	r.w = loadWorld(t, c.folder)
	r.events = []byte(c.read(protocol.EventsFile))
	r.lt = ledgerTail{path: c.ledgerPath}
	r.lt.read(r)
	return r
}

// failf stops the run, saying how to replay it and what it did.
func (r *run) failf(format string, args ...any) {
	r.failed = true
	ops := r.log
	if len(ops) > 200 {
		ops = append([]string{fmt.Sprintf("... %d operations before", len(ops)-200)}, ops[len(ops)-200:]...)
	}
	r.t.Fatalf("%s\n%s\nreplay: %s\noperations:\n  %s", r.currentOp(), fmt.Sprintf(format, args...), r.what, strings.Join(ops, "\n  "))
}

func (r *run) currentOp() string {
	if len(r.log) == 0 {
		return "before the first operation"
	}
	return fmt.Sprintf("operation %d: %s", len(r.log), r.log[len(r.log)-1])
}

// note starts an operation: its line in the log, and a mark in the
// ledger from which its records are read.
func (r *run) note(format string, args ...any) {
	r.log = append(r.log, fmt.Sprintf(format, args...))
	r.lt.mark()
}

// modelOp is one kind of operation, chosen with weight.
type modelOp struct {
	name   string
	weight int
	do     func(r *run)
}

func modelOps() []modelOp {
	return []modelOp{
		{"stat", 8, (*run).opStat}, {"read", 8, (*run).opReadFile}, {"list", 4, (*run).opList},
		{"readlink", 2, (*run).opReadlink}, {"write", 6, (*run).opWriteFile}, {"create", 6, (*run).opCreate},
		{"mkdir", 2, (*run).opMkdir}, {"rmdir", 2, (*run).opRmdir}, {"unlink", 4, (*run).opUnlink},
		{"rename", 5, (*run).opRename}, {"symlink", 2, (*run).opSymlink}, {"truncate", 2, (*run).opTruncate},
		{"link", 1, (*run).opLink}, {"open", 5, (*run).opOpenHandle}, {"handle read", 6, (*run).opHandleRead},
		{"handle write", 4, (*run).opHandleWrite}, {"release", 3, (*run).opHandleRelease},
		{"append", 8, (*run).opAppend}, {"protocol.json", 3, (*run).opProtocolJSON}, {"grant", 2, (*run).opSetGrant},
		{"disk", 8, (*run).opBacking},
	}
}

// step runs one operation chosen by r.ch, then checks the folder.
func (r *run) step(ops []modelOp, total int) {
	n := r.ch.intn(total)
	for _, o := range ops {
		if n < o.weight {
			o.do(r)
			break
		}
		n -= o.weight
	}
	if !r.ch.done() {
		r.checkDisk()
	}
}

// play runs up to n operations, then the checks of the end.
func (r *run) play(n int) {
	ops := modelOps()
	total := 0
	for _, o := range ops {
		total += o.weight
	}
	for i := 0; i < n && !r.ch.done() && !r.failed; i++ {
		r.step(ops, total)
	}
	if !r.failed {
		r.finish()
	}
}

// finish looks up every name through every view, then checks that the
// ledger holds each refusal the model counted, no more and no less.
func (r *run) finish() {
	for _, a := range r.agents {
		for _, h := range a.handles {
			h.fh.Release(r.ctx)
		}
		a.handles = nil
		for _, rel := range append(append([]string(nil), mFiles...), mDirs...) {
			r.statAs(a, rel, false)
		}
		a.view.FlushRepeats()
	}
	r.lt.read(r)
	got := map[refusalKey]int{}
	for _, rec := range r.lt.all {
		k := refusalKey{agent: rec.Agent, path: rec.Path, op: rec.Op}
		switch rec.Kind {
		case ledger.KindDenied, ledger.KindFrozenRefused, ledger.KindAppendRejected:
			got[k]++
		case ledger.KindDeniedRepeat:
			got[k] += int(rec.Count)
		}
	}
	for k, n := range r.refusals {
		if got[k] != n {
			r.failf("the ledger holds %d refusals of %s %s by %s, the model counted %d", got[k], k.op, k.path, k.agent, n)
		}
	}
	for k, n := range got {
		if r.refusals[k] == 0 {
			r.failf("the ledger holds %d refusals of %s %s by %s that the model never made", n, k.op, k.path, k.agent)
		}
	}
}

// modelSeeds are the seeds TestModel runs: ACPFS_MODEL_SEED alone when
// set, else ACPFS_MODEL_SEEDS of them (3 by default) from
// ACPFS_MODEL_FIRST on (1 by default).
func modelSeeds(t *testing.T) []uint64 {
	if s := os.Getenv("ACPFS_MODEL_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("ACPFS_MODEL_SEED: %v", err)
		}
		return []uint64{seed}
	}
	n, first := envInt(t, "ACPFS_MODEL_SEEDS", 3), envInt(t, "ACPFS_MODEL_FIRST", 1)
	seeds := make([]uint64, n)
	for i := range seeds {
		seeds[i] = uint64(first + i)
	}
	return seeds
}

func envInt(t *testing.T, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return n
}

// TestModel plays random sequences of operations against the model.
func TestModel(t *testing.T) {
	quietLogs(t)
	ops := envInt(t, "ACPFS_MODEL_OPS", 300)
	for _, seed := range modelSeeds(t) {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			what := fmt.Sprintf("ACPFS_MODEL_SEED=%d ACPFS_MODEL_OPS=%d go test -run TestModel ./view/", seed, ops)
			r := newRun(t, seeded{rand.New(rand.NewPCG(seed, seed))}, what)
			r.play(ops)
			t.Logf("%d operations, %d of %d steps of the collaboration, frozen %v, audit %q; answers: %v",
				len(r.log), r.next, len(r.steps), r.w.frozen, r.audit, r.answers)
		})
	}
}

// fuzzOps bounds the operations of one input: a run costs a folder and
// three views, so an input is a sequence, not a single operation, but a
// short one, that the fuzzer can vary quickly.
const fuzzOps = 150

// FuzzModel lets the fuzzer choose the operations, a byte per choice.
func FuzzModel(f *testing.F) {
	for _, seed := range []uint64{1} {
		r := rand.New(rand.NewPCG(seed, seed))
		b := make([]byte, 4*fuzzOps)
		for i := range b {
			b[i] = byte(r.UintN(256))
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		quietLogs(t)
		what := fmt.Sprintf("go test -run 'FuzzModel/<name>' ./view/ with the failing input the fuzzer saved in testdata/fuzz/FuzzModel (%d bytes)", len(data))
		r := newRun(t, &fuzzBytes{b: data}, what)
		r.play(fuzzOps)
	})
}

// ledgerTail reads the ledger's new records as the run goes.
type ledgerTail struct {
	path string
	all  []ledger.Record
	from int // index in all of the current operation's first record
}

// read appends the records written since the last read. It reads the
// file from its start through the ledger's reader, each time: a version
// 3 line leaves out what the records before it say (the agent among
// them), and the reader puts it back.
func (lt *ledgerTail) read(r *run) {
	f, err := os.Open(lt.path)
	if err != nil {
		r.failf("open the ledger: %v", err)
		return
	}
	defer f.Close()
	rd := ledger.NewReader(f)
	for n := 0; ; n++ {
		rec, err := rd.Next()
		var le *ledger.LineError
		switch {
		case errors.Is(err, io.EOF), errors.As(err, &le) && le.Torn:
			return // a line not complete yet is read next time
		case err != nil:
			r.failf("a ledger line that is not a record: %v", err)
			return
		case n >= len(lt.all):
			lt.all = append(lt.all, rec)
		}
	}
}

func (lt *ledgerTail) mark() { lt.from = len(lt.all) }

// since is the records of the current operation.
func (r *run) since() []ledger.Record {
	r.lt.read(r)
	return r.lt.all[r.lt.from:]
}

// has reports whether recs hold a record of kind by agent of op on path.
func has(recs []ledger.Record, kind ledger.Kind, agent string, op ledger.Op, path string) bool {
	for _, rec := range recs {
		if rec.Kind == kind && rec.Agent == agent && rec.Op == op && rec.Path == path {
			return true
		}
	}
	return false
}

// refused checks the answer of an operation refused (or not) as v says:
// its errno, the record of the refusal, and .acpfs/last-error, which a
// refusal that hides the name leaves alone.
func (r *run) refused(a *agent, got syscall.Errno, v mverdict, op ledger.Op, rel string) {
	r.answers[fmt.Sprintf("%s %s", op, errnoText(got))]++
	if got != v.errno {
		r.failf("%s %s by %s: errno %v, the model says %v", op, rel, a.name, errnoText(got), errnoText(v.errno))
		return
	}
	recs := r.since()
	switch {
	case v.kind != "":
		r.refusals[refusalKey{agent: a.name, path: rel, op: op}]++
		if !has(r.lt.all, v.kind, a.name, op, rel) {
			r.failf("no %s record of %s %s by %s in the ledger", v.kind, op, rel, a.name)
		}
	default:
		for _, rec := range recs {
			if rec.Agent == a.name && rec.Path == rel && isRefusal(rec.Kind) {
				r.failf("a %s record of %s %s by %s, the model expects none", rec.Kind, rec.Op, rel, a.name)
			}
		}
	}
	r.lastError(a, v.kind != "" && v != mHidden, op, rel)
}

// lastError checks .acpfs/last-error: it names the operation that was
// refused, or is what it was.
func (r *run) lastError(a *agent, changed bool, op ledger.Op, rel string) {
	le := a.view.LastError()
	switch {
	case changed && !strings.Contains(le, fmt.Sprintf(" %s %s: ", op, rel)):
		r.failf(".acpfs/last-error of %s does not name %s %s: %q", a.name, op, rel, le)
	case !changed && le != a.lastErr:
		r.failf(".acpfs/last-error of %s changed without a refusal it may tell: %q", a.name, le)
	}
	a.lastErr = le
}

func isRefusal(k ledger.Kind) bool {
	return k == ledger.KindDenied || k == ledger.KindFrozenRefused || k == ledger.KindAppendRejected
}

// wrote checks that the operation recorded the change it made (or
// tried: the record comes first).
func (r *run) wrote(a *agent, op ledger.Op, rel string) {
	if !has(r.since(), ledger.KindWrite, a.name, op, rel) {
		r.failf("no write record of %s %s by %s", op, rel, a.name)
	}
}

// read checks the ledger after an agent was served content of rel: a
// full record of that content is in the ledger, written by this
// operation when it is the first read of it (records says whether the
// operation records a read at all).
func (r *run) read(a *agent, rel string, content []byte, records bool) {
	sha := sum(content)
	fresh := false
	for _, rec := range r.since() {
		if rec.Agent == a.name && rec.Path == rel && rec.Kind == ledger.KindRead {
			if rec.SHA256 != sha || fresh {
				r.failf("read of %s by %s recorded as %v, the model expects one record of %s", rel, a.name, rec, sha)
			}
			fresh = true
		}
	}
	if want := records && (r.audit == AuditOpens || a.latest[rel] != sha); fresh != want {
		r.failf("read of %s by %s (%s): a new full record %v, the model says %v", rel, a.name, sha, fresh, want)
	}
	if !records {
		return
	}
	if !has(r.lt.all, ledger.KindRead, a.name, ledger.OpOpen, rel) {
		r.failf("no read record of %s by %s", rel, a.name)
	}
	a.latest[rel] = sha
}

func errnoText(e syscall.Errno) string {
	if e == 0 {
		return "0"
	}
	return errnoName(e)
}

// sortedKeys is m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
