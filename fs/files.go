package fs

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sync"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/protocol"
)

// open implements the open row of the contract for every kind of file.
func (f *FS) open(ctx context.Context, n *node, rel string, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	m := f.matcher()
	if !m.Visible(rel) {
		// Reachable only through an inode looked up before the grant
		// changed, or a file handle.
		return nil, 0, f.hide(ctx, "open", rel, "hidden by grant")
	}
	acc := flags & syscall.O_ACCMODE
	writing := acc != syscall.O_RDONLY || flags&syscall.O_TRUNC != 0
	if writing {
		if errno := f.checkWrite(ctx, "open", rel); errno != 0 {
			return nil, 0, errno
		}
	} else if !m.Readable(rel) {
		return nil, 0, f.deny(ctx, ledger.KindDenied, "open", rel, syscall.EACCES, "not readable under the grant")
	}

	// The protocol files are never opened for writing on the backing
	// folder: their writes are validated and applied by acpfs.
	openFlags := flags
	if managed(rel) {
		openFlags = syscall.O_RDONLY
		if rel == EventsFile && flags&syscall.O_TRUNC != 0 {
			return nil, 0, f.deny(ctx, ledger.KindAppendRejected, "open", rel, syscall.EPERM, "events.jsonl is append-only; O_TRUNC refused")
		}
	}
	fh, _, errno := n.LoopbackNode.Open(ctx, openFlags)
	if errno != 0 {
		return nil, 0, errno
	}
	lf := fh.(*gofs.LoopbackFile)
	fd, _ := lf.PassthroughFd()

	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		lf.Release(ctx)
		return nil, 0, gofs.ToErrno(err)
	}
	// Another name of the same file may be one the grant hides (an
	// oracle linked into a readable folder); refuse rather than guess.
	if st.Mode&syscall.S_IFMT == syscall.S_IFREG && st.Nlink > 1 {
		lf.Release(ctx)
		return nil, 0, f.deny(ctx, ledger.KindDenied, "open", rel, syscall.EACCES, "hard-linked file: its other names cannot be checked against the grant")
	}

	if acc != syscall.O_WRONLY {
		sha, err := f.contentHash(rel, fd)
		if err != nil {
			lf.Release(ctx)
			return nil, 0, gofs.ToErrno(err)
		}
		if errno := f.recordRead(ctx, rel, sha, ""); errno != 0 {
			lf.Release(ctx)
			return nil, 0, errno
		}
	}

	h := &handle{LoopbackFile: lf, fsys: f, node: n.EmbeddedInode(), rel: rel, audit: f.auditReads}
	switch {
	case rel == EventsFile:
		return &eventsFile{handle: h}, fuse.FOPEN_DIRECT_IO, 0
	case rel == ProtocolFile:
		pf := &protocolFile{handle: h}
		if writing {
			if errno := pf.load(flags&syscall.O_TRUNC != 0); errno != 0 {
				lf.Release(ctx)
				return nil, 0, errno
			}
		}
		return pf, fuse.FOPEN_DIRECT_IO, 0
	case writing:
		f.record(ctx, ledger.KindWrite, "open", rel, "", "")
		h.writable = true
		if flags&syscall.O_APPEND != 0 {
			// The kernel turns O_APPEND into writes at the size it has
			// cached, which is stale when another view or process has
			// appended since. Appending on the backing descriptor puts
			// each write at the true end of the file, and direct I/O
			// keeps those bytes out of a page cache indexed by the stale
			// offset.
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, unix.O_APPEND); err != nil {
				lf.Release(ctx)
				return nil, 0, gofs.ToErrno(err)
			}
			return h, fuse.FOPEN_DIRECT_IO, 0
		}
	case !f.auditReads && !m.Writable(rel):
		// Read-only for this grant for the life of the inode: the kernel
		// may read the backing file directly. Mixing passthrough and
		// regular opens on one inode fails, so files the grant can write
		// never take this path, even when opened for reading.
		h.passthrough = true
	}
	return h, 0, 0
}

// contentHash is the SHA-256 recorded with each read.
func (f *FS) contentHash(rel string, fd int) (string, error) {
	if rel == EventsFile {
		return f.evHash.sum()
	}
	return f.hashes.sum(fd)
}

// handle is the file handle for every regular file. It embeds the
// loopback file for the mechanics and overrides each call that could
// change the file, so that a check cannot be bypassed by a variant
// (writev, fallocate, ioctl) the loopback also implements.
type handle struct {
	*gofs.LoopbackFile
	fsys        *FS
	node        *gofs.Inode
	rel         string // path at open, for records when the node is gone
	writable    bool
	passthrough bool
	audit       bool
}

