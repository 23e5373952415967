package view

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/ledger"
)

// narrowed is the owner's grant without scratch/: what a revocation of
// part of it leaves.
func narrowed() *grants.Grant {
	g := ownerGrant()
	g.GrantID = "G-alice-2"
	g.ForbiddenRead = append(g.ForbiddenRead, "scratch/**")
	return g
}

// TestRevocationReachesOpenHandles: a grant narrowed or revoked while a
// file is open stops the next read, stat and write through the handle
// opened earlier, each refusal recorded; the kernel is told to drop the
// pages it holds; a passthrough descriptor, which the view cannot stop,
// is recorded as read.
func TestRevocationReachesOpenHandles(t *testing.T) {
	c := newCollab(t)
	c.write("scratch/a.md", "alpha\n")
	f := c.newView(ownerGrant())
	ctx := context.Background()
	n := newFakeNode("scratch/a.md")
	ro, _, errno := f.Open(ctx, n, "scratch/a.md", syscall.O_RDONLY)
	require.Zero(t, errno)
	rw, _, errno := f.Open(ctx, nil, "scratch/a.md", syscall.O_RDWR)
	require.Zero(t, errno)

	seq := c.lastSeq()
	require.NoError(t, f.SetGrant(narrowed(), nil))
	assert.Len(t, recordsOf(c.since(seq), ledger.KindGrantApplied, "alice", "", ""), 1, "the new grant is recorded")
	assert.EqualValues(t, 1, n.drops.Load(), "the kernel's pages of the open file are dropped")
	assert.Equal(t, "G-alice-2", f.Grant().GrantID)

	tests := []struct {
		name string
		do   func() syscall.Errno
		op   ledger.Op
	}{
		{"read", func() syscall.Errno { _, e := ro.Read(ctx, make([]byte, 16), 0); return e }, ledger.OpRead},
		{"stat of the open file", func() syscall.Errno { _, e := f.Getattr(ctx, "scratch/a.md", ro); return e }, ledger.OpRead},
		{"write", func() syscall.Errno { _, e := rw.Write(ctx, []byte("x"), 0); return e }, ledger.OpWrite},
		{"fallocate", func() syscall.Errno { return rw.Allocate(ctx, 0, 10, 0) }, ledger.OpFallocate},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			seq := c.lastSeq()
			assert.Equal(t, syscall.EACCES, tc.do())
			recs := recordsOf(c.since(seq), ledger.KindDenied, "alice", "scratch/a.md", tc.op)
			if tc.op == ledger.OpRead && len(recs) == 0 {
				// The same refusal as the read's: counted, not recorded
				// again (AuditCompact).
				recs = recordsOf(c.records(), ledger.KindDenied, "alice", "scratch/a.md", tc.op)
			}
			assert.NotEmpty(t, recs)
		})
	}
	assert.Equal(t, "alpha\n", c.read("scratch/a.md"), "no refused write landed")

	// Given back: the same handles read again.
	require.NoError(t, f.SetGrant(ownerGrant(), nil))
	got, errno := ro.Read(ctx, make([]byte, 16), 0)
	require.Zero(t, errno)
	assert.Equal(t, "alpha\n", string(got))
	require.Zero(t, ro.Release(ctx))
	require.Zero(t, rw.Release(ctx))

	t.Run("a passthrough descriptor is recorded as read at the change", func(t *testing.T) {
		p := c.newView(ownerGrant(), func(o *Options) { o.Passthrough = true })
		fh, _, errno := p.Open(ctx, nil, "docs/a.md", syscall.O_RDONLY)
		require.Zero(t, errno)
		_, ok := fh.PassthroughFd()
		require.True(t, ok, "docs/ is read-only for the grant")
		seq := c.lastSeq()
		g := ownerGrant()
		g.Revoked = true
		require.NoError(t, p.SetGrant(g, nil))
		assert.Len(t, recordsOf(c.since(seq), ledger.KindRead, "alice", "docs/a.md", ledger.OpPassthrough), 1)
		require.Zero(t, fh.Release(ctx))
	})
}

