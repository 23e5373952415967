package view

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/internal/digest"
	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/protocol"
)

// Caching is how the kernel may cache the pages of an open file.
type Caching uint8

const (
	// CacheDrop: the kernel drops the pages it holds at this open.
	CacheDrop Caching = iota
	// CacheKeep: the pages are still the file's (FOPEN_KEEP_CACHE).
	CacheKeep
	// CacheDirect: every read and write reaches the view, at the offset
	// it asks (FOPEN_DIRECT_IO).
	CacheDirect
)

// File is an open regular file of a view: every operation on it is
// judged here, with the grant in force at the time of the call.
type File interface {
	Read(ctx context.Context, dest []byte, off int64) ([]byte, syscall.Errno)
	Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno)
	Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno
	Flush(ctx context.Context) syscall.Errno
	Fsync(ctx context.Context, flags uint32) syscall.Errno
	Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno)
	Release(ctx context.Context) syscall.Errno
	// Getattr is the open file's attributes, whatever its name has
	// become; refused, like its reads, once the grant no longer lets the
	// agent read it.
	Getattr(ctx context.Context) (unix.Stat_t, syscall.Errno)
	// Flushes reports whether close(2) of a caller's descriptor must
	// reach the file (FLUSH): it does what the close means (an event
	// line left without its newline, a protocol.json rewrite) or reports
	// what went wrong. A read-only descriptor's close has nothing to do,
	// so the kernel is told not to ask (FOPEN_NOFLUSH).
	Flushes() bool
	// PassthroughFd is the backing descriptor the kernel may read
	// directly, when the view lets it.
	PassthroughFd() (int, bool)
	// Locked is the backing file, for POSIX and BSD locks only: they
	// change nothing the grant judges.
	Locked() *os.File
	base() *handle
}

// Open opens the file at rel, which the adapter's node n names (nil for
// none), and implements the open row of the contract for every kind of
// file.
func (f *View) Open(ctx context.Context, n Node, rel string, flags uint32) (File, Caching, syscall.Errno) {
	// What a judgement depends on, taken before it is made: a change
	// while it runs leaves a verdict no later open trusts.
	gv, gen := f.gv.Load(), f.placeStamp()
	o, ok := f.openCached(n, rel, flags)
	if !ok {
		var errno syscall.Errno
		if o, errno = f.openJudgedName(ctx, rel, flags); errno != 0 {
			return nil, 0, errno
		}
		f.rememberVerdict(n, gv, gen, rel, flags, &o.st)
	}
	return f.openHandle(ctx, n, rel, flags, o)
}

// opened is a backing file an open reached: its descriptor, which the
// caller owns, and what the open learned about it.
type opened struct {
	fd int
	st unix.Stat_t
	// deferRecord: the open for writing is recorded before its first
	// change, or at release as a no-op (see recordNoop).
	deferRecord bool
}

// openWrites reports whether an open with flags may change the file.
func openWrites(flags uint32) bool {
	return flags&syscall.O_ACCMODE != syscall.O_RDONLY || flags&syscall.O_TRUNC != 0
}

// openJudgedName judges the open of rel at the checkpoint, records what
// must be recorded before it, and opens the backing file.
func (f *View) openJudgedName(ctx context.Context, rel string, flags uint32) (opened, syscall.Errno) {
	writing := openWrites(flags)
	o := opOpenRead
	if writing {
		o = opOpenWrite
	}
	t, errno := f.at(ctx, o, rel)
	if errno != 0 {
		return opened{}, errno
	}
	if errno := f.handleRoom(ctx, ledger.OpOpen, rel); errno != 0 {
		t.close()
		return opened{}, errno
	}
	if rel == protocol.EventsFile && flags&syscall.O_TRUNC != 0 && t.e.kind == kindFile {
		t.close()
		return opened{}, f.deny(ctx, ledger.KindAppendRejected, ledger.OpOpen, rel, syscall.EPERM, "events.jsonl is append-only; O_TRUNC refused")
	}
	// The protocol files are never opened for writing on the backing
	// folder: their writes are validated and applied by acpfs.
	oflags := int(flags) &^ (unix.O_CREAT | unix.O_EXCL | unix.O_NOCTTY)
	deferRecord := false
	if managed(rel) {
		oflags = unix.O_RDONLY
	} else if writing && flags&syscall.O_TRUNC != 0 && t.e.kind == kindFile {
		// Recorded before the open, which already changes the file.
		if errno := f.recordChange(ctx, ledger.OpOpen, rel, ""); errno != 0 {
			t.close()
			return opened{}, errno
		}
	} else if writing {
		// Recorded before the first change made through the handle, or
		// at its release as a no-op (recordNoop): an open that writes
		// nothing changes nothing, and a loop of them must not grow the
		// ledger by a full record each.
		deferRecord = true
	}
	t, fd, errno := f.openJudged(ctx, t, o, oflags)
	if errno != 0 {
		return opened{}, errno
	}
	t.close()
	return opened{fd: fd, st: t.opened, deferRecord: deferRecord}, 0
}