var (
	_ gofs.FilePassthroughFder = (*handle)(nil)
	_ gofs.FileReader          = (*handle)(nil)
	_ gofs.FileWriter          = (*handle)(nil)
	_ gofs.FileWritever        = (*handle)(nil)
	_ gofs.FileAllocater       = (*handle)(nil)
	_ gofs.FileIoctler         = (*handle)(nil)
)

func (h *handle) path() string {
	if p := h.node.Path(nil); p != "" {
		return p
	}
	return h.rel
}

func (h *handle) PassthroughFd() (int, bool) {
	if !h.passthrough {
		return -1, false
	}
	return h.LoopbackFile.PassthroughFd()
}

func (h *handle) Read(ctx context.Context, dest []byte, off int64) (res fuse.ReadResult, errno syscall.Errno) {
	if h.audit {
		h.fsys.record(ctx, ledger.KindReadRequest, "read", h.path(), "", fmt.Sprintf("offset=%d length=%d", off, len(dest)))
	}
	return h.LoopbackFile.Read(ctx, dest, off)
}

// writeCheck runs before every data change: the grant may have changed
// and the file may have been frozen since it was opened.
func (h *handle) writeCheck(ctx context.Context, op string) syscall.Errno {
	if !h.writable {
		return syscall.EBADF
	}
	return h.fsys.checkWrite(ctx, op, h.path())
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (n uint32, errno syscall.Errno) {
	defer h.fsys.guard(ctx, "write", h.rel, &errno)
	h.fsys.enter("write", h.rel)
	if errno := h.writeCheck(ctx, "write"); errno != 0 {
		return 0, errno
	}
	return h.LoopbackFile.Write(ctx, data, off)
}

func (h *handle) Writev(ctx context.Context, data [][]byte, off int64) (n uint32, errno syscall.Errno) {
	defer h.fsys.guard(ctx, "write", h.rel, &errno)
	h.fsys.enter("write", h.rel)
	if errno := h.writeCheck(ctx, "write"); errno != 0 {
		return 0, errno
	}
	return h.LoopbackFile.Writev(ctx, data, off)
}

func (h *handle) Allocate(ctx context.Context, off, size uint64, mode uint32) (errno syscall.Errno) {
	defer h.fsys.guard(ctx, "fallocate", h.rel, &errno)
	if errno := h.writeCheck(ctx, "fallocate"); errno != 0 {
		return errno
	}
	return h.LoopbackFile.Allocate(ctx, off, size, mode)
}

// Ioctl is refused: the daemon runs as root, and an ioctl forwarded to
// the backing file (FS_IOC_SETFLAGS, FICLONE...) would act with its
// privileges and outside every rule above.
func (h *handle) Ioctl(ctx context.Context, cmd uint32, arg uint64, input, output []byte) (int32, syscall.Errno) {
	return 0, syscall.ENOTTY
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
}

func (e *eventsFile) PassthroughFd() (int, bool) { return -1, false }

func (e *eventsFile) Writev(ctx context.Context, data [][]byte, off int64) (uint32, syscall.Errno) {
	return e.Write(ctx, bytes.Join(data, nil), off)
}

func (e *eventsFile) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	return e.fsys.deny(ctx, ledger.KindAppendRejected, "fallocate", EventsFile, syscall.EPERM, "events.jsonl is append-only")
}

