package integration

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/drive"
	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/protocol"
)

// driveWithEnv runs acpfs drive --json on the kit's file to its end with
// extra variables in the driver's environment.
func (k *driveKit) driveWithEnv(env ...string) (notes []drive.Note, stderr string, code int) {
	k.t.Helper()
	cmd := exec.Command(acpfsBin, "drive", "--json", k.file)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	out, errOut, code := runCmd(k.t, cmd)
	return parseNotes(k.t, out), errOut, code
}

// driveBlock ends a test's collaboration early: the participant appends
// blocked, which ends the drive (exit 2) after a few turns instead of the
// ten a completed design takes.
const driveBlock = `. "$ACPFS_DRIVE_DIR/turns/lib.sh"; emit blocked "Stopping here"`

// requireBlockedEnd requires that a drive ended as driveBlock ends it,
// with a sound history and ledger.
func (k *driveKit) requireBlockedEnd(notes []drive.Note, errOut string, code int) {
	k.t.Helper()
	require.Equal(k.t, 2, code, "%s\n%s", notesText(notes), errOut)
	require.Equal(k.t, protocol.PhaseBlocked, k.phase(), notesText(notes))
	k.requireSound()
}

// driveTurnEnv are the variables a turn's command may get besides the
// participant's env names: acpfs run's minimal environment and the
// driver's ACPFS_* (LC_* too), plus what the shell sets itself.
var driveTurnEnv = []string{"PATH", "HOME", "LANG", "LANGUAGE", "TERM", "COLORTERM", "TZ", "SHELL", "USER", "LOGNAME", "TMPDIR", "PWD", "OLDPWD", "SHLVL", "_"}

// TestDriveParticipantEnvironment: a participant's env names reach its
// command with the driver's values, and nothing else of the driver's
// environment does (a credential the file does not name stays out);
// HOME is the agent's own home, in the run directory.
func TestDriveParticipantEnvironment(t *testing.T) {
	dump := `env -0 > "$ACPFS_DRIVE_DIR/box/env.$ACPFS_ATTEMPT"; echo "$ACPFS_TURN" >> "$HOME/turns"; ` + driveBlock
	k := newDriveKit(t, []driveParticipant{driveOwner(),
		{id: "bob", grant: `{preset: reviewer}`, command: yamlQuote(dump), extra: "    env: [DRIVE_TEST_NAMED, DRIVE_TEST_UNSET]\n"},
	}, "")
	k.requireBlockedEnd(k.driveWithEnv("DRIVE_TEST_NAMED=named-value", "DRIVE_TEST_SECRET=sk-not-for-agents", "DRIVE_TEST_UNSET_NOT=x"))

	env := map[string]string{}
	for _, kv := range strings.Split(strings.TrimRight(readFile(t, filepath.Join(k.box, "env.1")), "\x00"), "\x00") {
		name, value, _ := strings.Cut(kv, "=")
		env[name] = value
		ok := slices.Contains(driveTurnEnv, name) || name == "DRIVE_TEST_NAMED" ||
			strings.HasPrefix(name, "LC_") || (strings.HasPrefix(name, "ACPFS_") && !strings.HasPrefix(name, "ACPFS_TEST"))
		assert.True(t, ok, "the command got %s, which neither acpfs run's minimal environment, the driver nor the file gives", name)
	}
	assert.Equal(t, "named-value", env["DRIVE_TEST_NAMED"])
	assert.NotContains(t, env, "DRIVE_TEST_SECRET")
	assert.NotContains(t, env, "DRIVE_TEST_UNSET", "a name the driver has not set stays unset")
	assert.Equal(t, "bob", env["ACPFS_PARTICIPANT"])
	// Not the driver's own ACPFS_* either: only the ones it sets.
	assert.NotContains(t, env, "ACPFS_REQUIRE_FUSE")
	home := filepath.Join(k.runs, "homes", grants.GrantIDFor("bob"))
	assert.Equal(t, os.Getenv("HOME"), env["HOME"], "the home is shown at the caller's HOME path")
	assert.Contains(t, readFile(t, filepath.Join(home, "turns")), "000003-bob-1", "HOME is RUNS/homes/<grant>")
}

