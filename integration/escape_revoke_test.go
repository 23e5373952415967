package integration

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/ledger"
)

// escLateRead reads through a descriptor opened before a grant change
// and fails the test if it returns bytes written after the change.
func escLateRead(t *testing.T, f *os.File) error {
	t.Helper()
	b := make([]byte, 256)
	n, err := f.ReadAt(b, 0)
	assert.NotContains(t, string(b[:max(n, 0)]), escSecret, "%s: read bytes written after the grant changed", f.Name())
	if err == nil || errors.Is(err, io.EOF) {
		return fmt.Errorf("read %q", b[:max(n, 0)])
	}
	return err
}

// TestEscapeRevokedGrant: what a narrowed, then revoked, grant does to an
// agent that holds open files, mappings, handles and cached names. Every
// read is served by the daemon, which checks the grant in force first: a
// descriptor opened before the change answers EACCES on its next read
// (recorded, op read), a mapping faults again and is refused, and no
// byte written on the backing folder after the change is ever returned.
func TestEscapeRevokedGrant(t *testing.T) {
	rv := newEscRevoke(t)
	rv.narrow(t)
	escNarrowedGrantChecks(t, rv)
	rv.revoke(t)
	escRevokedGrantChecks(t, rv)
}

// escRevoke is the collaboration of TestEscapeRevokedGrant: a view with
// escWriterGrant (g), and what the agent holds in it before the grant
// changes: descriptors, a mapping and file handles.
type escRevoke struct {
	c       *collab
	g       *grants.Grant
	v       *view
	backing func(rel string) string
	// noRead, refusedRead and deniedRead check a read after the change
	// (see newEscRevoke).
	noRead                  func(t *testing.T, nrec int, rel string)
	refusedRead, deniedRead func(t *testing.T, f *os.File, rel string)
	// ro and rw are proposal.md and scratch/mine.md, read-only and
	// writable for the grant; mapped maps proposal.md and handle is its
	// file handle.
	ro, rw *os.File
	mapped *escMapper
	handle unix.FileHandle
	// later and laterRW are opened before the grant narrows to hide them;
	// laterHandle is later's file handle.
	later, laterRW *os.File
	laterHandle    unix.FileHandle
}

