package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReferenceScriptsThroughMount runs the reference implementation's
// scripts on the agents' views: its append must be accepted (including
// its rewrite of protocol.json), its forged appends refused, and its
// validator must pass the folder at the end. It needs the reference
// scripts: ACPFS_REFERENCE_SCRIPTS names their directory.
func TestReferenceScriptsThroughMount(t *testing.T) {
	ref := os.Getenv("ACPFS_REFERENCE_SCRIPTS")
	if ref == "" {
		t.Skip("set ACPFS_REFERENCE_SCRIPTS to the reference scripts directory to run this test")
	}
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed")
	}
	r := newRun(t)
	py := func(script string, args ...string) (string, int) {
		cmd := exec.Command("python3", append([]string{filepath.Join(ref, script)}, args...)...)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else {
			require.NoError(t, err)
		}
		return string(out), code
	}
	require.NoError(t, os.WriteFile(r.alice.path(primary), []byte(designSpec("In Review")), 0o644))
	out, code := py("append_event.py", "--folder", r.alice.dir, "--participant", owner, "--event", "deliverable_drafted",
		"--summary", "drafted with the reference script", "--doc", primary, "--role", "primary", "--reply-to", "1")
	require.Equal(t, 0, code, out)
	assert.Equal(t, 2, r.c.snapshot().LastSeq)

	// The reviewer's view refuses the reference script writing as the owner.
	before := r.c.snapshotFiles()
	out, code = py("append_event.py", "--folder", r.bob.dir, "--participant", owner, "--event", "proposal_submitted",
		"--summary", "forged", "--reply-to", "2")
	assert.NotEqual(t, 0, code, out)
	assert.Equal(t, before, r.c.snapshotFiles())

	out, code = py("append_event.py", "--folder", r.alice.dir, "--participant", owner, "--event", "proposal_submitted",
		"--summary", "ready for review", "--reply-to", "2")
	require.Equal(t, 0, code, out)
	out, code = py("next_action.py", "--folder", r.bob.dir, "--participant", reviewer)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "phase: reviewing")
	out, code = py("validate_collaboration.py", "--folder", r.bob.dir)
	assert.Equal(t, 0, code, out)
}