// openHandle records the read an open makes, when it reads the folder,
// and hands the descriptor of o over to the handle of the right kind
// for rel. Its first read checks again that the file is at its name
// (inPlace): a rename between the open and the read, which the watcher
// may not have reported yet, must not let the read through.
func (f *View) openHandle(ctx context.Context, n Node, rel string, flags uint32, o opened) (File, Caching, syscall.Errno) {
	acc := flags & syscall.O_ACCMODE
	_, private := f.stagedName(rel)
	// protocol.json as the history gives it, which the file on disk may
	// not state yet (its rewrite is deferred): what this open reads.
	var pjson []byte
	if rel == protocol.ProtocolFile {
		pjson = f.protocolContent()
	}
	var ver fileVersion
	// A private temporary file holds only what the agent wrote itself:
	// reading it back is no read of the folder.
	if acc != syscall.O_WRONLY && !private {
		var errno syscall.Errno
		if ver, errno = f.recordOpenRead(ctx, rel, o.fd, &o.st, pjson); errno != 0 {
			unix.Close(o.fd)
			return nil, 0, errno
		}
	}
	h := f.newHandle(o.fd, rel, n)
	if acc != syscall.O_WRONLY && rel != protocol.EventsFile && pjson == nil && !private {
		h.readVer = &ver
	}
	switch {
	case rel == protocol.EventsFile:
		return &eventsFile{handle: f.track(h)}, CacheDirect, 0
	case rel == protocol.ProtocolFile:
		return f.openProtocolFile(ctx, h, pjson, flags)
	case openWrites(flags):
		h.writable = true
		h.unrecorded.Store(o.deferRecord)
		h.appending = flags&syscall.O_APPEND != 0
		if h.appending {
			// The kernel turns O_APPEND into writes at the size it has
			// cached, which is stale when another view or process has
			// appended since. Appending on the backing descriptor puts
			// each write at the true end of the file, and direct I/O
			// keeps those bytes out of a page cache indexed by the stale
			// offset.
			return f.track(h), CacheDirect, 0
		}
		return f.track(h), CacheDrop, 0
	case f.auditReads:
		return f.track(h), CacheDrop, 0
	case f.passthrough && !f.matcher().Writable(rel) && !h.isStaged(rel):
		// Read-only for this grant for the life of the inode: the kernel
		// may read the backing file directly. Mixing passthrough and
		// regular opens on one inode fails, so files the grant can write
		// never take this path, even when opened for reading.
		h.passthrough = true
		return f.track(h), CacheDrop, 0
	}
	keep := keepCache(n, ver, acc != syscall.O_WRONLY && !private)
	return f.track(h), keep, 0
}

// openProtocolFile sets up an open protocol.json: the content the open
// recorded, and for writing the rewrite to judge at flush.
func (f *View) openProtocolFile(ctx context.Context, h *handle, pjson []byte, flags uint32) (File, Caching, syscall.Errno) {
	pf := &protocolFile{handle: h, content: pjson}
	if openWrites(flags) {
		if errno := pf.load(flags&syscall.O_TRUNC != 0); errno != 0 {
			h.Release(ctx)
			return nil, 0, errno
		}
	}
	f.track(h)
	return pf, CacheDirect, 0
}

// openVerdict is a node's last judgement of a read-only open: allowed,
// of the regular file dev/ino found at rel, under the grant view gv, with
// the folder's directories as they were at gen (placeStamp).
type openVerdict struct {
	gv       *grantView
	gen      uint64
	rel      string
	dev, ino uint64
}

// uncachedOpenFlags are the open flags that make an open more than a read
// of what was judged before (or fail where it succeeded): such an open is
// judged in full whatever was judged before. 0x20 is the kernel's
// __FMODE_EXEC, an open by execve.
const uncachedOpenFlags = syscall.O_TRUNC | syscall.O_CREAT | syscall.O_EXCL | syscall.O_APPEND | syscall.O_DIRECTORY |
	unix.O_PATH | unix.O_TMPFILE | syscall.O_ASYNC | 0x20

// cachedOpen reports whether an open with flags may reuse a judgement.
func cachedOpen(flags uint32) bool {
	return flags&syscall.O_ACCMODE == syscall.O_RDONLY && flags&uncachedOpenFlags == 0
}

// rememberVerdict keeps the judgement of a read-only open of a regular
// file the view reads from the folder, made under gv at gen, for
// openCached.
func (f *View) rememberVerdict(n Node, gv *grantView, gen uint64, rel string, flags uint32, st *unix.Stat_t) {
	if n == nil || !cachedOpen(flags) || managed(rel) || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return
	}
	if _, private := f.stagedName(rel); private {
		return
	}
	n.Seen().open.Store(&openVerdict{gv: gv, gen: gen, rel: rel, dev: st.Dev, ino: st.Ino})
}

// lookupVerdict is the judgement of a read-only open that a lookup (or a
// listing) of the regular file st at rel, judged visible under gv at gen,
// makes too: an open adds to a lookup only that the grant lets the agent
// read the name.
func (f *View) lookupVerdict(gv *grantView, gen uint64, rel string, st *unix.Stat_t) *openVerdict {
	if gv == nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink > 1 || managed(rel) || !gv.matcher.Readable(rel) {
		return nil
	}
	if _, private := f.stagedName(rel); private {
		return nil
	}
	return &openVerdict{gv: gv, gen: gen, rel: rel, dev: st.Dev, ino: st.Ino}
}

