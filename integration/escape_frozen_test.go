package integration

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/ledger"
)

// TestEscapeFrozenDeliverable: once the primary deliverable is frozen,
// its owner tries to change it by every name, descriptor and mapping, and
// through a second name planted on the backing folder
// (escape_hardlink_test.go).
func TestEscapeFrozenDeliverable(t *testing.T) {
	fz := newEscFrozen(t)
	escRun(t, fz.e, escFrozenAttempts(fz))
	escFrozenSecondName(t, fz)
}

// The deliverable's refusals, and the second name planted for it.
const (
	escFrozenWhy  = "frozen deliverable (EROFS)"
	escFrozenLink = "scratch/design-spec-link.md"
)

// escFrozenRec is the record of a refused change of the frozen primary
// deliverable.
func escFrozenRec(op string) *escRecord { return escRec(ledger.KindFrozenRefused, primary, op) }

// escFrozen is the collaboration of TestEscapeFrozenDeliverable: in
// readiness check with the primary deliverable frozen, and a descriptor
// (rw) and a shared writable mapping of it made before the freeze.
type escFrozen struct {
	r       *collabRun
	e       escEnv
	rw      int
	mapping *escMapper
}

func newEscFrozen(t *testing.T) *escFrozen {
	r := newRun(t)
	a := r.alice
	r.toReadinessCheck()
	require.NoError(t, os.WriteFile(a.path(primary), []byte(designSpec("Frozen")), 0o644))
	require.NoError(t, os.WriteFile(a.path("deliverables/other.md"), []byte("other\n"), 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(r.c.folder, "scratch"), 0o755))
	// Descriptors opened for writing before the freeze, and a shared
	// writable mapping: the freeze must still stop every write.
	rw, err := unix.Open(a.path(primary), unix.O_RDWR|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	t.Cleanup(func() { unix.Close(rw) })
	mapping := escMapFile(t, a.path(primary))
	r.must(a, owner, "deliverable_frozen",
		map[string]any{"doc": primary, "role": "primary", "sha256": fileSHA(t, a.path(primary))})
	return &escFrozen{r: r, e: escEnv{c: r.c, v: a, other: r.bob}, rw: rw, mapping: mapping}
}

// fromRW runs fn on the descriptor opened for writing before the freeze.
func (fz *escFrozen) fromRW(fn func(fd int) error) func(*testing.T) error {
	return func(*testing.T) error { return fn(fz.rw) }
}

// escFrozenAttempts change the frozen deliverable by its name, through the
// descriptor and the mapping made before the freeze, and by events.
func escFrozenAttempts(fz *escFrozen) []escAttempt {
	r, a, p, mapping, frozen, why := fz.r, fz.r.alice, fz.r.alice.path, fz.mapping, escFrozenRec, escFrozenWhy
	fromRW := fz.fromRW
	return []escAttempt{
		{name: "echo > (O_TRUNC open)", do: escSh(a, "echo x > "+primary), errno: syscall.EROFS, record: frozen("open"),
			explain: "open " + primary + ": " + why},
		{name: "echo >>", do: escSh(a, "echo x >> "+primary), errno: syscall.EROFS, record: frozen("open"),
			explain: why},
		{name: "O_RDWR", do: func(*testing.T) error { return escOpen(p(primary), os.O_RDWR) }, errno: syscall.EROFS,
			record: frozen("open"), explain: why},
		{name: "O_RDONLY|O_TRUNC", do: func(*testing.T) error { return escOpen(p(primary), os.O_RDONLY|os.O_TRUNC) },
			errno: syscall.EROFS, record: frozen("open"), explain: why},
		{name: "cp over it", do: escSh(a, "cp deliverables/other.md "+primary), errno: syscall.EROFS,
			record: frozen("open"), explain: why},
		{name: "truncate(2)", do: func(*testing.T) error { return os.Truncate(p(primary), 0) }, errno: syscall.EROFS,
			record: frozen("truncate"), explain: why},
		{name: "chmod", do: func(*testing.T) error { return os.Chmod(p(primary), 0o600) }, errno: syscall.EROFS,
			record: frozen("setattr"), explain: why},
		{name: "utimes", do: func(*testing.T) error { return os.Chtimes(p(primary), time.Unix(0, 0), time.Unix(0, 0)) },
			errno: syscall.EROFS, record: frozen("setattr"), explain: why},
		{name: "chown", do: func(*testing.T) error { return os.Chown(p(primary), 65534, 65534) }, errno: syscall.EROFS,
			record: frozen("setattr"), explain: why},
		{name: "setxattr user.x",
			do:    func(*testing.T) error { return unix.Setxattr(p(primary), "user.x", []byte("1"), 0) },
			errno: syscall.EROFS, record: frozen("setxattr"), explain: why},
		{name: "removexattr", do: func(*testing.T) error { return unix.Removexattr(p(primary), "user.x") },
			errno: syscall.EROFS, record: frozen("removexattr"), explain: why},
		{name: "rm", do: func(*testing.T) error { return os.Remove(p(primary)) }, errno: syscall.EROFS,
			record: frozen("unlink"), explain: why},
		{name: "mv it away", do: func(*testing.T) error { return os.Rename(p(primary), p("deliverables/moved.md")) },
			errno: syscall.EROFS, record: frozen("rename"), explain: why},
		{name: "mv another file over it",
			do:    func(*testing.T) error { return os.Rename(p("deliverables/other.md"), p(primary)) },
			errno: syscall.EROFS, record: frozen("rename"), explain: why},
		{name: "RENAME_EXCHANGE with another file", do: func(*testing.T) error {
			return unix.Renameat2(unix.AT_FDCWD, p("deliverables/other.md"), unix.AT_FDCWD, p(primary),
				unix.RENAME_EXCHANGE)
		}, errno: syscall.EROFS, record: frozen("rename"), explain: why},
		{name: "mv the deliverables directory away",
			do:    func(*testing.T) error { return os.Rename(p("deliverables"), p("scratch/moved")) },
			errno: syscall.EROFS, record: escRec(ledger.KindFrozenRefused, "deliverables", "rename"), explain: why},
		{name: "rmdir the deliverables directory", do: func(*testing.T) error { return unix.Rmdir(p("deliverables")) },
			errno: syscall.EROFS, record: escRec(ledger.KindFrozenRefused, "deliverables", "rmdir"), explain: why},
		{name: "ln to a second, writable name",
			do: func(*testing.T) error { return os.Link(p(primary), p("deliverables/copy.md")) }, errno: syscall.EACCES,
			record: escRec(ledger.KindDenied, "deliverables/copy.md", "link"), explain: escNoLinks},
		{name: "reopen a read-only descriptor for writing via /proc/self/fd",
			do: escSh(a, "exec 3<"+primary+" && echo x >> /proc/self/fd/3"), errno: syscall.EROFS,
			record: frozen("open"), explain: why},
		{name: "pwrite on a descriptor opened before the freeze",
			do:    fromRW(func(fd int) error { _, err := unix.Pwrite(fd, []byte("X"), 0); return err }),
			errno: syscall.EROFS, record: frozen("write"), explain: "write " + primary + ": " + why},
		{name: "pwritev on a descriptor opened before the freeze",
			do: fromRW(func(fd int) error {
				_, err := unix.Pwritev(fd, [][]byte{[]byte("X"), []byte("Y")}, 0)
				return err
			}), errno: syscall.EROFS, record: frozen("write"), explain: why},
		{name: "ftruncate on a descriptor opened before the freeze",
			do: fromRW(func(fd int) error { return unix.Ftruncate(fd, 0) }), errno: syscall.EROFS,
			record: frozen("truncate"), explain: why},
		{name: "fallocate on a descriptor opened before the freeze",
			do: fromRW(func(fd int) error { return unix.Fallocate(fd, 0, 0, 1<<20) }), errno: syscall.EROFS,
			record: frozen("fallocate"), explain: why},
		{name: "fallocate PUNCH_HOLE", do: fromRW(func(fd int) error {
			return unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, 16)
		}), errno: syscall.EROFS, record: frozen("fallocate"), explain: why},
		{name: "copy_file_range into the frozen file", do: fromRW(func(fd int) error {
			src, err := unix.Open(p("deliverables/other.md"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			defer unix.Close(src)
			off := int64(0)
			_, err = unix.CopyFileRange(src, nil, fd, &off, 6, 0)
			return err
		}), errno: syscall.EROFS, record: frozen("write"), explain: why},
		{name: "shared mmap write made before the freeze, synced after", do: func(*testing.T) error {
			return mapping.writeAndSync("MAPPED WRITE")
		}, errno: syscall.EROFS, record: frozen("write"), explain: why},
		{name: "shared writable mmap of a fresh read-only descriptor", do: func(*testing.T) error {
			fd, err := unix.Open(p(primary), unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			_, err = unix.Mmap(fd, 0, 64, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
			return err
		}, errno: syscall.EACCES},
		{name: "ioctl FS_IOC_SETFLAGS on the writable descriptor",
			do:    fromRW(func(fd int) error { return unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, 0) }),
			errno: syscall.ENOTTY},
		{name: "deliverable_revised after the freeze", do: func(*testing.T) error {
			return escAppend(a,
				r.c.event(owner, "deliverable_revised", map[string]any{"doc": primary, "role": "primary"}))
		}, errno: syscall.EPERM, record: escRec(ledger.KindAppendRejected, "events.jsonl", "append"),
			explain: "append events.jsonl"},
		{name: "a second deliverable_frozen with another hash", do: func(*testing.T) error {
			return escAppend(a,
				r.c.event(owner, "deliverable_frozen",
					map[string]any{"doc": primary, "role": "primary", "sha256": strings.Repeat("0", 64)}))
		}, errno: syscall.EPERM, record: escRec(ledger.KindAppendRejected, "events.jsonl", "append"),
			explain: "append events.jsonl"},
		{name: "the reviewer, who may not write it anyway", as: r.bob, do: escSh(r.bob, "echo x > "+primary),
			errno: syscall.EACCES, record: escRec(ledger.KindDenied, primary, "open"),
			explain: "not writable under the grant"},
	}
}

// escFrozenSecondName plants a second name for the frozen deliverable and
// checks that it is concealed under both, and shown again once it has one.
func escFrozenSecondName(t *testing.T, fz *escFrozen) {
	r, e, p, frozen, link := fz.r, fz.e, fz.r.alice.path, escFrozenRec, escFrozenLink
	hardLinked := escHardLinkedRec
	// A second name for the deliverable, planted on the backing folder
	// by another process after the freeze. While the file has two names
	// it is concealed under both: every attempt through either name is a
	// lookup refused quietly (ENOENT), and making a new name there is
	// refused. The descriptor opened before the freeze still answers
	// EROFS.
	require.NoError(t, os.Link(filepath.Join(r.c.folder, primary), filepath.Join(r.c.folder, link)))
	{
		// The kernel may still hold the deliverable's entry from the
		// attempts above; once a lookup of it has been refused, every
		// later access looks it up again.
		nrec := len(r.c.records())
		eventually(t, func() bool {
			_, err := os.Stat(p(primary))
			return errors.Is(err, syscall.ENOENT) && escHasRecord(r.c.records()[nrec:], *hardLinked(primary))
		}, "the deliverable is still shown while it has a second name")
	}
	escRun(t, e, escFrozenHardLinkAttempts(fz))

	t.Run("the deliverable is concealed under both names while it has two", func(t *testing.T) {
		nrec := len(r.c.records())
		for _, name := range []string{primary, link} {
			_, err := os.Lstat(p(name))
			assert.ErrorIs(t, err, syscall.ENOENT, name)
		}
		assert.NotContains(t, escGetdents(t, p("deliverables")), filepath.Base(primary))
		assert.NotContains(t, escGetdents(t, p("scratch")), filepath.Base(link))
		for _, rec := range r.c.records()[nrec:] {
			assert.NotEqual(t, ledger.KindRead, rec.Kind, "read of %s", rec.Path)
		}
	})

	t.Run("the deliverable is shown and opens again once its second name is removed on the backing folder",
		func(t *testing.T) {
			require.NoError(t, os.Remove(filepath.Join(r.c.folder, link)))
			// A lookup finds it at once; the listing the kernel keeps shows
			// it once the watcher has seen the removal.
			eventually(t, func() bool {
				b, err := os.ReadFile(p(primary))
				return err == nil && string(b) == designSpec("Frozen") &&
					slices.Contains(escGetdents(t, p("deliverables")), filepath.Base(primary))
			}, "the deliverable stays concealed")
			assert.Equal(t, designSpec("Frozen"), readFile(t, filepath.Join(r.c.folder, primary)))
			r.c.requireRecord(ledger.KindRead, primary, "open")
		})

	t.Run("reading the frozen deliverable works again once its second name is gone, and it is still frozen",
		func(t *testing.T) {
			_, err := os.Lstat(filepath.Join(r.c.folder, link))
			require.ErrorIs(t, err, os.ErrNotExist)
			eventually(t, func() bool {
				b, err := os.ReadFile(p(primary))
				return err == nil && string(b) == designSpec("Frozen")
			}, "the deliverable stays unreadable")
			nrec := len(r.c.records())
			assert.ErrorIs(t, escOpen(p(primary), os.O_WRONLY|os.O_APPEND), syscall.EROFS)
			assert.True(t, escHasRecord(r.c.records()[nrec:], *frozen("open")), escFmtRecords(r.c.records()[nrec:]))
			assert.Equal(t, designSpec("Frozen"), readFile(t, filepath.Join(r.c.folder, primary)))
		})
}
