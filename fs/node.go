package fs

import (
	"context"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/view"
)

// node is one file or directory of a view. It holds no descriptor and no
// backing identity of its own: every operation hands the core the node's
// current name, which the core resolves strictly beneath the folder root
// and judges there. A node whose backing path was swapped, removed or
// turned into a symlink on disk therefore reaches nothing the grant does
// not show under that name.
type node struct {
	gofs.Inode
	fsys *FS
	seen view.Seen
}

// Compile-time checks: the operations a view implements. Anything not
// listed is answered by go-fuse's defaults (ENOTSUP / ENOSYS), which
// never touch the backing folder; in particular there is no Statx (the
// kernel falls back to Getattr), no CopyFileRange (it falls back to read
// and write, which pass the handle checks) and no Tmpfile (an unnamed
// file has no path to judge).
var (
	_ gofs.NodeLookuper       = (*node)(nil)
	_ gofs.NodeGetattrer      = (*node)(nil)
	_ gofs.NodeSetattrer      = (*node)(nil)
	_ gofs.NodeOpener         = (*node)(nil)
	_ gofs.NodeOpendirHandler = (*node)(nil)
	_ gofs.NodeCreater        = (*node)(nil)
	_ gofs.NodeMkdirer        = (*node)(nil)
	_ gofs.NodeMknoder        = (*node)(nil)
	_ gofs.NodeRmdirer        = (*node)(nil)
	_ gofs.NodeUnlinker       = (*node)(nil)
	_ gofs.NodeRenamer        = (*node)(nil)
	_ gofs.NodeLinker         = (*node)(nil)
	_ gofs.NodeSymlinker      = (*node)(nil)
	_ gofs.NodeReadlinker     = (*node)(nil)
	_ gofs.NodeGetxattrer     = (*node)(nil)
	_ gofs.NodeListxattrer    = (*node)(nil)
	_ gofs.NodeSetxattrer     = (*node)(nil)
	_ gofs.NodeRemovexattrer  = (*node)(nil)
	_ gofs.NodeStatfser       = (*node)(nil)
	_ gofs.NodeOnAdder        = (*node)(nil)
	_ view.Node               = (*node)(nil)
)

// OnAdd gives the core its kernel when go-fuse adopts the root.
func (n *node) OnAdd(ctx context.Context) {
	if n.IsRoot() {
		n.fsys.attached.Store(true)
		n.fsys.Attach(n.fsys)
	}
}

// ViewPath: see view.Node.
func (n *node) ViewPath() string { return n.Path(nil) }

// DropContent: see view.Node.
func (n *node) DropContent(now bool) {
	if !n.fsys.attached.Load() {
		return
	}
	if now {
		n.NotifyContent(0, 0)
		return
	}
	go n.NotifyContent(0, 0)
}

// Seen: see view.Node.
func (n *node) Seen() *view.Seen { return &n.seen }

// rel is the node's folder-relative name ("" for the folder).
func (n *node) rel() string { return n.fsys.Name(n.Path(nil)) }

// childRel is the folder-relative name of the entry name in n.
func (n *node) childRel(name string) string { return n.fsys.Join(n.rel(), name) }

