package integration

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/ledger"
)

// Each test below is one row of the filesystem contract, driven through
// a real mount with ordinary tools or raw system calls.

func TestHiddenPathsAreAbsent(t *testing.T) {
	c := newCollab(t)
	v := c.mountView(reviewerGrant())

	out, code := v.sh("ls -a")
	require.Equal(t, 0, code, out)
	assert.NotContains(t, out, "oracle")
	assert.NotContains(t, out, "agent_runs")
	assert.Contains(t, out, "events.jsonl")

	for _, p := range []string{"oracle", "oracle/answer.md"} {
		_, err := os.Stat(v.path(p))
		assert.ErrorIs(t, err, syscall.ENOENT, p)
		_, err = os.ReadFile(v.path(p))
		assert.ErrorIs(t, err, syscall.ENOENT, p)
	}
	out, code = v.sh("find . -name '*answer*'; grep -r 'secret answer' . ; true")
	require.Equal(t, 0, code)
	assert.NotContains(t, out, "answer")

	r := c.requireRecord(ledger.KindDenied, "oracle", "lookup")
	assert.Equal(t, reviewer, r.Agent)
	assert.Equal(t, "G-reviewer", r.Grant)
	// The agent itself learns nothing about the hidden name.
	assert.NotContains(t, readFile(t, v.path(".acpfs/last-error")), "oracle")
}

func TestReadIsRecordedWithHashAndPid(t *testing.T) {
	c := newCollab(t)
	v := c.mountView(reviewerGrant())
	out, code := v.sh("cat proposal.md >/dev/null")
	require.Equal(t, 0, code, out)
	r := c.requireRecord(ledger.KindRead, "proposal.md", "open")
	assert.Equal(t, fileSHA(t, filepath.Join(c.folder, "proposal.md")), r.SHA256)
	assert.NotZero(t, r.PID)
	assert.Equal(t, reviewer, r.Agent)

	_, code = v.sh("ls deliverables >/dev/null")
	require.Equal(t, 0, code)
	c.requireRecord(ledger.KindList, "deliverables", "readdir")
}

func TestAuditReadsRecordsEachRequest(t *testing.T) {
	c := newCollab(t)
	v := c.mountView(reviewerGrant(), withAuditReads())
	_, code := v.sh("cat proposal.md >/dev/null")
	require.Equal(t, 0, code)
	r := c.requireRecord(ledger.KindReadRequest, "proposal.md", "read")
	assert.Contains(t, r.Detail, "offset=0")
}

func TestWritesOutsideGrantAreRefused(t *testing.T) {
	c := newCollab(t)
	v := c.mountView(reviewerGrant())
	other := c.mountView(ownerGrant())
	before := readFile(t, filepath.Join(c.folder, "proposal.md"))
	cases := []struct {
		name, script string
		// private is the name of a file the script makes privately: the
		// grant does not let the agent write it, but it may write other
		// names in the directory, so the file exists in this view only
		// (fs/staging.go) and the script succeeds.
		private string
	}{
		{name: "overwrite", script: "echo hacked > proposal.md"},
		{name: "append", script: "echo hacked >> proposal.md"},
		{name: "create", script: "touch new.md", private: "new.md"},
		{name: "mkdir", script: "mkdir newdir"},
		{name: "rm", script: "rm proposal.md"},
		{name: "mv", script: "mv proposal.md p2.md"},
		{name: "truncate", script: "truncate -s 0 proposal.md"},
		{name: "chmod", script: "chmod 600 proposal.md"},
		{name: "sed -i", script: "sed -i s/Proposal/Hacked/ proposal.md"},
		{name: "cp over", script: "cp review.md proposal.md"},
		{name: "ln", script: "ln review.md hard.md"},
		{name: "ln -s", script: "ln -s proposal.md link.md"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			nrec := len(c.records())
			out, code := v.sh(tc.script)
			if tc.private == "" {
				assert.NotEqual(t, 0, code, "%s succeeded: %s", tc.script, out)
				return
			}
			require.Equal(t, 0, code, "%s: %s", tc.script, out)
			var mine ledger.Record
			for _, r := range c.records()[nrec:] {
				if r.Kind == ledger.KindWrite && r.Path == tc.private && r.Op == "create" {
					mine = r
				}
			}
			assert.Equal(t, "private temporary file of this view", mine.Detail, "the create is recorded as private")
			assert.Equal(t, reviewer, mine.Agent)
			_, err := os.Stat(v.path(tc.private))
			assert.NoError(t, err, "the view that made it shows it")
			_, err = os.Lstat(filepath.Join(c.folder, tc.private))
			assert.ErrorIs(t, err, os.ErrNotExist, "it is in the backing folder under its name")
			_, err = os.Lstat(other.path(tc.private))
			assert.ErrorIs(t, err, syscall.ENOENT, "another view shows it")
			out, code = other.sh("ls -a")
			require.Equal(t, 0, code, out)
			assert.NotContains(t, out, tc.private, "another view lists it")
			require.NoError(t, os.Remove(v.path(tc.private)))
			_, err = os.Lstat(v.path(tc.private))
			assert.ErrorIs(t, err, syscall.ENOENT)
		})
	}
	assert.Equal(t, before, readFile(t, filepath.Join(c.folder, "proposal.md")))
	_, err := os.Stat(filepath.Join(c.folder, "new.md"))
	assert.ErrorIs(t, err, os.ErrNotExist)

	err = os.WriteFile(v.path("proposal.md"), []byte("x"), 0o644)
	assert.ErrorIs(t, err, syscall.EACCES)
	r := c.requireRecord(ledger.KindDenied, "proposal.md", "open")
	assert.Contains(t, r.Detail, "not writable")
}

