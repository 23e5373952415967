package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/internal/testutil"
)

var protoInitArgs = []string{"--participant", "server", "--participant", "reader", "--objective", "Decide the storage",
	"--completion", "Accepted decisions are explicit", "--primary-deliverable-type", "design-spec"}

// protoInitFolder creates a collaboration folder with acpfs init.
func protoInitFolder(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "collab")
	r := runCLI(t, append([]string{"init", "--folder", dir}, protoInitArgs...)...)
	require.Equal(t, exitOK, r.code, "%v", r.err)
	return dir
}

var (
	protoCLIOnce sync.Once
	protoCLIPath string
	protoCLIErr  error
)

// protoBuildCLI builds the acpfs binary once per test process, into a
// fixed place under the temporary directory so that runs do not pile up
// copies (built beside it and renamed, so parallel runs do not collide).
func protoBuildCLI(t testing.TB) string {
	t.Helper()
	protoCLIOnce.Do(func() {
		// make test built it once for every package (bin/acpfs).
		if p := os.Getenv(testutil.CLIEnv); p != "" {
			protoCLIPath = p
			return
		}
		dir := filepath.Join(os.TempDir(), fmt.Sprintf("acpfs-cli-test-%d", os.Getuid()))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			protoCLIErr = err
			return
		}
		protoCLIPath = filepath.Join(dir, "acpfs")
		tmp := fmt.Sprintf("%s.%d", protoCLIPath, os.Getpid())
		out, err := exec.Command("go", "build", "-o", tmp, ".").CombinedOutput()
		if err != nil {
			protoCLIErr = errors.New(string(out))
			return
		}
		protoCLIErr = os.Rename(tmp, protoCLIPath)
	})
	if protoCLIErr != nil {
		t.Fatalf("cannot build acpfs: %v", protoCLIErr)
	}
	return protoCLIPath
}

func TestInitCommand(t *testing.T) {
	dir := protoInitFolder(t)
	for _, name := range []string{"protocol.json", "events.jsonl", "proposal.md", "review.md", "decisions.md", "readiness.md", "conclusion.md", "README.md", "deliverables/design-spec.md"} {
		assert.FileExists(t, filepath.Join(dir, name))
	}
	r := runCLI(t, "validate", "--folder", dir)
	assert.Equal(t, exitOK, r.code, r.out)

	again := runCLI(t, append([]string{"init", "--folder", dir}, protoInitArgs...)...)
	assert.Equal(t, exitFailed, again.code)
	assert.ErrorContains(t, again.err, "--resume")

	resume := runCLI(t, append([]string{"init", "--folder", dir, "--resume"}, protoInitArgs...)...)
	assert.Equal(t, exitOK, resume.code)
	assert.Contains(t, resume.out, "already exists")
}

func TestInitCommandExternal(t *testing.T) {
	repo := t.TempDir()
	dir := filepath.Join(repo, ".acp", "run")
	r := runCLI(t, "init", "--folder", dir, "--participant", "a", "--participant", "b", "--objective", "o",
		"--completion", "c", "--primary-deliverable-type", "decision-memo", "--deliverables-mode", "external",
		"--repo-root", "../..", "--deliverables-dir", "docs/out")
	require.Equal(t, exitOK, r.code, "%v", r.err)
	assert.FileExists(t, filepath.Join(repo, "docs", "out", "decision-memo.md"))
	assert.Equal(t, exitOK, runCLI(t, "validate", "--folder", dir).code)
}

func TestInitCommandRefusals(t *testing.T) {
	base := []string{"--participant", "a", "--participant", "b", "--objective", "o", "--completion", "c"}
	cases := []struct {
		name string
		args []string
		msg  string
	}{
		{"custom without file", []string{"--primary-deliverable-type", "custom"}, "--primary-deliverable-file"},
		{"custom without checklist", []string{"--primary-deliverable-type", "custom", "--primary-deliverable-file", "x.md"}, "--primary-deliverable-check"},
		{"unknown type", []string{"--primary-deliverable-type", "novel"}, "primary-deliverable-type"},
		{"not markdown", []string{"--primary-deliverable-type", "adr", "--primary-deliverable-file", "adr.txt"}, ".md"},
		{"escaping file", []string{"--primary-deliverable-type", "adr", "--primary-deliverable-file", "../adr.md"}, ".."},
		{"escaping dir", []string{"--primary-deliverable-type", "adr", "--deliverables-dir", "/abs"}, "--deliverables-dir"},
		{"external without repo root", []string{"--primary-deliverable-type", "adr", "--deliverables-mode", "external"}, "--repo-root"},
		{"absolute repo root", []string{"--primary-deliverable-type", "adr", "--deliverables-mode", "external", "--repo-root", "/"}, "--repo-root"},
		{"repo root in internal mode", []string{"--primary-deliverable-type", "adr", "--repo-root", ".."}, "--repo-root"},
		{"bad mode", []string{"--primary-deliverable-type", "adr", "--deliverables-mode", "shared"}, "deliverables-mode"},
		{"one participant", []string{"--primary-deliverable-type", "adr", "--participant", "a"}, "participant"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "collab")
			args := append([]string{"init", "--folder", dir}, base...)
			if c.name == "one participant" {
				args = []string{"init", "--folder", dir, "--participant", "a", "--objective", "o", "--completion", "c"}
			}
			r := runCLI(t, append(args, c.args...)...)
			assert.Equal(t, exitFailed, r.code)
			assert.ErrorContains(t, r.err, c.msg)
			assert.NoFileExists(t, filepath.Join(dir, "protocol.json"))
		})
	}
	r := runCLI(t, "init", "--folder", t.TempDir())
	assert.Equal(t, exitFailed, r.code, "required flags")
}