// child makes (or finds) the inode for a backing entry. Inodes are keyed
// by the backing inode number, so a rename through the view keeps the
// kernel's node; hard-linked files, the one case where two names would
// share a node, never reach here.
func (n *node) child(ctx context.Context, e view.Entry, out *fuse.EntryOut) *gofs.Inode {
	fillEntry(out, e)
	id := gofs.StableAttr{Mode: e.Attr.Mode & unix.S_IFMT, Ino: e.Attr.Ino}
	ch := n.NewInode(ctx, &node{fsys: n.fsys}, id)
	if cn, ok := ch.Operations().(*node); ok {
		cn.seen.Found(&e)
	}
	return ch
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (ch *gofs.Inode, errno syscall.Errno) {
	f := n.fsys
	rel := n.childRel(name)
	defer f.Guard(ctx, ledger.OpLookup, rel, &errno)
	f.Enter(ledger.OpLookup, rel)
	e, errno := f.Lookup(ctx, rel)
	switch {
	case errno != 0:
		return nil, errno
	case e.Control:
		fillEntry(out, e)
		return f.controlDir(ctx, n.EmbeddedInode()), 0
	case e.Snapshot != "":
		fillEntry(out, e)
		s := &snapshotFile{fsys: f, rel: rel, src: e.Snapshot}
		return n.NewInode(ctx, s, gofs.StableAttr{Mode: syscall.S_IFREG, Ino: e.Attr.Ino}), 0
	}
	return n.child(ctx, e, out), 0
}

func (n *node) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) (errno syscall.Errno) {
	f := n.fsys
	rel := n.rel()
	defer f.Guard(ctx, ledger.OpGetattr, rel, &errno)
	f.Enter(ledger.OpGetattr, rel)
	h, open := fh.(*fileHandle)
	var file view.File
	if open {
		file = h.File
	}
	st, errno := f.View.Getattr(ctx, rel, file)
	if errno != 0 {
		return errno
	}
	fillAttrOut(out, &st, f.AttrTimeout(rel))
	if !open {
		n.seen.Saw(&st)
	}
	return 0
}

func (n *node) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) (errno syscall.Errno) {
	f := n.fsys
	rel := n.rel()
	defer f.Guard(ctx, ledger.OpSetattr, rel, &errno)
	f.Enter(ledger.OpSetattr, rel)
	var file view.File
	if h, ok := fh.(*fileHandle); ok {
		file = h.File
	}
	st, errno := f.View.Setattr(ctx, rel, file, setAttrOf(in))
	if errno != 0 {
		return errno
	}
	fillAttrOut(out, &st, f.AttrTimeout(rel))
	n.seen.Saw(&st)
	return 0
}

func (n *node) Open(ctx context.Context, flags uint32) (fh gofs.FileHandle, fuseFlags uint32, errno syscall.Errno) {
	f := n.fsys
	rel := n.rel()
	defer f.Guard(ctx, ledger.OpOpen, rel, &errno)
	f.Enter(ledger.OpOpen, rel)
	file, caching, errno := f.Open(ctx, n, rel, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	flagsOut := openFlags(caching)
	if !file.Flushes() {
		flagsOut |= fuse.FOPEN_NOFLUSH
	}
	return newFileHandle(f, rel, file), flagsOut, 0
}

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fh gofs.FileHandle, fuseFlags uint32, errno syscall.Errno) {
	f := n.fsys
	rel := n.rel()
	defer f.Guard(ctx, ledger.OpOpendir, rel, &errno)
	f.Enter(ledger.OpOpendir, rel)
	d, keep, errno := f.Opendir(ctx, rel)
	if errno != 0 {
		return nil, 0, errno
	}
	var flagsOut uint32
	if keep {
		flagsOut = fuse.FOPEN_CACHE_DIR | fuse.FOPEN_KEEP_CACHE
	}
	return &dirHandle{fsys: f, node: n, rel: rel, d: d}, flagsOut, 0
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (ch *gofs.Inode, fh gofs.FileHandle, fuseFlags uint32, errno syscall.Errno) {
	f := n.fsys
	rel := n.childRel(name)
	defer f.Guard(ctx, ledger.OpCreate, rel, &errno)
	f.Enter(ledger.OpCreate, rel)
	_, file, errno := f.View.Create(ctx, rel, flags, mode, func(e view.Entry) view.Node {
		ch = n.child(ctx, e, out)
		if cn, ok := ch.Operations().(*node); ok {
			return cn
		}
		return nil
	})
	if errno != 0 {
		return nil, nil, 0, errno
	}
	return ch, newFileHandle(f, rel, file), 0, 0
}

// made hands the kernel a name the core made.
func (n *node) made(ctx context.Context, op ledger.Op, name string, do func(rel string) (view.Entry, syscall.Errno), out *fuse.EntryOut) (ch *gofs.Inode, errno syscall.Errno) {
	f := n.fsys
	rel := n.childRel(name)
	defer f.Guard(ctx, op, rel, &errno)
	f.Enter(op, rel)
	e, errno := do(rel)
	if errno != 0 {
		return nil, errno
	}
	return n.child(ctx, e, out), 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return n.made(ctx, ledger.OpMkdir, name, func(rel string) (view.Entry, syscall.Errno) { return n.fsys.Mkdir(ctx, rel, mode) }, out)
}

func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return n.made(ctx, ledger.OpMknod, name, func(rel string) (view.Entry, syscall.Errno) { return n.fsys.Mknod(ctx, rel, mode) }, out)
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return n.made(ctx, ledger.OpSymlink, name, func(rel string) (view.Entry, syscall.Errno) { return n.fsys.View.Symlink(ctx, rel, target) }, out)
}