// TestDriveNetworkAllowList: network: {allow: [...]} gives the turn the
// named host only, through acpfs run's proxy: a fake model API on the
// host's loopback answers, another port and a direct connection do not,
// and the ledger records each connection under the participant's grant.
func TestDriveNetworkAllowList(t *testing.T) {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "model-api:"+r.URL.Path)
	}))
	defer api.Close()
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "other:"+r.URL.Path)
	}))
	defer other.Close()
	port := api.Listener.Addr().(*net.TCPAddr).Port
	otherPort := other.Listener.Addr().(*net.TCPAddr).Port
	// --noproxy '': the proxy variables name localhost as a host to reach
	// directly, which the turn's own loopback cannot serve.
	probe := fmt.Sprintf(`box="$ACPFS_DRIVE_DIR/box"
try() { name=$1; shift; if out=$("$@" 2>&1); then echo "$name ok $out"; else echo "$name failed"; fi; }
{ try api curl -fsS --max-time 20 --noproxy '' http://localhost:%d/v1/messages
  try other curl -fsS --max-time 20 --noproxy '' http://localhost:%d/
  try direct curl -fsS --max-time 20 --noproxy '*' http://127.0.0.1:%d/; } > "$box/net"
%s`, port, otherPort, port, driveBlock)
	k := newDriveKit(t, []driveParticipant{driveOwner(),
		{id: "bob", grant: `{preset: reviewer}`, command: yamlQuote(probe), extra: fmt.Sprintf("    network: {allow: [\"localhost:%d\"]}\n", port)},
	}, "")
	k.requireBlockedEnd(k.drive())

	lines := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(readFile(t, filepath.Join(k.box, "net"))), "\n") {
		name, rest, _ := strings.Cut(l, " ")
		lines[name] = rest
	}
	assert.Equal(t, "ok model-api:/v1/messages", lines["api"])
	assert.Equal(t, "failed", lines["other"], "a port the list does not name")
	assert.Equal(t, "failed", lines["direct"], "no way around the proxy")
	rc := k.receipts()["000003-bob-1"]
	assert.Contains(t, rc.Run, fmt.Sprintf("allow=localhost:%d", port))

	var allowed, refused []string
	require.NoError(t, ledger.Scan(filepath.Join(k.runs, "communication_ledger.jsonl"),
		ledger.Filter{Kinds: []ledger.Kind{ledger.KindNetAllowed, ledger.KindNetRefused}},
		func(r ledger.Record) error {
			assert.Equal(t, grants.GrantIDFor("bob"), r.Grant)
			host, _, _ := strings.Cut(r.Detail, ": ")
			if r.Kind == ledger.KindNetAllowed {
				allowed = append(allowed, host)
			} else {
				refused = append(refused, host)
			}
			return nil
		}))
	assert.Equal(t, []string{fmt.Sprintf("localhost:%d", port)}, allowed)
	assert.Equal(t, []string{fmt.Sprintf("localhost:%d", otherPort)}, refused)
}

// TestDriveGrantReplacedOnResume: a drive that stopped (bob gave up)
// resumed with a file that changed bob's grant revokes the old grant,
// with the reason in the ledger, and runs bob's next turns under a new
// one; alice's, unchanged, is kept.
func TestDriveGrantReplacedOnResume(t *testing.T) {
	idle := `cat "$ACPFS_NEXT_ACTION_FILE" > /dev/null`
	k := newDriveKit(t, []driveParticipant{driveOwner(),
		{id: "bob", grant: `{preset: reviewer, forbid: ["oracle/**"]}`, command: yamlQuote(idle), extra: "    retries: 0\n"},
	}, "")
	notes, errOut, code := k.drive()
	require.Equal(t, 2, code, "%s\n%s", notesText(notes), errOut)
	require.Equal(t, protocol.PhaseReviewing, k.phase())

	// The same collaboration, bob's grant now shows notes/ too, and bob
	// acts (it appends blocked).
	b := readFile(t, k.file)
	b = strings.Replace(b, `{preset: reviewer, forbid: ["oracle/**"]}`, `{preset: reviewer, forbid: ["oracle/**"], may_read: ["notes/**"]}`, 1)
	b = strings.Replace(b, yamlQuote(idle), yamlQuote(driveBlock), 1)
	b = strings.Replace(b, "    retries: 0\n", "    retries: 2\n", 1)
	require.NoError(t, os.WriteFile(k.file, []byte(b), 0o644))
	notes, errOut, code = k.drive()
	k.requireBlockedEnd(notes, errOut, code)
	assert.Contains(t, notesText(notes), "grant G-bob differs from the collaboration file: revoked, replaced by G-bob-2")

	rcs := k.receipts()
	assert.Equal(t, "G-bob", rcs["000003-bob-1"].Grant)
	assert.Equal(t, "G-bob-2", rcs["000003-bob-2"].Grant)
	assert.Equal(t, drive.OutcomeAppended, rcs["000003-bob-2"].Outcome)
	old, err := grants.Load(filepath.Join(k.runs, "context_grants", "G-bob.json"))
	require.NoError(t, err)
	assert.True(t, old.Revoked, "G-bob is revoked")
	g2, err := grants.Load(filepath.Join(k.runs, "context_grants", "G-bob-2.json"))
	require.NoError(t, err)
	assert.Contains(t, g2.MayRead, "notes/**")
	assert.Equal(t, []string{"oracle/**"}, g2.ForbiddenRead)
	assert.NoFileExists(t, filepath.Join(k.runs, "context_grants", "G-alice-2.json"), "alice's grant did not change")
	var revoked []string
	require.NoError(t, ledger.Scan(filepath.Join(k.runs, "communication_ledger.jsonl"), ledger.Filter{},
		func(r ledger.Record) error {
			if r.Grant == "G-bob" && strings.Contains(r.Detail, "the collaboration file changed this grant") {
				revoked = append(revoked, string(r.Kind))
			}
			return nil
		}))
	assert.NotEmpty(t, revoked, "the revocation and its reason are in the ledger")
}

