package mount

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/acpfs/acpfs/ledger"
)

// Owner is the one user a view serves: inside `acpfs run`, the agent's
// uid and gid. Every file of the view appears owned by it with
// owner-only permissions, so that the kernel lets it do whatever reaches
// the daemon (where the grant alone decides) and refuses every other
// uid before anything is asked; the daemon refuses whatever of another
// uid still reaches it.
type Owner struct {
	UID, GID uint32
	// Sandbox, when set, also requires the owner's requests to come from
	// the sandbox's PID namespace: a host process that happens to have
	// the agent's uid is not the agent. Until Sandbox.Set, the owner's
	// uid is refused too.
	Sandbox *SandboxNS
}

// SandboxNS names the PID namespace of a sandbox, once it exists.
type SandboxNS struct{ ns atomic.Pointer[string] }

// Set records the PID namespace of the process pid (the sandbox's first
// process, as the daemon sees it).
func (s *SandboxNS) Set(pid int) error {
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
	if err != nil {
		return fmt.Errorf("the sandbox's PID namespace: %w", err)
	}
	s.ns.Store(&ns)
	return nil
}

// holds reports whether the caller pid lives in the sandbox.
func (s *SandboxNS) holds(pid uint32) bool {
	want := s.ns.Load()
	if want == nil {
		return false
	}
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
	return err == nil && ns == *want
}

// ownerFS wraps the view's FUSE file system: a request from any uid but
// the owner's, or root's outside every sandbox, is answered EACCES before
// the view sees it, and every attribute the view returns shows the owner.
//
// It sits at the raw protocol level, below go-fuse's node bridge, so
// that no operation can miss the check: it implements every method of
// fuse.RawFileSystem itself (no embedding), and a method added to the
// interface breaks the build until it is handled here.
type ownerFS struct {
	raw   fuse.RawFileSystem
	owner Owner
	// pidNS names the daemon's PID namespace (readlink of
	// /proc/self/ns/pid). Root is served only from there: a root process
	// in another PID namespace lives in some sandbox.
	pidNS string
	// refused is called the first time each uid is refused, so that the
	// ledger shows the attempt without one record per request.
	refused  func(op ledger.Op, c fuse.Caller)
	mu       sync.Mutex
	reported map[uint32]bool
}

var _ fuse.RawFileSystem = (*ownerFS)(nil)

// newOwnerFS guards raw for owner.
func newOwnerFS(raw fuse.RawFileSystem, owner Owner, refused func(op ledger.Op, c fuse.Caller)) (*ownerFS, error) {
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return nil, fmt.Errorf("own PID namespace: %w", err)
	}
	return &ownerFS{raw: raw, owner: owner, pidNS: ns, refused: refused, reported: map[uint32]bool{}}, nil
}

// allowed tells whether the caller may use the view.
func (o *ownerFS) allowed(c *fuse.Caller) bool {
	if c.Uid == o.owner.UID && (o.owner.Sandbox == nil || o.owner.Sandbox.holds(c.Pid)) {
		return true
	}
	if c.Uid != 0 {
		return false
	}
	// The kernel gives the caller's pid in the daemon's PID namespace; a
	// process of a sandbox has its own namespace there.
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", c.Pid))
	return err == nil && ns == o.pidNS
}

// check answers EACCES for a caller that is not allowed.
func (o *ownerFS) check(h *fuse.InHeader, op ledger.Op) fuse.Status {
	if o.allowed(&h.Caller) {
		return fuse.OK
	}
	o.mu.Lock()
	first := !o.reported[h.Uid]
	o.reported[h.Uid] = true
	o.mu.Unlock()
	if first && o.refused != nil {
		o.refused(op, h.Caller)
	}
	return fuse.EACCES
}

// ownerMode is the permission part the owner sees: everything on
// directories, read and write on the rest, execute where the folder has
// any execute bit. The grant decides what actually succeeds; nobody else
// gets any bit, so the kernel refuses them at once.
func ownerMode(mode uint32) uint32 {
	typ := mode & syscall.S_IFMT
	switch typ {
	case syscall.S_IFDIR:
		return typ | 0o700
	case syscall.S_IFLNK:
		return typ | 0o777
	}
	perm := uint32(0o600)
	if mode&0o111 != 0 {
		perm |= 0o100
	}
	return typ | perm
}

