package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/drive"
	"github.com/acpfs/acpfs/internal/procstat"
	"github.com/acpfs/acpfs/mount"
)

// floodTurn prints what an agent may: a line, a 5 MB line without a
// newline, more lines on stdout and stderr, a line with a
// right-to-left override, 40 MB of lines, a last line; then it appends
// blocked. It does not ignore SIGPIPE: a driver that stopped reading
// would kill it (exit 141) before it appends.
const floodTurn = `echo BEFORE
head -c 5000000 /dev/zero | tr '\0' x
printf '\nAFTER\n'
echo STDERR-LINE >&2
printf 'file \342\200\256gpj.exe\n'
yes 'a line of output that fills the turn log, over and over, 70 bytes long' | head -c 40000000
echo LAST-LINE
` + driveBlock

// TestDriveTurnOutputBounded: a turn that prints 45 MB, one line of it
// 5 MB long without a newline, is read to its end (it appends after
// printing, it is not killed by SIGPIPE); its log keeps the head and
// tail with marks saying what was left out, the driver's own output
// stays small, the receipt says what was cut and has no last error
// (it appended), and the right-to-left override reaches the driver's
// output escaped.
func TestDriveTurnOutputBounded(t *testing.T) {
	k := newDriveKit(t, []driveParticipant{driveOwner(), {id: "bob", grant: `{preset: reviewer}`, command: yamlQuote(floodTurn)}}, "")
	cmd := exec.Command(acpfsBin, "drive", "--json", k.file)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	out, errOut, code := runCmd(t, cmd)
	notes := parseNotes(t, out)
	k.requireBlockedEnd(notes, errOut, code)

	rc := k.receipts()["000003-bob-1"]
	assert.Equal(t, drive.OutcomeAppended, rc.Outcome, "the agent appended after its output: it was never stopped")
	assert.Equal(t, 0, rc.Exit)
	assert.Empty(t, rc.LastError, "an appended turn has nothing to tell a next attempt")
	require.NotNil(t, rc.Output)
	assert.True(t, rc.Output.Cut)
	assert.Greater(t, rc.Output.Bytes, int64(45_000_000))
	assert.Greater(t, rc.Output.LeftOut, rc.Output.Bytes-int64(drive.DefaultOutputLimits.LogHead+drive.DefaultOutputLimits.LogTail))
	assert.Equal(t, int64(1), rc.Output.LongLines)
	assert.NotZero(t, rc.Output.NotShown)

	log := readFile(t, filepath.Join(k.runs, drive.TurnsDir, rc.ID+".log"))
	assert.Less(t, int64(len(log)), drive.DefaultOutputLimits.LogHead+drive.DefaultOutputLimits.LogTail+1<<20, "the log is bounded")
	at := 0
	for _, want := range []string{"BEFORE\n", " more bytes of this line left out]\n", "AFTER\n", "STDERR-LINE\n",
		"file \u202egpj.exe\n", "bytes (", "of output left out here", "LAST-LINE\n", "appended seq 4 blocked\n"} {
		i := strings.Index(log[at:], want)
		require.GreaterOrEqual(t, i, 0, "%q not in the turn's log after byte %d", want, at)
		at += i + len(want)
	}

	assert.Less(t, len(out), 1<<20, "the driver's own output is bounded")
	assert.NotContains(t, out, "\u202e", "no raw override on the coordinator's terminal")
	var bob []string
	for _, n := range notes {
		if n.Type == drive.NoteOutput && n.Participant == "bob" {
			bob = append(bob, n.Text)
		}
	}
	assert.LessOrEqual(t, len(bob), drive.DefaultOutputLimits.ShowLines)
	require.GreaterOrEqual(t, len(bob), 5, "%v", bob[:min(len(bob), 5)])
	assert.Equal(t, []string{"BEFORE", "AFTER", "STDERR-LINE", "file \u202egpj.exe"}, []string{bob[0], bob[2], bob[3], bob[4]}, "JSON carries the text whole, escaped")
	assert.LessOrEqual(t, len(bob[1]), drive.DefaultOutputLimits.ShowLine+64, "the long line is cut for display")
	assert.Contains(t, notesText(notes), "output "+strconv.FormatInt(rc.Output.Bytes, 10)+" bytes")
}

