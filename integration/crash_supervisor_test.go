package integration

import (
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/internal/testutil"
)

// supervisorAnswer bounds how long a view may take to answer after its
// coordinator was killed (the bound; the supervisor needs a
// fraction of it).
const supervisorAnswer = 5 * time.Second

// crashKills is how many times TestCrashKillUpUnderLoad kills `acpfs up`
// (ACPFS_CRASH_KILLS overrides it).
func crashKills(t *testing.T) int {
	if s := os.Getenv("ACPFS_CRASH_KILLS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err, "ACPFS_CRASH_KILLS")
		return n
	}
	return 20
}

// crashLoadFor is how long the load of one round of
// TestCrashKillUpUnderLoad runs before the kill: a random moment, early
// (the first requests, the history still being read) as well as late,
// short enough that twenty rounds stay cheap.
func crashLoadFor(rng *rand.Rand) time.Duration {
	return time.Duration(20+rng.Intn(600)) * time.Millisecond
}

// answers runs op in a goroutine and tells whether it returned within d
// (a call stuck on a hung view never returns until its connection is
// aborted), with what it returned.
func answers(d time.Duration, op func() error) (error, bool) {
	ch := make(chan error, 1)
	go func() { ch <- op() }()
	select {
	case err := <-ch:
		return err, true
	case <-time.After(d):
		return nil, false
	}
}

// TestCrashKillUpUnderLoad (issue 25, finding 1): `acpfs up` is killed
// with SIGKILL at random moments while writers append through the
// owner's view and readers list, stat and read every view (a 64 MiB file
// among what they read). Each time, with no manual step, every caller
// returns and every view answers (ENOTCONN) within supervisorAnswer, the
// killed process finishes dying, every append acknowledged so far is in
// the folder exactly once, and `acpfs up` starts again on the same root
// and serves.
func TestCrashKillUpUnderLoad(t *testing.T) {
	r := newConcRig(t)
	rng := rand.New(rand.NewSource(crashSeed(t)))
	own := r.owner()
	big := filepath.Join(r.folder, "deliverables", "big.bin")
	require.NoError(t, os.MkdirAll(filepath.Dir(big), 0o755))
	require.NoError(t, os.WriteFile(big, make([]byte, 64<<20), 0o644))

	acked := &crashAcked{m: map[string]bool{}}
	kills := crashKills(t)
	for round := 0; round <= kills; round++ {
		up := r.up()
		if round == 0 {
			requireSupervisorHoldsNoFUSE(t, up.PID())
			require.NoError(t, os.WriteFile(r.path(own, primary), []byte(designSpec("Draft")), 0o644))
		}
		if round == kills {
			// The last start: it serves, and stops cleanly.
			_, err := os.ReadFile(r.path(own, "events.jsonl"))
			require.NoError(t, err)
			sup := requireSupervisorHoldsNoFUSE(t, up.PID())
			require.NoError(t, up.Stop(), up.Output())
			// The supervisor ends with its daemon (Stop waited for the
			// output they share to close).
			st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", sup))
			assert.True(t, err != nil || strings.Contains(string(st), ") Z "), "the supervisor outlived its daemon: %s", st)
			break
		}
		load := startCrashLoad(r, round, acked)
		// A random moment of the load (not a synchronisation: any moment
		// will do, and every one must be survived).
		time.Sleep(crashLoadFor(rng))
		require.NoError(t, syscall.Kill(up.PID(), syscall.SIGKILL))
		killed := time.Now()
		crashRequireAnswered(t, r, up, load, round, killed)
		crashRequireOnce(t, r.folder, acked.m, fmt.Sprintf("round %d", round))
		if round == 0 {
			// status says what became of the views, and what clears them.
			out, stderr, code := acpfs(t, "status", "--runs", r.runs)
			assert.Equal(t, 2, code, "%s%s", out, stderr)
			assert.Contains(t, stderr, fmt.Sprintf("%d view(s) are dead (ENOTCONN): run `acpfs up` again: it clears them", len(r.agents)))
			assert.Contains(t, out, "[dead]")
			assert.NotContains(t, out, "[hung]")
		}
		// The supervisor says when it aborted a daemon that still had
		// threads (among them, one stuck is the hang this test is about).
		rescued := strings.Contains(up.Output(), "dying with threads left")
		t.Logf("round %d: views answered %v after SIGKILL (aborted by the supervisor while dying: %v)", round, time.Since(killed).Round(time.Millisecond), rescued)
	}

	n := crashRequireOnce(t, r.folder, acked.m, "at the end")
	t.Logf("%d kills, %d acknowledged appends, %d events", kills, len(acked.m), n)
	pmRequireLedgerValid(t, r.ledger)
}