func (o *ownerFS) fixAttr(a *fuse.Attr) {
	a.Uid, a.Gid = o.owner.UID, o.owner.GID
	a.Mode = ownerMode(a.Mode)
}

func (o *ownerFS) fixEntry(s fuse.Status, e *fuse.EntryOut) fuse.Status {
	if s.Ok() {
		o.fixAttr(&e.Attr)
	}
	return s
}

// entryOutSize and direntSize are the sizes of the READDIRPLUS records
// go-fuse serialises: an EntryOut, then a dirent (ino, off, namelen,
// type) and the name, padded to 8 bytes.
const (
	entryOutSize = int(unsafe.Sizeof(fuse.EntryOut{}))
	direntSize   = 24
)

// fixDirPlus rewrites the attributes inside a READDIRPLUS reply.
func (o *ownerFS) fixDirPlus(buf []byte) {
	for off := 0; off+entryOutSize+direntSize <= len(buf); {
		e := (*fuse.EntryOut)(unsafe.Pointer(&buf[off]))
		if e.NodeId != 0 {
			o.fixAttr(&e.Attr)
		}
		off += entryOutSize
		nameLen := int(*(*uint32)(unsafe.Pointer(&buf[off+16])))
		off += direntSize + nameLen + (8-nameLen&7)&7
	}
}

func (o *ownerFS) String() string      { return o.raw.String() }
func (o *ownerFS) SetDebug(debug bool) { o.raw.SetDebug(debug) }
func (o *ownerFS) Init(s *fuse.Server) { o.raw.Init(s) }
func (o *ownerFS) OnUnmount()          { o.raw.OnUnmount() }

// Forget, Release and ReleaseDir end what an allowed caller started;
// they carry no caller of their own to judge.
func (o *ownerFS) Forget(nodeid, nlookup uint64)                      { o.raw.Forget(nodeid, nlookup) }
func (o *ownerFS) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) { o.raw.Release(cancel, in) }
func (o *ownerFS) ReleaseDir(in *fuse.ReleaseIn)                      { o.raw.ReleaseDir(in) }

func (o *ownerFS) Lookup(cancel <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	if s := o.check(h, ledger.OpLookup); !s.Ok() {
		return s
	}
	return o.fixEntry(o.raw.Lookup(cancel, h, name, out), out)
}

func (o *ownerFS) GetAttr(cancel <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	if s := o.check(&in.InHeader, ledger.OpGetattr); !s.Ok() {
		return s
	}
	s := o.raw.GetAttr(cancel, in, out)
	if s.Ok() {
		o.fixAttr(&out.Attr)
	}
	return s
}

// noSetID strips the set-user-ID and set-group-ID bits from a mode the
// owner asks for: the view is nosuid in the sandbox, but the file lands
// in the folder, where a set-ID program of the agent's uid would let
// whoever runs it act as the agent.
func noSetID(mode uint32) uint32 { return mode &^ (syscall.S_ISUID | syscall.S_ISGID) }

func (o *ownerFS) SetAttr(cancel <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	if s := o.check(&in.InHeader, ledger.OpSetattr); !s.Ok() {
		return s
	}
	if in.Valid&fuse.FATTR_MODE != 0 {
		in.Mode = noSetID(in.Mode)
	}
	s := o.raw.SetAttr(cancel, in, out)
	if s.Ok() {
		o.fixAttr(&out.Attr)
	}
	return s
}

func (o *ownerFS) Mknod(cancel <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	if s := o.check(&in.InHeader, ledger.OpMknod); !s.Ok() {
		return s
	}
	in.Mode = noSetID(in.Mode)
	return o.fixEntry(o.raw.Mknod(cancel, in, name, out), out)
}

func (o *ownerFS) Mkdir(cancel <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	if s := o.check(&in.InHeader, ledger.OpMkdir); !s.Ok() {
		return s
	}
	in.Mode = noSetID(in.Mode)
	return o.fixEntry(o.raw.Mkdir(cancel, in, name, out), out)
}

func (o *ownerFS) Unlink(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	if s := o.check(h, ledger.OpUnlink); !s.Ok() {
		return s
	}
	return o.raw.Unlink(cancel, h, name)
}

