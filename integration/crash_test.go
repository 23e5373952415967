package integration

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/internal/testutil"
	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/protocol"
)

// crashRig is a two-agent collaboration whose views are served by
// separate `acpfs mount` processes that the test kills and restarts.
type crashRig struct {
	t      *testing.T
	c      *collab
	grant  map[string]string // agent -> grant file
	mnt    map[string]string // agent -> mountpoint
	proc   map[string]*testutil.Daemon
	starts []time.Duration // exec to first answer, per (re)start
}

func newCrashRig(t *testing.T) *crashRig {
	testutil.RequireFUSE(t)
	c := newCollab(t)
	r := &crashRig{t: t, c: c, grant: map[string]string{}, mnt: map[string]string{}, proc: map[string]*testutil.Daemon{}}
	for _, g := range []struct {
		agent string
		path  string
	}{{owner, c.writeGrant(ownerGrant())}, {reviewer, c.writeGrant(reviewerGrant())}} {
		r.grant[g.agent] = g.path
		r.mnt[g.agent] = filepath.Join(c.root, "mnt-"+g.agent)
		r.start(g.agent)
	}
	return r
}

func (r *crashRig) start(agent string) {
	r.t.Helper()
	t0 := time.Now()
	r.proc[agent] = pmMount(r.t, r.c.folder, r.grant[agent], r.c.ledger, r.mnt[agent])
	r.starts = append(r.starts, time.Since(t0))
}

func (r *crashRig) path(agent, rel string) string { return filepath.Join(r.mnt[agent], rel) }

// must appends through agent's view and fails on refusal.
func (r *crashRig) must(agent, name string, extra map[string]any) {
	r.t.Helper()
	line := r.c.event(agent, name, extra)
	errno := pmAppend(r.path(agent, "events.jsonl"), line)
	require.Equal(r.t, syscall.Errno(0), errno, "append %s: %s", line, readFile(r.t, r.path(agent, ".acpfs/last-error")))
}

// toDecisionReview brings the collaboration to decision_review with
// readiness resolved, writing through the views only.
func (r *crashRig) toDecisionReview() {
	t := r.t
	require.NoError(t, os.WriteFile(r.path(owner, primary), []byte(designSpec("In Review")), 0o644))
	r.must(owner, "deliverable_drafted", map[string]any{"doc": primary, "role": "primary"})
	r.must(owner, "proposal_submitted", nil)
	require.NoError(t, os.WriteFile(r.path(reviewer, "review.md"), []byte(reviewDoc(r.c.snapshot().LastSeq+1)), 0o644))
	r.must(reviewer, "review_submitted", nil)
	r.must(owner, "proposal_revised", nil)
	p := r.path(owner, "readiness.md")
	s := regexp.MustCompile(`(?m)^- \[unresolved\] .*$`).ReplaceAllString(readFile(t, p), "- [resolved] The first review is complete.")
	require.NoError(t, os.WriteFile(p, []byte(s), 0o644))
}

// nextStep picks the next event of a loop that stays valid forever in
// decision_review: the owner proposes, classifies, then one participant
// (chosen by rng) accepts, which leaves the other one waited for.
func nextStep(last pmEvent, rng *rand.Rand) (from, name string) {
	switch last.Event {
	case "proposal_revised", "decision_proposed":
		return owner, "question_classified"
	case "question_classified":
		return []string{owner, reviewer}[rng.Intn(2)], "decision_accepted"
	default:
		return owner, "decision_proposed"
	}
}

// lastEvent reads the backing events.jsonl, which must be whole lines.
func (r *crashRig) lastEvent() pmEvent {
	r.t.Helper()
	evs, err := pmParseEvents([]byte(readFile(r.t, filepath.Join(r.c.folder, "events.jsonl"))))
	require.NoError(r.t, err)
	require.NotEmpty(r.t, evs)
	return evs[len(evs)-1]
}

// derivedMismatch compares a protocol.json with the state derived from
// the events by a fresh replay; "" when they agree.
func derivedMismatch(folder string, protoJSON []byte) string {
	l, err := protocol.OpenLog(folder)
	if err != nil {
		return err.Error()
	}
	defer l.Close()
	s := l.Snapshot()
	var p struct {
		Phase   string   `json:"currentPhase"`
		Owner   string   `json:"proposalOwner"`
		Waiting []string `json:"waitingFor"`
	}
	if err := json.Unmarshal(protoJSON, &p); err != nil {
		return fmt.Sprintf("protocol.json does not parse: %v", err)
	}
	if p.Waiting == nil {
		p.Waiting = []string{}
	}
	if p.Phase != s.Phase || p.Owner != s.Owner || strings.Join(p.Waiting, ",") != strings.Join(s.WaitingFor, ",") {
		return fmt.Sprintf("protocol.json says %s/%s/%v, the events (last seq %d) give %s/%s/%v",
			p.Phase, p.Owner, p.Waiting, s.LastSeq, s.Phase, s.Owner, s.WaitingFor)
	}
	return ""
}