// openCached opens rel for reading without judging it again when nothing
// its last judgement depended on can have changed: the same grant view,
// no directory moved, made, removed or marked in the folder since, nor
// anything concealed by identity added (placeStamp, while the watcher
// vouches for the whole folder), and the name still leads, beneath the
// folder and through no symlink, to the same regular file with one name
// that is not concealed by identity, which the open itself checks: a
// file replaced at the name (protocol.json at every append, a file an
// editor saves) is another file. A repeated open (grep -r, a build) then
// costs an open and a stat of the backing file. It reports false when it
// cannot vouch for the open; the caller judges it in full.
func (f *View) openCached(n Node, rel string, flags uint32) (opened, bool) {
	if n == nil || !cachedOpen(flags) {
		return opened{}, false
	}
	v := n.Seen().open.Load()
	if v == nil || v.rel != rel || v.gv != f.gv.Load() || v.gen != f.placeStamp() || f.cacheTimeout() != CacheTimeout {
		return opened{}, false
	}
	RaiseFileLimit()
	if f.ledger.Broken() != nil || f.ledger.Failing() || f.openHandles.Load() >= f.maxHandles && f.maxHandles > 0 ||
		processHandles.Load() >= processMaxHandles.Load() {
		// The judgement answers these, alike for every name.
		return opened{}, false
	}
	vp, ok := f.loc.viewPath(rel)
	if !ok {
		return opened{}, false
	}
	// O_NONBLOCK: a FIFO swapped in at the name since (its watcher event
	// still on its way) must not hold the open.
	oflags := int(flags) &^ unix.O_NOCTTY
	fd, err := f.b.openView(vp, oflags|unix.O_NONBLOCK, 0)
	if err != nil {
		return opened{}, false
	}
	o := opened{fd: fd}
	// Concealed by identity since (the coordinator's shared set grows
	// when a grant is reloaded or its run directory looked at again,
	// with no name changed in the folder): judged in full.
	if unix.Fstat(fd, &o.st) != nil || o.st.Dev != v.dev || o.st.Ino != v.ino || o.st.Mode&unix.S_IFMT != unix.S_IFREG ||
		o.st.Nlink > 1 || f.conceal.has(&o.st) {
		unix.Close(fd)
		return opened{}, false
	}
	// O_NONBLOCK stays: reads, writes, syncs and locks of a regular file
	// ignore it, and the descriptor is never polled (see handle).
	return o, true
}

// openRetries bounds how often an open judges its name again when the
// entry was replaced between the judgement and the open (protocol.json is
// replaced by every append's deferred rewrite).
const openRetries = 4

// openJudged opens the entry t judged. When its name was given to
// another entry in between (a rename onto it: protocol.json is replaced
// by every append's deferred rewrite), the name is judged again and the
// open retried, as an open of the folder itself would find the new
// entry; the caller's record of a change stands for the retries.
func (f *View) openJudged(ctx context.Context, t *target, o op, oflags int) (*target, int, syscall.Errno) {
	for attempt := 1; ; attempt++ {
		if t.e.kind != kindFile {
			// The kernel opens symlinks by following them and
			// directories through opendir: anything else here is a
			// name whose entry changed kind since the kernel looked
			// it up.
			t.close()
			return nil, -1, syscall.ENOENT
		}
		fd, err := t.openSame(oflags)
		if err == nil {
			return t, fd, 0
		}
		t.close()
		if err != errReplaced || attempt >= openRetries {
			return nil, -1, errnoOf(err)
		}
		var errno syscall.Errno
		if t, errno = f.at(ctx, o, t.rel); errno != 0 {
			return nil, -1, errno
		}
	}
}

// recordOpenRead records the read an open makes of rel (fd, whose stat
// the open took, or pjson for protocol.json as the history gives it) and
// returns the version of the file read.
func (f *View) recordOpenRead(ctx context.Context, rel string, fd int, st *unix.Stat_t, pjson []byte) (fileVersion, syscall.Errno) {
	ver := unixVersion(st)
	if pjson != nil {
		return ver, f.recordRead(ctx, rel, digest.Bytes(pjson), "")
	}
	return f.recordReadOf(ctx, rel, fd, ver, "")
}

// keepCache decides the open flags of served reads, checked one by one,
// of pages the kernel may keep between opens: warm reads then cost what
// the page cache costs. The watcher drops the pages when the backing
// file changes, and a grant change drops them too. A change inotify does
// not report shows here: the file is not the version whose attributes
// the kernel holds. reading is whether this open reads the folder.
func keepCache(n Node, ver fileVersion, reading bool) Caching {
	if n != nil && reading {
		if prev := n.Seen().v.Swap(&ver); prev != nil && *prev != ver {
			// Without FOPEN_KEEP_CACHE the kernel drops the pages at this
			// open; the attributes (the size above all) go too, from
			// another goroutine: a notification sent while this request
			// is answered could wait for it.
			n.DropContent(false)
			return CacheDrop
		}
	}
	return CacheKeep
}

// handle is an open regular file. It holds the descriptor the checkpoint
// opened and implements each file operation explicitly: a method go-fuse
// adds to its loopback file one day is not inherited, so no call can
// reach the backing file without passing a check here.
type handle struct {
	// fdMu guards the descriptor against its close at release: withFd
	// and Locked hold it. Reads take no lock: the kernel sends no request
	// on a descriptor after its release, and fdNum is atomic.
	fdMu  sync.RWMutex
	fdNum atomic.Int32 // -1 once released
	// lockFile is a duplicate of the descriptor (the same open file
	// description, so the same locks) for the adapter's locks, made at
	// the first lock request: most opens never lock.
	lockFile    *os.File
	fsys        *View
	node        Node   // nil for handed-over snapshots
	rel         string // path at open, for records when the node is gone
	writable    bool
	appending   bool // opened O_APPEND: writes go to the true end of the file
	passthrough bool
	audit       bool

	// readVer is the version of the content whose hash the ledger holds
	// for this descriptor; a served read of another version records it
	// too. nil when the open recorded no read.
	verMu   sync.Mutex
	readVer *fileVersion
	// placeGen is the entryGen at which the file was last seen at its
	// name (see inPlace).
	placeGen atomic.Uint64
	// unrecorded: the open for writing is not in the ledger yet; its
	// write record comes before the first change (recordFirstChange).
	recMu      sync.Mutex
	unrecorded atomic.Bool
}