// Write acknowledges bytes only as far as they are safely handled: whole
// accepted lines, or the start of a line kept for the next write. When a
// later line of the same write is refused, the accepted prefix is
// reported as a short write, so the caller retries the rest and receives
// the error for exactly the refused line.
func (e *eventsFile) Write(ctx context.Context, data []byte, off int64) (n uint32, errno syscall.Errno) {
	defer e.fsys.guard(ctx, "append", EventsFile, &errno)
	e.fsys.enter("append", EventsFile)
	e.mu.Lock()
	defer e.mu.Unlock()
	// Only the grant can have changed since open: events.jsonl is never
	// a deliverable (so never frozen), and its content is validated line
	// by line whatever name reached it. The protocol log catches up with
	// other writers itself, so no refresh is needed here.
	if !e.fsys.matcher().Writable(EventsFile) {
		return 0, e.fsys.deny(ctx, ledger.KindDenied, "append", EventsFile, syscall.EACCES, "not writable under the grant")
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
				e.pending, e.discard = nil, true
				return 0, e.fsys.rejectLine(ctx, syscall.EINVAL, fmt.Sprintf("line longer than %d bytes", maxLine))
			}
			e.pending = append(e.pending, rest...)
			return uint32(len(data)), 0
		}
		startedHere := len(e.pending) == 0
		line := rest[:i]
		if !startedHere {
			line = append(e.pending, line...)
			e.pending = nil
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

// Flush refuses an unterminated line so that close(2) reports it: an
// event is only appended once its newline arrives.
func (e *eventsFile) Flush(ctx context.Context) (errno syscall.Errno) {
	defer e.fsys.guard(ctx, "flush", EventsFile, &errno)
	e.mu.Lock()
	partial := len(e.pending) > 0
	e.pending, e.discard = nil, false
	e.mu.Unlock()
	if partial {
		return e.fsys.rejectLine(ctx, syscall.EINVAL, "incomplete line at close: an event must end with a newline")
	}
	return e.LoopbackFile.Flush(ctx)
}

// appendLine hands one complete line to the protocol log.
func (f *FS) appendLine(ctx context.Context, line []byte) syscall.Errno {
	ev, err := f.log.AppendLine(line, f.participant())
	if err != nil {
		errno := syscall.EPERM
		switch protocol.KindOf(err) {
		case protocol.Malformed:
			errno = syscall.EINVAL
		case protocol.Unavailable:
			// The folder itself is broken (unreadable files, a history
			// that already violates the protocol): not this line's fault.
			errno = syscall.EIO
		}
		return f.rejectLine(ctx, errno, err.Error())
	}
	f.record(ctx, ledger.KindAppendAccepted, "append", EventsFile, "", fmt.Sprintf("seq %d %s", ev.Seq, ev.Event))
	f.wake()
	return 0
}

func (f *FS) rejectLine(ctx context.Context, errno syscall.Errno, why string) syscall.Errno {
	return f.deny(ctx, ledger.KindAppendRejected, "append", EventsFile, errno, why)
}

// protocolFile is an open protocol.json. Writes are collected in memory
// and judged at flush: a rewrite whose content equals the derived state
// (what the reference scripts write after an append) is accepted, and
// the file on disk stays the one acpfs maintains; anything else is
// refused with EPERM.
type protocolFile struct {
	*handle
	mu    sync.Mutex
	buf   []byte
	dirty bool
}

func (p *protocolFile) PassthroughFd() (int, bool) { return -1, false }

func (p *protocolFile) load(trunc bool) syscall.Errno {
	p.writable = true
	if trunc {
		p.dirty = true
		return 0
	}
	b, err := os.ReadFile(p.fsys.abs(ProtocolFile))
	if err != nil {
		return gofs.ToErrno(err)
	}
	p.buf = b
	return 0
}

func (p *protocolFile) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if !p.writable {
		return 0, syscall.EBADF
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if end := int(off) + len(data); end > len(p.buf) {
		if end > maxLine {
			return 0, p.fsys.deny(ctx, ledger.KindDenied, "write", ProtocolFile, syscall.EFBIG, "protocol.json rewrite too large")
		}
		p.buf = append(p.buf, make([]byte, end-len(p.buf))...)
	}
	copy(p.buf[off:], data)
	p.dirty = true
	return uint32(len(data)), 0
}

func (p *protocolFile) Writev(ctx context.Context, data [][]byte, off int64) (uint32, syscall.Errno) {
	return p.Write(ctx, bytes.Join(data, nil), off)
}

func (p *protocolFile) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	return syscall.EOPNOTSUPP
}

// truncate handles ftruncate on a handle opened for writing.
func (p *protocolFile) truncate(ctx context.Context, size uint64, out *fuse.AttrOut) syscall.Errno {
	if !p.writable || size > maxLine {
		return syscall.EPERM
	}
	p.mu.Lock()
	if int(size) <= len(p.buf) {
		p.buf = p.buf[:size]
	} else {
		p.buf = append(p.buf, make([]byte, int(size)-len(p.buf))...)
	}
	p.dirty = true
	p.mu.Unlock()
	if errno := p.LoopbackFile.Getattr(ctx, out); errno != 0 {
		return errno
	}
	out.Size = size
	return 0
}

func (p *protocolFile) Flush(ctx context.Context) (errno syscall.Errno) {
	defer p.fsys.guard(ctx, "flush", ProtocolFile, &errno)
	p.mu.Lock()
	buf, dirty := p.buf, p.dirty
	p.dirty = false
	p.mu.Unlock()
	if !dirty {
		return 0
	}
	if err := p.fsys.log.CheckProtocolWrite(buf); err != nil {
		return p.fsys.deny(ctx, ledger.KindDenied, "write", ProtocolFile, syscall.EPERM, err.Error())
	}
	p.fsys.record(ctx, ledger.KindWrite, "rewrite", ProtocolFile, "", "content equals the derived state")
	return 0
}
