package view

import (
	"bytes"
	"context"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/protocol"
)

// TestAppendsThroughViewsToCompletion: the whole collaboration appended
// line by line through the two agents' views, each line recorded as
// accepted before it lands, protocol.json following at once; then the
// primary deliverable is frozen for every view.
func TestAppendsThroughViewsToCompletion(t *testing.T) {
	c := newCollab(t)
	views := map[string]*View{"alice": c.newView(ownerGrant()), "bob": c.newView(reviewerGrant())}
	for i, s := range acpSteps() {
		seq := i + 2
		before := c.lastSeq()
		_, err := appendVia(views[s.from], s.line(c, seq))
		require.NoError(t, err, "seq %d %s: %s", seq, s.event, views[s.from].LastError())
		assert.True(t, hasRecord(c.since(before), ledger.KindAppendAccepted, s.from, protocol.EventsFile, "append", ""), "seq %d recorded", seq)
		lines := strings.Count(c.read(protocol.EventsFile), "\n")
		assert.Equal(t, seq, lines)
	}
	ctx := context.Background()
	for _, f := range views {
		assert.True(t, f.frozen(primaryRef))
		pj, _, errno := f.Open(ctx, nil, protocol.ProtocolFile, syscall.O_RDONLY)
		require.Zero(t, errno)
		b, errno := pj.Read(ctx, make([]byte, 1<<16), 0)
		require.Zero(t, errno)
		assert.Contains(t, string(b), "completed")
		st, errno := pj.Getattr(ctx)
		require.Zero(t, errno)
		assert.EqualValues(t, len(b), st.Size, "protocol.json's size is that of the content served")
		require.Zero(t, pj.Release(ctx))
	}
	status, errno := views["alice"].statusText(ctx)
	require.Zero(t, errno)
	assert.Contains(t, string(status), "phase: completed")
	// .acpfs/wait returns at once: the collaboration ended.
	w, errno := views["bob"].waitTurn(ctx)
	require.Zero(t, errno)
	assert.True(t, bytes.HasPrefix(w, []byte("ready: ")), string(w))
	_ = os.Remove
}

// eventsCase is one way of writing to events.jsonl: writes (each with
// the errno and the count it must answer), then close.
type eventsCase struct {
	name   string
	agent  string
	writes func(next func() []byte) []eventsWrite
	flush  syscall.Errno
	lines  int         // lines added
	kind   ledger.Kind // a record the ledger must then hold ("" none)
}

type eventsWrite struct {
	data  []byte
	errno syscall.Errno
	n     int // -1: all of data
}