func TestWritesInsideGrantWork(t *testing.T) {
	c := newCollab(t)
	v := c.mountView(ownerGrant())
	out, code := v.sh(`set -e
mkdir -p scratch/notes
echo draft > scratch/notes/a.md
echo more >> scratch/notes/a.md
cp scratch/notes/a.md scratch/notes/b.md
mv scratch/notes/b.md scratch/notes/c.md
sed -i s/draft/DRAFT/ scratch/notes/a.md
ln -s a.md scratch/notes/link.md
cat scratch/notes/link.md
rm scratch/notes/c.md
`)
	require.Equal(t, 0, code, out)
	assert.Equal(t, "DRAFT\nmore\n", out)
	assert.Equal(t, "DRAFT\nmore\n", readFile(t, filepath.Join(c.folder, "scratch/notes/a.md")))
	c.requireRecord(ledger.KindWrite, "scratch/notes", "mkdir")
}

// An editor's atomic save: write a temporary file next to the target,
// then rename it over the target.
func TestEditorAtomicSave(t *testing.T) {
	c := newCollab(t)
	v := c.mountView(ownerGrant())
	tmp := v.path("deliverables/.design-spec.md.swp")
	require.NoError(t, os.WriteFile(tmp, []byte(designSpec("Draft")), 0o644))
	require.NoError(t, os.Rename(tmp, v.path(primary)))
	assert.Equal(t, designSpec("Draft"), readFile(t, filepath.Join(c.folder, primary)))

	// The same sequence is refused where the grant does not allow it.
	rv := c.mountView(reviewerGrant())
	err := os.WriteFile(rv.path("deliverables/.x.swp"), []byte("x"), 0o644)
	assert.ErrorIs(t, err, syscall.EACCES)
}

func TestRenameChecksBothNames(t *testing.T) {
	c := newCollab(t)
	v := c.mountView(ownerGrant())
	err := os.Rename(v.path("proposal.md"), v.path("oracle/answer.md"))
	assert.Error(t, err)
	// proposal.md is a required document (EPERM to move it away);
	// README.md is not writable (EACCES): either refusal stops it.
	err = os.Rename(v.path("proposal.md"), v.path("README.md"))
	assert.ErrorIs(t, err, syscall.EPERM)
	err = os.Rename(v.path("scratch/x.md"), v.path("README.md"))
	assert.Error(t, err)
	err = unix.Renameat2(unix.AT_FDCWD, v.path("proposal.md"), unix.AT_FDCWD, v.path("README.md"), unix.RENAME_EXCHANGE)
	assert.ErrorIs(t, err, syscall.EPERM)
	assert.Contains(t, readFile(t, filepath.Join(c.folder, "oracle/answer.md")), "secret")
}