// newEscRevoke mounts the view and opens, maps and takes handles of its
// files while the grant shows them.
func newEscRevoke(t *testing.T) *escRevoke {
	c := newCollab(t)
	escPlant(t, c.folder, nil, map[string]string{
		"scratch/mine.md":     "mine\n",
		"scratch/later.md":    "visible before the narrowing\n",
		"scratch/later-rw.md": "visible and writable before the narrowing\n",
	}, nil)
	g := escWriterGrant()
	v := c.mountView(g, withAuditOpens())
	p := v.path
	backing := func(rel string) string { return filepath.Join(c.folder, rel) }
	// noRead fails if any record since nrec is a read of rel.
	noRead := func(t *testing.T, nrec int, rel string) {
		t.Helper()
		for _, r := range c.records()[nrec:] {
			assert.False(t, r.Kind == ledger.KindRead && r.Path == rel,
				"read of %s recorded after the change: %+v", rel, r)
		}
	}
	// refusedRead expects the next read through f, opened before the
	// grant took rel away, to fail without returning a byte written since
	// and without a read record.
	refusedRead := func(t *testing.T, f *os.File, rel string) {
		t.Helper()
		nrec := len(c.records())
		assert.Error(t, escLateRead(t, f), rel)
		noRead(t, nrec, rel)
	}
	// deniedRead expects that refusal to be EACCES, recorded as a denied
	// read of rel (a full-size read, as cat makes: past the cached size,
	// so the kernel asks for the file's attributes first).
	deniedRead := func(t *testing.T, f *os.File, rel string) {
		t.Helper()
		nrec := len(c.records())
		assert.ErrorIs(t, escLateRead(t, f), syscall.EACCES, rel)
		recs := c.records()[nrec:]
		want := escRecord{kind: ledger.KindDenied, path: rel, op: "read", detail: escNoLongerReadable}
		assert.True(t, escHasRecord(recs, want), escFmtRecords(recs))
		assert.Contains(t, escLastError(t, v), "read "+rel+": "+escNoLongerReadable)
		noRead(t, nrec, rel)
	}

	ro, err := os.Open(p("proposal.md")) // read-only for this grant
	require.NoError(t, err)
	t.Cleanup(func() { ro.Close() })
	rw, err := os.OpenFile(p("scratch/mine.md"), os.O_RDWR, 0) // writable
	require.NoError(t, err)
	t.Cleanup(func() { rw.Close() })
	// A shared read-only mapping of the read-only file, read once, in
	// another process.
	mapped := escMapFileRO(t, p("proposal.md"))
	b, err := mapped.readMapped()
	require.NoError(t, err)
	require.Equal(t, readFile(t, backing("proposal.md"))[:len(b)], string(b))
	// A handle taken while the file is visible; the open descriptor
	// keeps its inode in the kernel's cache after the revocation.
	handle, _, err := unix.NameToHandleAt(unix.AT_FDCWD, p("proposal.md"), 0)
	require.NoError(t, err)
	out, code := escShell(t, v.dir, "ls -a")
	require.Equal(t, 0, code)
	require.Contains(t, out, "proposal.md")

	// First the grant narrows: scratch/later.md and scratch/later-rw.md,
	// looked up and held open while visible, become hidden.
	later, err := os.Open(p("scratch/later.md"))
	require.NoError(t, err)
	t.Cleanup(func() { later.Close() })
	laterRW, err := os.OpenFile(p("scratch/later-rw.md"), os.O_RDWR, 0)
	require.NoError(t, err)
	t.Cleanup(func() { laterRW.Close() })
	laterHandle, _, err := unix.NameToHandleAt(unix.AT_FDCWD, p("scratch/later.md"), 0)
	require.NoError(t, err)
	return &escRevoke{
		c: c, g: g, v: v, backing: backing, noRead: noRead, refusedRead: refusedRead, deniedRead: deniedRead,
		ro: ro, rw: rw, mapped: mapped, handle: handle, later: later, laterRW: laterRW, laterHandle: laterHandle,
	}
}

// narrow hides scratch/later.md and scratch/later-rw.md, then rewrites them on
// the backing folder.
func (rv *escRevoke) narrow(t *testing.T) {
	c, g, v, backing := rv.c, rv.g, rv.v, rv.backing
	g.ForbiddenRead = append(g.ForbiddenRead, "scratch/later.md", "scratch/later-rw.md")
	c.writeGrant(g)
	v.m.ReloadGrant() // the grant watcher does the same; here it is synchronous
	// Written on the backing folder after the change: no descriptor
	// opened before it may return these bytes.
	require.NoError(t,
		os.WriteFile(backing("scratch/later.md"), []byte(escSecret+" (written after the narrowing)\n"), 0o644))
	require.NoError(t,
		os.WriteFile(backing("scratch/later-rw.md"), []byte(escSecret+" (written after the narrowing)\n"), 0o644))
}

// revoke revokes the grant, then rewrites proposal.md and scratch/mine.md on
// the backing folder.
func (rv *escRevoke) revoke(t *testing.T) {
	c, g, v, backing := rv.c, rv.g, rv.v, rv.backing
	// Then the grant is revoked, and the files rewritten on the backing
	// folder.
	g.Revoked = true
	c.writeGrant(g)
	v.m.ReloadGrant()
	require.NoError(t,
		os.WriteFile(backing("proposal.md"), []byte(escSecret+" (proposal rewritten after the revocation)\n"), 0o644))
	require.NoError(t,
		os.WriteFile(backing("scratch/mine.md"), []byte(escSecret+" (mine rewritten after the revocation)\n"), 0o644))
}