func (o *ownerFS) Rmdir(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	if s := o.check(h, ledger.OpRmdir); !s.Ok() {
		return s
	}
	return o.raw.Rmdir(cancel, h, name)
}

func (o *ownerFS) Rename(cancel <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	if s := o.check(&in.InHeader, ledger.OpRename); !s.Ok() {
		return s
	}
	return o.raw.Rename(cancel, in, oldName, newName)
}

func (o *ownerFS) Link(cancel <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	if s := o.check(&in.InHeader, ledger.OpLink); !s.Ok() {
		return s
	}
	return o.fixEntry(o.raw.Link(cancel, in, name, out), out)
}

func (o *ownerFS) Symlink(cancel <-chan struct{}, h *fuse.InHeader, target, name string, out *fuse.EntryOut) fuse.Status {
	if s := o.check(h, ledger.OpSymlink); !s.Ok() {
		return s
	}
	return o.fixEntry(o.raw.Symlink(cancel, h, target, name, out), out)
}

func (o *ownerFS) Readlink(cancel <-chan struct{}, h *fuse.InHeader) ([]byte, fuse.Status) {
	if s := o.check(h, ledger.OpReadlink); !s.Ok() {
		return nil, s
	}
	return o.raw.Readlink(cancel, h)
}

func (o *ownerFS) Access(cancel <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	if s := o.check(&in.InHeader, ledger.OpAccess); !s.Ok() {
		return s
	}
	return o.raw.Access(cancel, in)
}

func (o *ownerFS) GetXAttr(cancel <-chan struct{}, h *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	if s := o.check(h, ledger.OpGetxattr); !s.Ok() {
		return 0, s
	}
	return o.raw.GetXAttr(cancel, h, attr, dest)
}

func (o *ownerFS) ListXAttr(cancel <-chan struct{}, h *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	if s := o.check(h, ledger.OpListxattr); !s.Ok() {
		return 0, s
	}
	return o.raw.ListXAttr(cancel, h, dest)
}

func (o *ownerFS) SetXAttr(cancel <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	if s := o.check(&in.InHeader, ledger.OpSetxattr); !s.Ok() {
		return s
	}
	return o.raw.SetXAttr(cancel, in, attr, data)
}

func (o *ownerFS) RemoveXAttr(cancel <-chan struct{}, h *fuse.InHeader, attr string) fuse.Status {
	if s := o.check(h, ledger.OpRemovexattr); !s.Ok() {
		return s
	}
	return o.raw.RemoveXAttr(cancel, h, attr)
}

func (o *ownerFS) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	if s := o.check(&in.InHeader, ledger.OpCreate); !s.Ok() {
		return s
	}
	in.Mode = noSetID(in.Mode)
	return o.fixEntry(o.raw.Create(cancel, in, name, out), &out.EntryOut)
}

func (o *ownerFS) Tmpfile(cancel <-chan struct{}, in *fuse.CreateIn, out *fuse.CreateOut) fuse.Status {
	if s := o.check(&in.InHeader, ledger.OpTmpfile); !s.Ok() {
		return s
	}
	in.Mode = noSetID(in.Mode)
	return o.fixEntry(o.raw.Tmpfile(cancel, in, out), &out.EntryOut)
}

func (o *ownerFS) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	if s := o.check(&in.InHeader, ledger.OpOpen); !s.Ok() {
		return s
	}
	return o.raw.Open(cancel, in, out)
}

func (o *ownerFS) Read(cancel <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	if s := o.check(&in.InHeader, ledger.OpRead); !s.Ok() {
		return nil, s
	}
	return o.raw.Read(cancel, in, buf)
}

func (o *ownerFS) Lseek(cancel <-chan struct{}, in *fuse.LseekIn, out *fuse.LseekOut) fuse.Status {
	if s := o.check(&in.InHeader, ledger.OpLseek); !s.Ok() {
		return s
	}
	return o.raw.Lseek(cancel, in, out)
}

func (o *ownerFS) GetLk(cancel <-chan struct{}, in *fuse.LkIn, out *fuse.LkOut) fuse.Status {
	if s := o.check(&in.InHeader, ledger.OpGetlk); !s.Ok() {
		return s
	}
	return o.raw.GetLk(cancel, in, out)
}