// TestDriveRetryToldTheRefusal: a first attempt refused by its view (a
// write its grant does not allow) that appends nothing is retried, and
// the retry is told that refusal, as its view's .acpfs/last-error put
// it, in ACPFS_LAST_ERROR and in the file ACPFS_LAST_ERROR_FILE. A read
// of a name the grant hides, refused after it, is not told: the view
// answered it as a missing name, and the agent must not learn otherwise.
func TestDriveRetryToldTheRefusal(t *testing.T) {
	turn := `box="$ACPFS_DRIVE_DIR/box"
if [ "$ACPFS_ATTEMPT" = 1 ]; then
  echo "a reviewer's edit" >> proposal.md || true
  cat oracle/expected-answer.md || true
  cat .acpfs/last-error > "$box/seen"
  exit 0
fi
printf '%s' "$ACPFS_LAST_ERROR" > "$box/told-env"
cat "$ACPFS_LAST_ERROR_FILE" > "$box/told-file"
` + driveBlock
	k := newDriveKit(t, []driveParticipant{driveOwner(),
		{id: "bob", grant: `{preset: reviewer, forbid: ["oracle/**"]}`, command: yamlQuote(turn)},
	}, "")
	k.requireBlockedEnd(k.drive())

	// .acpfs/last-error: "TIME OP PATH: WHY (ERRNO)".
	seen := strings.TrimSpace(readFile(t, filepath.Join(k.box, "seen")))
	_, refusal, ok := strings.Cut(seen, " ")
	require.True(t, ok, seen)
	refusal = refusal[:strings.LastIndex(refusal, " (")]
	require.Contains(t, refusal, "proposal.md")
	env := readFile(t, filepath.Join(k.box, "told-env"))
	assert.Equal(t, env, readFile(t, filepath.Join(k.box, "told-file")), "the same in the environment and in the file")
	assert.True(t, strings.HasPrefix(env, refusal), "the retry was told %q; its view said %q", env, refusal)
	assert.Contains(t, env, "the grant does not show or allow this path", "with what the refusal means")
	assert.NotContains(t, env, "oracle")
	rcs := k.receipts()
	first := rcs["000003-bob-1"]
	assert.Equal(t, drive.OutcomeNothing, first.Outcome)
	assert.Equal(t, env, first.LastError)
	second := rcs["000003-bob-2"]
	assert.Equal(t, drive.OutcomeAppended, second.Outcome)
	assert.Empty(t, second.LastError, "the retry appended: its receipt has no last error")
	var refused []string
	for _, r := range first.Refusals {
		refused = append(refused, string(r.Op)+" "+r.Path)
	}
	assert.Equal(t, []string{"open proposal.md", "lookup oracle"}, refused, "the receipt, for the coordinator, has both")
	assert.Equal(t, env, readFile(t, filepath.Join(k.runs, drive.TurnsDir, "000003-bob-2", "last-error")), "the run directory keeps what the retry was told")
}

// TestDriveAgentAppendsBlocked: an agent that appends blocked itself
// ends the collaboration: the driver stops without giving anyone up,
// the turn's receipt holds the event, and the audit runs.
func TestDriveAgentAppendsBlocked(t *testing.T) {
	k := newDriveKit(t, []driveParticipant{driveOwner(), {id: "bob", grant: `{preset: reviewer}`, command: yamlQuote(driveBlock)}}, "")
	notes, errOut, code := k.drive()
	assert.Equal(t, 2, code, "%s\n%s", notesText(notes), errOut)
	assert.Contains(t, errOut, "did not complete: blocked")
	assert.NotContains(t, notesText(notes), drive.NoteGaveUp+" ")
	require.Equal(t, protocol.PhaseBlocked, k.phase())
	k.requireSound()
	rc := k.receipts()["000003-bob-1"]
	assert.Equal(t, drive.OutcomeAppended, rc.Outcome)
	assert.Equal(t, []drive.EventRef{{Seq: 4, Type: protocol.EvBlocked}}, rc.Events)
	assert.NotContains(t, k.receipts(), "000004-alice-1", "nobody is woken after blocked")
	assert.FileExists(t, filepath.Join(k.runs, "audit.md"))
}