// TestHandleNoLongerAtItsName: a descriptor whose file was moved away,
// replaced or given a second name since it was opened is refused: the
// grant judged the name, not the file.
func TestHandleNoLongerAtItsName(t *testing.T) {
	c := newCollab(t)
	f := c.newView(ownerGrant())
	ctx := context.Background()
	tests := []struct {
		name   string
		change func(rel string)
	}{
		{"moved into a hidden directory", func(rel string) { require.NoError(t, os.Rename(c.in(rel), c.in("oracle/moved.md"))) }},
		{"replaced", func(rel string) {
			c.write("scratch/other.md", "other")
			require.NoError(t, os.Rename(c.in("scratch/other.md"), c.in(rel)))
		}},
		{"given a second name", func(rel string) { require.NoError(t, os.Link(c.in(rel), c.in("oracle/second.md"))) }},
		{"removed", func(rel string) { require.NoError(t, os.Remove(c.in(rel))) }},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// A path of its own: a refusal like an earlier one would be
			// counted, not recorded again.
			rel := fmt.Sprintf("scratch/m%d.md", i)
			c.write(rel, "mine")
			n := newFakeNode(rel)
			fh, _, errno := f.Open(ctx, n, rel, syscall.O_RDWR)
			require.Zero(t, errno)
			defer fh.Release(ctx)
			tc.change(rel)
			seq := c.lastSeq()
			_, errno = fh.Read(ctx, make([]byte, 8), 0)
			assert.Equal(t, syscall.EACCES, errno)
			_, errno = fh.Write(ctx, []byte("x"), 0)
			assert.Equal(t, syscall.EACCES, errno)
			recs := c.since(seq)
			assert.NotEmpty(t, recordsOf(recs, ledger.KindDenied, "alice", rel, ledger.OpRead), "%v", kinds(recs))
			assert.NotEmpty(t, recordsOf(recs, ledger.KindDenied, "alice", rel, ledger.OpWrite), "%v", kinds(recs))
			assert.Positive(t, n.drops.Load())
			assert.Contains(t, f.LastError(), "no longer the one at the name")
		})
	}
}

// TestWritesThroughHandles: what each kind of open for writing records,
// and when.
func TestWritesThroughHandles(t *testing.T) {
	c := newCollab(t)
	c.write("scratch/w.md", "0123456789")
	f := c.newView(ownerGrant())
	ctx := context.Background()
	writes := func(seq int64) []ledger.Record {
		return recordsOf(c.since(seq), ledger.KindWrite, "alice", "scratch/w.md", ledger.OpOpen)
	}

	t.Run("O_RDWR: the read at the open, the write at the first change", func(t *testing.T) {
		seq := c.lastSeq()
		fh, _, errno := f.Open(ctx, nil, "scratch/w.md", syscall.O_RDWR)
		require.Zero(t, errno)
		assert.Len(t, recordsOf(c.since(seq), ledger.KindRead, "alice", "scratch/w.md", ledger.OpOpen), 1)
		assert.Empty(t, writes(seq), "nothing written yet")
		_, errno = fh.Write(ctx, []byte("ab"), 0)
		require.Zero(t, errno)
		_, errno = fh.Write(ctx, []byte("cd"), 2)
		require.Zero(t, errno)
		assert.Len(t, writes(seq), 1, "one record, before the first change")
		// Reading back its own bytes is no new version.
		seq = c.lastSeq()
		got, errno := fh.Read(ctx, make([]byte, 16), 0)
		require.Zero(t, errno)
		assert.Equal(t, "abcd456789", string(got))
		assert.Empty(t, recordsOf(c.since(seq), ledger.KindRead, "alice", "scratch/w.md", ""))
		checkPlainCalls(t, fh)
	})
	t.Run("O_WRONLY closed without a write: recorded once, then counted", func(t *testing.T) {
		seq := c.lastSeq()
		for i := 0; i < 3; i++ {
			fh, _, errno := f.Open(ctx, nil, "scratch/w.md", syscall.O_WRONLY)
			require.Zero(t, errno)
			require.Zero(t, fh.Release(ctx))
		}
		recs := writes(seq)
		require.Len(t, recs, 1)
		assert.Equal(t, noopOpen, recs[0].Detail)
		f.FlushRepeats()
		rep := recordsOf(c.since(seq), ledger.KindWriteRepeat, "alice", "scratch/w.md", ledger.OpOpen)
		require.Len(t, rep, 1)
		assert.EqualValues(t, 2, rep[0].Count)
	})
	t.Run("O_TRUNC: recorded before the open", func(t *testing.T) {
		seq := c.lastSeq()
		fh, _, errno := f.Open(ctx, nil, "scratch/w.md", syscall.O_WRONLY|syscall.O_TRUNC)
		require.Zero(t, errno)
		assert.Len(t, writes(seq), 1)
		assert.Empty(t, c.read("scratch/w.md"))
		require.Zero(t, fh.Release(ctx))
	})
	t.Run("a read-only handle writes nothing", func(t *testing.T) {
		fh, _, errno := f.Open(ctx, nil, "scratch/w.md", syscall.O_RDONLY)
		require.Zero(t, errno)
		_, errno = fh.Write(ctx, []byte("x"), 0)
		assert.Equal(t, syscall.EBADF, errno)
		assert.Equal(t, syscall.EBADF, fh.Allocate(ctx, 0, 1, 0))
		require.Zero(t, fh.Release(ctx))
	})
	t.Run("O_APPEND writes at the true end", func(t *testing.T) {
		c.write("scratch/w.md", "start\n")
		fh, caching, errno := f.Open(ctx, nil, "scratch/w.md", syscall.O_WRONLY|syscall.O_APPEND)
		require.Zero(t, errno)
		assert.Equal(t, CacheDirect, caching)
		c.write("scratch/w.md", "start\nmore from elsewhere\n")
		_, errno = fh.Write(ctx, []byte("end\n"), 0)
		require.Zero(t, errno)
		require.Zero(t, fh.Release(ctx))
		assert.Equal(t, "start\nmore from elsewhere\nend\n", c.read("scratch/w.md"))
	})
}