// change runs a core change of rel under the guard.
func (n *node) change(ctx context.Context, op ledger.Op, rel string, do func() syscall.Errno) (errno syscall.Errno) {
	defer n.fsys.Guard(ctx, op, rel, &errno)
	n.fsys.Enter(op, rel)
	return do()
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	rel := n.childRel(name)
	return n.change(ctx, ledger.OpRmdir, rel, func() syscall.Errno { return n.fsys.View.Rmdir(ctx, rel) })
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	rel := n.childRel(name)
	return n.change(ctx, ledger.OpUnlink, rel, func() syscall.Errno { return n.fsys.View.Unlink(ctx, rel) })
}

func (n *node) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	from := n.childRel(name)
	to := n.fsys.Join(n.fsys.Name(newParent.EmbeddedInode().Path(nil)), newName)
	return n.change(ctx, ledger.OpRename, from, func() syscall.Errno { return n.fsys.View.Rename(ctx, from, to, flags) })
}

func (n *node) Link(ctx context.Context, target gofs.InodeEmbedder, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	rel := n.childRel(name)
	return nil, n.change(ctx, ledger.OpLink, rel, func() syscall.Errno { return n.fsys.View.Link(ctx, rel) })
}

func (n *node) Readlink(ctx context.Context) (b []byte, errno syscall.Errno) {
	rel := n.rel()
	defer n.fsys.Guard(ctx, ledger.OpReadlink, rel, &errno)
	n.fsys.Enter(ledger.OpReadlink, rel)
	return n.fsys.View.Readlink(ctx, rel)
}

// Getxattr and Listxattr answer ENOSYS, which the kernel remembers for
// the mount: extended attributes are not shown in a view, and every later
// getxattr(2) and listxattr(2) answers EOPNOTSUPP without asking the
// daemon. `ls -l` asks every file for two attributes (its ACL and its
// security label); answered here, that is two round trips per file, ten
// times what listing a warm directory costs otherwise. Names are still
// resolved first, so a hidden name answers ENOENT as before. Setting and
// removing attributes are judged and recorded like any other change.
func (n *node) Getxattr(ctx context.Context, attr string, dest []byte) (sz uint32, errno syscall.Errno) {
	return 0, syscall.ENOSYS
}

// Listxattr: see Getxattr.
func (n *node) Listxattr(ctx context.Context, dest []byte) (sz uint32, errno syscall.Errno) {
	return 0, syscall.ENOSYS
}

func (n *node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	rel := n.rel()
	return n.change(ctx, ledger.OpSetxattr, rel, func() syscall.Errno { return n.fsys.View.Setxattr(ctx, rel, attr, data, flags) })
}

func (n *node) Removexattr(ctx context.Context, attr string) syscall.Errno {
	rel := n.rel()
	return n.change(ctx, ledger.OpRemovexattr, rel, func() syscall.Errno { return n.fsys.View.Removexattr(ctx, rel, attr) })
}

// Statfs reports the backing filesystem's figures.
func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	st, errno := n.fsys.View.Statfs()
	if errno != 0 {
		return errno
	}
	out.Blocks, out.Bfree, out.Bavail = st.Blocks, st.Bfree, st.Bavail
	out.Files, out.Ffree = st.Files, st.Ffree
	out.Bsize, out.Frsize = uint32(st.Bsize), uint32(st.Frsize)
	out.NameLen = uint32(st.Namelen)
	return 0
}
