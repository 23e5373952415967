package view

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/ledger"
)

// TestOpsWithoutFUSE drives the operations of a view as the adapter
// calls them, without a mount: each answers as the contract says, and
// the ledger's last record says what was refused or changed.
func TestOpsWithoutFUSE(t *testing.T) {
	f, folder, ledgerPath := checkpointFS(t)
	ctx := context.Background()
	in := func(p string) string { return filepath.Join(folder, p) }
	kindOf := func() string { return string(lastRecord(t, ledgerPath).Kind) }

	cases := []struct {
		name  string
		do    func() syscall.Errno
		errno syscall.Errno
		kind  string // the last record's kind, "" to skip
	}{
		{"lookup of a forbidden file", func() syscall.Errno { _, e := f.Lookup(ctx, "oracle/answer.md"); return e }, syscall.ENOENT, string(ledger.KindDenied)},
		{"lookup of a readable file", func() syscall.Errno { _, e := f.Lookup(ctx, "docs/a.md"); return e }, 0, ""},
		{"lookup of .acpfs", func() syscall.Errno {
			e, errno := f.Lookup(ctx, ControlDir)
			if errno == 0 && !e.Control {
				return syscall.EINVAL
			}
			return errno
		}, 0, ""},
		{"mkdir where the grant writes", func() syscall.Errno { _, e := f.Mkdir(ctx, "scratch/new", 0o755); return e }, 0, string(ledger.KindWrite)},
		{"mkdir where it does not", func() syscall.Errno { _, e := f.Mkdir(ctx, "docs/new", 0o755); return e }, syscall.EACCES, string(ledger.KindDenied)},
		{"mknod of a fifo", func() syscall.Errno { _, e := f.Mknod(ctx, "scratch/fifo", syscall.S_IFIFO|0o644); return e }, syscall.EPERM, string(ledger.KindDenied)},
		{"symlink to the oracle", func() syscall.Errno { _, e := f.Symlink(ctx, "scratch/l", "../oracle/answer.md"); return e }, syscall.EACCES, string(ledger.KindDenied)},
		{"symlink out of the folder", func() syscall.Errno { _, e := f.Symlink(ctx, "scratch/l", "../../x"); return e }, syscall.EACCES, string(ledger.KindDenied)},
		{"symlink to a shown file", func() syscall.Errno { _, e := f.Symlink(ctx, "scratch/l", "../docs/a.md"); return e }, 0, string(ledger.KindWrite)},
		{"unlink of a read-only file", func() syscall.Errno { return f.Unlink(ctx, "docs/a.md") }, syscall.EACCES, string(ledger.KindDenied)},
		{"unlink of events.jsonl", func() syscall.Errno { return f.Unlink(ctx, "events.jsonl") }, syscall.EPERM, string(ledger.KindDenied)},
		{"rename onto the oracle", func() syscall.Errno { return f.Rename(ctx, "scratch/d/f.md", "oracle/f.md", 0) }, syscall.EACCES, string(ledger.KindDenied)},
		{"rename with a whiteout", func() syscall.Errno { return f.Rename(ctx, "scratch/d/f.md", "scratch/g.md", 1<<2) }, syscall.EINVAL, ""},
		{"rename within the grant", func() syscall.Errno { return f.Rename(ctx, "scratch/d/f.md", "scratch/g.md", 0) }, 0, string(ledger.KindWrite)},
		{"hard link", func() syscall.Errno { return f.Link(ctx, "scratch/h") }, syscall.EACCES, string(ledger.KindDenied)},
		{"readlink of a file", func() syscall.Errno { _, e := f.Readlink(ctx, "docs/a.md"); return e }, syscall.EINVAL, ""},
		{"setxattr of a read-only file", func() syscall.Errno { return f.Setxattr(ctx, "docs/a.md", "user.x", []byte("1"), 0) }, syscall.EACCES, string(ledger.KindDenied)},
		{"truncate of a read-only file", func() syscall.Errno {
			_, e := f.Setattr(ctx, "docs/a.md", nil, &SetAttr{Size: 0, HasSize: true})
			return e
		}, syscall.EACCES, string(ledger.KindDenied)},
		{"create of a name that is not UTF-8", func() syscall.Errno {
			_, _, e := f.Create(ctx, "scratch/\xff.md", uint32(os.O_RDWR), 0o644, nil)
			return e
		}, syscall.EILSEQ, string(ledger.KindDenied)},
		{"lookup of a planted name that is not UTF-8", func() syscall.Errno {
			require.NoError(t, os.WriteFile(in("scratch/\xfe.md"), []byte("x"), 0o644))
			_, e := f.Lookup(ctx, "scratch/\xfe.md")
			return e
		}, syscall.ENOENT, string(ledger.KindDenied)},
		{"rmdir of the folder", func() syscall.Errno { return f.Rmdir(ctx, "") }, syscall.EACCES, string(ledger.KindDenied)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.errno, tc.do())
			if tc.kind != "" {
				assert.Equal(t, tc.kind, kindOf())
			}
		})
	}
	_, err := os.Stat(in("scratch/g.md"))
	assert.NoError(t, err, "the allowed rename happened")
	assert.FileExists(t, in("docs/a.md"), "the refused unlink did not")
}

