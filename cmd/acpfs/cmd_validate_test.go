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

	// A folder without protocol.json is still validated file by file.
	empty := t.TempDir()
	r = runCLI(t, "validate", "--folder", empty)
	assert.Equal(t, exitFailed, r.code)
	assert.Contains(t, r.out, "ERROR: protocol.json: missing protocol.json")
}

// TestValidateNoSuchFolder: a --folder that is not a directory gives one
// clear error and exit 2, not one error per missing file.
func TestValidateNoSuchFolder(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(file, []byte("x"), 0o644))
	tests := []struct {
		name, folder, want string
	}{
		{"missing", filepath.Join(dir, "nope"), "no such folder: " + filepath.Join(dir, "nope")},
		{"relative", "nope-" + filepath.Base(dir), "no such folder: nope-" + filepath.Base(dir)},
		{"a file", file, "not a folder: " + file},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runCLI(t, "validate", "--folder", tt.folder)
			assert.Equal(t, exitFailed, r.code)
			require.Error(t, r.err)
			assert.Equal(t, tt.want, r.err.Error())
			assert.Empty(t, r.out, "nothing but the one error")

			r = runCLI(t, "validate", "--folder", tt.folder, "--json")
			assert.Equal(t, exitFailed, r.code)
			var rep protoValidateReport
			require.NoError(t, json.Unmarshal([]byte(r.out), &rep))
			assert.Equal(t, "failed", rep.Status)
			assert.Equal(t, []string{tt.want}, rep.Errors)
			assert.Empty(t, rep.Warnings)
		})
	}
}
