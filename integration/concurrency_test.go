package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/internal/testutil"
	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/protocol"
)

// concAgents is the number of participants, each with its own view.
const concAgents = 8

// concRounds is how many rounds of concurrent decision_accepted the
// owner opens; in all but the last the owner itself does not accept, so
// the collaboration stays in decision_review.
const concRounds = 4

// concRig is a collaboration of concAgents participants whose views are
// served by other processes; view maps each agent to its mountpoint.
type concRig struct {
	t      *testing.T
	root   string
	folder string
	runs   string
	ledger string
	agents []string
	view   map[string]string

	mu       sync.Mutex
	acked    map[string]int    // summary -> acknowledged appends
	refused  map[string]int    // rule of each EPERM -> count
	problems []string          // found by goroutines, reported at the end
	lastErr  map[string]string // agent -> last .acpfs/last-error seen
}

func newConcRig(t *testing.T) *concRig {
	testutil.RequireFUSE(t)
	root := newDir(t, "conc")
	r := &concRig{t: t, root: root, folder: filepath.Join(root, "folder"), runs: filepath.Join(root, "agent_runs"),
		view: map[string]string{}, acked: map[string]int{}, refused: map[string]int{}, lastErr: map[string]string{}}
	r.ledger = filepath.Join(r.runs, "communication_ledger.jsonl")
	args := []string{"init", "--folder", r.folder, "--objective", "Agree on the cache layer", "--completion", "Cache design reviewed",
		"--primary-deliverable-type", "design-spec"}
	for i := 1; i <= concAgents; i++ {
		a := fmt.Sprintf("agent%d", i)
		r.agents = append(r.agents, a)
		args = append(args, "--participant", a)
	}
	_, stderr, code := acpfs(t, args...)
	require.Equal(t, 0, code, stderr)
	return r
}

func (r *concRig) owner() string { return r.agents[0] }

// grant is the grant of agent: the owner writes the proposal documents,
// the others review.
func (r *concRig) grant(agent string) *grants.Grant {
	g := &grants.Grant{GrantID: "G-" + agent, AgentID: agent, Role: "reviewer", Objective: "Review the cache design",
		MayRead: protocolDocs, ForbiddenRead: []string{"oracle/**"}, MayWrite: []string{"events.jsonl", "protocol.json", "review.md"}}
	if agent == r.owner() {
		g.Role, g.Objective = "proposal owner", "Write the cache design"
		g.MayWrite = []string{"events.jsonl", "protocol.json", "proposal.md", "decisions.md", "readiness.md", "conclusion.md", "deliverables/**"}
	}
	return g
}

// mountEach starts one `acpfs mount` process per agent.
func (r *concRig) mountEach() []*testutil.Daemon {
	var procs []*testutil.Daemon
	for _, a := range r.agents {
		gp := pmWriteGrant(r.t, r.runs, r.grant(a))
		r.view[a] = filepath.Join(r.root, "mnt", a)
		procs = append(procs, pmMount(r.t, r.folder, gp, r.ledger, r.view[a]))
	}
	return procs
}

// up starts one `acpfs up` process serving every agent's view.
func (r *concRig) up() *testutil.Daemon {
	for _, a := range r.agents {
		pmWriteGrant(r.t, r.runs, r.grant(a))
		r.view[a] = filepath.Join(r.root, "mnt", a)
	}
	return pmUp(r.t, r.runs, r.folder, filepath.Join(r.root, "mnt"), r.agents)
}

func (r *concRig) path(agent, rel string) string { return filepath.Join(r.view[agent], rel) }

// found returns the problems recorded so far, one per line.
func (r *concRig) found() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.problems, "\n")
}

func (r *concRig) problem(format string, args ...any) {
	r.mu.Lock()
	r.problems = append(r.problems, fmt.Sprintf(format, args...))
	r.mu.Unlock()
}

var ruleRE = regexp.MustCompile(`\[([a-z0-9-]+)\]`)

