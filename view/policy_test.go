package view

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/protocol"
)

// policyGrant is the grant of the policy tables: docs/ read-only,
// scratch/ and deliverables/ writable, oracle/ forbidden.
func policyGrant() *grants.Grant {
	return &grants.Grant{
		GrantID: "G-t", AgentID: "alice", Role: "r", Objective: "o",
		MayRead:       []string{"docs/**", "deliverables/**", "events.jsonl", "protocol.json"},
		ForbiddenRead: []string{"oracle/**"},
		MayWrite:      []string{"scratch/**", "deliverables/**", "events.jsonl", "protocol.json", "review.md"},
	}
}

type expect struct {
	errno  syscall.Errno
	record ledger.Kind // ledger kind of the refusal, "" for none
}

var (
	ok      = expect{}
	enoent  = expect{syscall.ENOENT, ""}
	hid     = expect{syscall.ENOENT, ledger.KindDenied}
	eacces  = expect{syscall.EACCES, ledger.KindDenied}
	erofs   = expect{syscall.EROFS, ledger.KindFrozenRefused}
	eperm   = expect{syscall.EPERM, ledger.KindDenied}
	epermEv = expect{syscall.EPERM, ledger.KindAppendRejected}
	eexist  = expect{syscall.EEXIST, ""}
)

// TestDecideTable is the access policy of a view: every op on every kind
// of entry, with the errno the agent sees and the ledger record kind.
func TestDecideTable(t *testing.T) {
	m, err := grants.Compile(policyGrant(), grants.MatcherOptions{})
	require.NoError(t, err)
	p := policy{m: m, frozen: func(rel string) bool { return rel == "deliverables/spec.md" || rel == "deliverables" }}
	file := entry{kind: kindFile}
	cases := []struct {
		name string
		rel  string
		e    entry
		// expectations per op class, then per-op exceptions
		read, change, make expect
		except             map[op]expect
	}{
		{name: "hidden by grant", rel: "oracle/answer.md", e: file,
			read: hid, change: hid, make: eacces},
		{name: "read-only", rel: "docs/a.md", e: file,
			read: ok, change: eacces, make: eacces,
			except: map[op]expect{opReadlink: {syscall.EINVAL, ""}}},
		{name: "writable", rel: "scratch/a.md", e: file,
			read: ok, change: ok, make: eexist,
			except: map[op]expect{opReadlink: {syscall.EINVAL, ""}, opRenameTo: ok, opLink: eacces}},
		{name: "frozen", rel: "deliverables/spec.md", e: file,
			read: ok, change: erofs, make: erofs,
			except: map[op]expect{opReadlink: {syscall.EINVAL, ""}}},
		{name: "directory holding a frozen file", rel: "deliverables", e: entry{kind: kindDir},
			read: ok, change: erofs, make: erofs,
			except: map[op]expect{opReadlink: {syscall.EINVAL, ""}}},
		{name: "managed events.jsonl", rel: protocol.EventsFile, e: file,
			read: ok, change: epermEv, make: eperm,
			except: map[op]expect{opReadlink: {syscall.EINVAL, ""}, opOpenWrite: ok,
				opUnlink: eperm, opRmdir: eperm, opRenameFrom: eperm, opSetxattr: eperm, opRemovexattr: eperm}},
		{name: "managed protocol.json", rel: protocol.ProtocolFile, e: file,
			read: ok, change: eperm, make: eperm,
			except: map[op]expect{opReadlink: {syscall.EINVAL, ""}, opOpenWrite: ok}},
		{name: "hard-linked (concealed)", rel: "scratch/h.md", e: entry{kind: kindConcealed, why: "hard-linked"},
			read: hid, change: hid, make: eacces},
		{name: "symlink to a hidden target (concealed)", rel: "scratch/s", e: entry{kind: kindConcealed, why: "symlink"},
			read: hid, change: hid, make: eacces},
		{name: "visible symlink", rel: "scratch/v", e: entry{kind: kindSymlink},
			read: ok, change: ok, make: eexist,
			except: map[op]expect{opRenameTo: ok, opLink: eacces}},
		{name: "required document", rel: "review.md", e: file,
			read: ok, change: ok, make: eexist,
			except: map[op]expect{opReadlink: {syscall.EINVAL, ""}, opRenameTo: ok, opLink: eacces,
				opUnlink: eperm, opRenameFrom: eperm}},
		{name: "absent writable name", rel: "scratch/new.md", e: entry{kind: kindAbsent},
			read: enoent, change: enoent, make: ok,
			except: map[op]expect{opLink: eacces}},
		{name: "absent read-only name", rel: "docs/new.md", e: entry{kind: kindAbsent},
			read: enoent, change: enoent, make: eacces},
		{name: "the appenders' lock", rel: protocol.LockFile, e: file,
			read: hid, change: hid, make: hid},
		{name: "the appenders' lock, absent", rel: protocol.LockFile, e: entry{kind: kindAbsent},
			read: hid, change: hid, make: eacces},
		{name: "control directory", rel: ControlDir, e: entry{kind: kindAbsent},
			read: ok, change: eacces, make: eacces},
		{name: "folder root", rel: "", e: entry{kind: kindDir},
			read: ok, change: eacces, make: eacces},
	}
	for _, tc := range cases {
		for o := op(0); o < opCount; o++ {
			want, ok := tc.except[o]
			if !ok {
				want = map[opClass]expect{classRead: tc.read, classChange: tc.change, classMake: tc.make}[o.class()]
			}
			t.Run(tc.name+"/"+o.String(), func(t *testing.T) {
				v := decide(o, tc.rel, tc.e, p)
				assert.Equal(t, want.errno, v.errno, "errno")
				assert.Equal(t, want.record, v.record, "ledger kind (%s)", v.why)
				if v.errno == syscall.ENOENT && v.record != "" {
					assert.True(t, v.quiet, "a hidden name must not reach .acpfs/last-error")
				}
			})
		}
	}
}