// crashAcked are the appends the views acknowledged, by summary.
type crashAcked struct {
	mu sync.Mutex
	m  map[string]bool
}

// crashLoad is the load of one round of TestCrashKillUpUnderLoad: its
// workers end at stop, or at their first error (the daemon is gone).
type crashLoad struct {
	stop chan struct{}
	wg   sync.WaitGroup
	ops  sync.Map // worker -> its last operation, for a hang's report
}

// running says whether the load is to go on.
func (l *crashLoad) running() bool {
	select {
	case <-l.stop:
		return false
	default:
		return true
	}
}

// crashWriters is how many writers race through the owner's view.
const crashWriters = 16

// startCrashLoad starts the writers racing through the owner's view,
// readers of every view, and a writer of the folder.
func startCrashLoad(r *concRig, round int, acked *crashAcked) *crashLoad {
	l := &crashLoad{stop: make(chan struct{})}
	for w := 0; w < crashWriters; w++ {
		l.wg.Add(1)
		go l.writer(r, fmt.Sprintf("writer %d", w), fmt.Sprintf("round %d writer %d", round, w), acked)
	}
	// Readers of every view: listers (readdir and stat hold the
	// directory's lock while they wait for the daemon, which is what a
	// cache-invalidation notify queues behind) and readers of the large
	// file and of events.jsonl.
	for i, a := range r.agents {
		l.wg.Add(2)
		go l.lister(r, fmt.Sprintf("lister %d", i), a)
		go l.reader(r, fmt.Sprintf("reader %d", i), a)
	}
	// Someone with the folder (another host's copy, an editor) replaces
	// a file at its top: the watcher tells every view's kernel to drop
	// the name, a notify that takes the directory's lock.
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		for i := 0; l.running(); i++ {
			tmp := filepath.Join(r.folder, fmt.Sprintf(".notes.tmp-%d", i))
			if os.WriteFile(tmp, []byte("notes\n"), 0o644) != nil || os.Rename(tmp, filepath.Join(r.folder, "notes.txt")) != nil {
				r.problem("folder writer: cannot replace notes.txt")
				return
			}
		}
	}()
	return l
}

// writer appends the owner's deliverable_drafted through its view,
// reading the next seq there first, and notes what was acknowledged.
func (l *crashLoad) writer(r *concRig, name, prefix string, acked *crashAcked) {
	defer l.wg.Done()
	own := r.owner()
	for i := 0; l.running(); i++ {
		l.ops.Store(name, "read events.jsonl")
		b, err := os.ReadFile(r.path(own, "events.jsonl"))
		if err != nil {
			return // the daemon is gone
		}
		evs, err := pmParseEvents(b)
		if err != nil || len(evs) == 0 {
			r.problem("%s: events.jsonl through the view: %v", name, err)
			return
		}
		summary := fmt.Sprintf("%s #%d", prefix, i)
		l.ops.Store(name, "append")
		errno := pmAppend(r.path(own, "events.jsonl"), pmLine(evs[len(evs)-1].Seq+1, own, "deliverable_drafted", summary, time.Now(),
			map[string]any{"doc": primary, "role": "primary"}))
		switch errno {
		case 0:
			acked.mu.Lock()
			acked.m[summary] = true
			acked.mu.Unlock()
		case syscall.EPERM: // lost the race for the seq
		default:
			return // the daemon is gone
		}
	}
}

// lister lists agent's view and stats its protocol.json.
func (l *crashLoad) lister(r *concRig, name, agent string) {
	defer l.wg.Done()
	for l.running() {
		l.ops.Store(name, "ls")
		if _, err := os.ReadDir(r.view[agent]); err != nil {
			return
		}
		l.ops.Store(name, "stat")
		if _, err := os.Stat(r.path(agent, "protocol.json")); err != nil {
			return
		}
	}
}

// reader reads the large file and events.jsonl through agent's view.
func (l *crashLoad) reader(r *concRig, name, agent string) {
	defer l.wg.Done()
	buf := make([]byte, 1<<20)
	for l.running() {
		l.ops.Store(name, "cat big.bin")
		f, err := os.Open(r.path(agent, "deliverables/big.bin"))
		if err != nil {
			return
		}
		_, err = io.CopyBuffer(io.Discard, f, buf)
		f.Close()
		if err != nil {
			return
		}
		l.ops.Store(name, "cat events.jsonl")
		if _, err := os.ReadFile(r.path(agent, "events.jsonl")); err != nil {
			return
		}
	}
}