// appendEvent appends event name as agent through its own view, reading
// the next seq from the view first, and retries while another agent's
// append wins the race (EPERM). It returns the accepted seq, or 0 after
// recording a problem.
func (r *concRig) appendEvent(agent, name, summary string, extra map[string]any) int {
	for attempt := 0; attempt < 200; attempt++ {
		b, err := os.ReadFile(r.path(agent, "events.jsonl"))
		if err != nil {
			r.problem("%s: read events.jsonl: %v", agent, err)
			return 0
		}
		evs, err := pmParseEvents(b)
		if err != nil || len(evs) == 0 {
			r.problem("%s: events.jsonl as read through its view: %v", agent, err)
			return 0
		}
		seq := evs[len(evs)-1].Seq + 1
		errno := pmAppend(r.path(agent, "events.jsonl"), pmLine(seq, agent, name, summary, time.Now(), extra))
		if errno == 0 {
			r.mu.Lock()
			r.acked[summary]++
			r.mu.Unlock()
			return seq
		}
		le, _ := os.ReadFile(r.path(agent, ".acpfs/last-error"))
		if errno != syscall.EPERM {
			r.problem("%s: append %s seq %d: %v: %s", agent, name, seq, errno, le)
			return 0
		}
		rule := "?"
		if m := ruleRE.FindAllStringSubmatch(string(le), -1); len(m) > 0 {
			rule = m[len(m)-1][1]
		}
		r.mu.Lock()
		r.refused[rule]++
		r.lastErr[agent] = string(le)
		r.mu.Unlock()
		if rule != "seq-continuous" && rule != "at-order" {
			r.problem("%s: append %s seq %d refused for a reason other than a lost race: %s", agent, name, seq, le)
			return 0
		}
	}
	r.problem("%s: append %s: still losing the race after 200 attempts", agent, name)
	return 0
}

// must appends and fails the test at once on refusal (single writer).
func (r *concRig) must(agent, name string, extra map[string]any) int {
	r.t.Helper()
	r.mu.Lock()
	n := len(r.acked)
	r.mu.Unlock()
	seq := r.appendEvent(agent, name, fmt.Sprintf("%s by %s (#%d)", name, agent, n), extra)
	require.NotZero(r.t, seq, r.found())
	return seq
}

// concurrently runs fn for each agent at once and waits.
func concurrently(agents []string, fn func(agent string)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, a := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			fn(a)
		}()
	}
	close(start)
	wg.Wait()
}

// readers keep reading events.jsonl and .acpfs/status through every
// view until stop is closed: each read must be whole, continuous lines.
func (r *concRig) readers(stop <-chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	for i, a := range r.agents {
		if i%2 == 1 {
			continue // half the agents read while the others write
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				b, err := os.ReadFile(r.path(a, "events.jsonl"))
				if err != nil {
					r.problem("reader %s: %v", a, err)
					return
				}
				evs, err := pmParseEvents(b)
				if err != nil {
					r.problem("reader %s: read %d: %v", a, n, err)
					return
				}
				for j, ev := range evs {
					if ev.Seq != j+1 {
						r.problem("reader %s: read %d: line %d carries seq %d", a, n, j+1, ev.Seq)
						return
					}
				}
				if _, err := os.ReadFile(r.path(a, ".acpfs/status")); err != nil {
					r.problem("reader %s: status: %v", a, err)
					return
				}
			}
		}()
	}
	return &wg
}