// TestFilesWithoutFUSE: files created, written, read back and listed
// through the core, and a refused append that leaves events.jsonl as it
// was.
func TestFilesWithoutFUSE(t *testing.T) {
	f, folder, _ := checkpointFS(t)
	ctx := context.Background()

	_, file, errno := f.Create(ctx, "scratch/n.md", uint32(os.O_RDWR), 0o644, nil)
	require.Zero(t, errno)
	n, errno := file.Write(ctx, []byte("hello"), 0)
	require.Zero(t, errno)
	assert.EqualValues(t, 5, n)
	got, errno := file.Read(ctx, make([]byte, 16), 0)
	require.Zero(t, errno)
	assert.Equal(t, "hello", string(got))
	st, errno := file.Getattr(ctx)
	require.Zero(t, errno)
	assert.EqualValues(t, 5, st.Size)
	require.Zero(t, file.Flush(ctx))
	require.Zero(t, file.Release(ctx))

	_, _, errno = f.Create(ctx, "docs/n.md", uint32(os.O_RDWR), 0o644, nil)
	assert.Equal(t, syscall.EACCES, errno)
	_, _, errno = f.Open(ctx, nil, "oracle/answer.md", uint32(os.O_RDONLY))
	assert.Equal(t, syscall.ENOENT, errno)

	d, _, errno := f.Opendir(ctx, "scratch")
	require.Zero(t, errno)
	var names []string
	for {
		e, ok, errno := d.Next(ctx)
		require.Zero(t, errno)
		if !ok {
			break
		}
		names = append(names, e.Name)
	}
	assert.ElementsMatch(t, []string{".", "..", "d", "n.md"}, names)
	root, _, errno := f.Opendir(ctx, "")
	require.Zero(t, errno)
	for {
		e, ok, _ := root.Next(ctx)
		if !ok {
			break
		}
		assert.NotEqual(t, "oracle", e.Name, "the forbidden directory is not listed")
	}

	events := filepath.Join(folder, "events.jsonl")
	before, err := os.ReadFile(events)
	require.NoError(t, err)
	ev, _, errno := f.Open(ctx, nil, "events.jsonl", uint32(os.O_WRONLY|os.O_APPEND))
	require.Zero(t, errno)
	_, errno = ev.Write(ctx, []byte("{not json}\n"), 0)
	assert.Equal(t, syscall.EINVAL, errno)
	_, errno = ev.Write(ctx, []byte(`{"seq":99,"event":"nothing_like_it","from":"alice"}`+"\n"), 0)
	assert.NotZero(t, errno)
	require.Zero(t, ev.Release(ctx))
	after, err := os.ReadFile(events)
	require.NoError(t, err)
	assert.Equal(t, before, after, "refused appends change nothing")
	assert.Contains(t, f.LastError(), "append events.jsonl")
}