var (
	_ File = (*handle)(nil)
	_ File = (*eventsFile)(nil)
	_ File = (*protocolFile)(nil)
)

// newHandle wraps fd, which the caller hands over. The caller sets the
// handle up, then registers it with FS.track before handing it out.
func (f *View) newHandle(fd int, rel string, n Node) *handle {
	f.handleOpened()
	h := &handle{fsys: f, node: n, rel: rel, audit: f.auditReads}
	h.fdNum.Store(int32(fd))
	return h
}

// track registers a handle, fully set up, so that grant changes reach
// it, and returns it.
func (f *View) track(h *handle) *handle {
	f.handles.add(h)
	return h
}

func (h *handle) base() *handle { return h }

func (h *handle) fd() int { return int(h.fdNum.Load()) }

func (h *handle) path() string {
	if h.node != nil {
		if p := h.node.ViewPath(); p != "" {
			return h.fsys.loc.nameOf(p)
		}
	}
	return h.rel
}

// Locked: see File. nil once the handle is released.
func (h *handle) Locked() *os.File {
	h.fdMu.Lock()
	defer h.fdMu.Unlock()
	fd := h.fd()
	if h.lockFile == nil && fd >= 0 {
		if d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0); err == nil {
			h.lockFile = os.NewFile(uintptr(d), h.rel)
		}
	}
	return h.lockFile
}

func (h *handle) Getattr(ctx context.Context) (unix.Stat_t, syscall.Errno) {
	if errno := h.readable(ctx); errno != 0 {
		return unix.Stat_t{}, errno
	}
	return h.stat()
}

func (h *handle) stat() (unix.Stat_t, syscall.Errno) {
	var st unix.Stat_t
	if err := unix.Fstat(h.fd(), &st); err != nil {
		return st, errnoOf(err)
	}
	if h.node != nil && h.path() == protocol.ProtocolFile {
		h.fsys.protocolAttr(&st)
	}
	return st, 0
}

// Flushes: see File. Flush only closes a duplicate of the descriptor,
// which matters to a descriptor that wrote (its errors), not to one that
// only read: locks are the backing descriptor's own (OFD) and go at
// release.
func (h *handle) Flushes() bool { return h.writable }

func (h *handle) PassthroughFd() (int, bool) {
	if !h.passthrough {
		return -1, false
	}
	return h.fd(), true
}

// readable is checked before every read the daemon serves: a grant
// narrowed or revoked since the open stops the next read.
func (h *handle) readable(ctx context.Context) syscall.Errno {
	p := h.path()
	if h.isSnapshotOf(p) || h.isStaged(p) {
		return 0
	}
	if !h.fsys.matcher().Readable(p) {
		return h.fsys.deny(ctx, ledger.KindDenied, ledger.OpRead, p, syscall.EACCES, "the grant no longer lets this agent read the file")
	}
	return h.inPlace(ctx, ledger.OpRead)
}

// inPlace refuses a descriptor whose file is no longer the one at the
// name it was opened by: moved (into a place the grant hides, say),
// given another name, or replaced. The grant judged the name, so what
// the descriptor reaches must still be what the name shows. Checked
// again only after a name change in the folder (entryGen), so a steady
// stream of reads costs nothing.
func (h *handle) inPlace(ctx context.Context, op ledger.Op) syscall.Errno {
	f := h.fsys
	if managed(h.path()) {
		return 0 // acpfs replaces these itself; their content is its own
	}
	gen := f.entryGen.Load()
	if h.placeGen.Load() == gen+1 && f.cacheTimeout() == CacheTimeout {
		// No name changed since the last check, as a watcher that sees
		// the whole folder vouches; without one, every call checks.
		return 0
	}
	var st unix.Stat_t
	if err := unix.Fstat(h.fd(), &st); err != nil {
		return errnoOf(err)
	}
	p := h.path()
	t, errno := f.resolve(f.matcher(), p)
	if errno == 0 {
		defer t.close()
	}
	if errno != 0 || t.e.kind != kindFile || t.e.st.Dev != st.Dev || t.e.st.Ino != st.Ino {
		if h.node != nil {
			// Not from inside the request: the kernel may be waiting on
			// this very request for the pages it would drop.
			h.node.DropContent(false)
		}
		return f.deny(ctx, ledger.KindDenied, op, p, syscall.EACCES,
			"the file is no longer the one at the name it was opened by (moved, given another name or replaced)")
	}
	h.placeGen.Store(gen + 1) // +1: the zero value means never checked
	return 0
}

// isStaged reports whether p is a private temporary file of the view:
// the agent's own until it is renamed onto a name of the folder.
func (h *handle) isStaged(p string) bool {
	_, ok := h.fsys.stagedName(p)
	return ok
}

func (h *handle) isSnapshotOf(p string) bool {
	if h.node != nil {
		return false
	}
	_, ok := h.fsys.gv.Load().handoffs[p]
	return ok
}

