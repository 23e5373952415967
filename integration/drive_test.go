package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/audit"
	"github.com/acpfs/acpfs/drive"
	"github.com/acpfs/acpfs/internal/testutil"
	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/mount"
	"github.com/acpfs/acpfs/protocol"
)

// driveKit is a collaboration file in a directory of its own, with the
// demo's turn scripts, a shared directory every participant may write
// (to prove that two turns overlap) and an oracle in the folder.
type driveKit struct {
	t                                  *testing.T
	dir, file, folder, runs, root, box string
}

// driveParticipant is one participant of a test's collaboration file.
type driveParticipant struct {
	id, grant, command string
	extra              string // more YAML fields, indented like the others
}

// reviewerScript is a reviewer's turn for the tests: review (after the
// event, so the heading names the seq it got), then accept. With an
// argument, its review waits until that other reviewer's turn has
// started (a file it creates in the shared box): two reviewers that
// both finish proved they ran at the same time.
const reviewerScript = `. "$ACPFS_DRIVE_DIR/turns/lib.sh"
box="$ACPFS_DRIVE_DIR/box"
case $(phase) in
  reviewing)
    touch "$box/$ACPFS_PARTICIPANT"
    if [ -n "${1:-}" ]; then
      i=0
      while [ ! -e "$box/$1" ]; do
        i=$((i + 1)); [ $i -gt 1200 ] && { echo "never saw $1's turn"; exit 1; }
        sleep 0.05
      done
      echo "saw $1's turn running"
    fi
    emit review_submitted "Reviewed"
    printf '\n## %s - %s - seq %s\n\nReview Scope:\n- All of it\n\nPosition:\n- Sound.\n' "$(now)" "$ACPFS_PARTICIPANT" "$seq" >> review.md
    ;;
  decision_review) emit decision_accepted "Accepting D1" ;;
esac
`

func newDriveKit(t *testing.T, parts []driveParticipant, top string) *driveKit {
	t.Helper()
	testutil.RequireFUSE(t)
	dir := newDir(t, "drive")
	require.NoError(t, os.Chmod(dir, 0o755))
	k := &driveKit{t: t, dir: dir, file: filepath.Join(dir, "collab.yaml"), folder: filepath.Join(dir, "collab"),
		runs: filepath.Join(dir, "agent_runs"), root: filepath.Join(dir, "mnt"), box: filepath.Join(dir, "box")}
	t.Cleanup(func() {
		// Whatever the test did, the driver's views must be gone.
		assert.Empty(t, testutil.FUSEMounts(dir), "mounts left behind")
		_ = testutil.DetachLeftovers(dir)
	})
	turns := filepath.Join(dir, "turns")
	require.NoError(t, os.MkdirAll(turns, 0o755))
	for _, f := range []string{"lib.sh", "owner.sh"} {
		b, err := os.ReadFile(filepath.Join("..", "examples", "turns", f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(turns, f), b, 0o755))
	}
	require.NoError(t, os.WriteFile(filepath.Join(turns, "reviewer.sh"), []byte(reviewerScript), 0o755))
	require.NoError(t, os.Mkdir(k.box, 0o777))
	require.NoError(t, os.Chmod(k.box, 0o777))
	require.NoError(t, os.MkdirAll(filepath.Join(k.folder, "oracle"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(k.folder, "oracle", "expected-answer.md"), []byte("token bucket\n"), 0o644))
	var b strings.Builder
	fmt.Fprintf(&b, "objective: Design a rate limiter\ncompletion: [Limits per API key are specified]\ndeliverable: {type: design-spec}\ndeadline: 3m\n%s", top)
	b.WriteString("participants:\n")
	for _, p := range parts {
		fmt.Fprintf(&b, "  - id: %s\n    grant: %s\n    command: %s\n    ro: [turns]\n    rw: [box]\n    timeout: 60s\n%s", p.id, p.grant, p.command, p.extra)
	}
	require.NoError(t, os.WriteFile(k.file, []byte(b.String()), 0o644))
	return k
}

// driveOwner is the demo's owner; driveReviewer is the tests' reviewer, waiting
// for other's turn when other is set.
func driveOwner() driveParticipant {
	return driveParticipant{id: "alice", grant: `{preset: owner, may_read: ["oracle/**"]}`, command: `sh "$ACPFS_DRIVE_DIR/turns/owner.sh"`}
}

func driveReviewer(id, other string) driveParticipant {
	return driveParticipant{id: id, grant: `{preset: reviewer, forbid: ["oracle/**"]}`, command: fmt.Sprintf(`sh "$ACPFS_DRIVE_DIR/turns/reviewer.sh" %s`, other)}
}

// drive runs acpfs drive --json on the kit's file to its end.
func (k *driveKit) drive() (notes []drive.Note, stderr string, code int) {
	k.t.Helper()
	cmd := exec.Command(acpfsBin, "drive", "--json", k.file)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	out, errOut, code := runCmd(k.t, cmd)
	return parseNotes(k.t, out), errOut, code
}

func parseNotes(t *testing.T, out string) []drive.Note {
	t.Helper()
	var notes []drive.Note
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var n drive.Note
		if json.Unmarshal(sc.Bytes(), &n) == nil && n.Type != "" {
			notes = append(notes, n)
		}
	}
	return notes
}

