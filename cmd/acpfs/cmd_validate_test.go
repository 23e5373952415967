package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestValidateCommand(t *testing.T) {
	dir := protoInitFolder(t)
	r := runCLI(t, "validate", "--folder", dir)
	assert.Equal(t, exitOK, r.code)
	assert.Equal(t, "ACP validation passed\n", r.out)

	readiness := filepath.Join(dir, "readiness.md")
	text, err := os.ReadFile(readiness)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(readiness, []byte(strings.Replace(string(text), "## Blocking Issues",
		"- [deferred_nonblocking] Later.\n\n## Blocking Issues", 1)), 0o644))
	r = runCLI(t, "validate", "--folder", dir)
	assert.Equal(t, exitWarnings, r.code)
	assert.Contains(t, r.out, "passed with warnings\nWARNING: readiness.md: ")

	require.NoError(t, os.WriteFile(filepath.Join(dir, "opinions.md"), []byte("x"), 0o644))
	r = runCLI(t, "validate", "--folder", dir, "--json")
	assert.Equal(t, exitFailed, r.code)
	var rep protoValidateReport
	require.NoError(t, json.Unmarshal([]byte(r.out), &rep))
	assert.Equal(t, "failed", rep.Status)
	assert.Equal(t, 2, rep.ExitCode)
	require.Len(t, rep.Errors, 1)
	assert.Contains(t, rep.Errors[0], "[forbidden-file]")
	assert.Len(t, rep.Warnings, 1)

	r = runCLI(t, "validate", "--folder", filepath.Join(t.TempDir(), "none"))
	assert.Equal(t, exitFailed, r.code)
	assert.Contains(t, r.out, "ERROR: protocol.json: missing protocol.json")
}