// escNarrowedGrantChecks: what the narrowed grant does to the names,
// descriptors and handles the agent held.
func escNarrowedGrantChecks(t *testing.T, rv *escRevoke) {
	c, v, p, backing, noRead, refusedRead := rv.c, rv.v, rv.v.path, rv.backing, rv.noRead, rv.refusedRead
	deniedRead, ro, rw, mapped, later, laterRW := rv.deniedRead, rv.ro, rv.rw, rv.mapped, rv.later, rv.laterRW
	laterHandle := rv.laterHandle
	t.Run("a name hidden by a narrowed grant vanishes at once", func(t *testing.T) {
		last := escLastError(t, v)
		nrec := len(c.records())
		_, err := os.Stat(p("scratch/later.md"))
		assert.ErrorIs(t, err, syscall.ENOENT)
		out, code := escShell(t, v.dir, "ls -a scratch")
		require.Equal(t, 0, code, out)
		assert.NotContains(t, out, "later")
		assert.Contains(t, out, "mine.md")
		recs := c.records()[nrec:]
		assert.True(t, escHasRecord(recs, escRecord{kind: ledger.KindDenied, path: "scratch/later.md", op: "lookup"}),
			escFmtRecords(recs))
		assert.Equal(t, last, escLastError(t, v), "hidden names are refused silently")
	})
	t.Run("reopening the newly hidden file through /proc/self/fd is refused and recorded", func(t *testing.T) {
		last := escLastError(t, v)
		nrec := len(c.records())
		err := escReadErr(fmt.Sprintf("/proc/self/fd/%d", later.Fd()))
		assert.ErrorIs(t, err, syscall.ENOENT)
		recs := c.records()[nrec:]
		want := escRecord{kind: ledger.KindDenied, path: "scratch/later.md", op: "open", detail: "hidden by grant"}
		assert.True(t, escHasRecord(recs, want), escFmtRecords(recs))
		assert.Equal(t, last, escLastError(t, v), "hidden names are refused silently")
		noRead(t, nrec, "scratch/later.md")
	})
	t.Run("open_by_handle_at of a handle taken before the narrowing is refused, recorded, silently",
		func(t *testing.T) {
			last := escLastError(t, v)
			nrec := len(c.records())
			assert.ErrorIs(t, escOpenByHandle(v.dir, laterHandle), syscall.ENOENT)
			recs := c.records()[nrec:]
			want := escRecord{kind: ledger.KindDenied, path: "scratch/later.md", op: "open", detail: "hidden by grant"}
			assert.True(t, escHasRecord(recs, want), escFmtRecords(recs))
			assert.Equal(t, last, escLastError(t, v), "hidden names are refused silently")
			noRead(t, nrec, "scratch/later.md")
		})
	t.Run("a read-only descriptor opened before the narrowing refuses its next reads", func(t *testing.T) {
		refusedRead(t, later, "scratch/later.md")
		refusedRead(t, later, "scratch/later.md")
		n, err := later.Read(make([]byte, 256))
		assert.Error(t, err)
		assert.Zero(t, n)
	})
	t.Run("a read-only descriptor opened before the narrowing answers EACCES, recorded", func(t *testing.T) {
		deniedRead(t, later, "scratch/later.md")
	})
	t.Run("an O_RDWR descriptor opened before the narrowing answers EACCES, recorded", func(t *testing.T) {
		deniedRead(t, laterRW, "scratch/later-rw.md")
	})
	t.Run("an O_RDWR descriptor opened before the narrowing refuses reads and writes", func(t *testing.T) {
		before := escTree(t, c.folder)
		refusedRead(t, laterRW, "scratch/later-rw.md")
		nrec := len(c.records())
		_, err := laterRW.WriteAt([]byte("changed"), 0)
		assert.ErrorIs(t, err, syscall.EACCES)
		escRequireSameTree(t, before, escTree(t, c.folder))
		recs := c.records()[nrec:]
		want := escRecord{kind: ledger.KindDenied, path: "scratch/later-rw.md", op: "write", detail: escNotWritable}
		assert.True(t, escHasRecord(recs, want), escFmtRecords(recs))
		assert.Contains(t, escLastError(t, v), "write scratch/later-rw.md: not writable under the grant")
	})
	t.Run("other names, descriptors and mappings stay usable", func(t *testing.T) {
		assert.Equal(t, "mine\n", readFile(t, p("scratch/mine.md")))
		b := make([]byte, 64)
		n, err := rw.ReadAt(b, 0)
		if err != nil {
			assert.ErrorIs(t, err, io.EOF)
		}
		assert.Equal(t, "mine\n", string(b[:n]))
		n, err = ro.ReadAt(b, 0)
		if err != nil {
			assert.ErrorIs(t, err, io.EOF)
		}
		assert.Equal(t, readFile(t, backing("proposal.md"))[:n], string(b[:n]))
		m, err := mapped.readMapped()
		require.NoError(t, err)
		assert.Equal(t, readFile(t, backing("proposal.md"))[:len(m)], string(m))
	})
}