func (h *handle) Read(ctx context.Context, dest []byte, off int64) (res []byte, errno syscall.Errno) {
	defer h.fsys.Guard(ctx, ledger.OpRead, h.rel, &errno)
	if errno := h.readable(ctx); errno != 0 {
		return nil, errno
	}
	if errno := h.recordNewVersion(ctx); errno != 0 {
		return nil, errno
	}
	if h.audit {
		h.fsys.record(ctx, ledger.KindReadRequest, ledger.OpRead, h.path(), "", fmt.Sprintf("offset=%d length=%d", off, len(dest)))
	}
	k, err := unix.Pread(h.fd(), dest, off)
	if err != nil {
		return nil, errnoOf(err)
	}
	// A change between the check above and the read: the bytes read
	// may be of the new version, which is recorded before they are
	// handed out.
	if errno := h.recordNewVersion(ctx); errno != 0 {
		return nil, errno
	}
	return dest[:k], 0
}

// recordNewVersion keeps the ledger true to what a descriptor reads: when
// the file changed since the content hash the ledger holds for it (a
// writer elsewhere rewrote it), the new version is recorded as a read
// before any byte of it is served.
func (h *handle) recordNewVersion(ctx context.Context) syscall.Errno {
	h.verMu.Lock()
	defer h.verMu.Unlock()
	if h.readVer == nil {
		return 0
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(h.fd(), &st); err != nil {
		return errnoOf(err)
	}
	v := versionOf(&st)
	if v == *h.readVer {
		return 0
	}
	v, errno := h.fsys.recordReadOf(ctx, h.path(), h.fd(), v, "content changed since the open")
	if errno != 0 {
		return errno
	}
	h.readVer = &v
	return 0
}

// noopOpen is the detail of the record of an open for writing that wrote
// nothing.
const noopOpen = "opened for writing, closed without a write through the descriptor"

// recordFirstChange writes the record of the open for writing before the
// first change made through the handle. Without its record the change
// does not happen (see recordChange).
func (h *handle) recordFirstChange(ctx context.Context) syscall.Errno {
	if !h.unrecorded.Load() {
		return 0
	}
	h.recMu.Lock()
	defer h.recMu.Unlock()
	if !h.unrecorded.Load() {
		return 0
	}
	if errno := h.fsys.recordChange(ctx, ledger.OpOpen, h.rel, ""); errno != 0 {
		return errno
	}
	h.unrecorded.Store(false)
	return 0
}

// ownChange notes that this descriptor changed the file itself: reading
// back its own bytes is no new version for the ledger.
func (h *handle) ownChange() {
	h.verMu.Lock()
	defer h.verMu.Unlock()
	if h.readVer == nil {
		return
	}
	var st syscall.Stat_t
	if syscall.Fstat(h.fd(), &st) == nil {
		v := versionOf(&st)
		h.readVer = &v
	}
}

// writeCheck runs before every data change: the grant may have changed
// and the file may have been frozen since it was opened.
func (h *handle) writeCheck(ctx context.Context, op ledger.Op) syscall.Errno {
	if !h.writable {
		return syscall.EBADF
	}
	p := h.path()
	if errno := h.fsys.gated(ctx, op, p); errno != 0 {
		return errno
	}
	if h.isStaged(p) {
		return 0
	}
	if v := checkName(opOpenWrite, p, h.fsys.policy()); v.errno != 0 {
		// Pages the kernel keeps for a writable mapping hold bytes whose
		// writeback is refused: drop them, so that the view shows the
		// file as it is.
		if h.node != nil {
			h.node.DropContent(false) // not inside the writeback request
		}
		return h.fsys.deny(ctx, v.record, op, p, v.errno, v.why)
	}
	return h.inPlace(ctx, op)
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (n uint32, errno syscall.Errno) {
	defer h.fsys.Guard(ctx, ledger.OpWrite, h.rel, &errno)
	h.fsys.Enter(ledger.OpWrite, h.rel)
	if errno := h.writeCheck(ctx, ledger.OpWrite); errno != 0 {
		return 0, errno
	}
	if errno := h.recordFirstChange(ctx); errno != 0 {
		return 0, errno
	}
	grow := growth(h.fd(), off, int64(len(data)), h.appending)
	if errno := h.fsys.chargeGrowth(ctx, ledger.OpWrite, h.rel, grow); errno != 0 {
		return 0, errno
	}
	var k int
	var err error
	if h.appending {
		k, err = unix.Write(h.fd(), data) // at the true end of the file
	} else {
		k, err = unix.Pwrite(h.fd(), data, off)
	}
	if k < len(data) {
		h.fsys.refund(min(grow, int64(len(data)-max(k, 0))))
	}
	h.ownChange()
	return uint32(k), errnoOf(err)
}

func (h *handle) Allocate(ctx context.Context, off, size uint64, mode uint32) (errno syscall.Errno) {
	defer h.fsys.Guard(ctx, ledger.OpFallocate, h.rel, &errno)
	if errno := h.writeCheck(ctx, ledger.OpFallocate); errno != 0 {
		return errno
	}
	if errno := h.recordFirstChange(ctx); errno != 0 {
		return errno
	}
	grow := int64(0)
	if mode&unix.FALLOC_FL_KEEP_SIZE == 0 {
		grow = growth(h.fd(), int64(off), int64(size), false)
	}
	if errno := h.fsys.chargeGrowth(ctx, ledger.OpFallocate, h.rel, grow); errno != 0 {
		return errno
	}
	err := unix.Fallocate(h.fd(), mode, int64(off), int64(size))
	if err != nil {
		h.fsys.refund(grow)
	}
	return errnoOf(err)
}

// Flush closes a duplicate of the descriptor: what close(2) of one of
// the caller's descriptors does to the file (its POSIX locks go), without
// closing the view's own.
func (h *handle) Flush(ctx context.Context) syscall.Errno {
	return h.withFd(func(fd int) error {
		d, err := unix.Dup(fd)
		if err != nil {
			return err
		}
		return unix.Close(d)
	})
}

func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	return h.withFd(unix.Fsync)
}

// withFd runs fn on the descriptor unless the handle was released.
func (h *handle) withFd(fn func(fd int) error) syscall.Errno {
	h.fdMu.RLock()
	defer h.fdMu.RUnlock()
	fd := h.fd()
	if fd < 0 {
		return syscall.EBADF
	}
	return errnoOf(fn(fd))
}

// closeFd closes the descriptor (and its duplicate for locks) once.
func (h *handle) closeFd() syscall.Errno {
	h.fdMu.Lock()
	defer h.fdMu.Unlock()
	fd := h.fd()
	if fd < 0 {
		return syscall.EBADF
	}
	h.fdNum.Store(-1)
	if h.lockFile != nil {
		h.lockFile.Close()
		h.lockFile = nil
	}
	return errnoOf(unix.Close(fd))
}

func (h *handle) Release(ctx context.Context) syscall.Errno {
	if h.unrecorded.Load() {
		// Opened for writing, nothing written through it: still a fact
		// of the path, recorded once in full and then counted.
		if err := h.fsys.recordNoop(ctx, ledger.OpOpen, h.rel, noopOpen); err != nil {
			slog.Error("ledger: cannot record an open for writing", "path", h.rel, "err", err)
		}
	}
	errno := h.closeFd()
	if errno == syscall.EBADF {
		return errno // released before
	}
	h.fsys.handles.remove(h)
	h.fsys.handleClosed()
	return errno
}

func (h *handle) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	var n int64
	errno := h.withFd(func(fd int) error {
		var err error
		n, err = unix.Seek(fd, int64(off), int(whence))
		return err
	})
	return uint64(n), errno
}