func (k *driveKit) receipts() map[string]drive.Receipt {
	k.t.Helper()
	m := map[string]drive.Receipt{}
	files, err := filepath.Glob(filepath.Join(k.runs, drive.TurnsDir, "*.json"))
	require.NoError(k.t, err)
	for _, f := range files {
		var rc drive.Receipt
		require.NoError(k.t, json.Unmarshal([]byte(readFile(k.t, f)), &rc))
		m[rc.ID] = rc
	}
	return m
}

func (k *driveKit) phase() string {
	k.t.Helper()
	l, err := protocol.OpenLog(k.folder)
	require.NoError(k.t, err)
	defer l.Close()
	return l.Snapshot().Phase
}

func (k *driveKit) audit() *audit.Report {
	k.t.Helper()
	out, _, _ := acpfs(k.t, "audit", "--runs", k.runs, "--format", "json")
	var rep audit.Report
	require.NoError(k.t, json.Unmarshal([]byte(out), &rep), out)
	return &rep
}

// requireSound checks the history and the ledger of a finished drive;
// a collaboration that did not complete passes validate with warnings
// at best.
func (k *driveKit) requireSound() {
	k.t.Helper()
	out, errOut, code := acpfs(k.t, "validate", "--folder", k.folder)
	if k.phase() == protocol.PhaseCompleted {
		require.Equal(k.t, 0, code, "validate:\n%s%s", out, errOut)
	} else {
		require.Less(k.t, code, 2, "validate:\n%s%s", out, errOut)
	}
	out, errOut, code = acpfs(k.t, "ledger", "verify", "--ledger", filepath.Join(k.runs, "communication_ledger.jsonl"))
	require.Equal(k.t, 0, code, "ledger verify:\n%s%s", out, errOut)
}

func notesText(notes []drive.Note) string {
	var b strings.Builder
	for _, n := range notes {
		fmt.Fprintf(&b, "%s %s %s\n", n.Type, n.Participant, n.Text)
	}
	return b.String()
}

