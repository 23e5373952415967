package view

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/protocol"
)

// nameCase is one operation on a name: the errno it answers and the
// record it leaves (kind "" for none).
type nameCase struct {
	name  string
	do    func() syscall.Errno
	errno syscall.Errno
	kind  ledger.Kind
	op    ledger.Op
	path  string
}

// runNameCases runs each case and checks its answer and the records it
// left: the one of its kind, op and path, and nothing of that path
// otherwise.
func runNameCases(t *testing.T, c *collab, agent string, cases []nameCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			seq := c.lastSeq()
			assert.Equal(t, tc.errno, tc.do())
			recs := c.since(seq)
			if tc.kind == "" {
				for _, r := range recs {
					assert.NotEqual(t, tc.path, r.Path, "no record: %v", kinds(recs))
				}
				return
			}
			assert.Len(t, recordsOf(recs, tc.kind, agent, tc.path, tc.op), 1, "%v", kinds(recs))
		})
	}
}

// TestAttributes: getattr, setattr (chmod, chown, times, truncate),
// statfs and extended attributes through the core, each answered and
// recorded as the contract says.
func TestAttributes(t *testing.T) {
	c := newCollab(t)
	c.write("scratch/f.md", "0123456789")
	require.NoError(t, os.MkdirAll(c.in("scratch/dir"), 0o755))
	require.NoError(t, os.Symlink("f.md", c.in("scratch/link")))
	f := c.newView(ownerGrant())
	ctx := context.Background()
	attr := func(rel string) unix.Stat_t {
		st, errno := f.Getattr(ctx, rel, nil)
		require.Zero(t, errno)
		return st
	}
	setattr := func(rel string, in SetAttr) func() syscall.Errno {
		return func() syscall.Errno { _, e := f.Setattr(ctx, rel, nil, &in); return e }
	}
	uid, gid := uint32(os.Getuid()), uint32(os.Getgid())
	when := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	runNameCases(t, c, "alice", []nameCase{
		{"getattr of a visible file", func() syscall.Errno { _, e := f.Getattr(ctx, "docs/a.md", nil); return e }, 0, "", "", "docs/a.md"},
		{"getattr of a hidden file", func() syscall.Errno { _, e := f.Getattr(ctx, "oracle/answer.md", nil); return e }, syscall.ENOENT, ledger.KindDenied, ledger.OpGetattr, "oracle/answer.md"},
		{"getattr of nothing", func() syscall.Errno { _, e := f.Getattr(ctx, "scratch/none", nil); return e }, syscall.ENOENT, "", "", "scratch/none"},
		{"chmod", setattr("scratch/f.md", SetAttr{HasMode: true, Mode: 0o600}), 0, ledger.KindWrite, ledger.OpSetattr, "scratch/f.md"},
		{"chmod of a directory", setattr("scratch/dir", SetAttr{HasMode: true, Mode: 0o700}), 0, ledger.KindWrite, ledger.OpSetattr, "scratch/dir"},
		{"chown to the owner it has", setattr("scratch/f.md", SetAttr{HasUID: true, UID: uid, HasGID: true, GID: gid}), 0, ledger.KindWrite, ledger.OpSetattr, "scratch/f.md"},
		{"times only", setattr("scratch/f.md", SetAttr{HasMTime: true, MTime: when, HasATime: true, ATime: when}), 0, ledger.KindWrite, ledger.OpSetattr, "scratch/f.md"},
		{"times only again: counted", setattr("scratch/f.md", SetAttr{HasMTime: true, MTimeNow: true}), 0, "", "", "scratch/f.md"},
		{"times of a symlink", setattr("scratch/link", SetAttr{HasATime: true, ATimeNow: true}), 0, ledger.KindWrite, ledger.OpSetattr, "scratch/link"},
		{"truncate", setattr("scratch/f.md", SetAttr{HasSize: true, Size: 4}), 0, ledger.KindWrite, ledger.OpTruncate, "scratch/f.md"},
		{"truncate of a directory", setattr("scratch/dir", SetAttr{HasSize: true}), syscall.EISDIR, ledger.KindWrite, ledger.OpTruncate, "scratch/dir"},
		{"chmod of a read-only file", setattr("docs/a.md", SetAttr{HasMode: true, Mode: 0o777}), syscall.EACCES, ledger.KindDenied, ledger.OpSetattr, "docs/a.md"},
		{"chmod of protocol.json", setattr(protocol.ProtocolFile, SetAttr{HasMode: true, Mode: 0o777}), syscall.EPERM, ledger.KindDenied, ledger.OpSetattr, protocol.ProtocolFile},
		{"truncate of events.jsonl", setattr(protocol.EventsFile, SetAttr{HasSize: true}), syscall.EPERM, ledger.KindAppendRejected, ledger.OpTruncate, protocol.EventsFile},
		{"setxattr", func() syscall.Errno { return f.Setxattr(ctx, "scratch/f.md", "user.acpfs", []byte("1"), 0) }, 0, ledger.KindWrite, ledger.OpSetxattr, "scratch/f.md"},
		{"removexattr", func() syscall.Errno { return f.Removexattr(ctx, "scratch/f.md", "user.acpfs") }, 0, ledger.KindWrite, ledger.OpRemovexattr, "scratch/f.md"},
		{"removexattr of one it does not have", func() syscall.Errno { return f.Removexattr(ctx, "scratch/dir", "user.none") }, syscall.ENODATA, ledger.KindWrite, ledger.OpRemovexattr, "scratch/dir"},
		{"removexattr of a read-only file", func() syscall.Errno { return f.Removexattr(ctx, "docs/a.md", "user.x") }, syscall.EACCES, ledger.KindDenied, ledger.OpRemovexattr, "docs/a.md"},
		{"removexattr of events.jsonl", func() syscall.Errno { return f.Removexattr(ctx, protocol.EventsFile, "user.x") }, syscall.EPERM, ledger.KindDenied, ledger.OpRemovexattr, protocol.EventsFile},
	})
	st := attr("scratch/f.md")
	assert.EqualValues(t, 0o600, st.Mode&0o7777)
	assert.EqualValues(t, 4, st.Size)
	assert.Equal(t, "0123", c.read("scratch/f.md"))
	assert.EqualValues(t, 1, attr("scratch").Nlink, "a directory's link count is the view's own")
	assert.EqualValues(t, len(protocolJSON(t, f)), attr(protocol.ProtocolFile).Size, "protocol.json is the size of what is served")
	assert.Equal(t, time.Duration(volatileTimeout), f.AttrTimeout(protocol.EventsFile))
	assert.Equal(t, ShortTimeout, f.AttrTimeout("docs/a.md"), "no watcher vouches for the folder")

	sfs, errno := f.Statfs()
	require.Zero(t, errno)
	assert.Positive(t, sfs.Bsize)

	// An open protocol.json's attributes are those of what it serves.
	pj, _, errno := f.Open(ctx, newFakeNode(protocol.ProtocolFile), protocol.ProtocolFile, syscall.O_RDONLY)
	require.Zero(t, errno)
	pst, errno := f.Getattr(ctx, protocol.ProtocolFile, pj)
	require.Zero(t, errno)
	assert.EqualValues(t, len(protocolJSON(t, f)), pst.Size)
	require.Zero(t, pj.Release(ctx))
}