func TestAppendThroughMount(t *testing.T) {
	r := newRun(t)
	require.NoError(t, os.WriteFile(r.alice.path(primary), []byte(designSpec("In Review")), 0o644))
	out, code := r.alice.sh("echo '" + r.c.event(owner, "deliverable_drafted", map[string]any{"doc": primary, "role": "primary"}) + "' >> events.jsonl")
	require.Equal(t, 0, code, out)
	s := r.c.snapshot()
	assert.Equal(t, 2, s.LastSeq)
	r.c.requireRecord(ledger.KindAppendAccepted, "events.jsonl", "append")

	// Python's open(..., 'a') works the same way.
	line := r.c.event(owner, "proposal_submitted", nil)
	out, code = r.alice.sh("python3 -c 'import sys; open(\"events.jsonl\",\"a\").write(sys.argv[1]+\"\\n\")' '" + line + "'")
	require.Equal(t, 0, code, out)
	assert.Equal(t, "reviewing", r.c.snapshot().Phase)
	assert.Contains(t, r.c.protocolOnDisk(), `"currentPhase": "reviewing"`)
	assert.Contains(t, readFile(t, r.bob.path("protocol.json")), `"currentPhase": "reviewing"`)
}

func TestRefusedAppendsChangeNothing(t *testing.T) {
	r := newRun(t)
	require.NoError(t, os.WriteFile(r.alice.path(primary), []byte(designSpec("In Review")), 0o644))
	cases := []struct {
		name  string
		v     *view
		line  string
		errno syscall.Errno
		why   string
	}{
		{"forged from", r.bob, r.c.event(owner, "deliverable_drafted", map[string]any{"doc": primary, "role": "primary"}), syscall.EPERM, "from"},
		{"not json", r.alice, "this is not json", syscall.EINVAL, ""},
		{"not an object", r.alice, `[1,2,3]`, syscall.EINVAL, ""},
		{"unknown event", r.alice, r.c.event(owner, "party", nil), syscall.EINVAL, ""},
		{"wrong phase", r.alice, r.c.event(owner, "review_submitted", nil), syscall.EPERM, ""},
		{"seq gap", r.alice, strings.Replace(r.c.event(owner, "deliverable_drafted", map[string]any{"doc": primary, "role": "primary"}), `"seq":2`, `"seq":5`, 1), syscall.EPERM, ""},
		{"proposal before draft", r.alice, r.c.event(owner, "proposal_submitted", nil), syscall.EPERM, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := r.c.snapshotFiles()
			errno := tc.v.appendEvent(tc.line)
			assert.Equal(t, tc.errno, errno)
			assert.Equal(t, before, r.c.snapshotFiles(), "refused append changed the protocol files")
			le := readFile(t, tc.v.path(".acpfs/last-error"))
			assert.Contains(t, le, "append events.jsonl")
			if tc.why != "" {
				assert.Contains(t, le, tc.why)
			}
		})
	}
	r.c.requireRecord(ledger.KindAppendRejected, "events.jsonl", "append")
}

func TestEventsFileIsAppendOnly(t *testing.T) {
	c := newCollab(t)
	v := c.mountView(ownerGrant())
	before := c.snapshotFiles()
	for _, script := range []string{": > events.jsonl", "truncate -s 0 events.jsonl", "rm events.jsonl", "mv events.jsonl e2", "sed -i d events.jsonl"} {
		out, code := v.sh(script)
		assert.NotEqual(t, 0, code, "%s: %s", script, out)
	}
	err := os.Truncate(v.path("events.jsonl"), 0)
	assert.ErrorIs(t, err, syscall.EPERM)
	_, err = os.OpenFile(v.path("events.jsonl"), os.O_WRONLY|os.O_TRUNC, 0)
	assert.ErrorIs(t, err, syscall.EPERM)
	assert.Equal(t, before, c.snapshotFiles())
}

