package protocol

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The parity tests run the reference implementation's scripts (python3)
// next to this package; they run only when ACPFS_REFERENCE_SCRIPTS names
// its scripts directory.

func referenceScripts(t *testing.T) string {
	dir := os.Getenv("ACPFS_REFERENCE_SCRIPTS")
	if dir == "" {
		t.Skip("ACPFS_REFERENCE_SCRIPTS is not set")
	}
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not found")
	}
	return dir
}

// runRef runs a reference script and returns its exit code and output.
func runRef(t *testing.T, script string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command("python3", append([]string{filepath.Join(referenceScripts(t), script)}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String()
	}
	require.NoError(t, err)
	return -1, ""
}

func initArgs(o InitOptions) []string {
	args := []string{"--folder", o.Folder, "--objective", o.Objective, "--primary-deliverable-type", o.PrimaryType}
	for _, p := range o.Participants {
		args = append(args, "--participant", p)
	}
	for _, c := range o.Completion {
		args = append(args, "--completion", c)
	}
	if o.PrimaryFile != "" {
		args = append(args, "--primary-deliverable-file", o.PrimaryFile)
	}
	for _, c := range o.PrimaryChecks {
		args = append(args, "--primary-deliverable-check", c)
	}
	if o.Mode != "" {
		args = append(args, "--deliverables-mode", o.Mode)
	}
	if o.Dir != "" {
		args = append(args, "--deliverables-dir", o.Dir)
	}
	if o.RepoRoot != "" {
		args = append(args, "--repo-root", o.RepoRoot)
	}
	return args
}

// refAppender appends through the reference append script.
func refAppender(t *testing.T, k *kit) func(e ev, doc string, replyTo *int, role, sha string) (Event, error) {
	return func(e ev, doc string, replyTo *int, role, sha string) (Event, error) {
		args := []string{"--folder", k.dir, "--participant", e.from, "--event", e.event, "--summary", "ref " + e.event}
		if doc != "" {
			args = append(args, "--doc", doc)
		}
		if replyTo != nil {
			args = append(args, "--reply-to", strconv.Itoa(*replyTo))
		}
		if role != "" {
			args = append(args, "--role", role)
		}
		if sha != "" {
			args = append(args, "--sha256", sha)
		}
		code, out := runRef(t, "append_event.py", args...)
		if code != 0 {
			return Event{}, &Error{Kind: Rejected, Rule: "reference", Msg: strings.TrimSpace(out)}
		}
		return Event{Event: e.event}, nil
	}
}

func parityOptions(root, typ string, external bool, parts ...string) InitOptions {
	o := kitOptions(filepath.Join(root, "collab"), typ, parts...)
	if external {
		o.Folder = filepath.Join(root, "repo", ".acp", "run")
		o.Mode, o.RepoRoot, o.Dir = "external", "../..", "docs/acp-output"
	}
	return o
}

func TestParityInitAndHappyPath(t *testing.T) {
	referenceScripts(t)
	type tc struct {
		typ   string
		ext   bool
		parts []string
	}
	var cases []tc
	for _, typ := range DeliverableTypes() {
		cases = append(cases, tc{typ: typ})
	}
	cases = append(cases, tc{typ: "design-spec", parts: []string{"server", "reader", "critic"}},
		tc{typ: "decision-memo", ext: true}, tc{typ: CustomType, ext: true, parts: []string{"a", "b", "c"}})
	for _, c := range cases {
		name := c.typ
		if c.ext {
			name += "/external"
		}
		name += "/" + strconv.Itoa(max(len(c.parts), 2)) + "p"
		t.Run(name, func(t *testing.T) {
			// acpfs init and appends, reference validation.
			k := newKit(t, parityOptions(t.TempDir(), c.typ, c.ext, c.parts...))
			code, out := runRef(t, "validate_collaboration.py", "--folder", k.dir)
			assert.Equal(t, 0, code, "reference validation of an acpfs init: %s", out)
			k.happy()
			code, out = runRef(t, "validate_collaboration.py", "--folder", k.dir)
			assert.Equal(t, 0, code, "reference validation of an acpfs happy path: %s", out)

			// Reference init and appends, acpfs validation.
			o := parityOptions(t.TempDir(), c.typ, c.ext, c.parts...)
			require.NoError(t, os.MkdirAll(filepath.Dir(o.Folder), 0o755))
			code, out = runRef(t, "init_collaboration.py", initArgs(o)...)
			require.Equal(t, 0, code, out)
			folder := resolvePath(o.Folder)
			res := Validate(folder)
			assert.Empty(t, res.Errors, "acpfs validation of a reference init")
			rk := &kit{t: t, dir: folder, clock: kitEpoch}
			for _, p := range o.Participants {
				rk.parts = append(rk.parts, p)
			}
			rk.open()
			rk.appender = refAppender(t, rk)
			rk.happy()
			res = Validate(folder)
			assert.Empty(t, res.Errors, "acpfs validation of a reference happy path")
			assert.Empty(t, res.Warnings)

			// Both logs hold the same events in the same order.
			require.NoError(t, rk.log.Refresh())
			assert.Equal(t, k.log.Snapshot().LastSeq, rk.log.Snapshot().LastSeq)
		})
	}
}

// knownVerdictDifferences are validateCases whose reference verdict
// differs on purpose; see docs/compatibility.md.
var knownVerdictDifferences = map[string]string{
	"protocol not an object": "the reference crashes with a traceback (exit 1)",
}

func TestParityValidateVerdicts(t *testing.T) {
	referenceScripts(t)
	for _, c := range validateCases {
		t.Run(c.name, func(t *testing.T) {
			k := kitAt(t, c.state)
			if c.edit != nil {
				c.edit(k)
			}
			got := Validate(k.dir).ExitCode()
			code, out := runRef(t, "validate_collaboration.py", "--folder", k.dir)
			if why, ok := knownVerdictDifferences[c.name]; ok {
				t.Logf("known difference (%s): acpfs %d, reference %d", why, got, code)
				return
			}
			assert.Equal(t, code, got, "reference output:\n%s", out)
		})
	}
}

// knownAppendDifferences are transitionCases the reference decides
// differently on purpose; see docs/compatibility.md.
var knownAppendDifferences = map[string]string{}

func TestParityAppendDecisions(t *testing.T) {
	referenceScripts(t)
	for _, c := range transitionCases {
		t.Run(c.name, func(t *testing.T) {
			k := kitAt(t, c.state)
			if c.prep != nil {
				c.prep(k)
			}
			e := c.e
			doc, rt, role, sha := k.defaults(e)
			if e.role == "-" {
				role = ""
			}
			if e.sha == "-" {
				sha = ""
			}
			_, err := refAppender(t, k)(e, doc, rt, role, sha)
			refAccepted := err == nil
			if why, ok := knownAppendDifferences[c.name]; ok {
				t.Logf("known difference (%s)", why)
				return
			}
			assert.Equal(t, c.rule == "", refAccepted, "acpfs rule %q; reference: %v", c.rule, err)
		})
	}
}