// checkPlainCalls: the calls of an open file that judge nothing, and a
// release, after which none of them reaches the file.
func checkPlainCalls(t *testing.T, fh File) {
	ctx := context.Background()
	require.Zero(t, fh.Fsync(ctx, 0))
	off, errno := fh.Lseek(ctx, 3, unix.SEEK_SET)
	require.Zero(t, errno)
	assert.EqualValues(t, 3, off)
	assert.NotNil(t, fh.Locked())
	_, ok := fh.PassthroughFd()
	assert.False(t, ok)
	require.Zero(t, fh.Flush(ctx))
	require.Zero(t, fh.Release(ctx))
	assert.Equal(t, syscall.EBADF, fh.Release(ctx), "released twice")
	assert.Equal(t, syscall.EBADF, fh.Flush(ctx))
}

// TestReadsRecordEachVersion: a file changed on disk while a handle is
// open is recorded again, with its new hash, before a byte of the new
// version is served; the kernel keeps pages only while the version it
// saw is the file's.
func TestReadsRecordEachVersion(t *testing.T) {
	c := newCollab(t)
	c.write("docs/v.md", "version one\n")
	f := c.newView(reviewerGrant())
	ctx := context.Background()
	n := newFakeNode("docs/v.md")
	fh, caching, errno := f.Open(ctx, n, "docs/v.md", syscall.O_RDONLY)
	require.Zero(t, errno)
	assert.Equal(t, CacheKeep, caching, "first open: nothing cached to drop")

	c.write("docs/v.md", "version two, longer\n")
	seq := c.lastSeq()
	got, errno := fh.Read(ctx, make([]byte, 64), 0)
	require.Zero(t, errno)
	assert.Equal(t, "version two, longer\n", string(got))
	recs := recordsOf(c.since(seq), ledger.KindRead, "bob", "docs/v.md", ledger.OpOpen)
	require.Len(t, recs, 1)
	assert.Equal(t, sum(got), recs[0].SHA256)
	assert.Contains(t, recs[0].Detail, "content changed since the open")
	require.Zero(t, fh.Release(ctx))

	// A second open that finds another version than the kernel saw
	// drops the pages.
	fh, caching, errno = f.Open(ctx, n, "docs/v.md", syscall.O_RDONLY)
	require.Zero(t, errno)
	assert.Equal(t, CacheDrop, caching)
	assert.EqualValues(t, 1, n.drops.Load())
	require.Zero(t, fh.Release(ctx))
	fh, caching, errno = f.Open(ctx, n, "docs/v.md", syscall.O_RDONLY)
	require.Zero(t, errno)
	assert.Equal(t, CacheKeep, caching, "the same version again")
	require.Zero(t, fh.Release(ctx))

	// The adapter notes what the kernel was given.
	var st unix.Stat_t
	require.NoError(t, unix.Stat(c.in("docs/v.md"), &st))
	var seen Seen
	seen.Saw(&st)
	assert.Equal(t, versionOf(toSyscall(&st)), *seen.v.Load())
}

func toSyscall(st *unix.Stat_t) *syscall.Stat_t {
	return &syscall.Stat_t{Dev: st.Dev, Ino: st.Ino, Size: st.Size,
		Mtim: syscall.Timespec{Sec: st.Mtim.Sec, Nsec: st.Mtim.Nsec}, Ctim: syscall.Timespec{Sec: st.Ctim.Sec, Nsec: st.Ctim.Nsec}}
}

// TestHandleLimits: past the view's cap on open files, an open is
// refused with EMFILE and recorded; a release makes room again.
func TestHandleLimits(t *testing.T) {
	c := newCollab(t)
	f := c.newView(ownerGrant(), func(o *Options) { o.MaxHandles = 1 })
	ctx := context.Background()
	fh, _, errno := f.Open(ctx, nil, "docs/a.md", syscall.O_RDONLY)
	require.Zero(t, errno)
	seq := c.lastSeq()
	_, _, errno = f.Open(ctx, nil, "docs/a.md", syscall.O_RDONLY)
	assert.Equal(t, syscall.EMFILE, errno)
	_, _, errno = f.Create(ctx, "scratch/n.md", syscall.O_RDWR, 0o644, nil)
	assert.Equal(t, syscall.EMFILE, errno)
	assert.Len(t, recordsOf(c.since(seq), ledger.KindDenied, "alice", "docs/a.md", ledger.OpOpen), 1)
	assert.Len(t, recordsOf(c.since(seq), ledger.KindDenied, "alice", "scratch/n.md", ledger.OpCreate), 1)
	require.Zero(t, fh.Release(ctx))
	fh, _, errno = f.Open(ctx, nil, "docs/a.md", syscall.O_RDONLY)
	require.Zero(t, errno)
	require.Zero(t, fh.Release(ctx))
}