// TestEventsAppends: the events.jsonl row of the contract, write by
// write: lines buffered until their newline, a complete event left
// without one appended at close, a cut-off one refused at close, short
// writes for an accepted prefix, malformed, forged and over-long lines.
func TestEventsAppends(t *testing.T) {
	c := newCollab(t)
	views := map[string]*View{"alice": c.newView(ownerGrant()), "bob": c.newView(reviewerGrant())}
	steps := acpSteps()
	lines := func() int { return strings.Count(c.read(protocol.EventsFile), "\n") }
	// next is the line of the next step of the collaboration.
	next := func() []byte { n := lines(); return steps[n-1].line(c, n+1) }
	nl := func(b []byte) []byte { return append(append([]byte(nil), b...), '\n') }
	all := -1
	cases := []eventsCase{
		{name: "a line in two writes", agent: "alice", writes: func(next func() []byte) []eventsWrite {
			l := nl(next())
			return []eventsWrite{{l[:10], 0, all}, {l[10:], 0, all}}
		}, lines: 1, kind: ledger.KindAppendAccepted},
		{name: "a complete event without its newline, at close", agent: "alice", writes: func(next func() []byte) []eventsWrite {
			return []eventsWrite{{next(), 0, all}}
		}, lines: 1, kind: ledger.KindAppendAccepted},
		{name: "a cut-off event at close", agent: "bob", writes: func(next func() []byte) []eventsWrite {
			return []eventsWrite{{next()[:20], 0, all}}
		}, flush: syscall.EINVAL, kind: ledger.KindAppendRejected},
		{name: "malformed", agent: "bob", writes: func(func() []byte) []eventsWrite {
			return []eventsWrite{{[]byte("{not json}\n"), syscall.EINVAL, 0}}
		}, kind: ledger.KindAppendRejected},
		{name: "forged as the owner", agent: "bob", writes: func(next func() []byte) []eventsWrite {
			l := next()
			return []eventsWrite{{nl(bytes.Replace(l, []byte(`"from":"bob"`), []byte(`"from":"alice"`), 1)), syscall.EPERM, 0}}
		}, kind: ledger.KindAppendRejected},
		{name: "a stale seq", agent: "bob", writes: func(next func() []byte) []eventsWrite {
			l := next()
			return []eventsWrite{{nl(bytes.Replace(l, []byte(`"seq":4`), []byte(`"seq":2`), 1)), syscall.EPERM, 0}}
		}, kind: ledger.KindAppendRejected},
		{name: "an accepted line, then a refused one: a short write", agent: "bob", writes: func(next func() []byte) []eventsWrite {
			l := nl(next())
			return []eventsWrite{{append(append([]byte(nil), l...), "{oops}\n"...), 0, len(l)}, {[]byte("{oops}\n"), syscall.EINVAL, 0}}
		}, lines: 1, kind: ledger.KindAppendAccepted},
		{name: "a line over 1 MiB", agent: "alice", writes: func(func() []byte) []eventsWrite {
			big := bytes.Repeat([]byte("x"), maxLine+1)
			return []eventsWrite{{big, syscall.EINVAL, 0}, {[]byte("rest of it\n"), syscall.EINVAL, 0}}
		}, kind: ledger.KindAppendRejected},
		{name: "a line over 1 MiB in pieces", agent: "alice", writes: func(func() []byte) []eventsWrite {
			half := bytes.Repeat([]byte("y"), maxLine/2+1)
			return []eventsWrite{{half, 0, all}, {half, syscall.EINVAL, 0}}
		}, flush: syscall.EINVAL, kind: ledger.KindAppendRejected}, // the acknowledged half is lost: close says so
	}
	ctx := context.Background()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := views[tc.agent]
			before, seq := lines(), c.lastSeq()
			raw := c.read(protocol.EventsFile)
			fh, caching, errno := f.Open(ctx, nil, protocol.EventsFile, uint32(os.O_WRONLY|os.O_APPEND))
			require.Zero(t, errno)
			assert.Equal(t, CacheDirect, caching)
			for i, w := range tc.writes(next) {
				n, errno := fh.Write(ctx, w.data, 0)
				assert.Equal(t, w.errno, errno, "write %d: %s", i, f.LastError())
				want := w.n
				if want == all {
					want = len(w.data)
				}
				assert.EqualValues(t, want, n, "write %d", i)
			}
			assert.Equal(t, tc.flush, fh.Flush(ctx))
			require.Zero(t, fh.Release(ctx))
			assert.Equal(t, before+tc.lines, lines())
			if tc.lines == 0 {
				assert.Equal(t, raw, c.read(protocol.EventsFile), "a refused append changes no byte")
			}
			if tc.kind != "" {
				// A refusal like an earlier one is counted, not recorded
				// again (AuditCompact): the first one is in the ledger.
				recs := c.records()
				if tc.kind == ledger.KindAppendAccepted {
					recs = c.since(seq)
				}
				assert.True(t, hasRecord(recs, tc.kind, tc.agent, protocol.EventsFile, "", ""), "%v", kinds(c.since(seq)))
			}
			assert.Zero(t, f.pending.Load(), "no unfinished line held after close")
		})
	}

	t.Run("what else events.jsonl refuses", func(t *testing.T) {
		f := views["alice"]
		_, _, errno := f.Open(ctx, nil, protocol.EventsFile, uint32(os.O_WRONLY|os.O_TRUNC))
		assert.Equal(t, syscall.EPERM, errno)
		fh, _, errno := f.Open(ctx, nil, protocol.EventsFile, uint32(os.O_RDWR))
		require.Zero(t, errno)
		assert.Equal(t, syscall.EPERM, fh.Allocate(ctx, 0, 10, 0))
		_, ok := fh.PassthroughFd()
		assert.False(t, ok)
		got, errno := fh.Read(ctx, make([]byte, 1<<16), 0)
		require.Zero(t, errno)
		assert.Equal(t, c.read(protocol.EventsFile), string(got))
		require.Zero(t, fh.Release(ctx))
		for name, errno := range map[string]syscall.Errno{
			"truncate": func() syscall.Errno {
				_, e := f.Setattr(ctx, protocol.EventsFile, nil, &SetAttr{HasSize: true})
				return e
			}(),
			"chmod": func() syscall.Errno {
				_, e := f.Setattr(ctx, protocol.EventsFile, nil, &SetAttr{HasMode: true, Mode: 0o600})
				return e
			}(),
			"unlink":   f.Unlink(ctx, protocol.EventsFile),
			"rename":   f.Rename(ctx, protocol.EventsFile, "scratch/e", 0),
			"setxattr": f.Setxattr(ctx, protocol.EventsFile, "user.x", []byte("1"), 0),
			"rename onto it": func() syscall.Errno {
				c.write("scratch/e2", "x")
				return f.Rename(ctx, "scratch/e2", protocol.EventsFile, 0)
			}(),
		} {
			assert.Equal(t, syscall.EPERM, errno, name)
		}
	})
}

