package view

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/protocol"
)

// quietLogs discards the log for the rest of the test: the failures it
// injects are logged with their stacks, which a passing run must not
// print.
func quietLogs(t *testing.T) {
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })
}

// changeCase is an operation that would change the folder, and how to
// tell that it did not.
type changeCase struct {
	name      string
	do        func() syscall.Errno
	unchanged func(t *testing.T)
}

// ledgerCases are the operations of f whose records the ledger must
// hold, each with a check that the folder is as it was.
func ledgerCases(c *collab, f *View, rw File) []changeCase {
	ctx := context.Background()
	events := c.read(protocol.EventsFile)
	return []changeCase{
		{"mkdir", func() syscall.Errno { _, e := f.Mkdir(ctx, "scratch/d", 0o755); return e }, func(t *testing.T) { assert.NoDirExists(t, c.in("scratch/d")) }},
		{"create", func() syscall.Errno { _, _, e := f.Create(ctx, "scratch/n.md", syscall.O_RDWR, 0o644, nil); return e }, func(t *testing.T) { assert.NoFileExists(t, c.in("scratch/n.md")) }},
		{"unlink", func() syscall.Errno { return f.Unlink(ctx, "scratch/keep.md") }, func(t *testing.T) { assert.FileExists(t, c.in("scratch/keep.md")) }},
		{"rename", func() syscall.Errno { return f.Rename(ctx, "scratch/keep.md", "scratch/moved.md", 0) }, func(t *testing.T) { assert.NoFileExists(t, c.in("scratch/moved.md")) }},
		{"truncate", func() syscall.Errno {
			_, e := f.Setattr(ctx, "scratch/keep.md", nil, &SetAttr{HasSize: true})
			return e
		}, func(t *testing.T) { assert.Equal(t, "kept", c.read("scratch/keep.md")) }},
		{"a write through a descriptor opened before", func() syscall.Errno { _, e := rw.Write(ctx, []byte("XXXX"), 0); return e }, func(t *testing.T) { assert.Equal(t, "kept", c.read("scratch/keep.md")) }},
		{"an open for reading", func() syscall.Errno { _, _, e := f.Open(ctx, nil, "docs/a.md", syscall.O_RDONLY); return e }, func(t *testing.T) {}},
		{"an append", func() syscall.Errno {
			_, err := appendVia(f, acpSteps()[0].line(c, 2))
			var e syscall.Errno
			errors.As(err, &e)
			return e
		}, func(t *testing.T) { assert.Equal(t, events, c.read(protocol.EventsFile)) }},
	}
}

// TestLedgerDown: an operation whose record cannot be written answers
// EIO and does not act; .acpfs/last-error says why.
func TestLedgerDown(t *testing.T) {
	quietLogs(t)
	c := newCollab(t)
	c.write("scratch/keep.md", "kept")
	f := c.newView(ownerGrant())
	ctx := context.Background()
	rw, _, errno := f.Open(ctx, nil, "scratch/keep.md", syscall.O_RDWR)
	require.Zero(t, errno)
	defer rw.Release(ctx)
	cases := ledgerCases(c, f, rw)
	require.NoError(t, c.lw.Close())
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, syscall.EIO, tc.do())
			tc.unchanged(t)
			assert.Contains(t, f.LastError(), "the ledger cannot be written")
		})
	}
	assert.Zero(t, f.quota.files.Load(), "nothing made, nothing charged")
}

// TestLedgerBroken: a ledger found tampered with stops the view: every
// operation answers EIO, a hidden name like an absent one, until an
// operator repairs it.
func TestLedgerBroken(t *testing.T) {
	quietLogs(t)
	c := newCollab(t)
	c.write("scratch/keep.md", "kept")
	f := c.newView(ownerGrant())
	ctx := context.Background()
	rw, _, errno := f.Open(ctx, nil, "scratch/keep.md", syscall.O_RDWR)
	require.Zero(t, errno)
	defer rw.Release(ctx)
	cases := ledgerCases(c, f, rw)
	require.NoError(t, os.Rename(c.ledgerPath, c.ledgerPath+".away"))
	// The next record finds the ledger gone.
	_, errno = f.Mkdir(ctx, "scratch/first", 0o755)
	require.Equal(t, syscall.EIO, errno)
	require.NotNil(t, c.lw.Broken())
	cases = append(cases,
		changeCase{"lookup of a visible file", func() syscall.Errno { _, e := f.Lookup(ctx, "docs/a.md"); return e }, func(t *testing.T) {}},
		changeCase{"lookup of a hidden file", func() syscall.Errno { _, e := f.Lookup(ctx, "oracle/answer.md"); return e }, func(t *testing.T) {}},
		changeCase{"lookup of nothing", func() syscall.Errno { _, e := f.Lookup(ctx, "oracle/none.md"); return e }, func(t *testing.T) {}},
	)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, syscall.EIO, tc.do())
			tc.unchanged(t)
			assert.Contains(t, f.LastError(), "tampered with")
		})
	}
}