// TestDrivePlainOutputEscapesBidi: on a plain output (a terminal's,
// but for the live block) an agent's right-to-left override and
// zero-width characters are shown escaped.
func TestDrivePlainOutputEscapesBidi(t *testing.T) {
	turn := `printf 'evil\342\200\256txt \342\200\213 \342\201\246iso\n'; ` + driveBlock
	k := newDriveKit(t, []driveParticipant{driveOwner(), {id: "bob", grant: `{preset: reviewer}`, command: yamlQuote(turn)}}, "")
	cmd := exec.Command(acpfsBin, "drive", "--plain", k.file)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	out, errOut, code := runCmd(t, cmd)
	require.Equal(t, 2, code, "%s\n%s", out, errOut)
	assert.Contains(t, out, `  bob| evil\u{202e}txt \u{200b} \u{2066}iso`+"\n")
	for _, r := range []string{"\u202e", "\u200b", "\u2066"} {
		assert.NotContains(t, out+errOut, r)
	}
}

// scratchByMaker lists the scratch directories PREFIX... under the
// temporary directory whose maker (pid and start time in the name) is
// gone (or a zombie), and those whose maker runs.
func scratchByMaker(t *testing.T, prefix string) (gone, running []string) {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(os.TempDir(), prefix+"*-*-*-*"))
	require.NoError(t, err)
	for _, p := range paths {
		parts := strings.Split(strings.TrimPrefix(filepath.Base(p), prefix), "-")
		if len(parts) != 4 {
			continue
		}
		pid, err1 := strconv.Atoi(parts[1])
		start, err2 := strconv.ParseUint(parts[2], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		// A zombie counts as gone: killed with its parent, it waits for
		// init to reap it.
		if st, err := procstat.Read(pid); err != nil || st.Start != start || st.Zombie() {
			gone = append(gone, p)
		} else {
			running = append(running, p)
		}
	}
	return gone, running
}

// scratchSince lists the run scratch directories under the temporary
// directory that are not in before.
func scratchSince(t *testing.T, before []string) []string {
	t.Helper()
	all, err := filepath.Glob(filepath.Join(os.TempDir(), mount.RunScratchPrefix+"*"))
	require.NoError(t, err)
	return slices.DeleteFunc(all, func(p string) bool { return slices.Contains(before, p) })
}

// waitScratchLeft waits until a run scratch directory made since before
// has lost its maker (a run killed with SIGKILL: its daemon, killed
// with it, closes its descriptors before it is gone), and returns
// those that have.
func waitScratchLeft(t *testing.T, before []string) []string {
	t.Helper()
	var left []string
	waitFor(t, func() bool {
		gone, _ := scratchByMaker(t, mount.RunScratchPrefix)
		left = slices.DeleteFunc(gone, func(p string) bool { return slices.Contains(before, p) })
		return len(left) > 0
	}, "no scratch directory of the killed run's is left")
	return left
}

// requireKeptWhileRunning requires that each of dirs whose maker still
// runs is still there: a sweep removes only what a process that is gone
// left (a directory gone with its maker was removed by that maker).
func requireKeptWhileRunning(t *testing.T, prefix string, dirs []string) {
	t.Helper()
	_, running := scratchByMaker(t, prefix)
	for _, p := range dirs {
		if _, err := os.Lstat(p); err != nil {
			assert.NotContains(t, running, p, "the directory of a process still running was removed")
		}
	}
}

// TestRunSweepsScratchOfKilledRuns: acpfs run killed with SIGKILL
// leaves its scratch directory (its sandbox's root and view mount
// points) in the temporary directory; the next acpfs run removes it,
// and never the directory of a run still running.
func TestRunSweepsScratchOfKilledRuns(t *testing.T) {
	eachMode(t, []sbxMode{asRoot, asSingle}, func(t *testing.T, m sbxMode) {
		e := newSandboxEnvAs(t, m)
		before := scratchSince(t, nil)
		live := e.startSandbox(sbxRun{grant: "G-bob", script: "true"})
		killed := e.startSandbox(sbxRun{grant: "G-alice", script: "true"})
		require.NoError(t, killed.cmd.Process.Kill())
		<-killed.exited
		left := waitScratchLeft(t, before)
		_, running := scratchByMaker(t, mount.RunScratchPrefix)
		require.NotEmpty(t, running, "the live run's")

		out, errOut, code := e.sandbox(sbxRun{grant: "G-alice", script: "true"})
		require.Equal(t, 0, code, out+errOut)
		for _, p := range left {
			assert.NoDirExists(t, p, "a killed run's scratch directory is removed by the next run")
		}
		requireKeptWhileRunning(t, mount.RunScratchPrefix, running)
		out, code = live.finish()
		assert.Equal(t, 0, code, out)
	})
}
