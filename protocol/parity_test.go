package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
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
	// The reference's directory is a checkout to read, not to write to.
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
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

// refAppendArgs are the reference append script's arguments for a.
func refAppendArgs(dir string, a appendArgs) []string {
	args := []string{"--folder", dir, "--participant", a.from, "--event", a.event, "--summary", a.summary}
	if a.doc != "" {
		args = append(args, "--doc", a.doc)
	}
	if a.replyTo != nil {
		args = append(args, "--reply-to", strconv.Itoa(*a.replyTo))
	}
	if a.role != "" {
		args = append(args, "--role", a.role)
	}
	if a.sha != "" {
		args = append(args, "--sha256", a.sha)
	}
	return args
}

// refAppender appends through the reference append script.
func refAppender(t *testing.T, k *kit) func(e ev, doc string, replyTo *int, role, sha string) (Event, error) {
	return func(e ev, doc string, replyTo *int, role, sha string) (Event, error) {
		a := appendArgs{from: e.from, event: e.event, summary: "ref " + e.event, doc: doc, replyTo: replyTo, role: role, sha: sha}
		code, out := runRef(t, "append_event.py", refAppendArgs(k.dir, a)...)
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

// The golden test: the reference's verdicts on the parity corpus
// (corpus_test.go) are committed in testdata/protocol/parity/golden.json,
// so that `make test` checks acpfs against them without Python. With
// -update-parity (scripts/parity-golden.sh) it runs the reference scripts
// named by ACPFS_REFERENCE_SCRIPTS on every case and writes the file
// again.

var updateParity = flag.Bool("update-parity", false,
	"regenerate testdata/protocol/parity/golden.json with the reference scripts in ACPFS_REFERENCE_SCRIPTS")

const goldenFile = "../testdata/protocol/parity/golden.json"

// parityVerdict is what one tool decided on one corpus case.
type parityVerdict struct {
	ID string `json:"id"`
	// Folder fingerprints the files of the case before the append: a
	// verdict is only compared on the folder it was made on.
	Folder   string         `json:"folder"`
	Validate int            `json:"validate"` // exit code of validate
	Append   *appendVerdict `json:"append,omitempty"`
}

// appendVerdict is the outcome of the case's append.
type appendVerdict struct {
	Accepted bool `json:"accepted"`
	// The state protocol.json holds afterwards.
	CurrentPhase  string   `json:"currentPhase,omitempty"`
	ProposalOwner string   `json:"proposalOwner,omitempty"`
	WaitingFor    []string `json:"waitingFor,omitempty"`
	// Validate is validate's exit code after an accepted append.
	Validate *int `json:"validate,omitempty"`
}

// appendArgs are the arguments of one append, the same for both tools.
type appendArgs struct {
	from, event, summary, doc, role, sha string
	replyTo                              *int
}

// judge is one implementation: it validates a folder (exit code) and
// tries an append (accepted or not).
type judge struct {
	validate func(t *testing.T, dir string) int
	append   func(t *testing.T, dir string, a appendArgs) bool
}

var acpfsJudge = judge{
	validate: func(t *testing.T, dir string) int { return Validate(dir).ExitCode() },
	append: func(t *testing.T, dir string, a appendArgs) bool {
		l, err := OpenLog(dir)
		if err != nil {
			return false
		}
		defer l.Close()
		_, err = l.Append(EventSpec{Participant: a.from, Event: a.event, Summary: a.summary, Doc: a.doc, ReplyTo: a.replyTo, Role: a.role, SHA256: a.sha})
		return err == nil
	},
}

var referenceJudge = judge{
	validate: func(t *testing.T, dir string) int {
		code, _ := runRef(t, "validate_collaboration.py", "--folder", dir)
		return code
	},
	append: func(t *testing.T, dir string, a appendArgs) bool {
		code, _ := runRef(t, "append_event.py", refAppendArgs(dir, a)...)
		return code == 0
	},
}

// judgeCase builds the case's folder below root and has j decide on it.
func judgeCase(t *testing.T, b *corpusBuilder, c parityCase, root string, j judge) parityVerdict {
	k := c.build(b, t, root)
	var a appendArgs
	if c.append != nil {
		e := *c.append
		doc, rt, role, sha := k.defaults(e)
		if e.role == "-" {
			role = ""
		}
		if e.sha == "-" {
			sha = ""
		}
		a = appendArgs{from: e.from, event: e.event, summary: "parity " + e.event, doc: doc, replyTo: rt, role: role, sha: sha}
	}
	if c.edit != nil {
		c.edit(k)
	}
	v := parityVerdict{ID: c.id, Folder: fingerprint(t, root)}
	code, ok := b.validated[v.Folder]
	if !ok {
		code = j.validate(t, k.dir)
		b.validated[v.Folder] = code
	}
	v.Validate = code
	if c.append == nil {
		return v
	}
	v.Append = &appendVerdict{Accepted: j.append(t, k.dir, a)}
	v.Append.CurrentPhase, v.Append.ProposalOwner, v.Append.WaitingFor = protocolState(k.dir)
	if v.Append.Accepted {
		after := j.validate(t, k.dir)
		v.Append.Validate = &after
	}
	return v
}

// protocolState reads the derived state protocol.json records, whatever
// is left of it.
func protocolState(dir string) (phase, owner string, waiting []string) {
	var m struct {
		CurrentPhase  string   `json:"currentPhase"`
		ProposalOwner *string  `json:"proposalOwner"`
		WaitingFor    []string `json:"waitingFor"`
	}
	b, err := os.ReadFile(filepath.Join(dir, ProtocolFile))
	if err != nil || json.Unmarshal(b, &m) != nil {
		return "", "", nil
	}
	if m.ProposalOwner != nil {
		owner = *m.ProposalOwner
	}
	if len(m.WaitingFor) > 0 {
		// An empty list reads back from the golden file as none.
		waiting = m.WaitingFor
	}
	return m.CurrentPhase, owner, waiting
}

// parityDifferences are the corpus cases where acpfs decides differently
// from the reference on purpose, with the row of docs/compatibility.md
// that explains it. The golden test checks that they still differ, so
// that the list shrinks when a difference goes away.
var parityDifferences = func() map[string]string {
	groups := []struct {
		why string
		ids []string
	}{
		{"row 1: an unknown field is a warning (exit 1); the reference ignores it", []string{
			"validate/foreign/unknown-field", "append/foreign/unknown-field",
			"validate/foreign/unknown-fields-on-every-line-crlf", "append/foreign/unknown-fields-on-every-line-crlf",
		}},
		{"row 2: a key repeated in an event is refused; the reference keeps the last value (and row 13: the history is not extended)", []string{
			"validate/foreign/unknown-field-twice-in-one-event", "append/foreign/unknown-field-twice-in-one-event",
			"validate/foreign/known-field-twice", "append/foreign/known-field-twice",
		}},
		{"row 3: seq must be a JSON integer; the reference takes 2.0 as 2", []string{
			"append/broken/init/last-seq-as-float", "append/broken/classified/last-seq-as-float",
			"append/broken/frozen/last-seq-as-float", "append/broken/completed/last-seq-as-float",
		}},
		{"row 8: a raw CR that does not end a CRLF line is refused; the reference reads a blank line", []string{
			"validate/foreign/two-carriage-returns", "append/foreign/two-carriage-returns",
		}},
		{"row 13: a history that breaks a rule (duplicated seq, at without a zone, reply_to 0) is not extended; the reference appends after it", []string{
			"append/broken/init/last-line-duplicated", "append/broken/classified/last-line-duplicated",
			"append/broken/init/last-at-without-zone", "append/broken/reviewing/last-at-without-zone",
			"append/broken/classified/last-at-without-zone", "append/broken/frozen/last-at-without-zone",
			"append/broken/completed/last-at-without-zone",
			"append/broken/reviewing/last-reply-to-zero", "append/broken/classified/last-reply-to-zero",
			"append/broken/frozen/last-reply-to-zero", "append/broken/completed/last-reply-to-zero",
		}},
		{"row 14: the readiness gates of decision_accepted are checked for the new event only; the reference checks past acceptances against today's readiness.md and refuses every later append", []string{
			"append/broken/completed/deferral-without-a-reason",
		}},
		{"rows 16 and 24: a last line without its newline is not read (validate warns, appends wait); the reference parses it and appends after it", []string{
			"validate/foreign/torn-last-line", "append/foreign/torn-last-line",
			"validate/foreign/complete-last-event-without-newline", "append/foreign/complete-last-event-without-newline",
			"validate/foreign/blank-last-line-without-newline", "append/foreign/blank-last-line-without-newline",
		}},
		{"row 19: a protocol.json that is not an object is an error (exit 2); the reference crashes (exit 1)", []string{
			"validate/protocol-not-an-object",
		}},
	}
	out := map[string]string{}
	for _, g := range groups {
		for _, id := range g.ids {
			out[id] = g.why
		}
	}
	return out
}()

func TestParityGolden(t *testing.T) {
	corpus := parityCorpus()
	ids := map[string]bool{}
	for _, c := range corpus {
		require.False(t, ids[c.id], "duplicate corpus id %s", c.id)
		ids[c.id] = true
	}
	if *updateParity {
		require.NotEmpty(t, os.Getenv("ACPFS_REFERENCE_SCRIPTS"), "-update-parity needs ACPFS_REFERENCE_SCRIPTS")
		_, err := exec.LookPath("python3")
		require.NoError(t, err, "-update-parity needs python3")
		writeGolden(t, corpus)
	}
	golden := loadGolden(t)
	for id := range golden {
		assert.True(t, ids[id], "%s is in the golden file but not in the corpus: run scripts/parity-golden.sh", id)
	}
	for id := range parityDifferences {
		assert.True(t, ids[id], "parityDifferences names %s, which is not in the corpus", id)
	}
	b := newCorpusBuilder(t.TempDir())
	for _, c := range corpus {
		t.Run(c.id, func(t *testing.T) {
			want, ok := golden[c.id]
			require.True(t, ok, "no reference verdict: run scripts/parity-golden.sh")
			got := judgeCase(t, b, c, t.TempDir(), acpfsJudge)
			require.Equal(t, want.Folder, got.Folder, "the case's folder changed since the reference judged it: run scripts/parity-golden.sh")
			if why, ok := parityDifferences[c.id]; ok {
				assert.NotEqual(t, want, got, "listed as a deliberate difference (%s), but acpfs now agrees with the reference: remove it from parityDifferences", why)
				return
			}
			assert.Equal(t, want, got)
		})
	}
}

func loadGolden(t *testing.T) map[string]parityVerdict {
	data, err := os.ReadFile(goldenFile)
	require.NoError(t, err)
	var file struct {
		Cases []parityVerdict `json:"cases"`
	}
	require.NoError(t, json.Unmarshal(data, &file), goldenFile)
	out := make(map[string]parityVerdict, len(file.Cases))
	for _, v := range file.Cases {
		out[v.ID] = v
	}
	return out
}

// writeGolden runs the reference on every case and writes its verdicts,
// one case per line so that a regeneration diffs case by case.
func writeGolden(t *testing.T, corpus []parityCase) {
	b := newCorpusBuilder(t.TempDir())
	var out bytes.Buffer
	out.WriteString("{\n\"about\": \"Verdicts of the reference implementation's validate_collaboration.py and append_event.py on the cases of protocol/corpus_test.go, written by scripts/parity-golden.sh.\",\n\"cases\": [\n")
	for i, c := range corpus {
		v := judgeCase(t, b, c, t.TempDir(), referenceJudge)
		line, err := json.Marshal(v)
		require.NoError(t, err)
		out.Write(line)
		if i < len(corpus)-1 {
			out.WriteByte(',')
		}
		out.WriteByte('\n')
	}
	out.WriteString("]\n}\n")
	require.NoError(t, os.MkdirAll(filepath.Dir(goldenFile), 0o755))
	require.NoError(t, os.WriteFile(goldenFile, out.Bytes(), 0o644))
}