// eventsFile is an open events.jsonl. Reads come from the backing file;
// writes are split into lines, and each complete line is validated and
// appended by the protocol log at the true end of the file, whatever
// offset the kernel sent.
type eventsFile struct {
	*handle
	mu      sync.Mutex
	pending []byte // start of a line not yet terminated
	discard bool   // dropping the rest of an over-long line
	// lost: bytes of a line were acknowledged (kept as pending) and then
	// dropped because the line grew too long. The kernel reports such a
	// write as short, which a writer that does not retry takes for
	// success, so close(2) reports the refusal too.
	lost bool
}

func (e *eventsFile) PassthroughFd() (int, bool) { return -1, false }

// Flushes: see File. Every close of events.jsonl goes through Flush,
// which appends or refuses what was left without a newline.
func (e *eventsFile) Flushes() bool { return true }

// drop forgets the unfinished line and gives its bytes back to the
// view's budget. Called with mu held.
func (e *eventsFile) drop() {
	e.fsys.releasePending(int64(len(e.pending)))
	e.pending = nil
}

func (e *eventsFile) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	return e.fsys.deny(ctx, ledger.KindAppendRejected, ledger.OpFallocate, protocol.EventsFile, syscall.EPERM, "events.jsonl is append-only")
}

// Write acknowledges bytes only as far as they are safely handled: whole
// accepted lines, or the start of a line kept for the next write. When a
// later line of the same write is refused, the accepted prefix is
// reported as a short write, so the caller retries the rest and receives
// the error for exactly the refused line.
func (e *eventsFile) Write(ctx context.Context, data []byte, off int64) (n uint32, errno syscall.Errno) {
	defer e.fsys.Guard(ctx, ledger.OpAppend, protocol.EventsFile, &errno)
	e.fsys.Enter(ledger.OpAppend, protocol.EventsFile)
	e.mu.Lock()
	defer e.mu.Unlock()
	// Only the grant can have changed since open: events.jsonl is never
	// a deliverable (so never frozen), and its content is validated line
	// by line whatever name reached it. The protocol log catches up with
	// other writers itself, so no refresh is needed here.
	if !e.fsys.matcher().Writable(protocol.EventsFile) {
		return 0, e.fsys.deny(ctx, ledger.KindDenied, ledger.OpAppend, protocol.EventsFile, syscall.EACCES, "not writable under the grant")
	}
	if errno := e.fsys.gated(ctx, ledger.OpAppend, protocol.EventsFile); errno != 0 {
		return 0, errno
	}
	consumed := 0
	rest := data
	for len(rest) > 0 {
		i := bytes.IndexByte(rest, '\n')
		if e.discard {
			// The rest of a refused over-long line: every write of it
			// fails too, so no writer mistakes it for accepted bytes.
			if i >= 0 {
				e.discard = false
			}
			return 0, syscall.EINVAL
		}
		if i < 0 {
			if len(e.pending)+len(rest) > maxLine {
				e.lost = e.lost || len(e.pending) > 0
				e.drop()
				e.discard = true
				return 0, e.fsys.rejectLine(ctx, syscall.EINVAL, fmt.Sprintf("line longer than %d bytes", maxLine))
			}
			if !e.fsys.holdPending(int64(len(rest))) {
				return 0, e.fsys.deny(ctx, ledger.KindAppendRejected, ledger.OpAppend, protocol.EventsFile, syscall.ENOMEM,
					"too many unfinished event lines held by this view or this daemon; finish a line with a newline first")
			}
			e.pending = append(e.pending, rest...)
			return uint32(len(data)), 0
		}
		startedHere := len(e.pending) == 0
		line := rest[:i]
		if !startedHere {
			line = append(e.pending, line...)
			e.drop()
		}
		var errno syscall.Errno
		if len(line) > maxLine {
			errno = e.fsys.rejectLine(ctx, syscall.EINVAL, fmt.Sprintf("line longer than %d bytes", maxLine))
		} else {
			errno = e.fsys.appendLine(ctx, line)
		}
		if errno != 0 {
			if consumed > 0 && startedHere {
				return uint32(consumed), 0
			}
			return 0, errno
		}
		consumed += i + 1
		rest = rest[i+1:]
	}
	return uint32(consumed), 0
}