// escRevokedGrantChecks: what the revoked grant does to everything the agent
// held, and that the backing folder did not change.
func escRevokedGrantChecks(t *testing.T, rv *escRevoke) {
	c, v, p, noRead, refusedRead := rv.c, rv.v, rv.v.path, rv.noRead, rv.refusedRead
	deniedRead, ro, rw, mapped, handle := rv.deniedRead, rv.ro, rv.rw, rv.mapped, rv.handle
	before := escTree(t, c.folder)

	t.Run("ls shows nothing at once", func(t *testing.T) {
		out, code := escShell(t, v.dir, "ls -a")
		require.Equal(t, 0, code, out)
		assert.Equal(t, ".\n..\n", out)
	})
	t.Run("new opens answer ENOENT", func(t *testing.T) {
		last := escLastError(t, v)
		for _, name := range []string{"proposal.md", "scratch/mine.md", "events.jsonl", "review.md"} {
			_, err := os.Open(p(name))
			assert.ErrorIs(t, err, syscall.ENOENT, name)
		}
		assert.Equal(t, last, escLastError(t, v), "hidden names are refused silently")
	})
	t.Run("a revoked name vanishes at once and its lookups are recorded", func(t *testing.T) {
		nrec := len(c.records())
		_, err := os.Stat(p("proposal.md"))
		assert.ErrorIs(t, err, syscall.ENOENT)
		_, err = os.Open(p("review.md"))
		assert.ErrorIs(t, err, syscall.ENOENT)
		recs := c.records()[nrec:]
		assert.True(t, escHasRecord(recs, escRecord{kind: ledger.KindDenied, path: "proposal.md", op: "lookup"}),
			escFmtRecords(recs))
		assert.True(t, escHasRecord(recs, escRecord{kind: ledger.KindDenied, path: "review.md", op: "lookup"}),
			escFmtRecords(recs))
	})
	t.Run("writes through a descriptor opened before are refused", func(t *testing.T) {
		nrec := len(c.records())
		_, err := rw.WriteAt([]byte("changed"), 0)
		assert.ErrorIs(t, err, syscall.EACCES)
		assert.True(t,
			escHasRecord(c.records()[nrec:], escRecord{kind: ledger.KindDenied, path: "scratch/mine.md", op: "write"}))
		assert.Contains(t, escLastError(t, v), "write scratch/mine.md: not writable under the grant")
		escRequireSameTree(t, before, escTree(t, c.folder))
	})
	t.Run("reads through a descriptor opened before are refused and return nothing written after the revocation",
		func(t *testing.T) {
			// The read-only descriptor too: the daemon serves it, and checks
			// the grant in force before each read.
			refusedRead(t, ro, "proposal.md")
			refusedRead(t, rw, "scratch/mine.md")
		})
	t.Run("reads through a descriptor opened before answer EACCES, recorded", func(t *testing.T) {
		deniedRead(t, ro, "proposal.md")
		deniedRead(t, rw, "scratch/mine.md")
	})
	t.Run("a shared mapping made before faults again and is refused", func(t *testing.T) {
		nrec := len(c.records())
		m, err := mapped.readMapped()
		assert.NotContains(t, string(m), escSecret, "the mapping shows bytes written after the revocation")
		// The refused fault is a SIGBUS, which ends the mapping process.
		assert.Error(t, err, "the mapping still reads %q", m)
		noRead(t, nrec, "proposal.md")
	})
	t.Run("open_by_handle_at of a handle taken before is refused", func(t *testing.T) {
		err := escOpenByHandle(v.dir, handle)
		assert.ErrorIs(t, err, syscall.ENOENT)
	})
	t.Run("open_by_handle_at of a handle taken before is recorded, silently", func(t *testing.T) {
		last := escLastError(t, v)
		nrec := len(c.records())
		assert.ErrorIs(t, escOpenByHandle(v.dir, handle), syscall.ENOENT)
		recs := c.records()[nrec:]
		want := escRecord{kind: ledger.KindDenied, path: "proposal.md", op: "open", detail: "hidden by grant"}
		assert.True(t, escHasRecord(recs, want), escFmtRecords(recs))
		assert.Equal(t, last, escLastError(t, v), "hidden names are refused silently")
		noRead(t, nrec, "proposal.md")
	})
	t.Run("forged handles for every node id open nothing but the root and .acpfs", func(t *testing.T) {
		var root unix.Stat_t
		require.NoError(t, unix.Stat(v.dir, &root))
		gen := binary.LittleEndian.Uint32(handle.Bytes()[8:])
		mfd, err := unix.Open(v.dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		require.NoError(t, err)
		defer unix.Close(mfd)
		for id := uint64(1); id <= 64; id++ {
			fd, err := unix.OpenByHandleAt(mfd, escHandle(id, gen), unix.O_RDONLY|unix.O_CLOEXEC)
			if err != nil {
				continue
			}
			var st unix.Stat_t
			require.NoError(t, unix.Fstat(fd, &st))
			unix.Close(fd)
			assert.True(t, st.Ino == root.Ino || st.Ino >= 1<<62, "node %d opened inode %d", id, st.Ino)
		}
	})
	t.Run("the backing folder did not change", func(t *testing.T) {
		escRequireSameTree(t, before, escTree(t, c.folder))
	})
}

// TestEscapeRevokedGrantPassthrough: the same revocation in a view that
// lets the kernel read read-only files straight from the backing folder
// (FUSE passthrough). Such reads never reach the daemon.
func TestEscapeRevokedGrantPassthrough(t *testing.T) {
	c := newCollab(t)
	g := escWriterGrant()
	v := c.mountView(g, escWithPassthrough())
	p := v.path
	ro, err := os.Open(p("proposal.md"))
	require.NoError(t, err)
	t.Cleanup(func() { ro.Close() })
	mapped := escMapFileRO(t, p("proposal.md"))
	_, err = mapped.readMapped()
	require.NoError(t, err)
	nrec := len(c.records())
	g.Revoked = true
	c.writeGrant(g)
	v.m.ReloadGrant()
	require.NoError(t,
		os.WriteFile(filepath.Join(c.folder, "proposal.md"),
			[]byte(escSecret+" (proposal rewritten after the revocation)\n"), 0o644))

	t.Run("a descriptor the daemon cannot stop is in the ledger at the change", func(t *testing.T) {
		recs := c.records()[nrec:]
		assert.True(t, escHasRecord(recs, escRecord{kind: ledger.KindRead, path: "proposal.md", op: "passthrough"}),
			escFmtRecords(recs))
	})
	t.Run("new opens answer ENOENT", func(t *testing.T) {
		_, err := os.Open(p("proposal.md"))
		assert.ErrorIs(t, err, syscall.ENOENT)
	})
	t.Run("what a passthrough descriptor reads later is covered by that record", func(t *testing.T) {
		// The documented trade-off of passthrough (docs/threat-model.md):
		// the kernel reads the backing file without the daemon, and
		// nothing the daemon can do stops a descriptor opened earlier.
		// The read record written at the change is what the audit counts.
		b, err := io.ReadAll(io.NewSectionReader(ro, 0, 1<<16))
		require.NoError(t, err)
		if strings.Contains(string(b), escSecret) {
			recs := c.records()[nrec:]
			assert.True(t, escHasRecord(recs, escRecord{kind: ledger.KindRead, path: "proposal.md", op: "passthrough"}))
		}
	})
}