// TestOpNamesComplete keeps every op named, so records never say "".
func TestOpNamesComplete(t *testing.T) {
	for o := op(0); o < opCount; o++ {
		assert.NotEmpty(t, o.String(), "op %d", o)
	}
}

// checkpointFS is a view (never mounted) of a fresh collaboration
// folder, for tests of the checkpoint against real backing entries.
func checkpointFS(t *testing.T) (*View, string, string) {
	t.Helper()
	root := t.TempDir()
	folder := filepath.Join(root, "folder")
	_, err := protocol.Init(protocol.InitOptions{Folder: folder, Participants: []string{"alice", "bob"},
		Objective: "o", Completion: []string{"c"}, PrimaryType: "design-spec"})
	require.NoError(t, err)
	log, err := protocol.OpenLog(folder)
	require.NoError(t, err)
	ledgerPath := filepath.Join(root, "ledger.jsonl")
	lw, err := ledger.Open(ledgerPath, ledger.Options{Sync: ledger.SyncOff})
	require.NoError(t, err)
	f, err := New(Options{Folder: folder, Grant: policyGrant(), Log: log, Ledger: lw})
	require.NoError(t, err)
	t.Cleanup(func() { f.Close(); lw.Close(); log.Close() })
	for _, d := range []string{"docs", "scratch/d", "oracle", "deliverables/a"} {
		require.NoError(t, os.MkdirAll(filepath.Join(folder, d), 0o755))
	}
	for _, p := range []string{"oracle/answer.md", "oracle/f.md", "scratch/d/f.md", "docs/a.md"} {
		require.NoError(t, os.WriteFile(filepath.Join(folder, p), []byte("content of "+p), 0o644))
	}
	return f, folder, ledgerPath
}

func lastRecord(t *testing.T, path string) ledger.Record {
	t.Helper()
	var last ledger.Record
	require.NoError(t, ledger.Scan(path, ledger.Filter{}, func(r ledger.Record) error { last = r; return nil }))
	return last
}