// Flush handles what is left without a newline at close. A complete JSON
// event (`printf '{...}' >> events.jsonl`) is appended as if its newline
// were there: shells ignore errors of close(2), so refusing it would lose
// it silently. Anything else is refused, and close(2) reports it.
func (e *eventsFile) Flush(ctx context.Context) (errno syscall.Errno) {
	defer e.fsys.Guard(ctx, ledger.OpFlush, protocol.EventsFile, &errno)
	e.mu.Lock()
	pending, lost := e.pending, e.lost
	e.drop()
	e.discard, e.lost = false, false
	e.mu.Unlock()
	if lost {
		// Refused and recorded when it happened; close only says so.
		return syscall.EINVAL
	}
	if len(pending) > 0 {
		if protocol.ClassifyPending(pending) != protocol.PendingPartial {
			if errno := e.fsys.appendLine(ctx, pending); errno != 0 {
				return errno
			}
		} else if _, err := e.fsys.log.AppendPending(pending, e.fsys.participant()); err != nil {
			return e.fsys.refuseAppend(ctx, err)
		}
	}
	return e.handle.Flush(ctx)
}

// Read never hands out a line still being written by another process:
// what it returns ends with a newline. A read that stops inside a line
// is cut after the last newline it holds (the caller comes back for the
// rest); one that holds no newline at all is a part of a long line, and
// is handed out only once the rest of that line, up to its newline, is
// there. Whether the writer has finished cannot be told from the file's
// size: it may grow between the read and a stat.
func (e *eventsFile) Read(ctx context.Context, dest []byte, off int64) (res []byte, errno syscall.Errno) {
	defer e.fsys.Guard(ctx, ledger.OpRead, protocol.EventsFile, &errno)
	if errno := e.readable(ctx); errno != 0 {
		return nil, errno
	}
	if e.audit {
		e.fsys.record(ctx, ledger.KindReadRequest, ledger.OpRead, protocol.EventsFile, "", fmt.Sprintf("offset=%d length=%d", off, len(dest)))
	}
	k, err := unix.Pread(e.fd(), dest, off)
	if err != nil {
		return nil, errnoOf(err)
	}
	data := dest[:k]
	if k == 0 || data[k-1] == '\n' {
		return data, 0
	}
	if i := bytes.LastIndexByte(data, '\n'); i >= 0 {
		return data[:i+1], 0
	}
	if !lineEndsAfter(e.fd(), off+int64(k)) {
		return nil, 0
	}
	return data, 0
}

// lineEndsAfter reports whether a newline follows off in fd within the
// longest line a view accepts: the line read so far is complete.
func lineEndsAfter(fd int, off int64) bool {
	buf := make([]byte, 64<<10)
	for end := off + maxLine; off < end; {
		n, err := unix.Pread(fd, buf, off)
		if err != nil || n == 0 {
			return false
		}
		if bytes.IndexByte(buf[:n], '\n') >= 0 {
			return true
		}
		off += int64(n)
	}
	return false
}

// appendLine hands one complete line to the protocol log.
//
// The acceptance is recorded after the line is validated and before it is
// written, under the log's lock: a crash between the two leaves a record
// of an event that is not in events.jsonl (the audit shows it as
// accepted but never written, see append_failed), never an event without
// its record.
func (f *View) appendLine(ctx context.Context, line []byte) syscall.Errno {
	recorded := false
	_, err := f.log.AppendLineRecordedContext(ctx, line, f.participant(), func(ev protocol.Event) error {
		if err := f.record(ctx, ledger.KindAppendAccepted, ledger.OpAppend, protocol.EventsFile, "", fmt.Sprintf("seq %d %s", ev.Seq, ev.Event)); err != nil {
			return err
		}
		recorded = true
		return nil
	})
	if err != nil {
		if recorded {
			// Recorded, then the write failed: say that it did not land.
			f.record(ctx, ledger.KindAppendFailed, ledger.OpAppend, protocol.EventsFile, "", err.Error())
		}
		if protocol.RuleOf(err) == protocol.RuleRecord {
			f.ledgerDown(ledger.OpAppend, protocol.EventsFile, err)
			return syscall.EIO
		}
		return f.refuseAppend(ctx, err)
	}
	f.wake()
	return 0
}

