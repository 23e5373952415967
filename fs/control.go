package fs

import (
	"context"
	"sync"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/view"
)

// Inode numbers of the virtual control files. They sit far above any
// inode number a backing filesystem hands out for a folder of this kind.
const ctlIno = 1 << 62

// control is the state of the .acpfs directory of one view.
type control struct {
	once sync.Once
	dir  *gofs.Inode
	// listed is what a listing of .acpfs shows: not wait, whose reads
	// block, so that globs and recursive tools (cat .acpfs/*, grep -r)
	// never open it.
	listed []fuse.DirEntry
}

// ctlFile is one read-only virtual file; gen produces its content at
// open (or, for wait, at the first read, which blocks).
type ctlFile struct {
	gofs.Inode
	fsys *FS
	gen  func(ctx context.Context) ([]byte, syscall.Errno)
}

var (
	_ gofs.NodeOpener    = (*ctlFile)(nil)
	_ gofs.NodeGetattrer = (*ctlFile)(nil)
	_ gofs.NodeSetattrer = (*ctlFile)(nil)
)

// ctlDir is the .acpfs directory. Every call that would change it is
// refused (go-fuse would otherwise let an unlink drop a control file from
// the tree) and recorded like any other refusal.
type ctlDir struct {
	gofs.Inode
	fsys *FS
}

var (
	_ gofs.NodeGetattrer     = (*ctlDir)(nil)
	_ gofs.NodeReaddirer     = (*ctlDir)(nil)
	_ gofs.NodeUnlinker      = (*ctlDir)(nil)
	_ gofs.NodeRmdirer       = (*ctlDir)(nil)
	_ gofs.NodeRenamer       = (*ctlDir)(nil)
	_ gofs.NodeMkdirer       = (*ctlDir)(nil)
	_ gofs.NodeCreater       = (*ctlDir)(nil)
	_ gofs.NodeMknoder       = (*ctlDir)(nil)
	_ gofs.NodeSymlinker     = (*ctlDir)(nil)
	_ gofs.NodeLinker        = (*ctlDir)(nil)
	_ gofs.NodeSetxattrer    = (*ctlDir)(nil)
	_ gofs.NodeRemovexattrer = (*ctlDir)(nil)
	_ gofs.NodeSetxattrer    = (*ctlFile)(nil)
	_ gofs.NodeRemovexattrer = (*ctlFile)(nil)
)

func (d *ctlDir) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	return d.fsys.RefuseControl(ctx, ledger.OpSetxattr, view.ControlDir)
}

func (d *ctlDir) Removexattr(ctx context.Context, attr string) syscall.Errno {
	return d.fsys.RefuseControl(ctx, ledger.OpRemovexattr, view.ControlDir)
}

func (c *ctlFile) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	return c.fsys.RefuseControl(ctx, ledger.OpSetxattr, c.rel())
}

func (c *ctlFile) Removexattr(ctx context.Context, attr string) syscall.Errno {
	return c.fsys.RefuseControl(ctx, ledger.OpRemovexattr, c.rel())
}

func (d *ctlDir) refuse(ctx context.Context, op ledger.Op, name string) syscall.Errno {
	return d.fsys.RefuseControl(ctx, op, view.ControlDir+"/"+name)
}

func (d *ctlDir) Unlink(ctx context.Context, name string) syscall.Errno {
	return d.refuse(ctx, ledger.OpUnlink, name)
}

func (d *ctlDir) Rmdir(ctx context.Context, name string) syscall.Errno {
	return d.refuse(ctx, ledger.OpRmdir, name)
}

func (d *ctlDir) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	return d.refuse(ctx, ledger.OpRename, name)
}

func (d *ctlDir) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, d.refuse(ctx, ledger.OpMkdir, name)
}

func (d *ctlDir) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, d.refuse(ctx, ledger.OpCreate, name)
}

func (d *ctlDir) Mknod(ctx context.Context, name string, mode, dev uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, d.refuse(ctx, ledger.OpMknod, name)
}

func (d *ctlDir) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, d.refuse(ctx, ledger.OpSymlink, name)
}

func (d *ctlDir) Link(ctx context.Context, target gofs.InodeEmbedder, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, d.refuse(ctx, ledger.OpLink, name)
}

// Readdir lists the control files except wait.
func (d *ctlDir) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	return gofs.NewListDirStream(d.fsys.ctl.listed), 0
}

func (d *ctlDir) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFDIR | 0o555
	out.Nlink = 1
	return 0
}