func protocolJSON(t *testing.T, f *View) []byte {
	t.Helper()
	b, err := f.log.ProtocolJSON()
	require.NoError(t, err)
	return b
}

// TestNameOperations: mknod, rmdir, unlink, readlink and link through
// the core.
func TestNameOperations(t *testing.T) {
	c := newCollab(t)
	require.NoError(t, os.MkdirAll(c.in("scratch/empty"), 0o755))
	require.NoError(t, os.MkdirAll(c.in("scratch/full"), 0o755))
	c.write("scratch/full/x", "x")
	require.NoError(t, os.Symlink("../docs/a.md", c.in("scratch/good")))
	require.NoError(t, os.Symlink("../oracle/answer.md", c.in("scratch/bad")))
	f := c.newView(ownerGrant())
	ctx := context.Background()
	readlink := func(rel, want string) func() syscall.Errno {
		return func() syscall.Errno {
			got, e := f.Readlink(ctx, rel)
			if e == 0 && string(got) != want {
				return syscall.EBADMSG
			}
			return e
		}
	}
	runNameCases(t, c, "alice", []nameCase{
		{"mknod of a regular file", func() syscall.Errno { _, e := f.Mknod(ctx, "scratch/reg", syscall.S_IFREG|0o640); return e }, 0, ledger.KindWrite, ledger.OpMknod, "scratch/reg"},
		{"mknod of a socket", func() syscall.Errno { _, e := f.Mknod(ctx, "scratch/sock", syscall.S_IFSOCK|0o640); return e }, syscall.EPERM, ledger.KindDenied, ledger.OpMknod, "scratch/sock"},
		{"mknod where it may not write", func() syscall.Errno { _, e := f.Mknod(ctx, "docs/reg", syscall.S_IFREG|0o640); return e }, syscall.EACCES, ledger.KindDenied, ledger.OpMknod, "docs/reg"},
		{"rmdir of an empty directory", func() syscall.Errno { return f.Rmdir(ctx, "scratch/empty") }, 0, ledger.KindWrite, ledger.OpRmdir, "scratch/empty"},
		{"rmdir of a full one: recorded, then refused by the folder", func() syscall.Errno { return f.Rmdir(ctx, "scratch/full") }, syscall.ENOTEMPTY, ledger.KindWrite, ledger.OpRmdir, "scratch/full"},
		{"rmdir of a read-only directory", func() syscall.Errno { return f.Rmdir(ctx, "docs") }, syscall.EACCES, ledger.KindDenied, ledger.OpRmdir, "docs"},
		{"rmdir of a hidden one", func() syscall.Errno { return f.Rmdir(ctx, "oracle") }, syscall.ENOENT, ledger.KindDenied, ledger.OpRmdir, "oracle"},
		{"rmdir of the deliverables' directory", func() syscall.Errno { return f.Rmdir(ctx, "deliverables") }, syscall.EPERM, ledger.KindDenied, ledger.OpRmdir, "deliverables"},
		{"unlink of a directory", func() syscall.Errno { return f.Unlink(ctx, "scratch/full") }, syscall.EISDIR, "", "", "scratch/full"},
		{"unlink of a required document", func() syscall.Errno { return f.Unlink(ctx, "proposal.md") }, syscall.EPERM, ledger.KindDenied, ledger.OpUnlink, "proposal.md"},
		{"unlink of the primary deliverable", func() syscall.Errno { return f.Unlink(ctx, primaryRef) }, syscall.EPERM, ledger.KindDenied, ledger.OpUnlink, primaryRef},
		{"readlink of a symlink", readlink("scratch/good", "../docs/a.md"), 0, "", "", "scratch/good"},
		{"readlink of a symlink to a hidden file", readlink("scratch/bad", ""), syscall.ENOENT, ledger.KindDenied, ledger.OpReadlink, "scratch/bad"},
		{"link", func() syscall.Errno { return f.Link(ctx, "scratch/l2") }, syscall.EACCES, ledger.KindDenied, ledger.OpLink, "scratch/l2"},
		{"link onto the oracle", func() syscall.Errno { return f.Link(ctx, "oracle/l2") }, syscall.EACCES, ledger.KindDenied, ledger.OpLink, "oracle/l2"},
		{"unlink of the symlink", func() syscall.Errno { return f.Unlink(ctx, "scratch/good") }, 0, ledger.KindWrite, ledger.OpUnlink, "scratch/good"},
	})
	assert.NoDirExists(t, c.in("scratch/empty"))
	assert.DirExists(t, c.in("scratch/full"))
	assert.NoFileExists(t, c.in("scratch/sock"))
	assert.FileExists(t, c.in("scratch/reg"))
}