// TestDriveThreeParticipantsReviewersInParallel: an owner and two
// reviewers from initialized to completed, each turn in its own
// sandbox. Each reviewer's review waits for the other's turn to have
// started, so the collaboration completes only if the two reviewers'
// turns ran at the same time.
func TestDriveThreeParticipantsReviewersInParallel(t *testing.T) {
	k := newDriveKit(t, []driveParticipant{driveOwner(), driveReviewer("bob", "carol"), driveReviewer("carol", "bob")}, "")
	out, errOut, code := acpfs(t, "drive", "--check", k.file)
	require.Equal(t, 0, code, out+errOut)
	notes, errOut, code := k.drive()
	require.Equal(t, 0, code, "%s\n%s", notesText(notes), errOut)
	require.Equal(t, protocol.PhaseCompleted, k.phase())
	k.requireSound()

	rcs := k.receipts()
	for _, id := range []string{"000003-bob-1", "000003-carol-1"} {
		rc, ok := rcs[id]
		require.True(t, ok, "no receipt %s in %v", id, rcs)
		assert.Equal(t, drive.OutcomeAppended, rc.Outcome)
		assert.Equal(t, "review_submitted", rc.Events[0].Type)
		assert.Contains(t, rc.Writes, "review.md")
		assert.NotEmpty(t, rc.GrantSHA256)
		assert.NotEmpty(t, rc.PromptSHA256)
		assert.NotZero(t, rc.LedgerSeq, "a turn record in the ledger")
	}
	for _, rc := range rcs {
		assert.Equal(t, drive.OutcomeAppended, rc.Outcome, rc.ID)
		assert.Empty(t, rc.LastError, "%s appended: nothing to tell a next attempt", rc.ID)
		require.NotNil(t, rc.Output, rc.ID)
		assert.False(t, rc.Output.Cut, rc.ID)
	}
	owner := rcs["000001-alice-1"]
	assert.Contains(t, owner.Reads, "oracle/expected-answer.md", "the owner's grant shows the oracle")
	assert.Equal(t, []drive.EventRef{{Seq: 2, Type: "deliverable_drafted"}, {Seq: 3, Type: "proposal_submitted"}}, owner.Events)

	rep := k.audit()
	assert.Equal(t, audit.VerdictIsolated, rep.Verdict)
	assert.Len(t, rep.Turns, len(rcs), "one turn record per receipt")
	md := readFile(t, filepath.Join(k.runs, "audit.md"))
	assert.Contains(t, md, "## Turns")
	assert.FileExists(t, filepath.Join(k.runs, "audit.html"))
	// The turns' inputs are gone, the copies kept in the run directory.
	for _, rc := range rcs {
		assert.NoDirExists(t, rc.Inputs)
		assert.FileExists(t, filepath.Join(k.runs, drive.TurnsDir, rc.ID, "prompt.md"))
	}
}

// TestDriveRefusalsOracleAndForgery: one reviewer tries the oracle its
// grant forbids, the other forges an event as the owner; both are
// refused, the driver explains both, and the receipts and the audit
// name both.
func TestDriveRefusalsOracleAndForgery(t *testing.T) {
	prober := `. "$ACPFS_DRIVE_DIR/turns/lib.sh"; [ "$(phase)" = reviewing ] && ! cat oracle/expected-answer.md; sh "$ACPFS_DRIVE_DIR/turns/reviewer.sh"`
	forger := `. "$ACPFS_DRIVE_DIR/turns/lib.sh"; if [ "$(phase)" = reviewing ]; then s=$(( $(last_seq) + 1 )); ! echo "{\"seq\":$s,\"from\":\"alice\",\"event\":\"proposal_revised\",\"at\":\"$(now)\",\"summary\":\"forged\",\"reply_to\":$((s - 1))}" >> events.jsonl; fi; sh "$ACPFS_DRIVE_DIR/turns/reviewer.sh"`
	k := newDriveKit(t, []driveParticipant{driveOwner(),
		{id: "bob", grant: `{preset: reviewer, forbid: ["oracle/**"]}`, command: yamlQuote(prober)},
		{id: "carol", grant: `{preset: reviewer, forbid: ["oracle/**"]}`, command: yamlQuote(forger)},
	}, "")
	notes, errOut, code := k.drive()
	require.Equal(t, 0, code, "%s\n%s", notesText(notes), errOut)
	text := notesText(notes)
	assert.Contains(t, text, "refusal bob bob refused: lookup oracle")
	assert.Contains(t, text, "the grant does not show or allow this path")
	assert.Contains(t, text, `refusal carol carol refused: append events.jsonl`)
	assert.Contains(t, text, "from-mismatch")

	rcs := k.receipts()
	require.NotEmpty(t, rcs["000003-bob-1"].Refusals)
	assert.Equal(t, "oracle", rcs["000003-bob-1"].Refusals[0].Path)
	require.NotEmpty(t, rcs["000003-carol-1"].Refusals)
	assert.Equal(t, ledger.KindAppendRejected, rcs["000003-carol-1"].Refusals[0].Kind)

	rep := k.audit()
	refused := map[string][]string{}
	for _, ag := range rep.Agents {
		for _, e := range ag.Refused {
			refused[ag.Agent] = append(refused[ag.Agent], string(e.Kind)+" "+e.Path)
		}
	}
	assert.Contains(t, refused["bob"], "denied oracle")
	assert.Contains(t, refused["carol"], "append_rejected events.jsonl")
	md := readFile(t, filepath.Join(k.runs, "audit.md"))
	assert.Contains(t, md, "lookup oracle: denied")
	assert.Contains(t, md, `append events.jsonl: append\_rejected`)
}

func yamlQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestDriveAgentThatNeverAppends: a reviewer whose turns append nothing
// is retried, told why, then given up: blocked on its behalf through
// its own view when the file says so, else the driver stops.
func TestDriveAgentThatNeverAppends(t *testing.T) {
	// It records what each attempt was told, in the shared box.
	idle := `printf '%s|%s\n' "$ACPFS_ATTEMPT" "$ACPFS_LAST_ERROR" >> "$ACPFS_DRIVE_DIR/box/told"; cat "$ACPFS_NEXT_ACTION_FILE" > /dev/null`
	for _, tt := range []struct {
		exhausted, phase, line string
	}{
		{drive.ExhaustedBlocked, protocol.PhaseBlocked, "appended blocked on its behalf"},
		{drive.ExhaustedStop, protocol.PhaseReviewing, "bob: 2 turn(s) in a row appended no accepted event"},
	} {
		t.Run(tt.exhausted, func(t *testing.T) {
			k := newDriveKit(t, []driveParticipant{driveOwner(),
				{id: "bob", grant: `{preset: reviewer}`, command: yamlQuote(idle), extra: "    retries: 1\n    on_exhausted: " + tt.exhausted + "\n"},
			}, "")
			notes, errOut, code := k.drive()
			assert.Equal(t, 2, code, "not completed")
			assert.Contains(t, errOut, "did not complete")
			assert.Contains(t, notesText(notes), tt.line)
			assert.Equal(t, tt.phase, k.phase())
			rcs := k.receipts()
			for _, id := range []string{"000003-bob-1", "000003-bob-2"} {
				assert.Equal(t, drive.OutcomeNothing, rcs[id].Outcome, id)
			}
			assert.NotContains(t, rcs, "000003-bob-3", "one retry, no more")
			told := strings.Split(strings.TrimSpace(readFile(t, filepath.Join(k.box, "told"))), "\n")
			require.Len(t, told, 2)
			assert.Equal(t, "1|", told[0], "a first attempt is told nothing")
			assert.Equal(t, "2|the command exited without appending an accepted event to events.jsonl", told[1])
			k.requireSound()
		})
	}
}

// TestDriveTurnTimeout: a turn that hangs past its timeout is stopped,
// and its receipt says so.
func TestDriveTurnTimeout(t *testing.T) {
	k := newDriveKit(t, []driveParticipant{driveOwner(),
		{id: "bob", grant: `{preset: reviewer}`, command: `"exec sleep 86398"`, extra: "    retries: 0\n"},
	}, "")
	// The kit's timeout is 60s: this participant's is shorter.
	b := strings.Replace(readFile(t, k.file), "timeout: 60s\n    retries: 0", "timeout: 1s\n    retries: 0", 1)
	require.NoError(t, os.WriteFile(k.file, []byte(b), 0o644))
	notes, errOut, code := k.drive()
	assert.Equal(t, 2, code, "%s\n%s", notesText(notes), errOut)
	assert.Contains(t, notesText(notes), "ran past its timeout (1s)")
	rc := k.receipts()["000003-bob-1"]
	assert.Equal(t, drive.OutcomeTimeout, rc.Outcome)
	assert.Equal(t, []string{"timeout"}, rc.Limits)
	assert.NotZero(t, rc.Exit)
	assert.Equal(t, protocol.PhaseReviewing, k.phase())
	assert.False(t, processWithArgs("sleep 86398"), "the hung command is gone")
	k.requireSound()
}

// processWithArgs reports whether a process runs whose command line is
// args.
func processWithArgs(args string) bool {
	dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, d := range dirs {
		b, err := os.ReadFile(d)
		if err == nil && strings.TrimRight(strings.ReplaceAll(string(b), "\x00", " "), " ") == args {
			return true
		}
	}
	return false
}

