package fs

import (
	"context"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/view"
)

// fileHandle is an open regular file: the core's File, with go-fuse's
// types. It implements each file operation explicitly: a method go-fuse
// adds to its loopback file one day is not inherited, so no call can
// reach the backing file without passing the core.
type fileHandle struct {
	view.File
	fsys *FS
	rel  string // name at open, for the guard's record
}

var (
	_ gofs.FilePassthroughFder = (*fileHandle)(nil)
	_ gofs.FileReader          = (*fileHandle)(nil)
	_ gofs.FileWriter          = (*fileHandle)(nil)
	_ gofs.FileFlusher         = (*fileHandle)(nil)
	_ gofs.FileFsyncer         = (*fileHandle)(nil)
	_ gofs.FileReleaser        = (*fileHandle)(nil)
	_ gofs.FileLseeker         = (*fileHandle)(nil)
	_ gofs.FileAllocater       = (*fileHandle)(nil)
	_ gofs.FileGetlker         = (*fileHandle)(nil)
	_ gofs.FileSetlker         = (*fileHandle)(nil)
	_ gofs.FileSetlkwer        = (*fileHandle)(nil)
)

func newFileHandle(f *FS, rel string, file view.File) *fileHandle {
	return &fileHandle{File: file, fsys: f, rel: rel}
}

// locks is the backing file's lock calls, nothing else; nil once the
// file is released.
func (h *fileHandle) locks() *gofs.LoopbackFile {
	if f := h.File.Locked(); f != nil {
		return gofs.NewLoopbackFileFromOS(f)
	}
	return nil
}

func (h *fileHandle) Read(ctx context.Context, dest []byte, off int64) (res fuse.ReadResult, errno syscall.Errno) {
	defer h.fsys.Guard(ctx, ledger.OpRead, h.rel, &errno)
	b, errno := h.File.Read(ctx, dest, off)
	if errno != 0 {
		return nil, errno
	}
	return readResult(b), 0
}

// readResult is the answer of a read: the bytes, written to the kernel
// with one writev. (go-fuse first tries to splice any other result
// through a pipe, seven system calls that fail for bytes in memory.)
func readResult(b []byte) fuse.ReadResult { return fuse.ReadResultVector([][]byte{b}) }

func (h *fileHandle) Write(ctx context.Context, data []byte, off int64) (n uint32, errno syscall.Errno) {
	defer h.fsys.Guard(ctx, ledger.OpWrite, h.rel, &errno)
	return h.File.Write(ctx, data, off)
}

func (h *fileHandle) Allocate(ctx context.Context, off, size uint64, mode uint32) (errno syscall.Errno) {
	defer h.fsys.Guard(ctx, ledger.OpFallocate, h.rel, &errno)
	return h.File.Allocate(ctx, off, size, mode)
}

func (h *fileHandle) Flush(ctx context.Context) (errno syscall.Errno) {
	defer h.fsys.Guard(ctx, ledger.OpFlush, h.rel, &errno)
	return h.File.Flush(ctx)
}

func (h *fileHandle) Fsync(ctx context.Context, flags uint32) (errno syscall.Errno) {
	defer h.fsys.Guard(ctx, ledger.OpFsync, h.rel, &errno)
	return h.File.Fsync(ctx, flags)
}

func (h *fileHandle) Release(ctx context.Context) (errno syscall.Errno) {
	defer h.fsys.Guard(ctx, ledger.OpRelease, h.rel, &errno)
	return h.File.Release(ctx)
}

func (h *fileHandle) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	return h.File.Lseek(ctx, off, whence)
}

func (h *fileHandle) Getlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32, out *fuse.FileLock) syscall.Errno {
	l := h.locks()
	if l == nil {
		return syscall.EBADF
	}
	return l.Getlk(ctx, owner, lk, flags, out)
}

func (h *fileHandle) Setlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	l := h.locks()
	if l == nil {
		return syscall.EBADF
	}
	return l.Setlk(ctx, owner, lk, flags)
}

