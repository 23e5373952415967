package integration

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/internal/testutil"
	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/mount"
	"github.com/acpfs/acpfs/protocol"
)

// newDir makes a directory under tmpRoot, removed after the test (after
// every mount in it is gone, since cleanups run last-in first-out).
func newDir(t testing.TB, name string) string {
	t.Helper()
	d, err := os.MkdirTemp(tmpRoot, name+"-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// acpfs runs the CLI and returns stdout, stderr and the exit code.
func acpfs(t testing.TB, args ...string) (string, string, int) {
	t.Helper()
	// A command on a folder sees it as the folder's own file says; the
	// views of this process write their deferred rewrites first.
	for i, a := range args {
		if a == "--folder" && i+1 < len(args) {
			syncFolder(t, args[i+1])
		}
	}
	return runCmd(t, exec.Command(acpfsBin, args...))
}

// runCmd runs cmd and returns stdout, stderr and the exit code; failing
// to start it fails the test.
func runCmd(t testing.TB, cmd *exec.Cmd) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return out.String(), errb.String(), code
}

// collab is one collaboration folder with its run directory, a shared
// protocol log and ledger (as the coordinator shares them).
type collab struct {
	t      testing.TB
	root   string
	folder string
	runs   string
	ledger string
	log    *protocol.Log
	lw     *ledger.Writer
}

const (
	owner    = "alice"
	reviewer = "bob"
	primary  = "deliverables/design-spec.md"
)

// newCollab initializes a two-participant collaboration with an oracle
// file the reviewer must never see.
func newCollab(t testing.TB) *collab {
	t.Helper()
	root := newDir(t, "collab")
	c := &collab{t: t, root: root, folder: filepath.Join(root, "folder"), runs: filepath.Join(root, "agent_runs")}
	c.ledger = filepath.Join(c.runs, "communication_ledger.jsonl")
	_, stderr, code := acpfs(t, "init", "--folder", c.folder, "--participant", owner, "--participant", reviewer,
		"--objective", "Design the cache layer", "--completion", "Cache design reviewed",
		"--primary-deliverable-type", "design-spec")
	require.Equal(t, 0, code, stderr)
	require.NoError(t, os.MkdirAll(filepath.Join(c.folder, "oracle"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(c.folder, "oracle", "answer.md"), []byte("the secret answer\n"), 0o644))
	mkRunDir(t, c.runs)
	var err error
	c.log, err = protocol.OpenLog(c.folder)
	require.NoError(t, err)
	c.lw, err = ledger.Open(c.ledger, ledger.Options{Sync: ledger.SyncBatch})
	require.NoError(t, err)
	t.Cleanup(func() { c.lw.Close(); c.log.Close() })
	collabs.Store(c.folder, c)
	t.Cleanup(func() { collabs.Delete(c.folder) })
	return c
}

// collabs maps the folders of the collaborations alive in this process to
// them, so that helpers given only a folder can write what the views
// deferred (see syncFolder).
var collabs sync.Map

// syncFolder writes the protocol.json rewrite that the views of this
// process may have deferred for folder, so that a snapshot of the folder
// is not changed by it later.
func syncFolder(t testing.TB, folder string) {
	t.Helper()
	if c, ok := collabs.Load(folder); ok {
		require.NoError(t, c.(*collab).log.SyncProtocol())
	}
}

var protocolDocs = []string{"protocol.json", "events.jsonl", "README.md", "proposal.md", "review.md", "decisions.md", "readiness.md", "conclusion.md", "deliverables/**"}

// ownerGrant and reviewerGrant are the grants the tests use unless they
// need something special.
func ownerGrant() *grants.Grant {
	return &grants.Grant{
		GrantID: "G-owner", AgentID: owner, Role: "proposal owner", Objective: "Write the design",
		MayRead:       protocolDocs,
		ForbiddenRead: []string{"oracle/**"},
		MayWrite:      []string{"events.jsonl", "protocol.json", "proposal.md", "decisions.md", "readiness.md", "conclusion.md", "deliverables/**", "scratch/**"},
	}
}

func reviewerGrant() *grants.Grant {
	return &grants.Grant{
		GrantID: "G-reviewer", AgentID: reviewer, Role: "reviewer", Objective: "Review the design",
		MayRead:       append([]string{"scratch/**"}, protocolDocs...),
		ForbiddenRead: []string{"oracle/**", "scratch/private/**"},
		MayWrite:      []string{"events.jsonl", "protocol.json", "review.md"},
	}
}

// writeGrant stores g in the run directory and returns its path.
func (c *collab) writeGrant(g *grants.Grant) string {
	c.t.Helper()
	b, err := json.MarshalIndent(g, "", "  ")
	require.NoError(c.t, err)
	p := filepath.Join(c.runs, "context_grants", g.GrantID+".json")
	tmp := p + ".tmp"
	require.NoError(c.t, os.WriteFile(tmp, b, 0o644))
	require.NoError(c.t, os.Rename(tmp, p))
	return p
}

// view is one mounted grant.
type view struct {
	t   testing.TB
	dir string
	m   *mount.Mount
}

type viewOpt func(*mount.Config)

func withFault(fn func(op, rel string)) viewOpt { return func(c *mount.Config) { c.Fault = fn } }
func withAuditReads() viewOpt                   { return func(c *mount.Config) { c.Audit = "reads" } }

// withAuditOpens records every open and refusal in full, for tests that
// look for the record of each attempt.
func withAuditOpens() viewOpt { return func(c *mount.Config) { c.Audit = "opens" } }
func withHandoffs(h map[string]string) viewOpt {
	return func(c *mount.Config) { c.Handoffs = h }
}

// mountView mounts g in this process and unmounts it at cleanup,
// failing the test if the mount is still there afterwards.
func (c *collab) mountView(g *grants.Grant, opts ...viewOpt) *view {
	c.t.Helper()
	testutil.RequireFUSE(c.t)
	gp := c.writeGrant(g)
	dir := filepath.Join(c.root, "mnt-"+g.AgentID)
	require.NoError(c.t, os.MkdirAll(dir, 0o755))
	cfg := mount.Config{Folder: c.folder, Mountpoint: dir, Grant: g, GrantPath: gp, Log: c.log, Ledger: c.lw, Hidden: []string{c.runs}}
	for _, o := range opts {
		o(&cfg)
	}
	m, err := mount.Start(cfg)
	require.NoError(c.t, err)
	c.t.Cleanup(func() {
		require.NoError(c.t, m.Stop())
		require.NotContains(c.t, leftoverMounts(), dir, "mount left behind")
	})
	return &view{t: c.t, dir: dir, m: m}
}

func (v *view) path(rel string) string { return filepath.Join(v.dir, rel) }

// sh runs a shell command inside the view and returns its combined output
// and exit code.
func (v *view) sh(script string) (string, int) {
	v.t.Helper()
	// The shell enters the view itself. Starting it with cmd.Dir inside
	// the view would make the child chdir between vfork and exec, while
	// it shares memory with this process, which serves the view: a
	// garbage collection at that moment would wait for the suspended
	// thread and nobody would answer the child's FUSE request.
	cmd := exec.Command("bash", "-c", "cd \"$0\" && "+script, v.dir)
	out, err := cmd.CombinedOutput()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(v.t, err)
	}
	return string(out), code
}

// appendEvent appends one line through the view with a single write, as
// `echo >>` does, and returns the errno (0 when accepted).
func (v *view) appendEvent(line string) syscall.Errno {
	v.t.Helper()
	f, err := os.OpenFile(v.path("events.jsonl"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return errnoOf(v.t, err)
	}
	_, werr := f.Write([]byte(line + "\n"))
	cerr := f.Close()
	if werr != nil {
		return errnoOf(v.t, werr)
	}
	if cerr != nil {
		return errnoOf(v.t, cerr)
	}
	return 0
}

func errnoOf(t testing.TB, err error) syscall.Errno {
	t.Helper()
	var e syscall.Errno
	require.True(t, errors.As(err, &e), "not an errno: %v", err)
	return e
}

// event builds an event line for the next seq.
func (c *collab) event(from, name string, extra map[string]any) string {
	c.t.Helper()
	require.NoError(c.t, c.log.Refresh())
	s := c.log.Snapshot()
	ev := map[string]any{
		"seq": s.LastSeq + 1, "from": from, "event": name,
		"at": time.Now().UTC().Format("2006-01-02T15:04:05Z"), "summary": name + " by " + from,
		"reply_to": s.LastSeq,
	}
	for k, v := range extra {
		ev[k] = v
	}
	b, err := json.Marshal(ev)
	require.NoError(c.t, err)
	return string(b)
}

func (c *collab) snapshot() protocol.Snapshot {
	c.t.Helper()
	require.NoError(c.t, c.log.Refresh())
	return c.log.Snapshot()
}

// records reads the ledger.
func (c *collab) records() []ledger.Record {
	c.t.Helper()
	require.NoError(c.t, c.lw.Sync())
	f, err := os.Open(c.ledger)
	require.NoError(c.t, err)
	defer f.Close()
	// Through the ledger's reader: a version 3 line leaves out what the
	// record before it says, and the reader puts it back.
	var out []ledger.Record
	rd := ledger.NewReader(f)
	for {
		r, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(c.t, err)
		out = append(out, r)
	}
}

// findRecord returns the last record matching kind, path and op ("" matches any).
func (c *collab) findRecord(kind ledger.Kind, path, op string) (ledger.Record, bool) {
	c.t.Helper()
	recs := c.records()
	for i := len(recs) - 1; i >= 0; i-- {
		r := recs[i]
		if r.Kind == kind && (path == "" || r.Path == path) && (op == "" || string(r.Op) == op) {
			return r, true
		}
	}
	return ledger.Record{}, false
}

func (c *collab) requireRecord(kind ledger.Kind, path, op string) ledger.Record {
	c.t.Helper()
	r, ok := c.findRecord(kind, path, op)
	require.True(c.t, ok, "no ledger record kind=%s path=%s op=%s", kind, path, op)
	return r
}

func fileSHA(t testing.TB, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// protocolOnDisk is the folder's protocol.json once the rewrites that the
// views deferred are written.
func (c *collab) protocolOnDisk() string {
	c.t.Helper()
	require.NoError(c.t, c.log.SyncProtocol())
	return readFile(c.t, filepath.Join(c.folder, "protocol.json"))
}

func readFile(t testing.TB, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	return string(b)
}

// snapshotFiles returns the bytes of the protocol files, to prove that a
// refusal changed nothing. A protocol.json rewrite still pending from an
// earlier append is written first (the views defer it).
func (c *collab) snapshotFiles() map[string]string {
	require.NoError(c.t, c.log.SyncProtocol())
	out := map[string]string{}
	for _, n := range []string{"events.jsonl", "protocol.json"} {
		out[n] = readFile(c.t, filepath.Join(c.folder, n))
	}
	return out
}

// eventually polls cond until it holds. The deadline only ends a test
// whose condition never comes: while its watcher sees the folder, a
// view's cache lasts ten minutes (view.CacheTimeout), so a change shows
// by invalidation whatever the deadline, and a loaded machine that takes
// seconds to start a daemon, or a cluster to fail over, does not fail
// the test.
func eventually(t testing.TB, cond func() bool, msg string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal(msg)
}

// waitFor polls cond until it holds, for at most a minute (a driver
// initializes, creates grants and mounts before a first turn; a killed
// run's processes take a moment to go).
func waitFor(t *testing.T, cond func() bool, msg string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal(msg)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func timeAfter(sec int) <-chan time.Time { return time.After(time.Duration(sec) * time.Second) }

// captureLog sends what the process logs through log/slog (the daemon
// code of in-process mounts) to a buffer for the rest of the test, and
// prints it in the test's log only when the test fails: a test that
// injects a fault expects the daemon's error, stack trace and all, and a
// passing run should not print it. The test reads the buffer to see what
// an operator would find on the daemon's stderr.
func captureLog(t *testing.T) *syncBuffer {
	t.Helper()
	buf := &syncBuffer{}
	// slog.SetDefault also points the log package at the new handler, and
	// setting the previous default back does not undo that: the log
	// package's writer and flags are put back by hand, or every later
	// test's daemon output would go on into this buffer.
	prev, prevOut, prevFlags := slog.Default(), log.Writer(), log.Flags()
	slog.SetDefault(slog.New(slog.NewTextHandler(buf, nil)))
	t.Cleanup(func() {
		slog.SetDefault(prev)
		log.SetOutput(prevOut)
		log.SetFlags(prevFlags)
		if t.Failed() {
			t.Logf("the daemon logged:\n%s", buf.String())
		}
	})
	return buf
}

// syncBuffer is a bytes.Buffer that FUSE request goroutines may write
// while the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