// crashRequireAnswered stops the load and requires, within
// supervisorAnswer of the kill, that every worker returned, every view
// answers ENOTCONN (or ECONNABORTED) and the killed process is gone.
func crashRequireAnswered(t *testing.T, r *concRig, up *testutil.Daemon, l *crashLoad, round int, killed time.Time) {
	t.Helper()
	done := make(chan struct{})
	go func() { l.wg.Wait(); close(done) }()
	close(l.stop)
	select {
	case <-done:
	case <-time.After(supervisorAnswer):
		var stuck []string
		l.ops.Range(func(k, v any) bool { stuck = append(stuck, fmt.Sprintf("%v: %v", k, v)); return true })
		diag := describeProcess(up.PID())
		up.Kill() // aborts the connections, so that the test can end
		t.Fatalf("round %d: callers still blocked %s after `acpfs up` was killed (last operations: %s)\n%s",
			round, supervisorAnswer, strings.Join(stuck, "; "), diag)
	}
	for _, a := range r.agents {
		err, ok := answers(time.Until(killed.Add(supervisorAnswer)), func() error { return sfReaches(r.view[a]) })
		require.True(t, ok, "round %d: the view of %s hangs after `acpfs up` was killed\n%s", round, a, describeProcess(up.PID()))
		require.True(t, errors.Is(err, syscall.ENOTCONN) || errors.Is(err, syscall.ECONNABORTED), "round %d: view of %s: %v", round, a, err)
	}
	// The killed process finishes dying: nothing holds its lock.
	deadline := killed.Add(supervisorAnswer)
	for !up.Exited() {
		require.True(t, time.Now().Before(deadline), "round %d: `acpfs up` (pid %d) is still not gone\n%s", round, up.PID(), describeProcess(up.PID()))
		time.Sleep(10 * time.Millisecond)
	}
	require.Empty(t, r.found())
}

// crashRequireOnce requires that the folder's history is sound, holds
// every acknowledged append exactly once and no append twice, and
// returns how many events it holds.
func crashRequireOnce(t *testing.T, folder string, acked map[string]bool, when string) int {
	t.Helper()
	evs, err := pmParseEvents([]byte(readFile(t, filepath.Join(folder, "events.jsonl"))))
	require.NoError(t, err, when)
	pmRequireSeqs(t, evs)
	count := map[string]int{}
	for _, ev := range evs {
		count[ev.Summary]++
	}
	for s := range acked {
		require.Equal(t, 1, count[s], "%s: acknowledged append %q must be there exactly once", when, s)
	}
	for s, n := range count {
		require.LessOrEqual(t, n, 1, "%s: append %q duplicated", when, s)
	}
	return len(evs)
}

// requireSupervisorHoldsNoFUSE finds the supervisor of daemon pid (and
// returns its pid) and requires that it holds no /dev/fuse descriptor (it would keep the
// connections alive itself) and no directory of a view.
func requireSupervisorHoldsNoFUSE(t *testing.T, pid int) int {
	t.Helper()
	var sup int
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, task := range tasks {
		b, _ := os.ReadFile(task)
		for _, c := range strings.Fields(string(b)) {
			cmdline, _ := os.ReadFile("/proc/" + c + "/cmdline")
			if strings.Contains(string(cmdline), "supervise") {
				sup, _ = strconv.Atoi(c)
			}
		}
	}
	require.NotZero(t, sup, "no supervisor among the children of pid %d", pid)
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", sup))
	require.NoError(t, err)
	for _, fd := range fds {
		target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", sup, fd.Name()))
		assert.NotEqual(t, "/dev/fuse", target, "the supervisor holds /dev/fuse on descriptor %s", fd.Name())
	}
	cwd, _ := os.Readlink(fmt.Sprintf("/proc/%d/cwd", sup))
	assert.Equal(t, "/", cwd)
	return sup
}

// describeProcess lists where the threads of pid are blocked.
func describeProcess(pid int) string {
	var b strings.Builder
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", pid))
	for _, task := range tasks {
		st, _ := os.ReadFile(filepath.Join(task, "stat"))
		stack, _ := os.ReadFile(filepath.Join(task, "stack"))
		fmt.Fprintf(&b, "%s: %s\n%s", task, strings.TrimSpace(string(st)), stack)
	}
	return b.String()
}