func (h *fileHandle) Setlkw(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	l := h.locks()
	if l == nil {
		return syscall.EBADF
	}
	return l.Setlkw(ctx, owner, lk, flags)
}

// openFlags are the FUSE open flags of the core's caching.
func openFlags(c view.Caching) uint32 {
	switch c {
	case view.CacheKeep:
		return fuse.FOPEN_KEEP_CACHE
	case view.CacheDirect:
		return fuse.FOPEN_DIRECT_IO
	}
	return 0
}

// dirHandle is an open directory: the core's listing, with go-fuse's
// types.
type dirHandle struct {
	fsys *FS
	node *node
	rel  string
	d    *view.Dir
}

var (
	_ gofs.FileReaddirenter = (*dirHandle)(nil)
	_ gofs.FileSeekdirer    = (*dirHandle)(nil)
	_ gofs.FileLookuper     = (*dirHandle)(nil)
	_ gofs.FileFsyncdirer   = (*dirHandle)(nil)
)

func (d *dirHandle) Readdirent(ctx context.Context) (de *fuse.DirEntry, errno syscall.Errno) {
	defer d.fsys.Guard(ctx, ledger.OpReaddir, d.rel, &errno)
	e, ok, errno := d.d.Next(ctx)
	if errno != 0 || !ok {
		return nil, errno
	}
	return &fuse.DirEntry{Name: e.Name, Mode: e.Mode, Ino: e.Ino, Off: e.Off}, 0
}

func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	d.d.Seek(off)
	return 0
}

// Lookup answers the lookups of READDIRPLUS from the listing just read
// when the core can, else as a lookup of the name.
func (d *dirHandle) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	e, ok := d.d.Last(name)
	if !ok {
		return d.node.Lookup(ctx, name, out)
	}
	return d.node.child(ctx, e, out), 0
}

func (d *dirHandle) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	return d.d.Fsync(ctx)
}

// attrOf is the FUSE form of a stat.
func attrOf(a *fuse.Attr, st *unix.Stat_t) {
	a.Ino = st.Ino
	a.Size = uint64(st.Size)
	a.Blocks = uint64(st.Blocks)
	a.Atime, a.Atimensec = uint64(st.Atim.Sec), uint32(st.Atim.Nsec)
	a.Mtime, a.Mtimensec = uint64(st.Mtim.Sec), uint32(st.Mtim.Nsec)
	a.Ctime, a.Ctimensec = uint64(st.Ctim.Sec), uint32(st.Ctim.Nsec)
	a.Mode = st.Mode
	a.Nlink = uint32(st.Nlink)
	a.Uid, a.Gid = st.Uid, st.Gid
	a.Rdev = uint32(st.Rdev)
	a.Blksize = uint32(st.Blksize)
}

func fillEntry(out *fuse.EntryOut, e view.Entry) {
	attrOf(&out.Attr, &e.Attr)
	out.SetEntryTimeout(e.EntryTimeout)
	out.SetAttrTimeout(e.AttrTimeout)
}

func fillAttrOut(out *fuse.AttrOut, st *unix.Stat_t, timeout time.Duration) {
	attrOf(&out.Attr, st)
	out.SetTimeout(timeout)
}

// setAttrOf is the core's form of a setattr request.
func setAttrOf(in *fuse.SetAttrIn) *view.SetAttr {
	s := &view.SetAttr{KillSUIDGID: in.Valid&fuse.FATTR_KILL_SUIDGID != 0}
	s.Mode, s.HasMode = in.GetMode()
	s.UID, s.HasUID = in.GetUID()
	s.GID, s.HasGID = in.GetGID()
	s.Size, s.HasSize = in.GetSize()
	s.ATime, s.HasATime = in.GetATime()
	s.MTime, s.HasMTime = in.GetMTime()
	s.ATimeNow = in.Valid&fuse.FATTR_ATIME_NOW != 0
	s.MTimeNow = in.Valid&fuse.FATTR_MTIME_NOW != 0
	return s
}