// play runs the collaboration: concurrent reviews, then concRounds
// rounds in which every waited-for participant accepts at once while
// others read, the last round moving to readiness_check.
func (r *concRig) play() {
	t := r.t
	own := r.owner()
	reviewers := r.agents[1:]
	stop := make(chan struct{})
	readers := r.readers(stop)
	defer func() { close(stop); readers.Wait() }()

	require.NoError(t, os.WriteFile(r.path(own, primary), []byte(designSpec("In Review")), 0o644))
	r.must(own, "deliverable_drafted", map[string]any{"doc": primary, "role": "primary"})
	r.must(own, "proposal_submitted", nil)

	// Reviews race each other. Their review.md sections are appended to
	// the backing file under a lock, as a coordinator would: appending
	// to one file through several views loses sections today (see
	// TestConcurrentAppendsToSharedFileAcrossViews).
	var reviewMu sync.Mutex
	concurrently(reviewers, func(a string) {
		seq := r.appendEvent(a, "review_submitted", "review by "+a, nil)
		if seq == 0 {
			return
		}
		reviewMu.Lock()
		defer reviewMu.Unlock()
		if err := appendFile(filepath.Join(r.folder, "review.md"), reviewSection(a, seq)); err != nil {
			r.problem("%s: append to review.md: %v", a, err)
		}
	})
	require.Empty(t, r.found())

	r.must(own, "proposal_revised", nil)
	p := r.path(own, "readiness.md")
	s := regexp.MustCompile(`(?m)^- \[unresolved\] .*$`).ReplaceAllString(readFile(t, p), "- [resolved] The reviews are complete.")
	require.NoError(t, os.WriteFile(p, []byte(s), 0o644))

	for round := 1; round <= concRounds; round++ {
		if round > 1 {
			r.must(own, "decision_proposed", nil)
		}
		r.must(own, "question_classified", nil)
		accepting := reviewers
		if round == concRounds {
			accepting = r.agents
		}
		concurrently(accepting, func(a string) {
			r.appendEvent(a, "decision_accepted", fmt.Sprintf("round %d accepted by %s", round, a), nil)
		})
		require.Empty(t, r.found(), "round %d", round)
	}
}

// check verifies the end state: every acknowledged append once, seqs
// continuous, one append_accepted record per line and one
// append_rejected record per refusal, a valid chain, a clean folder.
func (r *concRig) check(procs []*testutil.Daemon) {
	t := r.t
	require.Empty(t, r.found())
	for _, p := range procs {
		require.NoError(t, p.Stop())
	}

	evs, err := pmParseEvents([]byte(readFile(t, filepath.Join(r.folder, "events.jsonl"))))
	require.NoError(t, err)
	pmRequireSeqs(t, evs)
	count := map[string]int{}
	for _, ev := range evs {
		count[ev.Summary]++
	}
	for s, n := range r.acked {
		assert.Equal(t, 1, n, "%q acknowledged %d times", s, n)
		assert.Equal(t, 1, count[s], "acknowledged %q is in events.jsonl %d times", s, count[s])
	}
	// initialized (by acpfs init) is the only line not appended through a view.
	require.Equal(t, len(evs)-1, len(r.acked))
	wantEvents := 1 + 2 + (concAgents - 1) + 1 + (concRounds-1)*(2+concAgents-1) + 1 + concAgents
	require.Equal(t, wantEvents, len(evs))

	pmRequireLedgerValid(t, r.ledger)
	recs := pmLedgerRecords(t, r.ledger)
	pmRequireLedgerMatchesEvents(t, recs, evs, 2)
	// An append interrupted while it waited for the log's lock (Go's own
	// preemption signal does it) is refused with EINTR and recorded, and
	// the writer's retry is what the agent sees: those are no lost race.
	refusals, starts, stops := 0, 0, 0
	for _, rec := range recs {
		switch rec.Kind {
		case ledger.KindAppendRejected:
			if !strings.Contains(rec.Detail, "["+protocol.RuleInterrupted+"]") {
				refusals++
			}
		case ledger.KindDeniedRepeat:
			if rec.Op == "append" && rec.Detail != "rule "+protocol.RuleInterrupted {
				refusals += int(rec.Count) // repeats of a refusal recorded in full
			}
		case ledger.KindMountStarted:
			starts++
		case ledger.KindMountStopped:
			stops++
		}
	}
	lost := 0
	for _, n := range r.refused {
		lost += n
	}
	assert.Equal(t, lost, refusals, "every refused append is recorded or counted")
	assert.Equal(t, concAgents, starts)
	assert.Equal(t, concAgents, stops)

	out, stderr, code := acpfs(t, "validate", "--folder", r.folder)
	require.Equal(t, 0, code, "validate: %s%s", out, stderr)
	require.Empty(t, derivedMismatch(r.folder, []byte(readFile(t, filepath.Join(r.folder, "protocol.json")))))
	require.Contains(t, readFile(t, filepath.Join(r.folder, "protocol.json")), `"currentPhase": "readiness_check"`)

	rules := make([]string, 0, len(r.refused))
	for k, n := range r.refused {
		rules = append(rules, fmt.Sprintf("%s=%d", k, n))
	}
	sort.Strings(rules)
	t.Logf("%d events, %d lost races (%s), %d ledger records", len(evs), lost, strings.Join(rules, " "), len(recs))
}