// crashSeed makes a failing run reproducible: ACPFS_CRASH_SEED=<n>.
func crashSeed(t *testing.T) int64 {
	seed := time.Now().UnixNano()
	if s := os.Getenv("ACPFS_CRASH_SEED"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		require.NoError(t, err)
		seed = n
	}
	t.Logf("ACPFS_CRASH_SEED=%d", seed)
	return seed
}

// TestCrashKillDaemonsDuringAppends drives 100 operations (appends of
// valid events and reads) through two `acpfs mount` processes and
// SIGKILLs the daemon serving an append at random moments of it, then
// cleans the dead mountpoint with `acpfs umount`, remounts and goes on.
// At the end: no torn line, protocol.json equals the derived state, the
// ledger chain verifies (a simulated torn ledger write is cut and
// recorded), every append acknowledged by write(2)+close(2) is in
// events.jsonl exactly once, and every line there has its
// append_accepted record.
func TestCrashKillDaemonsDuringAppends(t *testing.T) {
	r := newCrashRig(t)
	r.toDecisionReview()
	rng := rand.New(rand.NewSource(crashSeed(t)))

	const ops, kills = 100, 6
	killAt := map[int]bool{}
	for len(killAt) < kills {
		killAt[5+rng.Intn(ops-10)] = true
	}
	tornAt := -1 // the kill after which a torn ledger write is simulated
	for i := range killAt {
		if tornAt < 0 || i < tornAt {
			tornAt = i
		}
	}

	acked := map[string]bool{} // summary -> write+close succeeded
	var staleAfterRestart []string
	restarted := false // a daemon died since the last acknowledged append
	deadline := time.Now().Add(25 * time.Second)
	for i := 0; i < ops; i++ {
		require.True(t, time.Now().Before(deadline), "crash test over its time budget at op %d", i)
		if !killAt[i] && rng.Intn(10) < 3 {
			if m := r.readCheck(i, []string{owner, reviewer}[rng.Intn(2)]); m != "" {
				require.True(t, restarted, "op %d: protocol.json is not the derived state although no daemon died since the last append: %s", i, m)
				staleAfterRestart = append(staleAfterRestart, fmt.Sprintf("op %d (read): %s", i, m))
			}
			continue
		}
		last := r.lastEvent()
		from, name := nextStep(last, rng)
		summary := fmt.Sprintf("op-%03d %s", i, name)
		line := pmLine(last.Seq+1, from, name, summary, time.Now(), nil)
		if !killAt[i] {
			errno := pmAppend(r.path(from, "events.jsonl"), line)
			require.Equal(t, syscall.Errno(0), errno, "op %d: %s: %s", i, line, readFile(t, r.path(from, ".acpfs/last-error")))
			acked[summary] = true
			restarted = false
			continue
		}

		// Kill the daemon while the append is on its way through it.
		res := make(chan syscall.Errno, 1)
		go func() { res <- pmAppend(r.path(from, "events.jsonl"), line) }()
		time.Sleep(time.Duration(rng.Intn(3000)) * time.Microsecond)
		r.proc[from].Kill()
		errno := <-res
		acked[summary] = errno == 0
		outcome := "acknowledged"
		if errno != 0 {
			outcome = errno.Error()
		}
		t.Logf("op %d: killed %s's daemon during %s: %s", i, from, name, outcome)

		// An open always reaches the daemon (a stat of the root may be
		// answered from attributes the kernel still keeps).
		_, err := os.ReadFile(filepath.Join(r.mnt[from], ".acpfs", "status"))
		require.True(t, errors.Is(err, syscall.ENOTCONN), "a dead view must answer ENOTCONN, got %v", err)
		if i == tornAt {
			// A stale mountpoint is refused with a hint, not mounted over.
			out, stderr, code := acpfs(t, "mount", "--folder", r.c.folder, "--grant", r.grant[from], "--ledger", r.c.ledger, r.mnt[from])
			require.Equal(t, 3, code, "%s%s", out, stderr)
			require.Contains(t, stderr, "acpfs umount")
			// What a crash in the middle of a ledger write(2) leaves.
			f, err := os.OpenFile(r.c.ledger, os.O_WRONLY|os.O_APPEND, 0)
			require.NoError(t, err)
			_, err = f.WriteString(`{"seq":999999,"at":"2026-01-01T00:00:00.0`)
			require.NoError(t, err)
			require.NoError(t, f.Close())
		}
		out, stderr, code := acpfs(t, "umount", r.mnt[from])
		require.Equal(t, 0, code, "umount of a dead view: %s%s", out, stderr)
		require.False(t, testutil.Mounted(r.mnt[from]))
		r.start(from)
		restarted = true
		if m := derivedMismatch(r.c.folder, []byte(readFile(t, r.path(from, "protocol.json")))); m != "" {
			staleAfterRestart = append(staleAfterRestart, fmt.Sprintf("op %d: %s", i, m))
		}
	}

	for _, a := range []string{owner, reviewer} {
		require.NoError(t, r.proc[a].Stop(), "clean stop of %s's daemon", a)
	}
	// A restarted daemon reconciles protocol.json before serving, so it
	// is never stale after a restart.
	require.Empty(t, staleAfterRestart, "protocol.json stale after a restart")

	// No torn line, no gap, no duplicate.
	data := readFile(t, filepath.Join(r.c.folder, "events.jsonl"))
	evs, err := pmParseEvents([]byte(data))
	require.NoError(t, err)
	pmRequireSeqs(t, evs)
	count := map[string]int{}
	for _, ev := range evs {
		count[ev.Summary]++
	}
	ackedN := 0
	for s, ok := range acked {
		if ok {
			ackedN++
			assert.Equal(t, 1, count[s], "acknowledged append %q must be present exactly once", s)
		} else {
			assert.LessOrEqual(t, count[s], 1, "unacknowledged append %q duplicated", s)
		}
	}
	t.Logf("%d events, %d appends acknowledged, %d daemon restarts, start-up %v", len(evs), ackedN, len(r.starts)-2, r.starts)

	// protocol.json is the derived state; the folder validates.
	require.Empty(t, derivedMismatch(r.c.folder, []byte(readFile(t, filepath.Join(r.c.folder, "protocol.json")))))
	out, stderr, code := acpfs(t, "validate", "--folder", r.c.folder)
	require.Equal(t, 0, code, "validate: %s%s", out, stderr)

	// The ledger chain holds, the torn write was cut and recorded, and
	// every acknowledged append has its record.
	pmRequireLedgerValid(t, r.c.ledger)
	rep, err := ledger.Verify(r.c.ledger)
	require.NoError(t, err)
	require.NotEmpty(t, rep.Repairs, "the torn ledger write must be cut with a repair record")
	recs := pmLedgerRecords(t, r.c.ledger)
	accepted := map[string]bool{}
	for _, rec := range recs {
		if rec.Kind == ledger.KindAppendAccepted {
			accepted[rec.Detail] = true
		}
	}
	// Every line appended through a view has its record, whether or not
	// its writer heard back: the record is written before the line.
	for _, ev := range evs {
		if strings.HasPrefix(ev.Summary, "op-") {
			assert.True(t, accepted[fmt.Sprintf("seq %d %s", ev.Seq, ev.Event)], "no append_accepted record for seq %d (acknowledged: %v)", ev.Seq, acked[ev.Summary])
		}
	}
	if strays, _ := filepath.Glob(filepath.Join(r.c.folder, ".protocol.json.tmp-*")); len(strays) > 0 {
		t.Logf("temporary files left in the folder by killed daemons: %v", strays)
	}
}