// TestCheckpointOnDisk drives the checkpoint against entries a hostile
// writer of the backing folder plants: symlinks in the path, symlinks
// renamed to where they lead elsewhere, directories swapped for symlinks
// and hard links to hidden files.
func TestCheckpointOnDisk(t *testing.T) {
	f, folder, ledgerPath := checkpointFS(t)
	ctx := context.Background()
	in := func(p string) string { return filepath.Join(folder, p) }

	require.NoError(t, os.Symlink("../oracle", in("scratch/toOracle")))
	require.NoError(t, os.Symlink("../../../outside", in("scratch/d/up")))
	require.NoError(t, os.Link(in("oracle/answer.md"), in("scratch/h.md")))
	// Harmless where it is made (deliverables/oracle/answer.md is
	// visible), a door to the oracle once moved one level up.
	require.NoError(t, os.Symlink("../oracle/answer.md", in("deliverables/a/s1")))
	require.NoError(t, os.Symlink("a.md", in("docs/sub-link")))

	t.Run("a harmless symlink is judged where it is", func(t *testing.T) {
		tg, errno := f.at(ctx, opLookup, "deliverables/a/s1")
		require.Zero(t, errno)
		tg.close()
		assert.Equal(t, kindSymlink, tg.e.kind)
	})
	require.NoError(t, os.Rename(in("deliverables/a/s1"), in("deliverables/s1")))

	cases := []struct {
		name   string
		op     op
		rel    string
		errno  syscall.Errno
		record ledger.Kind
	}{
		{"renamed symlink now leads to the oracle", opLookup, "deliverables/s1", syscall.ENOENT, ledger.KindDenied},
		{"create on the renamed symlink", opCreate, "deliverables/s1", syscall.EACCES, ledger.KindDenied},
		{"open for writing through it", opOpenWrite, "deliverables/s1", syscall.ENOENT, ledger.KindDenied},
		{"directory symlink to the oracle", opLookup, "scratch/toOracle", syscall.ENOENT, ledger.KindDenied},
		{"create below a directory symlink", opCreate, "scratch/toOracle/x", syscall.ENOENT, ""},
		{"read below a directory symlink", opOpenRead, "scratch/toOracle/answer.md", syscall.ENOENT, ""},
		{"symlink climbing out of the folder", opLookup, "scratch/d/up", syscall.ENOENT, ledger.KindDenied},
		{"hard link to the oracle", opLookup, "scratch/h.md", syscall.ENOENT, ledger.KindDenied},
		{"O_EXCL on the hard link's name", opCreate, "scratch/h.md", syscall.EACCES, ledger.KindDenied},
		{"truncate through the hard link", opTruncate, "scratch/h.md", syscall.ENOENT, ledger.KindDenied},
		{"rename over the hard link", opRenameTo, "scratch/h.md", syscall.EACCES, ledger.KindDenied},
		{"visible relative symlink", opLookup, "docs/sub-link", 0, ""},
		{"read-only file", opOpenWrite, "docs/a.md", syscall.EACCES, ledger.KindDenied},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := lastRecord(t, ledgerPath)
			tg, errno := f.at(ctx, tc.op, tc.rel)
			if errno == 0 {
				tg.close()
			}
			assert.Equal(t, tc.errno, errno)
			after := lastRecord(t, ledgerPath)
			if tc.record == "" {
				assert.Equal(t, before.Seq, after.Seq, "no record expected")
				return
			}
			require.Greater(t, after.Seq, before.Seq, "a record is expected")
			assert.Equal(t, tc.record, after.Kind)
			assert.Equal(t, tc.rel, after.Path)
		})
	}

	t.Run("a directory swapped for a symlink after the lookup", func(t *testing.T) {
		tg, errno := f.at(ctx, opOpenRead, "scratch/d/f.md")
		require.Zero(t, errno)
		tg.close()
		require.NoError(t, os.Rename(in("scratch/d"), in("scratch/old")))
		require.NoError(t, os.Symlink("../oracle", in("scratch/d")))
		for _, o := range []op{opOpenRead, opOpenWrite, opTruncate, opSetattr, opUnlink} {
			_, errno := f.at(ctx, o, "scratch/d/f.md")
			assert.Equal(t, syscall.ENOENT, errno, o.String())
		}
		_, errno = f.at(ctx, opCreate, "scratch/d/x")
		assert.Equal(t, syscall.ENOENT, errno)
		_, err := os.Stat(in("oracle/x"))
		assert.True(t, os.IsNotExist(err))
	})

	t.Run("openSame refuses an entry replaced after the judgement", func(t *testing.T) {
		require.NoError(t, os.WriteFile(in("scratch/r.md"), []byte("mine"), 0o644))
		tg, errno := f.at(ctx, opOpenRead, "scratch/r.md")
		require.Zero(t, errno)
		defer tg.close()
		require.NoError(t, os.Rename(in("oracle/f.md"), in("scratch/r.md")))
		_, err := tg.openSame(os.O_RDONLY)
		assert.ErrorIs(t, err, syscall.ENOENT)
	})
}