// TestProtocolJSONRewrite: a rewrite of protocol.json is accepted when it
// equals the derived state, refused at close otherwise.
func TestProtocolJSONRewrite(t *testing.T) {
	c := newCollab(t)
	f := c.newView(ownerGrant())
	ctx := context.Background()
	derived := []byte(c.read(protocol.ProtocolFile))
	on := func(flags int, do func(fh File)) syscall.Errno {
		fh, caching, errno := f.Open(ctx, nil, protocol.ProtocolFile, uint32(flags))
		require.Zero(t, errno)
		assert.Equal(t, CacheDirect, caching)
		do(fh)
		errno = fh.Flush(ctx)
		require.Zero(t, fh.Release(ctx))
		return errno
	}
	seq := c.lastSeq()
	assert.Zero(t, on(os.O_WRONLY|os.O_TRUNC, func(fh File) {
		_, errno := fh.Write(ctx, derived, 0)
		require.Zero(t, errno)
	}), "the same content")
	assert.True(t, hasRecord(c.since(seq), ledger.KindWrite, "alice", protocol.ProtocolFile, "rewrite", ""))
	assert.Equal(t, syscall.EPERM, on(os.O_RDWR, func(fh File) {
		_, errno := fh.Write(ctx, []byte(`{"x":1}`), 0)
		require.Zero(t, errno)
		_, errno = f.Setattr(ctx, protocol.ProtocolFile, fh, &SetAttr{HasSize: true, Size: 7})
		require.Zero(t, errno)
	}), "other content")
	assert.Zero(t, on(os.O_RDWR, func(fh File) {
		assert.Equal(t, syscall.EOPNOTSUPP, fh.Allocate(ctx, 0, 1, 0))
		_, ok := fh.PassthroughFd()
		assert.False(t, ok)
		got, errno := fh.Read(ctx, make([]byte, 1<<16), 0)
		require.Zero(t, errno)
		assert.Equal(t, derived, got)
		got, errno = fh.Read(ctx, make([]byte, 10), int64(len(derived)))
		require.Zero(t, errno)
		assert.Empty(t, got)
	}), "nothing written: nothing to judge")
	assert.Equal(t, syscall.EPERM, on(os.O_RDWR, func(fh File) {
		_, errno := fh.Write(ctx, []byte("x"), maxLine)
		assert.Equal(t, syscall.EFBIG, errno)
		_, errno = f.Setattr(ctx, protocol.ProtocolFile, fh, &SetAttr{HasSize: true, Size: uint64(len(derived) + 3)})
		require.Zero(t, errno)
	}), "grown with zeros")
	assert.Equal(t, string(derived), c.read(protocol.ProtocolFile), "the file on disk is acpfs's")
	ro, _, errno := f.Open(ctx, nil, protocol.ProtocolFile, uint32(os.O_RDONLY))
	require.Zero(t, errno)
	_, errno = ro.Write(ctx, []byte("x"), 0)
	assert.Equal(t, syscall.EBADF, errno)
	_, errno = f.Setattr(ctx, protocol.ProtocolFile, ro, &SetAttr{HasSize: true})
	assert.Equal(t, syscall.EPERM, errno)
	require.Zero(t, ro.Release(ctx))
	_, errno = f.Setattr(ctx, protocol.ProtocolFile, nil, &SetAttr{HasMode: true, Mode: 0o600})
	assert.Equal(t, syscall.EPERM, errno)
}