// A line split across many writes is appended once its newline arrives;
// a complete event left without its newline is appended when the file is
// closed, as if the newline were there; a cut-off one is refused then.
func TestSplitAndPartialLines(t *testing.T) {
	r := newRun(t)
	require.NoError(t, os.WriteFile(r.alice.path(primary), []byte(designSpec("In Review")), 0o644))
	line := r.c.event(owner, "deliverable_drafted", map[string]any{"doc": primary, "role": "primary"}) + "\n"
	f, err := os.OpenFile(r.alice.path("events.jsonl"), os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	for i := 0; i < len(line); i += 7 {
		_, err := f.Write([]byte(line[i:min(i+7, len(line))]))
		require.NoError(t, err)
	}
	require.NoError(t, f.Close())
	assert.Equal(t, 2, r.c.snapshot().LastSeq)

	events := filepath.Join(r.c.folder, "events.jsonl")
	before := readFile(t, events)
	complete := r.c.event(owner, "proposal_submitted", nil)
	f, err = os.OpenFile(r.alice.path("events.jsonl"), os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.Write([]byte(complete))
	require.NoError(t, err)
	require.NoError(t, f.Close())
	assert.Equal(t, before+complete+"\n", readFile(t, events), "appended once, with its newline")
	assert.Equal(t, 3, r.c.snapshot().LastSeq)
	assert.Equal(t, "reviewing", r.c.snapshot().Phase)

	snap := r.c.snapshotFiles()
	f, err = os.OpenFile(r.alice.path("events.jsonl"), os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.Write([]byte(`{"seq":4`))
	require.NoError(t, err)
	err = f.Close()
	assert.ErrorIs(t, err, syscall.EINVAL)
	assert.Equal(t, snap, r.c.snapshotFiles())
	assert.Contains(t, readFile(t, r.alice.path(".acpfs/last-error")), "the event was cut off")
}

func TestProtocolJSONIsMaintained(t *testing.T) {
	c := newCollab(t)
	v := c.mountView(ownerGrant())
	cur := readFile(t, v.path("protocol.json"))
	// Rewriting the derived state (what the reference scripts do) works.
	require.NoError(t, os.WriteFile(v.path("protocol.json"), []byte(cur), 0o644))
	// A forged phase is refused at close and changes nothing.
	forged := strings.Replace(cur, `"currentPhase": "drafting"`, `"currentPhase": "completed"`, 1)
	require.NotEqual(t, cur, forged)
	err := os.WriteFile(v.path("protocol.json"), []byte(forged), 0o644)
	assert.ErrorIs(t, err, syscall.EPERM)
	assert.Equal(t, cur, readFile(t, filepath.Join(c.folder, "protocol.json")))
	out, code := v.sh("truncate -s 0 protocol.json; rm protocol.json")
	assert.NotEqual(t, 0, code, out)
	assert.Equal(t, cur, readFile(t, filepath.Join(c.folder, "protocol.json")))
}

func TestFrozenDeliverableIsReadOnly(t *testing.T) {
	r := newRun(t)
	r.toFrozen()
	frozen := readFile(t, filepath.Join(r.c.folder, primary))
	p := r.alice.path(primary)
	err := os.WriteFile(p, []byte("changed"), 0o644)
	assert.ErrorIs(t, err, syscall.EROFS)
	assert.ErrorIs(t, os.Truncate(p, 0), syscall.EROFS)
	assert.ErrorIs(t, os.Chmod(p, 0o600), syscall.EROFS)
	assert.ErrorIs(t, os.Remove(p), syscall.EROFS)
	assert.ErrorIs(t, os.Rename(p, p+".old"), syscall.EROFS)
	require.NoError(t, os.WriteFile(r.alice.path("deliverables/other.md"), []byte("x"), 0o644))
	assert.ErrorIs(t, os.Rename(r.alice.path("deliverables/other.md"), p), syscall.EROFS)
	out, code := r.alice.sh("echo more >> " + primary + "; sed -i s/Content/X/ " + primary)
	assert.NotEqual(t, 0, code, out)
	assert.Equal(t, frozen, readFile(t, filepath.Join(r.c.folder, primary)))
	rec := r.c.requireRecord(ledger.KindFrozenRefused, primary, "")
	assert.Equal(t, owner, rec.Agent)
	// Reading it is still fine.
	assert.Equal(t, frozen, readFile(t, p))
}

// Neither a hard link made before the freeze nor moving the directory
// around the deliverable is a way to change it afterwards.
func TestFrozenDeliverableHasNoSideDoors(t *testing.T) {
	r := newRun(t)
	r.toReadinessCheck()
	require.NoError(t, os.WriteFile(r.alice.path(primary), []byte(designSpec("Frozen")), 0o644))
	// A second name planted on the backing folder before the freeze.
	alias := r.alice.path("deliverables/alias.md")
	require.NoError(t, os.Link(filepath.Join(r.c.folder, primary), filepath.Join(r.c.folder, "deliverables/alias.md")))
	r.must(r.alice, owner, "deliverable_frozen", map[string]any{"doc": primary, "role": "primary", "sha256": fileSHA(t, filepath.Join(r.c.folder, primary))})
	frozen := readFile(t, filepath.Join(r.c.folder, primary))
	// A file with two names is shown under neither: writing the alias
	// is refused as writing over a name the view does not show.
	assert.ErrorIs(t, os.WriteFile(alias, []byte("changed"), 0o644), syscall.EACCES)
	assert.ErrorIs(t, os.Truncate(alias, 0), syscall.ENOENT)
	assert.ErrorIs(t, os.Rename(r.alice.path("deliverables"), r.alice.path("deliverables-moved")), syscall.EROFS)
	require.NoError(t, os.MkdirAll(filepath.Join(r.c.folder, "scratch"), 0o755))
	err := os.Rename(r.alice.path("deliverables"), r.alice.path("scratch/moved"))
	assert.ErrorIs(t, err, syscall.EROFS)
	assert.Equal(t, frozen, readFile(t, filepath.Join(r.c.folder, primary)))
}

func TestControlDirectory(t *testing.T) {
	c := newCollab(t)
	v := c.mountView(reviewerGrant())
	st := readFile(t, v.path(".acpfs/status"))
	assert.Contains(t, st, "agent: bob")
	assert.Contains(t, st, "phase: drafting")
	assert.Contains(t, st, "your turn: no")
	g := readFile(t, v.path(".acpfs/grant.md"))
	assert.Contains(t, g, "Review the design")
	assert.NotContains(t, g, "oracle")
	assert.NotContains(t, g, "scratch/private")
	assert.ErrorIs(t, os.WriteFile(v.path(".acpfs/status"), []byte("x"), 0o644), syscall.EACCES)
	_, err := os.ReadDir(v.path(".acpfs"))
	require.NoError(t, err)
}

// A read of .acpfs/wait blocks until the agent has the turn.
func TestWaitBlocksUntilTurn(t *testing.T) {
	r := newRun(t)
	done := make(chan string, 1)
	go func() {
		b, err := os.ReadFile(r.bob.path(".acpfs/wait"))
		if err != nil {
			done <- "error: " + err.Error()
			return
		}
		done <- string(b)
	}()
	select {
	case s := <-done:
		t.Fatalf("wait returned before bob's turn: %s", s)
	default:
	}
	r.toReviewing()
	select {
	case s := <-done:
		assert.Contains(t, s, "ready")
		assert.Contains(t, s, "next action")
	case <-timeAfter(5):
		t.Fatal("wait did not return after bob became waited for")
	}
}

func TestChangesAppearInOtherMounts(t *testing.T) {
	r := newRun(t)
	// Warm the reviewer's caches first.
	before := readFile(t, r.bob.path("events.jsonl"))
	_, err := os.Stat(r.bob.path("deliverables/design-spec.md"))
	require.NoError(t, err)
	r.toReviewing()
	eventually(t, func() bool { return readFile(t, r.bob.path("events.jsonl")) != before }, "reviewer did not see the new events")
	eventually(t, func() bool { return strings.Contains(readFile(t, r.bob.path(primary)), "In Review") }, "reviewer did not see the new draft")
	// A file created on disk appears too.
	require.NoError(t, os.WriteFile(filepath.Join(r.c.folder, "scratch-note.md"), nil, 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(r.c.folder, "scratch"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(r.c.folder, "scratch/x.md"), []byte("x"), 0o644))
	eventually(t, func() bool { _, err := os.Stat(r.bob.path("scratch/x.md")); return err == nil }, "new file not visible")
}

func TestGrantChangeAndRevocation(t *testing.T) {
	c := newCollab(t)
	g := reviewerGrant()
	v := c.mountView(g)
	require.NoError(t, os.WriteFile(filepath.Join(c.folder, "notes.md"), []byte("n"), 0o644))
	_, err := os.Stat(v.path("notes.md"))
	assert.ErrorIs(t, err, syscall.ENOENT)

	g.MayRead = append(g.MayRead, "notes.md")
	c.writeGrant(g)
	eventually(t, func() bool { _, err := os.Stat(v.path("notes.md")); return err == nil }, "granted file did not appear")

	f, err := os.Open(v.path("proposal.md")) // open before revocation
	require.NoError(t, err)
	defer f.Close()
	g.Revoked = true
	c.writeGrant(g)
	eventually(t, func() bool { _, err := os.ReadFile(v.path("proposal.md")); return errors.Is(err, syscall.ENOENT) }, "revoked grant still reads")
	out, _ := v.sh("ls")
	assert.Empty(t, strings.TrimSpace(out))
}

func TestSymlinksCannotEscape(t *testing.T) {
	c := newCollab(t)
	require.NoError(t, os.Symlink("oracle/answer.md", filepath.Join(c.folder, "to-oracle.md")))
	require.NoError(t, os.Symlink("/etc/passwd", filepath.Join(c.folder, "to-etc.md")))
	require.NoError(t, os.Symlink("proposal.md", filepath.Join(c.folder, "to-proposal.md")))
	require.NoError(t, os.Link(filepath.Join(c.folder, "oracle/answer.md"), filepath.Join(c.folder, "hard.md")))
	g := reviewerGrant()
	g.MayRead = append(g.MayRead, "*.md")
	v := c.mountView(g)
	for _, p := range []string{"to-oracle.md", "to-etc.md"} {
		_, err := os.ReadFile(v.path(p))
		assert.ErrorIs(t, err, syscall.ENOENT, p)
	}
	assert.Equal(t, readFile(t, filepath.Join(c.folder, "proposal.md")), readFile(t, v.path("to-proposal.md")))
	_, err := os.ReadFile(v.path("hard.md"))
	assert.ErrorIs(t, err, syscall.ENOENT, "a hard-linked file is not shown")
	out, _ := v.sh("ls")
	assert.NotContains(t, out, "hard.md")
	assert.NotContains(t, out, "to-oracle")
	assert.NotContains(t, out, "to-etc")

	ov := c.mountView(ownerGrant())
	assert.ErrorIs(t, os.Symlink("../oracle/answer.md", ov.path("scratch-link")), syscall.EACCES)
	require.NoError(t, os.MkdirAll(ov.path("scratch"), 0o755))
	assert.ErrorIs(t, os.Symlink("/etc/passwd", ov.path("scratch/l")), syscall.EACCES)
	assert.ErrorIs(t, os.Symlink("../oracle/answer.md", ov.path("scratch/l")), syscall.EACCES)
}

func TestPanicAnswersEIOAndMountSurvives(t *testing.T) {
	logged := captureLog(t)
	c := newCollab(t)
	v := c.mountView(reviewerGrant(), withFault(func(op, rel string) {
		if op == "open" && rel == "proposal.md" {
			panic("injected fault")
		}
	}))
	_, err := os.ReadFile(v.path("proposal.md"))
	assert.ErrorIs(t, err, syscall.EIO)
	r := c.requireRecord(ledger.KindPanic, "proposal.md", "open")
	assert.Contains(t, r.Detail, "injected fault")
	// The operator finds the stack on the daemon's stderr (slog).
	assert.Contains(t, logged.String(), "panic in handler")
	assert.Contains(t, logged.String(), "runtime/debug.Stack")
	_, err = os.ReadFile(v.path("review.md"))
	assert.NoError(t, err, "mount died after a panic")
}