// TestDriveKilledMidTurnResumes: kill -9 of the driver while a turn
// runs takes the sandbox with it; drive FILE again closes that turn as
// interrupted, never runs it again, runs the next attempt, and the
// collaboration completes with a valid history and a verified ledger.
func TestDriveKilledMidTurnResumes(t *testing.T) {
	// bob's first attempt says it started, then hangs; the next one
	// reviews.
	hang := `if [ ! -e "$ACPFS_DRIVE_DIR/box/hung" ]; then echo "$ACPFS_TURN_DIR" > "$ACPFS_DRIVE_DIR/box/hung"; exec sleep 86397; fi; sh "$ACPFS_DRIVE_DIR/turns/reviewer.sh"`
	k := newDriveKit(t, []driveParticipant{driveOwner(), {id: "bob", grant: `{preset: reviewer}`, command: yamlQuote(hang)}}, "")
	before := scratchSince(t, nil) // another user's are not this drive's to remove
	cmd := exec.Command(acpfsBin, "drive", "--json", k.file)
	var out testutil.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	waitFor(t, func() bool { return processWithArgs("sleep 86397") }, "bob's first turn hangs")
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	waitFor(t, func() bool { return !processWithArgs("sleep 86397") }, "the sandbox dies with the driver")
	// What the killed driver and its run left in the temporary
	// directory: the turn's inputs, the sandbox's scratch directory.
	turnDir := strings.TrimSpace(readFile(t, filepath.Join(k.box, "hung")))
	assert.DirExists(t, turnDir)
	runDirs := waitScratchLeft(t, before)
	_, running := scratchByMaker(t, mount.RunScratchPrefix)

	notes, errOut, code := k.drive()
	require.Equal(t, 0, code, "first run:\n%s\nresume:\n%s\n%s", out.String(), notesText(notes), errOut)
	assert.Contains(t, notesText(notes), "resuming")
	assert.NoDirExists(t, turnDir, "the next drive removes a killed driver's turn inputs")
	for _, p := range runDirs {
		assert.NoDirExists(t, p, "and the scratch directories of its runs")
	}
	requireKeptWhileRunning(t, mount.RunScratchPrefix, running)
	require.Equal(t, protocol.PhaseCompleted, k.phase())
	k.requireSound()

	rcs := k.receipts()
	first := rcs["000003-bob-1"]
	assert.Equal(t, drive.OutcomeInterrupted, first.Outcome)
	assert.Equal(t, drive.StateDone, first.State)
	assert.NotZero(t, first.LedgerSeq)
	assert.Equal(t, drive.OutcomeAppended, rcs["000003-bob-2"].Outcome, "the next attempt, not the same turn again")
	// Each turn ran once: one turn record per receipt.
	assert.Len(t, k.audit().Turns, len(rcs))
	started := 0
	for _, n := range notes {
		if n.Type == "turn_started" && n.Turn == "000001-alice-1" {
			started++
		}
	}
	assert.Zero(t, started, "the owner's first turn, finished before the kill, is not run again")
}