// TestConcurrentAgentsSeparateMounts: 8 agents, each with its own
// `acpfs mount` process, append and read at once.
func TestConcurrentAgentsSeparateMounts(t *testing.T) {
	r := newConcRig(t)
	procs := r.mountEach()
	deadline := time.AfterFunc(25*time.Second, func() { r.problem("over the 25 s budget") })
	defer deadline.Stop()
	r.play()
	r.check(procs)
}

// TestConcurrentAgentsCoordinator: the same collaboration with one
// `acpfs up` process serving all 8 views from one protocol log and one
// ledger writer.
func TestConcurrentAgentsCoordinator(t *testing.T) {
	r := newConcRig(t)
	p := r.up()
	deadline := time.AfterFunc(25*time.Second, func() { r.problem("over the 25 s budget") })
	defer deadline.Stop()
	r.play()
	r.check([]*testutil.Daemon{p})
}

func reviewSection(agent string, seq int) string {
	return fmt.Sprintf("\n## %s - %s - seq %d\n\nContext:\n- Reviewed primary deliverable: `%s`\n\nPosition:\n- Sound design.\n",
		time.Now().UTC().Format("2006-01-02T15:04:05Z"), agent, seq, primary)
}

// appendFile appends s with one O_APPEND write(2), as `echo >>` does.
func appendFile(path, s string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(s)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// TestConcurrentAppendsToSharedFileAcrossViews: reviewers append their
// sections to review.md with `>>`, each through its own view, one after
// the other and then all at once. No section may be lost.
func TestConcurrentAppendsToSharedFileAcrossViews(t *testing.T) {
	r := newConcRig(t)
	r.mountEach()
	reviewers := r.agents[1:4]
	p := filepath.Join(r.folder, "review.md")
	before := readFile(t, p)

	want := []string{}
	for i, a := range reviewers { // one after the other, no pause
		s := fmt.Sprintf("\n## sequential %d by %s\n", i, a)
		require.NoError(t, appendFile(r.path(a, "review.md"), s))
		want = append(want, s)
	}
	concurrently(reviewers, func(a string) {
		if err := appendFile(r.path(a, "review.md"), fmt.Sprintf("\n## concurrent by %s\n", a)); err != nil {
			r.problem("%s: %v", a, err)
		}
	})
	require.Empty(t, r.found())
	for _, a := range reviewers {
		want = append(want, fmt.Sprintf("\n## concurrent by %s\n", a))
	}

	got := readFile(t, p)
	var lost []string
	for _, s := range want {
		if !strings.Contains(got, s) {
			lost = append(lost, strings.TrimSpace(s))
		}
	}
	if len(lost) > 0 {
		t.Fatalf("appends from other views were overwritten (O_APPEND must write at the true end of the file): lost %q; review.md is now %d bytes (was %d)",
			lost, len(got), len(before))
	}
}