// TestGuard: a panic in an operation answers EIO and is recorded, and
// the view goes on serving.
func TestGuard(t *testing.T) {
	quietLogs(t)
	c := newCollab(t)
	f := c.newView(ownerGrant(), func(o *Options) {
		o.Fault = func(op, rel string) {
			if rel == "scratch/p.md" || rel == "scratch" {
				panic("injected " + op)
			}
		}
	})
	ctx := context.Background()
	_, fh, errno := f.Create(ctx, "scratch/p.md", syscall.O_RDWR, 0o644, nil)
	require.Zero(t, errno)
	defer fh.Release(ctx)
	d, _, errno := f.Opendir(ctx, "scratch")
	require.Zero(t, errno)
	tests := []struct {
		name string
		do   func() syscall.Errno
		op   ledger.Op
		path string
	}{
		{"a write", func() syscall.Errno { _, e := fh.Write(ctx, []byte("x"), 0); return e }, ledger.OpWrite, "scratch/p.md"},
		{"a handler of the adapter", func() (errno syscall.Errno) {
			defer f.Guard(ctx, ledger.OpReaddir, "scratch", &errno)
			f.Enter(ledger.OpReaddir, "scratch")
			_, _, errno = d.Next(ctx)
			return errno
		}, ledger.OpReaddir, "scratch"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			seq := c.lastSeq()
			assert.Equal(t, syscall.EIO, tc.do())
			recs := recordsOf(c.since(seq), ledger.KindPanic, "alice", tc.path, tc.op)
			require.Len(t, recs, 1)
			assert.Contains(t, recs[0].Detail, "injected")
			assert.Contains(t, f.LastError(), "internal error (EIO)")
		})
	}
	assert.Empty(t, c.read("scratch/p.md"))
	_, errno = f.Lookup(ctx, "docs/a.md")
	assert.Zero(t, errno, "the view still serves")
}

// TestGateClosed: while the gate refuses (a host cut off from the store
// of a collaboration), every change is refused with EROFS and recorded;
// reads go on.
func TestGateClosed(t *testing.T) {
	c := newCollab(t)
	c.write("scratch/g.md", "g")
	var closed error
	f := c.newView(ownerGrant(), func(o *Options) { o.Gate = func() error { return closed } })
	ctx := context.Background()
	rw, _, errno := f.Open(ctx, nil, "scratch/g.md", syscall.O_RDWR)
	require.Zero(t, errno)
	defer rw.Release(ctx)
	ev, _, errno := f.Open(ctx, nil, protocol.EventsFile, syscall.O_WRONLY|syscall.O_APPEND)
	require.Zero(t, errno)
	defer ev.Release(ctx)
	closed = errors.New("the store is unreachable")
	runNameCases(t, c, "alice", []nameCase{
		{"mkdir", func() syscall.Errno { _, e := f.Mkdir(ctx, "scratch/d", 0o755); return e }, syscall.EROFS, ledger.KindDenied, ledger.OpMkdir, "scratch/d"},
		{"unlink", func() syscall.Errno { return f.Unlink(ctx, "scratch/g.md") }, syscall.EROFS, ledger.KindDenied, ledger.OpUnlink, "scratch/g.md"},
		{"a write", func() syscall.Errno { _, e := rw.Write(ctx, []byte("x"), 0); return e }, syscall.EROFS, ledger.KindDenied, ledger.OpWrite, "scratch/g.md"},
		{"an append", func() syscall.Errno { _, e := ev.Write(ctx, []byte("{}\n"), 0); return e }, syscall.EROFS, ledger.KindDenied, ledger.OpAppend, protocol.EventsFile},
		{"a lookup", func() syscall.Errno { _, e := f.Lookup(ctx, "scratch/g.md"); return e }, 0, "", "", "scratch/g.md"},
	})
	assert.Contains(t, f.LastError(), "read-only: the store is unreachable")
	assert.Equal(t, "g", c.read("scratch/g.md"))
}