// TestDriveStops: SIGTERM, SIGINT or the deadline stop the running
// turns and unmount the views; the audit still runs and the receipt of
// the turn that was running says it was interrupted.
func TestDriveStops(t *testing.T) {
	hang := `touch "$ACPFS_DRIVE_DIR/box/hung"; exec sleep 86396`
	for _, tt := range []struct {
		name, top, line string
		sig             syscall.Signal
	}{
		{"SIGTERM", "", "stopped by a signal", syscall.SIGTERM},
		{"SIGINT", "", "stopped by a signal", syscall.SIGINT},
		// Whichever turn runs when the deadline passes (bob's hangs) is
		// stopped: the test waits for the driver, not for a turn.
		{"deadline", "deadline: 10s\n", "the deadline (10s) passed", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			k := newDriveKit(t, []driveParticipant{driveOwner(), {id: "bob", grant: `{preset: reviewer}`, command: yamlQuote(hang)}}, "")
			if tt.top != "" {
				b := strings.Replace(readFile(t, k.file), "deadline: 3m\n", tt.top, 1)
				require.NoError(t, os.WriteFile(k.file, []byte(b), 0o644))
			}
			cmd := exec.Command(acpfsBin, "drive", "--json", k.file)
			var out, errOut testutil.SyncBuffer
			cmd.Stdout, cmd.Stderr = &out, &errOut
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			require.NoError(t, cmd.Start())
			t.Cleanup(func() { _ = cmd.Process.Kill() })
			if tt.sig != 0 {
				waitFor(t, func() bool { _, err := os.Stat(filepath.Join(k.box, "hung")); return err == nil }, "bob's turn hangs")
				require.NoError(t, cmd.Process.Signal(tt.sig))
			}
			err := cmd.Wait()
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee, out.String())
			assert.Equal(t, 2, ee.ExitCode())
			assert.Contains(t, errOut.String(), tt.line)
			assert.False(t, processWithArgs("sleep 86396"), "the agent is stopped")
			assert.Empty(t, testutil.FUSEMounts(k.dir), "the views are unmounted")
			interrupted := 0
			for _, rc := range k.receipts() {
				assert.Equal(t, drive.StateDone, rc.State, rc.ID)
				if rc.Outcome == drive.OutcomeInterrupted {
					interrupted++
				}
			}
			assert.Equal(t, 1, interrupted, "the running turn was stopped")
			if tt.sig != 0 {
				assert.Equal(t, drive.OutcomeInterrupted, k.receipts()["000003-bob-1"].Outcome)
			}
			assert.FileExists(t, filepath.Join(k.runs, "audit.md"))
			k.requireSound()
		})
	}
}

// TestDriveLimitHit: a turn that runs into its sandbox's pids limit has
// that limit in its receipt and in the next attempt's last error.
func TestDriveLimitHit(t *testing.T) {
	forks := `i=0; while [ $i -lt 60 ]; do sleep 1 & i=$((i + 1)); done; wait; exit 1`
	k := newDriveKit(t, []driveParticipant{driveOwner(),
		{id: "bob", grant: `{preset: reviewer}`, command: yamlQuote(forks), extra: "    limits: {pids: 24}\n    retries: 0\n"},
	}, "")
	notes, errOut, code := k.drive()
	assert.Equal(t, 2, code, "%s\n%s", notesText(notes), errOut)
	rc := k.receipts()["000003-bob-1"]
	assert.Equal(t, []string{"pids"}, rc.Limits)
	assert.Equal(t, 6, rc.Exit, "acpfs run's status for a limit")
	assert.Equal(t, "the command ran into its pids limit", rc.LastError)
	assert.Contains(t, rc.Run, "--pids")
	k.requireSound()
}

// TestDemo: make demo's script runs the collaboration through acpfs
// drive to completed, shows and explains the three refusals and the
// grant's contrast, and leaves no mount and no directory behind.
func TestDemo(t *testing.T) {
	testutil.RequireFUSE(t)
	tmp := newDir(t, "demo")
	cmd := exec.Command("bash", filepath.Join("..", "examples", "demo.sh"))
	cmd.Env = append(os.Environ(), "ACPFS="+acpfsBin, "TMPDIR="+tmp, "NO_COLOR=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	out, errOut, code := runCmd(t, cmd)
	require.Equal(t, 0, code, "%s\n%s", out, errOut)
	for _, want := range []string{
		"alice| reads the oracle:",                           // the owner's grant shows it
		"bob| refused as it should be: a read of the oracle", // the reviewer's forbids it
		"bob refused: lookup oracle",                         // explained by the driver
		"bob| refused as it should be: an event forged as the owner",
		"from-mismatch",
		"alice| refused as it should be: a change to the frozen deliverable",
		"after deliverable_frozen nothing may change it",
		"acpfs drive: completed in",
		"ACP validation passed",
		"## Turns",
	} {
		assert.Contains(t, out, want)
	}
	left, err := os.ReadDir(tmp)
	require.NoError(t, err)
	assert.Empty(t, left, "the demo leaves nothing in TMPDIR")
	assert.Empty(t, testutil.FUSEMounts(tmp))
}
