package view

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/protocol"
)

// recordsOf is the records of kind for agent and path (op when not
// empty).
func recordsOf(recs []ledger.Record, kind ledger.Kind, agent, path string, op ledger.Op) []ledger.Record {
	var out []ledger.Record
	for _, r := range recs {
		if r.Kind == kind && r.Agent == agent && r.Path == path && (op == "" || r.Op == op) {
			out = append(out, r)
		}
	}
	return out
}

// controlGen is the content of the control file name of f.
func controlGen(t *testing.T, ctx context.Context, f *View, name string) ([]byte, syscall.Errno) {
	t.Helper()
	for _, cf := range f.ControlFiles() {
		if cf.Name == name {
			return cf.Gen(ctx)
		}
	}
	t.Fatalf("no control file %s", name)
	return nil, 0
}

// TestControlFiles: the files of .acpfs, what each says, which are
// listed, and that a change of any of them is refused and recorded.
func TestControlFiles(t *testing.T) {
	c := newCollab(t)
	alice, bob := c.newView(ownerGrant()), c.newView(reviewerGrant())
	ctx := context.Background()

	var listed []string
	for _, cf := range alice.ControlFiles() {
		if cf.Listed {
			listed = append(listed, cf.Name)
		}
	}
	assert.Equal(t, []string{"status", "grant.md", "last-error"}, listed, "wait is never listed: its reads block")

	tests := []struct {
		name, file string
		view       *View
		want       []string
	}{
		{"status names the agent and the turn", "status", alice, []string{"agent: alice", "grant: G-alice", "participant: alice", "your turn: yes", "ledger: recording", "quota: "}},
		{"status of the other participant", "status", bob, []string{"agent: bob", "your turn: no"}},
		{"grant.md is the rendered grant", "grant.md", bob, []string{"review.md"}},
		{"wait returns at once on the agent's turn", "wait", alice, []string{"ready: "}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, errno := controlGen(t, ctx, tc.view, tc.file)
			require.Zero(t, errno)
			for _, w := range tc.want {
				assert.Contains(t, string(got), w)
			}
		})
	}
	t.Run("grant.md never names a forbidden path", func(t *testing.T) {
		got, errno := controlGen(t, ctx, bob, "grant.md")
		require.Zero(t, errno)
		assert.NotContains(t, string(got), "oracle")
	})
	t.Run("wait blocks until the caller gives up", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, errno := controlGen(t, cctx, bob, "wait")
		assert.Equal(t, syscall.EINTR, errno)
	})
	t.Run("last-error follows refusals", func(t *testing.T) {
		got, errno := controlGen(t, ctx, bob, "last-error")
		require.Zero(t, errno)
		assert.Empty(t, got)
		_, errno = bob.Mkdir(ctx, "docs/new", 0o755)
		require.Equal(t, syscall.EACCES, errno)
		got, _ = controlGen(t, ctx, bob, "last-error")
		assert.Contains(t, string(got), "mkdir docs/new: not writable under the grant (EACCES)")
	})

	e, errno := alice.Lookup(ctx, ControlDir)
	require.Zero(t, errno)
	assert.True(t, e.Control)
	assert.True(t, alice.Keeps(ControlDir))
}

// TestControlFilesReadOnly: .acpfs is opened for reading only; any other
// open and any change of it is refused and recorded.
func TestControlFilesReadOnly(t *testing.T) {
	c := newCollab(t)
	alice := c.newView(ownerGrant())
	ctx := context.Background()
	refusals := []struct {
		name  string
		do    func() syscall.Errno
		errno syscall.Errno
		op    ledger.Op
	}{
		{"open for reading", func() syscall.Errno { return alice.OpenControl(ctx, ".acpfs/status", syscall.O_RDONLY) }, 0, ""},
		{"open for writing", func() syscall.Errno { return alice.OpenControl(ctx, ".acpfs/status", syscall.O_WRONLY) }, syscall.EACCES, ledger.OpOpen},
		{"open with O_TRUNC", func() syscall.Errno { return alice.OpenControl(ctx, ".acpfs/wait", syscall.O_RDONLY|syscall.O_TRUNC) }, syscall.EACCES, ledger.OpOpen},
		{"a change of the directory", func() syscall.Errno { return alice.RefuseControl(ctx, ledger.OpUnlink, ".acpfs/grant.md") }, syscall.EACCES, ledger.OpUnlink},
		{"mkdir of .acpfs", func() syscall.Errno { _, e := alice.Mkdir(ctx, ControlDir, 0o755); return e }, syscall.EACCES, ledger.OpMkdir},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			seq := c.lastSeq()
			assert.Equal(t, tc.errno, tc.do())
			recs := c.since(seq)
			if tc.errno == 0 {
				assert.Empty(t, recs)
				return
			}
			require.Len(t, recs, 1, "%v", kinds(recs))
			assert.Equal(t, ledger.KindDenied, recs[0].Kind)
			assert.Equal(t, tc.op, recs[0].Op)
			assert.Contains(t, alice.LastError(), "(EACCES)")
		})
	}
}

