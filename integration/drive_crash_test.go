package integration

import (
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/drive"
	"github.com/acpfs/acpfs/internal/testutil"
	"github.com/acpfs/acpfs/protocol"
)

// driveFailpointEnv is the variable that makes acpfs drive kill itself
// with SIGKILL at a named moment (drive.Options.Failpoint).
const driveFailpointEnv = "ACPFS_DRIVE_FAILPOINT"

// driveRun is an acpfs drive --json started in the background.
type driveRun struct {
	cmd  *exec.Cmd
	out  testutil.SyncBuffer
	done chan struct{}
	err  error
}

// start starts acpfs drive --json on the kit's file with extra
// variables in its environment.
func (k *driveKit) start(env ...string) *driveRun {
	k.t.Helper()
	r := &driveRun{cmd: exec.Command(acpfsBin, "drive", "--json", k.file), done: make(chan struct{})}
	r.cmd.Env = append(os.Environ(), env...)
	r.cmd.Stdout, r.cmd.Stderr = &r.out, &r.out
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(k.t, r.cmd.Start())
	go func() { r.err = r.cmd.Wait(); close(r.done) }()
	k.t.Cleanup(func() { _ = r.cmd.Process.Kill(); <-r.done })
	return r
}

// requireKilled waits for the driver to end, which must be by SIGKILL,
// within supervisorAnswer of since.
func (r *driveRun) requireKilled(t *testing.T, since time.Time) {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(time.Until(since.Add(supervisorAnswer))):
		t.Fatalf("acpfs drive (pid %d) is still not gone %s after SIGKILL\n%s", r.cmd.Process.Pid, supervisorAnswer, describeProcess(r.cmd.Process.Pid))
	}
	var ee *exec.ExitError
	require.ErrorAs(t, r.err, &ee, r.out.String())
	ws, ok := ee.Sys().(syscall.WaitStatus)
	require.True(t, ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL, "acpfs drive ended with %v, not SIGKILL:\n%s", r.err, r.out.String())
}

// requireViewsAnswer requires every view left under the kit's root to
// answer ENOTCONN or ECONNABORTED within supervisorAnswer of since (no
// caller of a dead driver's views may block), and returns how many
// there were.
func (k *driveKit) requireViewsAnswer(since time.Time) int {
	k.t.Helper()
	entries, err := os.ReadDir(k.root)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	require.NoError(k.t, err)
	n := 0
	for _, e := range entries {
		mp := filepath.Join(k.root, e.Name())
		if !testutil.Mounted(mp) {
			continue
		}
		n++
		err, ok := answers(time.Until(since.Add(supervisorAnswer)), func() error { return sfReaches(mp) })
		if !ok {
			k.abortViews()
			k.t.Fatalf("the view %s hangs after acpfs drive was killed", mp)
		}
		require.True(k.t, errors.Is(err, syscall.ENOTCONN) || errors.Is(err, syscall.ECONNABORTED), "view %s: %v", mp, err)
	}
	return n
}

// abortViews aborts the connections of the views under the kit's root
// after a failure, so that no caller stays blocked on them and the
// kit's cleanup can detach them.
func (k *driveKit) abortViews() {
	if err := testutil.AbortMounts(testutil.FUSEMounts(k.root)); err != nil {
		k.t.Logf("abort the views: %v", err)
	}
}

// requireTurnsOnce requires that no turn was started twice over the
// runs whose notes are given, that every receipt is closed, and that the
// ledger holds one turn record per receipt.
func (k *driveKit) requireTurnsOnce(runs ...[]drive.Note) {
	k.t.Helper()
	started := map[string]int{}
	for _, notes := range runs {
		for _, n := range notes {
			if n.Type == drive.NoteTurnStarted {
				started[n.Turn]++
			}
		}
	}
	for id, n := range started {
		assert.Equal(k.t, 1, n, "turn %s started %d times", id, n)
	}
	rcs := k.receipts()
	for _, rc := range rcs {
		assert.Equal(k.t, drive.StateDone, rc.State, rc.ID)
	}
	assert.Len(k.t, k.audit().Turns, len(rcs), "one turn record per receipt")
}

