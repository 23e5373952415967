package integration

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/internal/testutil"
)

// Helpers of the safety tests (issue 13, "safe commands"): names carry
// an "sf" prefix.

// sfTimeout bounds a command that must end by itself (a refusal); a
// command still running then is stopped, so that a wrongly accepted
// mount is unmounted instead of hanging the suite.
const sfTimeout = 20 * time.Second

// sfRun runs acpfs and returns stdout, stderr and the exit code. It
// fails the test if the command has not ended within sfTimeout.
func sfRun(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	return sfRunIn(t, "", args...)
}

// sfRunIn is sfRun in the working directory dir ("" for the test's).
func sfRunIn(t *testing.T, dir string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(acpfsBin, args...)
	cmd.Dir = dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(sfTimeout):
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err = <-done:
		case <-time.After(sfTimeout):
			_ = cmd.Process.Kill()
			err = <-done
		}
		t.Errorf("acpfs %s did not end by itself within %s: %s%s", strings.Join(args, " "), sfTimeout, out.String(), errb.String())
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return out.String(), errb.String(), code
}

// sfOneLine checks that a refusal is exactly one "error: ..." line.
func sfOneLine(t *testing.T, stderr string) {
	t.Helper()
	assert.True(t, strings.HasPrefix(stderr, "error: "), "stderr: %q", stderr)
	assert.Equal(t, 1, strings.Count(stderr, "\n"), "one line expected: %q", stderr)
}

// sfFSTypesAt lists the filesystem types mounted at path, bottom first.
func sfFSTypesAt(path string) []string {
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		if fields := strings.Fields(s.Text()); len(fields) >= 3 && fields[1] == path {
			out = append(out, fields[2])
		}
	}
	return out
}

// sfTmpfs mounts a small tmpfs on dir, a directory of the test, and
// unmounts it at cleanup (only while the top mount there is still it).
func sfTmpfs(t *testing.T, dir string) {
	t.Helper()
	require.True(t, strings.HasPrefix(dir, tmpRoot+"/"), "only a directory of the test: %s", dir)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, syscall.Mount("acpfs-test-tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "size=64k"))
	t.Cleanup(func() {
		types := sfFSTypesAt(dir)
		if len(types) > 0 && types[len(types)-1] == "tmpfs" {
			assert.NoError(t, syscall.Unmount(dir, 0))
		}
	})
}

// sfExitCode is the exit code of an ended daemon.
func sfExitCode(t *testing.T, p *testutil.Daemon) int {
	t.Helper()
	err := p.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	require.NoError(t, err)
	return 0
}

// sfEnv is a collaboration folder and a run directory holding the owner
// and reviewer grants (G-owner for alice, G-reviewer for bob), written as
// files so that the tests do not depend on `grant create` options.
type sfEnv struct {
	*coordEnv
	ledger string
	grant  map[string]string // agent -> grant file
}

func newSfEnv(t *testing.T) *sfEnv {
	t.Helper()
	e := &sfEnv{coordEnv: newCoordEnv(t), grant: map[string]string{}}
	e.ledger = filepath.Join(e.runs, "communication_ledger.jsonl")
	e.grant[owner] = pmWriteGrant(t, e.runs, ownerGrant())
	e.grant[reviewer] = pmWriteGrant(t, e.runs, reviewerGrant())
	return e
}

// sfStat stats path, returning the error only.
func sfStat(p string) error {
	_, err := os.Stat(p)
	return err
}

// sfReaches opens the view at mp and reads its status: unlike a stat of
// its root, which the kernel may answer from attributes it still keeps,
// an open always reaches the daemon (ENOTCONN when it is dead).
func sfReaches(mp string) error {
	_, err := os.ReadFile(filepath.Join(mp, ".acpfs", "status"))
	return err
}

// sfKill kills a daemon with SIGKILL, as a crash would, once it has
// finished starting (its "mounted"/"view(s)" line is out). A daemon
// killed earlier may still be closing the probe file that go-fuse opens
// in a new mount (its poll hack): that close waits, uninterruptibly, for
// the daemon's own answer, so the process could never finish dying and
// the view would hang instead of answering ENOTCONN.
func sfKill(t *testing.T, p *testutil.Daemon) {
	t.Helper()
	eventually(t, func() bool {
		out := p.Output()
		return strings.Contains(out, "mounted ") || strings.Contains(out, " view(s) of ")
	}, "the daemon did not finish starting: "+p.Output())
	p.Kill()
}