// readCheck reads through agent's view: events.jsonl must be whole,
// continuous lines and the status must answer. It returns how
// protocol.json differs from the derived state ("" when it does not).
func (r *crashRig) readCheck(op int, agent string) string {
	t := r.t
	t.Helper()
	b, err := os.ReadFile(r.path(agent, "events.jsonl"))
	require.NoError(t, err, "op %d", op)
	evs, err := pmParseEvents(b)
	require.NoError(t, err, "op %d: read through %s's view", op, agent)
	pmRequireSeqs(t, evs)
	st, err := os.ReadFile(r.path(agent, ".acpfs/status"))
	require.NoError(t, err)
	require.Contains(t, string(st), "phase: decision_review")
	pj, err := os.ReadFile(r.path(agent, "protocol.json"))
	require.NoError(t, err)
	return derivedMismatch(r.c.folder, pj)
}

// TestCrashBetweenEventAndProtocolWrite reproduces the narrowest crash
// window of an append: the event line is in events.jsonl but the daemon
// died before it replaced protocol.json. A restarted daemon must not
// serve the stale protocol.json as the collaboration's state.
func TestCrashBetweenEventAndProtocolWrite(t *testing.T) {
	r := newCrashRig(t)
	r.toDecisionReview()
	r.proc[owner].Kill()
	out, stderr, code := acpfs(t, "umount", r.mnt[owner])
	require.Equal(t, 0, code, "%s%s", out, stderr)

	// What the dead daemon managed to write: the line, not protocol.json.
	before := readFile(t, filepath.Join(r.c.folder, "protocol.json"))
	line := r.c.event(owner, "question_classified", nil)
	f, err := os.OpenFile(filepath.Join(r.c.folder, "events.jsonl"), os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.WriteString(line + "\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.NotEmpty(t, derivedMismatch(r.c.folder, []byte(before)), "the simulated crash must leave protocol.json stale")

	r.start(owner)
	status := readFile(t, r.path(owner, ".acpfs/status"))
	require.Contains(t, status, "waiting for: alice, bob", "the status follows the events")
	viewed := readFile(t, r.path(owner, "protocol.json"))
	if m := derivedMismatch(r.c.folder, []byte(viewed)); m != "" {
		t.Fatal("after a crash between the events.jsonl write and the protocol.json rename, the restarted daemon serves a stale protocol.json: " + m)
	}
	out, stderr, code = acpfs(t, "validate", "--folder", r.c.folder)
	require.Equal(t, 0, code, "%s%s", out, stderr)
}

// BenchmarkProcMountStart measures the start-up of an `acpfs mount`
// process on a folder with a long history: from exec to the view
// answering stat(.acpfs/status). It also reports what a read of the
// status costs on that history.
func BenchmarkProcMountStart(b *testing.B) {
	for _, n := range []int{1_000, 100_000} {
		b.Run(fmt.Sprintf("events=%dk", n/1000), func(b *testing.B) {
			testutil.RequireFUSE(b)
			c := newCollab(b)
			writeLongHistory(b, c, n)
			gp := c.writeGrant(reviewerGrant())
			mnt := filepath.Join(c.root, "mnt")
			var statusRead time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				p := pmMount(b, c.folder, gp, c.ledger, mnt)
				b.StopTimer()
				for j := 0; j < 3; j++ {
					t0 := time.Now()
					_, err := os.ReadFile(filepath.Join(mnt, ".acpfs", "status"))
					statusRead += time.Since(t0)
					require.NoError(b, err)
				}
				require.NoError(b, p.Stop())
				b.StartTimer()
			}
			b.ReportMetric(float64(statusRead.Microseconds())/float64(3*b.N)/1000, "ms/status-read")
		})
	}
}

// writeLongHistory gives c a valid history of n events: the happy path
// to question_classified through the CLI, then a loop of
// decision_accepted (bob), decision_proposed and question_classified
// (alice) written directly, all at one time; the last event goes
// through the CLI again so that protocol.json is rewritten from the
// state.
func writeLongHistory(b testing.TB, c *collab, n int) {
	b.Helper()
	require.GreaterOrEqual(b, n, 10)
	app := func(from, name string, extra ...string) {
		args := append([]string{"append", "--folder", c.folder, "--participant", from, "--event", name, "--summary", name,
			"--reply-to", strconv.Itoa(c.snapshot().LastSeq)}, extra...)
		out, stderr, code := acpfs(b, args...)
		require.Equal(b, 0, code, "%s%s", out, stderr)
	}
	require.NoError(b, os.WriteFile(filepath.Join(c.folder, primary), []byte(designSpec("In Review")), 0o644))
	app(owner, "deliverable_drafted", "--doc", primary, "--role", "primary")
	app(owner, "proposal_submitted")
	require.NoError(b, os.WriteFile(filepath.Join(c.folder, "review.md"), []byte(reviewDoc(c.snapshot().LastSeq+1)), 0o644))
	app(reviewer, "review_submitted")
	app(owner, "proposal_revised")
	p := filepath.Join(c.folder, "readiness.md")
	s := regexp.MustCompile(`(?m)^- \[unresolved\] .*$`).ReplaceAllString(readFile(b, p), "- [resolved] The first review is complete.")
	require.NoError(b, os.WriteFile(p, []byte(s), 0o644))
	app(owner, "question_classified")

	cycle := []struct{ from, name string }{{reviewer, "decision_accepted"}, {owner, "decision_proposed"}, {owner, "question_classified"}}
	first := c.snapshot().LastSeq + 1
	at := time.Now() // never earlier than the events above; equal times are allowed
	var buf bytes.Buffer
	for seq := first; seq < n; seq++ {
		st := cycle[(seq-first)%len(cycle)]
		buf.WriteString(pmLine(seq, st.from, st.name, "history step", at, nil))
		buf.WriteByte('\n')
	}
	f, err := os.OpenFile(filepath.Join(c.folder, "events.jsonl"), os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(b, err)
	_, err = f.Write(buf.Bytes())
	require.NoError(b, err)
	require.NoError(b, f.Close())
	st := cycle[(n-first)%len(cycle)]
	app(st.from, st.name)
	require.Equal(b, n, c.snapshot().LastSeq)
}