// TestDirectoryHandles: a listing is served with the view's own offsets,
// rewound and read again, READDIRPLUS answered from it; opendir of a
// file is refused.
func TestDirectoryHandles(t *testing.T) {
	c := newCollab(t)
	c.write("scratch/one", "1")
	f := c.newView(ownerGrant())
	ctx := context.Background()
	d, keep, errno := f.Opendir(ctx, "scratch")
	require.Zero(t, errno)
	assert.False(t, keep, "no watcher: the kernel keeps no listing")
	var offs []uint64
	for {
		e, ok, errno := d.Next(ctx)
		require.Zero(t, errno)
		if !ok {
			break
		}
		offs = append(offs, e.Off)
		if e.Name == "one" {
			got, ok := d.Last("one")
			require.True(t, ok)
			assert.EqualValues(t, 1, got.Attr.Size)
			_, ok = d.Last("other")
			assert.False(t, ok)
		}
	}
	assert.Equal(t, []uint64{1, 2, 3}, offs)
	c.write("scratch/two", "2")
	d.Seek(0)
	n := 0
	for {
		_, ok, _ := d.Next(ctx)
		if !ok {
			break
		}
		n++
	}
	assert.Equal(t, 4, n, "a rewind lists the directory again")
	d.Seek(2)
	e, ok, _ := d.Next(ctx)
	require.True(t, ok)
	assert.EqualValues(t, 3, e.Off)
	require.Zero(t, d.Fsync(ctx))

	_, _, errno = f.Opendir(ctx, "docs/a.md")
	assert.Equal(t, syscall.ENOTDIR, errno)
	_, _, errno = f.Opendir(ctx, "oracle")
	assert.Equal(t, syscall.ENOENT, errno)
}

// TestQuotaRefunds: bytes charged for a growth that did not happen are
// given back.
func TestQuotaRefunds(t *testing.T) {
	c := newCollab(t)
	f := c.newView(ownerGrant())
	ctx := context.Background()
	_, fh, errno := f.Create(ctx, "scratch/q", syscall.O_RDWR, 0o644, nil)
	require.Zero(t, errno)
	defer fh.Release(ctx)
	_, errno = fh.Write(ctx, []byte("12345"), 0)
	require.Zero(t, errno)
	require.EqualValues(t, 5, f.quota.bytes.Load())

	// A hole punched without FALLOC_FL_KEEP_SIZE is refused by the
	// kernel after the view charged its growth.
	assert.NotZero(t, fh.Allocate(ctx, 0, 100, unix.FALLOC_FL_PUNCH_HOLE))
	assert.EqualValues(t, 5, f.quota.bytes.Load())
	require.Zero(t, fh.Allocate(ctx, 0, 100, 0))
	assert.EqualValues(t, 100, f.quota.bytes.Load())

	ro, _, errno := f.Open(ctx, nil, "scratch/q", syscall.O_RDONLY)
	require.Zero(t, errno)
	defer ro.Release(ctx)
	_, errno = f.Setattr(ctx, "scratch/q", ro, &SetAttr{HasSize: true, Size: 1000})
	assert.NotZero(t, errno, "a truncate through a descriptor opened for reading")
	assert.EqualValues(t, 100, f.quota.bytes.Load())
}