// TestStagingAtomicSaves: an editor's save (write a temporary file next
// to the target, rename it over the target) through a grant that may
// write the target only: the temporary file is private to the view and
// the commit is one rename, recorded as a write of the target.
func TestStagingAtomicSaves(t *testing.T) {
	c := newCollab(t)
	bob := c.newView(reviewerGrant())
	alice := c.newView(ownerGrant())
	ctx := context.Background()
	c.write("notes.md", "old notes\n")

	_, fh, errno := bob.Create(ctx, ".notes.md.swp", uint32(os.O_RDWR), 0o600, nil)
	require.Zero(t, errno)
	_, errno = fh.Write(ctx, []byte("new notes\n"), 0)
	require.Zero(t, errno)
	got, errno := fh.Read(ctx, make([]byte, 64), 0)
	require.Zero(t, errno)
	assert.Equal(t, "new notes\n", string(got))
	require.Zero(t, fh.Release(ctx))

	_, errno = bob.Lookup(ctx, ".notes.md.swp")
	assert.Zero(t, errno, "the view shows its own temporary file")
	_, errno = alice.Lookup(ctx, ".notes.md.swp")
	assert.Equal(t, syscall.ENOENT, errno, "no other view does")
	assert.NoFileExists(t, c.in(".notes.md.swp"), "nor the folder")
	assert.Contains(t, listing(t, bob, ""), ".notes.md.swp")
	assert.NotContains(t, listing(t, alice, ""), StagingDir)

	// A reopened private file is no read of the folder.
	seq := c.lastSeq()
	ro, _, errno := bob.Open(ctx, nil, ".notes.md.swp", uint32(os.O_RDONLY))
	require.Zero(t, errno)
	require.Zero(t, ro.Release(ctx))
	assert.False(t, hasRecord(c.since(seq), ledger.KindRead, "bob", ".notes.md.swp", "", ""))

	// Moves between private names, refused swaps with the folder's files.
	require.Zero(t, bob.Rename(ctx, ".notes.md.swp", ".notes.md.tmp", 0))
	assert.Equal(t, syscall.EACCES, bob.Rename(ctx, "notes.md", ".notes.md.tmp", 0), "a folder file onto a private name")
	assert.Equal(t, syscall.EACCES, bob.Rename(ctx, ".notes.md.tmp", "notes.md", unix_RENAME_EXCHANGE), "an exchange with the folder")

	seq = c.lastSeq()
	require.Zero(t, bob.Rename(ctx, ".notes.md.tmp", "notes.md", 0), "the commit")
	assert.Equal(t, "new notes\n", c.read("notes.md"))
	assert.True(t, hasRecord(c.since(seq), ledger.KindWrite, "bob", "notes.md", "rename", ""), "%v", kinds(c.since(seq)))
	_, errno = bob.Lookup(ctx, ".notes.md.tmp")
	assert.Equal(t, syscall.ENOENT, errno)

	// A private file removed, another left for Close to take away.
	_, fh, errno = bob.Create(ctx, "sed1234", uint32(os.O_WRONLY), 0o600, nil)
	require.Zero(t, errno)
	require.Zero(t, fh.Release(ctx))
	_, errno = bob.Mkdir(ctx, "sed1234", 0o755)
	assert.Equal(t, syscall.EEXIST, errno)
	assert.Equal(t, syscall.EACCES, bob.Link(ctx, "sed1234"))
	require.Zero(t, bob.Unlink(ctx, "sed1234"))
	_, errno = bob.Lookup(ctx, "sed1234")
	assert.Equal(t, syscall.ENOENT, errno)
	_, fh, errno = bob.Create(ctx, "left-over", uint32(os.O_WRONLY), 0o600, nil)
	require.Zero(t, errno)
	require.Zero(t, fh.Release(ctx))
	// A commit onto a name the grant does not let it write is refused,
	// and nothing moves.
	assert.Equal(t, syscall.EACCES, bob.Rename(ctx, "left-over", "proposal.md", 0))
	require.NoError(t, bob.Close())
	entries, err := os.ReadDir(c.in(StagingDir))
	if err == nil {
		assert.Empty(t, entries, "what is left goes when the view stops")
	}

	// A crashed daemon's staging directory is swept by the next view.
	require.NoError(t, os.MkdirAll(c.in(StagingDir+"/999999999-dead/sub"), 0o700))
	c.write(StagingDir+"/999999999-dead/sub/t1", "x")
	c.newView(reviewerGrant())
	assert.NoDirExists(t, c.in(StagingDir+"/999999999-dead"))
}