func (o *ownerFS) SetLk(cancel <-chan struct{}, in *fuse.LkIn) fuse.Status {
	if s := o.check(&in.InHeader, ledger.OpSetlk); !s.Ok() {
		return s
	}
	return o.raw.SetLk(cancel, in)
}

func (o *ownerFS) SetLkw(cancel <-chan struct{}, in *fuse.LkIn) fuse.Status {
	if s := o.check(&in.InHeader, ledger.OpSetlkw); !s.Ok() {
		return s
	}
	return o.raw.SetLkw(cancel, in)
}

func (o *ownerFS) Write(cancel <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	if s := o.check(&in.InHeader, ledger.OpWrite); !s.Ok() {
		return 0, s
	}
	return o.raw.Write(cancel, in, data)
}

func (o *ownerFS) Writev(cancel <-chan struct{}, in *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	if s := o.check(&in.InHeader, ledger.OpWrite); !s.Ok() {
		return 0, s
	}
	return o.raw.Writev(cancel, in, data)
}

func (o *ownerFS) CopyFileRange(cancel <-chan struct{}, in *fuse.CopyFileRangeIn) (uint32, fuse.Status) {
	if s := o.check(&in.InHeader, ledger.OpCopyFileRange); !s.Ok() {
		return 0, s
	}
	return o.raw.CopyFileRange(cancel, in)
}

func (o *ownerFS) Ioctl(cancel <-chan struct{}, in *fuse.IoctlIn, inbuf []byte, out *fuse.IoctlOut, outbuf []byte) fuse.Status {
	if s := o.check(&in.InHeader, ledger.OpIoctl); !s.Ok() {
		return s
	}
	return o.raw.Ioctl(cancel, in, inbuf, out, outbuf)
}

// Flush comes with close(2): refusing it would only make close fail for
// a descriptor that an allowed caller opened.
func (o *ownerFS) Flush(cancel <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	return o.raw.Flush(cancel, in)
}

func (o *ownerFS) Fsync(cancel <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	if s := o.check(&in.InHeader, ledger.OpFsync); !s.Ok() {
		return s
	}
	return o.raw.Fsync(cancel, in)
}

func (o *ownerFS) Fallocate(cancel <-chan struct{}, in *fuse.FallocateIn) fuse.Status {
	if s := o.check(&in.InHeader, ledger.OpFallocate); !s.Ok() {
		return s
	}
	return o.raw.Fallocate(cancel, in)
}

func (o *ownerFS) OpenDir(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	if s := o.check(&in.InHeader, ledger.OpOpendir); !s.Ok() {
		return s
	}
	return o.raw.OpenDir(cancel, in, out)
}

func (o *ownerFS) ReadDir(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	if s := o.check(&in.InHeader, ledger.OpReaddir); !s.Ok() {
		return s
	}
	return o.raw.ReadDir(cancel, in, out)
}

func (o *ownerFS) ReadDirPlus(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	if s := o.check(&in.InHeader, ledger.OpReaddirplus); !s.Ok() {
		return s
	}
	s := o.raw.ReadDirPlus(cancel, in, out)
	if s.Ok() {
		o.fixDirPlus(out.Bytes())
	}
	return s
}

func (o *ownerFS) FsyncDir(cancel <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	if s := o.check(&in.InHeader, ledger.OpFsyncdir); !s.Ok() {
		return s
	}
	return o.raw.FsyncDir(cancel, in)
}

func (o *ownerFS) StatFs(cancel <-chan struct{}, h *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	if s := o.check(h, ledger.OpStatfs); !s.Ok() {
		return s
	}
	return o.raw.StatFs(cancel, h, out)
}

func (o *ownerFS) Statx(cancel <-chan struct{}, in *fuse.StatxIn, out *fuse.StatxOut) fuse.Status {
	if s := o.check(&in.InHeader, ledger.OpStatx); !s.Ok() {
		return s
	}
	s := o.raw.Statx(cancel, in, out)
	if s.Ok() {
		out.Uid, out.Gid = o.owner.UID, o.owner.GID
		out.Statx.Mode = uint16(ownerMode(uint32(out.Statx.Mode)))
	}
	return s
}