// controlDir returns the .acpfs directory, building it on first use.
func (f *FS) controlDir(ctx context.Context, root *gofs.Inode) *gofs.Inode {
	f.ctl.once.Do(func() {
		dir := root.NewPersistentInode(ctx, &ctlDir{fsys: f}, gofs.StableAttr{Mode: syscall.S_IFDIR, Ino: ctlIno})
		for i, c := range f.ControlFiles() {
			ino := ctlIno + 1 + uint64(i)
			ch := dir.NewPersistentInode(ctx, &ctlFile{fsys: f, gen: c.Gen}, gofs.StableAttr{Mode: syscall.S_IFREG, Ino: ino})
			dir.AddChild(c.Name, ch, true)
			if c.Listed {
				f.ctl.listed = append(f.ctl.listed, fuse.DirEntry{Name: c.Name, Mode: syscall.S_IFREG, Ino: ino})
			}
		}
		f.ctl.dir = dir
	})
	return f.ctl.dir
}

func (c *ctlFile) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFREG | 0o444
	out.Nlink = 1
	t := time.Now()
	out.SetTimes(nil, &t, &t)
	return 0
}

func (c *ctlFile) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return c.fsys.RefuseControl(ctx, ledger.OpSetattr, c.rel())
}

func (c *ctlFile) rel() string {
	name, _ := c.Parent()
	return view.ControlDir + "/" + name
}

func (c *ctlFile) Open(ctx context.Context, flags uint32) (fh gofs.FileHandle, fuseFlags uint32, errno syscall.Errno) {
	if errno := c.fsys.OpenControl(ctx, c.rel(), flags); errno != 0 {
		return nil, 0, errno
	}
	return &ctlHandle{gen: c.gen, fsys: c.fsys}, fuse.FOPEN_DIRECT_IO, 0
}

// ctlHandle produces its content once, on the first read, so that a
// read of .acpfs/wait blocks in read(2), where a signal can interrupt it,
// rather than in open(2).
type ctlHandle struct {
	mu      sync.Mutex
	gen     func(ctx context.Context) ([]byte, syscall.Errno)
	fsys    *FS
	content []byte
	done    bool
}

var _ gofs.FileReader = (*ctlHandle)(nil)

func (h *ctlHandle) Read(ctx context.Context, dest []byte, off int64) (res fuse.ReadResult, errno syscall.Errno) {
	defer h.fsys.Guard(ctx, ledger.OpRead, view.ControlDir, &errno)
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.done {
		b, errno := h.gen(ctx)
		if errno != 0 {
			return nil, errno
		}
		h.content, h.done = b, true
	}
	if off >= int64(len(h.content)) {
		return readResult(nil), 0
	}
	end := min(int(off)+len(dest), len(h.content))
	return readResult(h.content[off:end]), 0
}

// snapshotFile shows a handed-over artifact exactly as it was handed
// over: reads come from the content-addressed copy, never from the live
// file the producer may have changed since.
type snapshotFile struct {
	gofs.Inode
	fsys *FS
	rel  string
	src  string
}

var (
	_ gofs.NodeOpener        = (*snapshotFile)(nil)
	_ gofs.NodeGetattrer     = (*snapshotFile)(nil)
	_ gofs.NodeSetattrer     = (*snapshotFile)(nil)
	_ gofs.NodeSetxattrer    = (*snapshotFile)(nil)
	_ gofs.NodeRemovexattrer = (*snapshotFile)(nil)
)

func (s *snapshotFile) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	return s.fsys.RefuseSnapshot(ctx, ledger.OpSetxattr, s.rel)
}

func (s *snapshotFile) Removexattr(ctx context.Context, attr string) syscall.Errno {
	return s.fsys.RefuseSnapshot(ctx, ledger.OpRemovexattr, s.rel)
}

func (s *snapshotFile) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	st, errno := view.SnapshotAttr(s.src)
	if errno != 0 {
		return errno
	}
	attrOf(&out.Attr, &st)
	return 0
}

func (s *snapshotFile) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return s.fsys.RefuseSnapshot(ctx, ledger.OpSetattr, s.rel)
}

func (s *snapshotFile) Open(ctx context.Context, flags uint32) (fh gofs.FileHandle, fuseFlags uint32, errno syscall.Errno) {
	defer s.fsys.Guard(ctx, ledger.OpOpen, s.rel, &errno)
	file, errno := s.fsys.OpenSnapshot(ctx, s.rel, s.src, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	return newFileHandle(s.fsys, s.rel, file), 0, 0
}