// TestStagingDirectoryMadeByAnother: a staging directory someone else
// made first, open to everyone, is made the daemon's own and private
// before a view puts its private directory in it (as root, taken over
// from its owner, uid 65534 here; a daemon of another uid refuses one it
// does not own).
func TestStagingDirectoryMadeByAnother(t *testing.T) {
	c := newCollab(t)
	top := c.in(StagingDir)
	require.NoError(t, os.Mkdir(top, 0o777))
	require.NoError(t, os.Chmod(top, 0o777))
	root := os.Geteuid() == 0
	if root {
		require.NoError(t, os.Chown(top, 65534, 65534))
	}
	bob := c.newView(reviewerGrant())
	_, fh, errno := bob.Create(context.Background(), ".notes.md.swp", uint32(os.O_RDWR), 0o600, nil)
	require.Zero(t, errno)
	require.Zero(t, fh.Release(context.Background()))
	info, err := os.Stat(top)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), info.Mode().Perm(), "private")
	assert.Equal(t, uint32(os.Geteuid()), info.Sys().(*syscall.Stat_t).Uid, "the daemon's")
}

const unix_RENAME_EXCHANGE = 1 << 1

// listing is the names of a listing of rel through f.
func listing(t *testing.T, f *View, rel string) []string {
	t.Helper()
	d, _, errno := f.Opendir(context.Background(), rel)
	require.Zero(t, errno)
	var names []string
	for {
		e, ok, errno := d.Next(context.Background())
		require.Zero(t, errno)
		if !ok {
			break
		}
		if e.Name != "." && e.Name != ".." {
			names = append(names, e.Name)
		}
	}
	return names
}

// TestQuotas: past max_write_bytes and max_files, writes and creates
// fail with EDQUOT and the refusal is recorded; .acpfs/status shows the
// usage.
func TestQuotas(t *testing.T) {
	c := newCollab(t)
	g := ownerGrant()
	g.MaxWriteBytes, g.MaxFiles = 100, 2
	f := c.newView(g)
	ctx := context.Background()
	_, fh, errno := f.Create(ctx, "scratch/a", uint32(os.O_RDWR), 0o644, nil)
	require.Zero(t, errno)
	_, errno = f.Mkdir(ctx, "scratch/d", 0o755)
	require.Zero(t, errno)
	tests := []struct {
		name  string
		do    func() syscall.Errno
		errno syscall.Errno
	}{
		{"a write within the quota", func() syscall.Errno { _, e := fh.Write(ctx, bytes.Repeat([]byte("a"), 60), 0); return e }, 0},
		{"an overwrite grows nothing", func() syscall.Errno { _, e := fh.Write(ctx, bytes.Repeat([]byte("b"), 60), 0); return e }, 0},
		{"a write past it", func() syscall.Errno { _, e := fh.Write(ctx, bytes.Repeat([]byte("c"), 60), 60); return e }, syscall.EDQUOT},
		{"a truncate past it", func() syscall.Errno {
			_, e := f.Setattr(ctx, "scratch/a", fh, &SetAttr{HasSize: true, Size: 1000})
			return e
		}, syscall.EDQUOT},
		{"fallocate past it", func() syscall.Errno { return fh.Allocate(ctx, 0, 1000, 0) }, syscall.EDQUOT},
		{"a third name", func() syscall.Errno { _, _, e := f.Create(ctx, "scratch/b", uint32(os.O_RDWR), 0o644, nil); return e }, syscall.EDQUOT},
		{"a third directory", func() syscall.Errno { _, e := f.Mkdir(ctx, "scratch/e", 0o755); return e }, syscall.EDQUOT},
		{"a third symlink", func() syscall.Errno { _, e := f.Symlink(ctx, "scratch/l", "a"); return e }, syscall.EDQUOT},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			seq := c.lastSeq()
			assert.Equal(t, tc.errno, tc.do())
			if tc.errno == syscall.EDQUOT {
				var found bool
				for _, r := range c.records() {
					found = found || (r.Kind == ledger.KindDenied && r.Agent == "alice" && strings.Contains(r.Detail, "quota"))
				}
				assert.True(t, found, "the refusal is recorded")
				assert.Contains(t, f.LastError(), "quota")
				_ = seq
			}
		})
	}
	require.Zero(t, fh.Release(ctx))
	status, _ := f.statusText(ctx)
	assert.Contains(t, string(status), "quota: 60 of 100 bytes written, 2 of 2 new files")
	un := c.newView(grantOf("bob", []string{"**"}, nil, []string{"scratch/**"}), func(o *Options) { o.MaxWriteBytes, o.MaxFiles = -1, -1 })
	assert.Equal(t, "quota: 0 of unlimited bytes written, 0 of unlimited new files\n", un.quotaText())
}