func TestShowsAllDecidesDirectoryAttributes(t *testing.T) {
	f, folder, _ := checkpointFS(t)
	full := &grants.Grant{GrantID: "G-all", AgentID: "alice", Role: "r", Objective: "o",
		MayRead: []string{"**"}, MayWrite: []string{"scratch/**"}}
	require.NoError(t, f.SetGrant(full, nil))
	assert.True(t, f.matcher().ShowsAll(""))
	assert.True(t, f.matcher().ShowsAll("scratch"))
	require.NoError(t, f.SetGrant(policyGrant(), nil))
	assert.False(t, f.matcher().ShowsAll(""), "the root holds oracle/")
	assert.True(t, f.matcher().ShowsAll("scratch"))
	assert.False(t, f.matcher().ShowsAll("docsx"))

	// In a directory that may hide something, attributes come from the
	// visible entries only: a hidden entry changes nothing.
	tg, errno := f.at(context.Background(), opGetattr, "")
	require.Zero(t, errno)
	before := f.attrOf("", &tg.e.st)
	require.NoError(t, os.WriteFile(filepath.Join(folder, "oracle", "new-secret.md"), []byte("x"), 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(folder, "hidden-dir-by-no-rule"), 0o755))
	f.entryGen.Add(1)
	require.NoError(t, unix.Fstat(f.b.rootFd(), &tg.e.st))
	after := f.attrOf("", &tg.e.st)
	assert.Equal(t, before.Size, after.Size)
	assert.Equal(t, before.Nlink, after.Nlink)
	assert.Equal(t, before.Mtim, after.Mtim)
	assert.Equal(t, before.Ctim, after.Ctim)
	assert.Equal(t, before.Blocks, after.Blocks)
}

// TestDecideDeliverables: the deliverables protocol.json names are kept
// like the required documents. They can be opened for writing, changed
// and saved over (an editor's rename onto them), not removed or renamed
// away, and neither can the directories holding them.
func TestDecideDeliverables(t *testing.T) {
	m, err := grants.Compile(policyGrant(), grants.MatcherOptions{})
	require.NoError(t, err)
	named := []string{"deliverables/design-spec.md", "deliverables/sub/notes.md"}
	p := policy{m: m, deliverable: func(rel string) bool { return underAny(rel, named, place{}) }}
	file, dir := entry{kind: kindFile}, entry{kind: kindDir}
	cases := []struct {
		name string
		o    op
		rel  string
		e    entry
		want expect
	}{
		{"primary: unlink", opUnlink, "deliverables/design-spec.md", file, eperm},
		{"primary: rename away", opRenameFrom, "deliverables/design-spec.md", file, eperm},
		{"primary: saved over by a rename onto it", opRenameTo, "deliverables/design-spec.md", file, ok},
		{"primary: opened for writing", opOpenWrite, "deliverables/design-spec.md", file, ok},
		{"primary: truncated", opTruncate, "deliverables/design-spec.md", file, ok},
		{"primary: times set", opSetattr, "deliverables/design-spec.md", file, ok},
		{"supporting: unlink", opUnlink, "deliverables/sub/notes.md", file, eperm},
		{"supporting: rename away", opRenameFrom, "deliverables/sub/notes.md", file, eperm},
		{"directory holding one: rename", opRenameFrom, "deliverables", dir, eperm},
		{"directory holding one: rmdir", opRmdir, "deliverables/sub", dir, eperm},
		{"another file beside it: unlink", opUnlink, "deliverables/draft.md", file, ok},
		{"another file beside it: rename", opRenameFrom, "deliverables/draft.md", file, ok},
		{"a directory holding none: rename", opRenameFrom, "deliverables/other", dir, ok},
		{"a name sharing its prefix: unlink", opUnlink, "deliverables/design-spec.md.bak", file, ok},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := decide(tc.o, tc.rel, tc.e, p)
			assert.Equal(t, tc.want.errno, v.errno, "errno (%s)", v.why)
			assert.Equal(t, tc.want.record, v.record, "ledger kind (%s)", v.why)
		})
	}
}

// TestDeliverablesFromProtocol: the kept set is what protocol.json names.
func TestDeliverablesFromProtocol(t *testing.T) {
	f, _, _ := checkpointFS(t)
	for rel, want := range map[string]bool{
		"deliverables/design-spec.md": true,
		"deliverables":                true,
		"deliverables/a":              false,
		"deliverables/other.md":       false,
		"scratch/design-spec.md":      false,
	} {
		assert.Equal(t, want, f.deliverable(rel), rel)
	}
}