// driveLoad lists, stats and reads every view under the kit's root (a
// 64 MiB file among what it reads), and replaces a file at the top of the
// folder (the watcher then invalidates every view's entry, a notify that
// waits for the directory's lock), until stop is closed. Each worker ends
// at its first error: the driver is gone.
func (k *driveKit) driveLoad(stop <-chan struct{}, views []string) *sync.WaitGroup {
	var wg sync.WaitGroup
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	for _, v := range views {
		mp := filepath.Join(k.root, v)
		wg.Add(2)
		go func() {
			defer wg.Done()
			for !stopped() {
				if _, err := os.ReadDir(mp); err != nil {
					return
				}
				if _, err := os.Stat(filepath.Join(mp, protocol.ProtocolFile)); err != nil {
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			buf := make([]byte, 1<<20)
			for !stopped() {
				f, err := os.Open(filepath.Join(mp, "deliverables", "big.bin"))
				if err != nil {
					return
				}
				_, err = io.CopyBuffer(io.Discard, f, buf)
				f.Close()
				if err != nil {
					return
				}
				if _, err := os.ReadFile(filepath.Join(mp, protocol.EventsFile)); err != nil {
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; !stopped(); i++ {
			tmp := filepath.Join(k.folder, fmt.Sprintf(".notes.tmp-%d", i))
			if os.WriteFile(tmp, []byte("notes\n"), 0o644) != nil || os.Rename(tmp, filepath.Join(k.folder, "notes.txt")) != nil {
				return
			}
		}
	}()
	return &wg
}

// TestDriveKilledUnderLoadViewsAnswer: acpfs drive serves its views in
// its own process, with a supervisor as acpfs up has one. SIGKILL of the
// driver at a random moment while readers list, stat and read every view
// and the folder's files are replaced leaves no caller blocked: every
// caller returns and every view answers (ENOTCONN or ECONNABORTED)
// within supervisorAnswer, with no manual step, and drive FILE again
// resumes and completes.
func TestDriveKilledUnderLoadViewsAnswer(t *testing.T) {
	hang := `if [ ! -e "$ACPFS_DRIVE_DIR/box/hung" ]; then touch "$ACPFS_DRIVE_DIR/box/hung"; exec sleep 86395; fi; sh "$ACPFS_DRIVE_DIR/turns/reviewer.sh"`
	k := newDriveKit(t, []driveParticipant{driveOwner(), {id: "bob", grant: `{preset: reviewer}`, command: yamlQuote(hang)}}, "")
	rng := rand.New(rand.NewSource(crashSeed(t)))
	run := k.start()
	waitFor(t, func() bool { return processWithArgs("sleep 86395") }, "bob's first turn hangs")
	requireSupervisorHoldsNoFUSE(t, run.cmd.Process.Pid)
	big := filepath.Join(k.folder, "deliverables", "big.bin")
	require.NoError(t, os.WriteFile(big, make([]byte, 64<<20), 0o644))

	stop := make(chan struct{})
	wg := k.driveLoad(stop, []string{"alice", "bob"})
	// A random moment of the load (not a synchronisation: any moment
	// will do, and every one must be survived).
	time.Sleep(crashLoadFor(rng))
	require.NoError(t, run.cmd.Process.Signal(syscall.SIGKILL))
	killed := time.Now()
	close(stop)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(supervisorAnswer):
		diag := describeProcess(run.cmd.Process.Pid)
		k.abortViews()
		t.Fatalf("callers of the views still blocked %s after acpfs drive was killed\n%s", supervisorAnswer, diag)
	}
	require.Equal(t, 2, k.requireViewsAnswer(killed), "both views were left, dead")
	run.requireKilled(t, killed)
	waitFor(t, func() bool { return !processWithArgs("sleep 86395") }, "the sandbox dies with the driver")
	require.NoError(t, os.Remove(big))

	notes, errOut, code := k.drive()
	require.Equal(t, 0, code, "first run:\n%s\nresume:\n%s\n%s", run.out.String(), notesText(notes), errOut)
	require.Equal(t, protocol.PhaseCompleted, k.phase())
	k.requireSound()
	rcs := k.receipts()
	assert.Equal(t, drive.OutcomeInterrupted, rcs["000003-bob-1"].Outcome)
	assert.Equal(t, drive.OutcomeAppended, rcs["000003-bob-2"].Outcome)
	k.requireTurnsOnce(parseNotes(t, run.out.String()), notes)
}

// noRetryAfterGivingUp requires that bob, given up after one turn, was
// not woken again.
func noRetryAfterGivingUp(t *testing.T, k *driveKit) {
	assert.NotContains(t, k.receipts(), "000003-bob-2", "no turn after the retries were used up")
}

// TestDriveKilledAtEveryMoment: kill -9 of the driver (here by the
// driver itself, at a named moment, so that the moment is hit every
// time) while the folder is initialized, between two grants, right
// after a turn's receipt is written, between a turn's record and its
// receipt, right after a receipt is closed, and on either side of the
// blocked it appends on an agent's behalf. Each time the views answer
// at once, and drive FILE again resumes and ends as an undisturbed run
// would: a valid history, a verified ledger, no turn run twice, nothing
// left mounted (the kit's cleanup checks).
func TestDriveKilledAtEveryMoment(t *testing.T) {
	idle := `cat "$ACPFS_NEXT_ACTION_FILE" > /dev/null`
	idleBob := driveParticipant{id: "bob", grant: `{preset: reviewer}`, command: yamlQuote(idle), extra: "    retries: 0\n    on_exhausted: blocked\n"}
	// A reviewer that appends blocked at its first turn: the resumed
	// drive ends after alice's first turn and bob's, not ten turns later.
	blockingBob := driveParticipant{id: "bob", grant: `{preset: reviewer}`, command: yamlQuote(driveBlock)}
	for _, tt := range []struct {
		point string
		bob   driveParticipant
		phase string // where the resumed run ends
		check func(t *testing.T, k *driveKit)
	}{
		{point: drive.FailInitialized, bob: blockingBob, phase: protocol.PhaseBlocked},
		{point: drive.FailGranted + ":alice", bob: blockingBob, phase: protocol.PhaseBlocked,
			check: func(t *testing.T, k *driveKit) {
				assert.NoFileExists(t, filepath.Join(k.runs, "context_grants", "G-alice-2.json"), "the grant made before the kill is kept")
			}},
		{point: drive.FailReceipt + ":bob", bob: driveReviewer("bob", ""), phase: protocol.PhaseCompleted,
			check: func(t *testing.T, k *driveKit) {
				rcs := k.receipts()
				assert.Equal(t, drive.OutcomeInterrupted, rcs["000003-bob-1"].Outcome, "written, never started")
				assert.Equal(t, drive.OutcomeAppended, rcs["000003-bob-2"].Outcome)
			}},
		{point: drive.FailRecorded + ":alice", bob: blockingBob, phase: protocol.PhaseBlocked,
			check: func(t *testing.T, k *driveKit) {
				rc := k.receipts()["000001-alice-1"]
				assert.Equal(t, drive.OutcomeAppended, rc.Outcome, "closed from its turn record, not run again")
				assert.NotContains(t, k.receipts(), "000001-alice-2")
			}},
		{point: drive.FailEnded + ":alice", bob: blockingBob, phase: protocol.PhaseBlocked,
			check: func(t *testing.T, k *driveKit) { assert.NotContains(t, k.receipts(), "000001-alice-2") }},
		{point: drive.FailBlocking + ":bob", bob: idleBob, phase: protocol.PhaseBlocked, check: noRetryAfterGivingUp},
		{point: drive.FailBlocked + ":bob", bob: idleBob, phase: protocol.PhaseBlocked, check: noRetryAfterGivingUp},
	} {
		t.Run(tt.point, func(t *testing.T) {
			k := newDriveKit(t, []driveParticipant{driveOwner(), tt.bob}, "")
			run := k.start(driveFailpointEnv + "=" + tt.point)
			<-run.done
			killed := time.Now()
			run.requireKilled(t, killed)
			k.requireViewsAnswer(killed)

			notes, errOut, code := k.drive()
			want := 0
			if tt.phase != protocol.PhaseCompleted {
				want = 2
			}
			require.Equal(t, want, code, "first run:\n%s\nresume:\n%s\n%s", run.out.String(), notesText(notes), errOut)
			require.Equal(t, tt.phase, k.phase(), notesText(notes))
			k.requireSound()
			k.requireTurnsOnce(parseNotes(t, run.out.String()), notes)
			if tt.phase == protocol.PhaseBlocked {
				assert.Equal(t, 1, strings.Count(readFile(t, filepath.Join(k.folder, protocol.EventsFile)), `"event":"blocked"`), "blocked once")
			}
			if tt.check != nil {
				tt.check(t, k)
			}
		})
	}
}