// refuseAppend answers a line the protocol log refused.
func (f *View) refuseAppend(ctx context.Context, err error) syscall.Errno {
	errno := syscall.EPERM
	switch protocol.KindOf(err) {
	case protocol.Malformed:
		errno = syscall.EINVAL
	case protocol.Unavailable:
		// The folder itself is broken (unreadable files, a history
		// that already violates the protocol): not this line's fault.
		errno = syscall.EIO
		switch protocol.RuleOf(err) {
		case protocol.RuleStore:
			// The store of a multi-host collaboration did not take
			// it: nothing changed, and the view is read-only until
			// the store answers again.
			errno = syscall.EROFS
		case protocol.RuleLockBusy:
			// Another writer kept the lock for protocol.LockTimeout:
			// nothing was written, the agent may try again.
			errno = syscall.EBUSY
		case protocol.RuleInterrupted:
			// The caller was signalled while the line waited for the
			// lock (FUSE_INTERRUPT): answer now, nothing was written.
			errno = syscall.EINTR
		}
	}
	return f.denyAs(ctx, ledger.KindAppendRejected, ledger.OpAppend, protocol.EventsFile, errno, err.Error(), "rule "+protocol.RuleOf(err))
}

func (f *View) rejectLine(ctx context.Context, errno syscall.Errno, why string) syscall.Errno {
	return f.deny(ctx, ledger.KindAppendRejected, ledger.OpAppend, protocol.EventsFile, errno, why)
}

// protocolFile is an open protocol.json. Writes are collected in memory
// and judged at flush: a rewrite whose content equals the derived state
// (what the reference scripts write after an append) is accepted, and
// the file on disk stays the one acpfs maintains; anything else is
// refused with EPERM.
type protocolFile struct {
	*handle
	// content is protocol.json as the open found it in memory (see
	// FS.protocolContent); nil when the file on disk is served instead.
	content []byte
	mu      sync.Mutex
	buf     []byte
	dirty   bool
}

func (p *protocolFile) PassthroughFd() (int, bool) { return -1, false }

func (p *protocolFile) load(trunc bool) syscall.Errno {
	p.writable = true
	if trunc {
		p.dirty = true
		return 0
	}
	if p.content != nil {
		p.buf = append([]byte(nil), p.content...)
		return 0
	}
	b, err := io.ReadAll(io.NewSectionReader(fdReader(p.fd()), 0, maxLine))
	if err != nil {
		return errnoOf(err)
	}
	p.buf = b
	return 0
}

// Read serves the content the open recorded.
func (p *protocolFile) Read(ctx context.Context, dest []byte, off int64) (res []byte, errno syscall.Errno) {
	if p.content == nil {
		return p.handle.Read(ctx, dest, off)
	}
	defer p.fsys.Guard(ctx, ledger.OpRead, protocol.ProtocolFile, &errno)
	if errno := p.readable(ctx); errno != 0 {
		return nil, errno
	}
	if p.audit {
		p.fsys.record(ctx, ledger.KindReadRequest, ledger.OpRead, protocol.ProtocolFile, "", fmt.Sprintf("offset=%d length=%d", off, len(dest)))
	}
	if off >= int64(len(p.content)) {
		return nil, 0
	}
	end := min(off+int64(len(dest)), int64(len(p.content)))
	return p.content[off:end], 0
}

func (p *protocolFile) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if !p.writable {
		return 0, syscall.EBADF
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if end := int(off) + len(data); end > len(p.buf) {
		if end > maxLine {
			return 0, p.fsys.deny(ctx, ledger.KindDenied, ledger.OpWrite, protocol.ProtocolFile, syscall.EFBIG, "protocol.json rewrite too large")
		}
		p.buf = append(p.buf, make([]byte, end-len(p.buf))...)
	}
	copy(p.buf[off:], data)
	p.dirty = true
	return uint32(len(data)), 0
}

func (p *protocolFile) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	return syscall.EOPNOTSUPP
}

// truncate handles ftruncate on a handle opened for writing.
func (p *protocolFile) truncate(size uint64) (unix.Stat_t, syscall.Errno) {
	if !p.writable || size > maxLine {
		return unix.Stat_t{}, syscall.EPERM
	}
	p.mu.Lock()
	if int(size) <= len(p.buf) {
		p.buf = p.buf[:size]
	} else {
		p.buf = append(p.buf, make([]byte, int(size)-len(p.buf))...)
	}
	p.dirty = true
	p.mu.Unlock()
	st, errno := p.stat()
	if errno != 0 {
		return st, errno
	}
	st.Size = int64(size)
	return st, 0
}

func (p *protocolFile) Flush(ctx context.Context) (errno syscall.Errno) {
	defer p.fsys.Guard(ctx, ledger.OpFlush, protocol.ProtocolFile, &errno)
	p.mu.Lock()
	buf, dirty := p.buf, p.dirty
	p.dirty = false
	p.mu.Unlock()
	if !dirty {
		return 0
	}
	if err := p.fsys.log.CheckProtocolWrite(buf); err != nil {
		return p.fsys.deny(ctx, ledger.KindDenied, ledger.OpWrite, protocol.ProtocolFile, syscall.EPERM, err.Error())
	}
	return p.fsys.recordChange(ctx, ledger.OpRewrite, protocol.ProtocolFile, "content equals the derived state")
}

// protocolContent is protocol.json as the derived state has it (see
// protocol.Log.ProtocolJSON), or nil when the log cannot say, in which
// case the file on disk is served.
func (f *View) protocolContent() []byte {
	data, err := f.log.ProtocolJSON()
	if err != nil {
		slog.Warn("protocol.json: serving the file on disk", "err", err)
		return nil
	}
	return data
}

// protocolAttr gives protocol.json the size of the content a view serves.
func (f *View) protocolAttr(st *unix.Stat_t) {
	if data := f.protocolContent(); data != nil {
		st.Size = int64(len(data))
		st.Blocks = (st.Size + 511) / 512
	}
}