// TestStatusReportsTroubles: .acpfs/status says when writes are refused
// (a closed gate), when the ledger stopped and when the history is
// broken.
func TestStatusReportsTroubles(t *testing.T) {
	quietLogs(t)
	c := newCollab(t)
	var gateErr error
	f := c.newView(ownerGrant(), func(o *Options) { o.Gate = func() error { return gateErr } })
	ctx := context.Background()
	status := func() string {
		b, errno := f.statusText(ctx)
		require.Zero(t, errno)
		return string(b)
	}
	assert.Contains(t, status(), "writes: open\n")
	gateErr = errors.New("the store does not answer")
	assert.Contains(t, status(), "writes: refused with EROFS, reads go on (the store does not answer)")

	// The history broken on disk: a line no state machine accepts.
	events := c.read(protocol.EventsFile)
	c.write(protocol.EventsFile, events+`{"seq":7,"from":"bob","event":"completed"}`+"\n")
	assert.Contains(t, status(), "history: broken")
	c.write(protocol.EventsFile, events)

	// The ledger's file taken away: the writer stops.
	require.NoError(t, os.Rename(c.ledgerPath, c.ledgerPath+".moved"))
	_, _ = f.Mkdir(ctx, "scratch/x", 0o755)
	assert.Contains(t, status(), "ledger: stopped")
}

// TestHandoffSnapshots: an artifact handed to the agent is shown and read
// as it was handed over, read-only, and its read is recorded with the
// snapshot's hash, whatever the live file holds.
func TestHandoffSnapshots(t *testing.T) {
	c := newCollab(t)
	snap := filepath.Join(c.root, "handoffs", "a.md")
	require.NoError(t, os.MkdirAll(filepath.Dir(snap), 0o700))
	require.NoError(t, os.WriteFile(snap, []byte("as handed over\n"), 0o600))
	c.write("scratch/spec.md", "changed since\n")
	g := grantOf("bob", []string{"docs/**", "scratch/**"}, nil, []string{"scratch/**"})
	f := c.newView(g, func(o *Options) { o.Handoffs = map[string]string{"scratch/spec.md": snap} })
	ctx := context.Background()

	assert.Equal(t, map[string]string{"scratch/spec.md": snap}, f.Handoffs())
	assert.True(t, f.Keeps("scratch/spec.md"))
	e, errno := f.Lookup(ctx, "scratch/spec.md")
	require.Zero(t, errno)
	assert.Equal(t, snap, e.Snapshot)
	assert.EqualValues(t, syscall.S_IFREG|0o444, e.Attr.Mode)
	assert.EqualValues(t, len("as handed over\n"), e.Attr.Size)

	seq := c.lastSeq()
	fh, errno := f.OpenSnapshot(ctx, "scratch/spec.md", snap, syscall.O_RDONLY)
	require.Zero(t, errno)
	got, errno := fh.Read(ctx, make([]byte, 64), 0)
	require.Zero(t, errno)
	assert.Equal(t, "as handed over\n", string(got))
	reads := recordsOf(c.since(seq), ledger.KindRead, "bob", "scratch/spec.md", ledger.OpOpen)
	require.Len(t, reads, 1)
	assert.Equal(t, sum([]byte("as handed over\n")), reads[0].SHA256)
	assert.Contains(t, reads[0].Detail, "handoff snapshot")

	// Still readable after a grant that no longer reads the live file:
	// the snapshot is what was handed over.
	require.NoError(t, f.SetGrant(grantOf("bob", []string{"docs/**"}, nil, nil), f.Handoffs()))
	_, errno = fh.Read(ctx, make([]byte, 64), 0)
	assert.Zero(t, errno)
	require.Zero(t, fh.Release(ctx))

	refusals := []struct {
		name string
		do   func() syscall.Errno
		op   ledger.Op
	}{
		{"open for writing", func() syscall.Errno {
			_, e := f.OpenSnapshot(ctx, "scratch/spec.md", snap, syscall.O_RDWR)
			return e
		}, ledger.OpOpen},
		{"a change", func() syscall.Errno { return f.RefuseSnapshot(ctx, ledger.OpSetattr, "scratch/spec.md") }, ledger.OpSetattr},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			seq := c.lastSeq()
			assert.Equal(t, syscall.EACCES, tc.do())
			assert.Len(t, recordsOf(c.since(seq), ledger.KindDenied, "bob", "scratch/spec.md", tc.op), 1)
			assert.Contains(t, f.LastError(), "handed-over artifact is read-only")
		})
	}
	t.Run("the live file under a handoff is not writable", func(t *testing.T) {
		require.NoError(t, f.SetGrant(g, f.Handoffs()))
		_, errno := f.Setattr(ctx, "scratch/spec.md", nil, &SetAttr{HasMode: true, Mode: 0o600})
		assert.Equal(t, syscall.EACCES, errno)
	})
	t.Run("a snapshot gone or swapped for a symlink", func(t *testing.T) {
		_, errno := SnapshotAttr(snap + ".gone")
		assert.Equal(t, syscall.ENOENT, errno)
		link := snap + ".link"
		require.NoError(t, os.Symlink(snap, link))
		_, errno = f.OpenSnapshot(ctx, "scratch/spec.md", link, syscall.O_RDONLY)
		assert.Equal(t, syscall.ELOOP, errno)
	})
	t.Run("a passthrough view lets the kernel read the snapshot", func(t *testing.T) {
		p := c.newView(g, func(o *Options) { o.Handoffs = map[string]string{"scratch/spec.md": snap}; o.Passthrough = true })
		fh, errno := p.OpenSnapshot(ctx, "scratch/spec.md", snap, syscall.O_RDONLY)
		require.Zero(t, errno)
		fd, ok := fh.PassthroughFd()
		assert.True(t, ok)
		assert.Positive(t, fd)
		require.Zero(t, fh.Release(ctx))
	})
	assert.True(t, strings.HasPrefix(snap, c.root))
}
