package fs

import (
	"context"
	"hash/fnv"
	"sync/atomic"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/ledger"
)

// node is a loopback node that asks the grant and the protocol before
// every operation. It embeds the go-fuse loopback for the mechanics and
// overrides every operation that takes or reveals a name.
type node struct {
	*gofs.LoopbackNode
	fsys *FS
	// checked is 1 + the FS's entry generation at which this directory
	// was last found to be itself on disk (see stillDir).
	checked atomic.Uint64
}

// Compile-time checks: each interface below is one row of the
// filesystem contract, and losing an override would silently fall back
// to the unchecked loopback.
var (
	_ gofs.NodeWrapChilder    = (*node)(nil)
	_ gofs.NodeLookuper       = (*node)(nil)
	_ gofs.NodeGetattrer      = (*node)(nil)
	_ gofs.NodeSetattrer      = (*node)(nil)
	_ gofs.NodeOpener         = (*node)(nil)
	_ gofs.NodeOpendirHandler = (*node)(nil)
	_ gofs.NodeReaddirer      = (*node)(nil)
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
	_ gofs.NodeCopyFileRanger = (*node)(nil)
	_ gofs.NodeStatxer        = (*node)(nil)
	_ gofs.NodeOnAdder        = (*node)(nil)
	_ gofs.NodeTmpfiler       = (*node)(nil)
)

// WrapChild makes every node the loopback creates one of ours. Nodes of
// other types (the control directory, handoff snapshots) pass unchanged.
func (n *node) WrapChild(ctx context.Context, ops gofs.InodeEmbedder) gofs.InodeEmbedder {
	if lb, ok := ops.(*gofs.LoopbackNode); ok {
		return &node{LoopbackNode: lb, fsys: n.fsys}
	}
	return ops
}

// OnAdd marks the view as attached when go-fuse adopts the root.
func (n *node) OnAdd(ctx context.Context) {
	if n.IsRoot() {
		n.fsys.attached.Store(true)
	}
}

// rel is the node's path relative to the folder root ("" for the root).
func (n *node) rel() string { return n.Path(nil) }

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (ch *gofs.Inode, errno syscall.Errno) {
	dir := n.rel()
	rel := join(dir, name)
	defer n.fsys.guard(ctx, "lookup", rel, &errno)
	n.fsys.enter("lookup", rel)
	if rel == ControlDir {
		return n.fsys.controlDir(ctx, n.EmbeddedInode(), out), 0
	}
	// An artifact handed to this agent is shown as handed over, even
	// where its grant would not show the live file.
	if snap, ok := n.fsys.view.Load().handoffs[rel]; ok {
		return n.fsys.snapshotNode(ctx, n.EmbeddedInode(), rel, snap, out)
	}
	if !n.stillDir(dir) {
		return nil, syscall.ENOENT
	}
	m := n.fsys.matcher()
	if !m.Visible(rel) {
		var st unix.Stat_t
		if unix.Lstat(n.fsys.abs(rel), &st) == nil {
			return nil, n.fsys.hide(ctx, "lookup", rel, "hidden by grant")
		}
		return nil, syscall.ENOENT
	}
	ch, errno = n.LoopbackNode.Lookup(ctx, name, out)
	if errno != 0 {
		return nil, errno
	}
	hideDirLinks(&out.Attr)
	switch mode := out.Attr.Mode & syscall.S_IFMT; {
	case mode == syscall.S_IFLNK && !n.fsys.symlinkVisible(rel):
		return nil, n.fsys.hide(ctx, "lookup", rel, "symlink target hidden or outside the folder")
	case !m.VisibleEntry(rel, mode == syscall.S_IFDIR):
		// Visible only as the way to something readable, but it is not
		// a directory, so nothing can lie below it.
		return nil, n.fsys.hide(ctx, "lookup", rel, "hidden by grant")
	case mode == syscall.S_IFREG && out.Attr.Nlink > 1:
		// go-fuse keeps one node per inode and names it by the last path
		// it saw; a hard-linked file gets one node per name instead, so
		// that every refusal is judged and recorded under the name used.
		id := gofs.StableAttr{Mode: syscall.S_IFREG, Ino: nameIno(rel), Gen: 1}
		out.Attr.Ino = id.Ino
		return n.NewInode(ctx, &gofs.LoopbackNode{RootData: n.RootData}, id), 0
	}
	return ch, 0
}

// nameIno is a node number for one name of a hard-linked file: a hash of
// the path with the top bit set, far from the numbers backing inodes use.
func nameIno(rel string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(rel))
	return h.Sum64() | nameInoBit
}

// nameInoBit marks the node numbers of nameIno. Such a node has no inode
// of its own to compare in current; every change through it is refused
// anyway, as for any hard-linked file.
const nameInoBit = 1 << 63

// symlinkVisible reports whether the symlink at rel points at a visible
// path inside the folder. The kernel follows symlinks itself, so a link
// to an absolute path would lead out of the mount: such links are hidden.
func (f *FS) symlinkVisible(rel string) bool {
	buf := make([]byte, 4096)
	k, err := unix.Readlink(f.abs(rel), buf)
	if err != nil {
		return false
	}
	target, ok := cleanSymlinkTarget(rel, string(buf[:k]))
	return ok && (target == "" || f.matcher().Visible(target))
}

func (n *node) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) (errno syscall.Errno) {
	rel := n.rel()
	defer n.fsys.guard(ctx, "getattr", rel, &errno)
	n.fsys.enter("getattr", rel)
	if rel != "" && !n.fsys.matcher().Visible(rel) {
		return syscall.ENOENT
	}
	if fh != nil {
		errno = n.LoopbackNode.Getattr(ctx, fh, out)
	} else {
		var st syscall.Stat_t
		if st, errno = n.current(rel); errno == 0 {
			out.FromStat(&st)
		}
	}
	hideDirLinks(&out.Attr)
	return errno
}

// stillDir is current for a directory about to be searched, checked once
// per entry generation: the backing path of a directory can only start
// leading elsewhere through a rename, removal or creation in the folder,
// each of which the watcher reports and counts, so a listing of a quiet
// tree pays one lstat per directory rather than one per name.
func (n *node) stillDir(rel string) bool {
	gen := n.fsys.entryGen.Load() + 1
	if n.checked.Load() == gen {
		return true
	}
	if _, errno := n.current(rel); errno != 0 {
		return false
	}
	n.checked.Store(gen)
	return true
}

// current lstats the node's backing path and checks that it still leads
// to the node's own inode. Path-based calls resolve every component
// again; if a directory on the way was swapped on disk (for a symlink to
// a hidden directory, say), the path now leads somewhere the grant never
// judged, and the node is treated as gone.
func (n *node) current(rel string) (syscall.Stat_t, syscall.Errno) {
	var st syscall.Stat_t
	stat := syscall.Lstat
	if rel == "" {
		// The folder itself may be reached through a symlink (acpfs run
		// serves it from /proc/self/fd/N).
		stat = syscall.Stat
	}
	if err := stat(n.fsys.abs(rel), &st); err != nil {
		return st, gofs.ToErrno(err)
	}
	if ino := n.StableAttr().Ino; !n.IsRoot() && ino&nameInoBit == 0 && n.fsys.inoOf(&st) != ino {
		return st, syscall.ENOENT
	}
	return st, 0
}

// hideDirLinks reports a directory's link count as 1, "unknown" to tools
// such as find: the real count is 2 plus the number of subdirectories,
// hidden ones included.
func hideDirLinks(a *fuse.Attr) {
	if a.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		a.Nlink = 1
	}
}

func (n *node) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) (errno syscall.Errno) {
	rel := n.rel()
	defer n.fsys.guard(ctx, "setattr", rel, &errno)
	n.fsys.enter("setattr", rel)
	f := n.fsys
	if errno := f.checkWrite(ctx, "setattr", rel); errno != 0 {
		return errno
	}
	_, sizeSet := in.GetSize()
	_, modeSet := in.GetMode()
	_, uidSet := in.GetUID()
	_, gidSet := in.GetGID()
	switch rel {
	case EventsFile:
		return f.deny(ctx, ledger.KindAppendRejected, "setattr", rel, syscall.EPERM, "events.jsonl is append-only and maintained by acpfs")
	case ProtocolFile:
		if pf, ok := fh.(*protocolFile); ok && sizeSet && !modeSet && !uidSet && !gidSet {
			sz, _ := in.GetSize()
			return pf.truncate(ctx, sz, out)
		}
		return f.deny(ctx, ledger.KindDenied, "setattr", rel, syscall.EPERM, "protocol.json is maintained by acpfs")
	}
	if sizeSet {
		f.record(ctx, ledger.KindWrite, "truncate", rel, "", "")
	}
	return n.LoopbackNode.Setattr(ctx, fh, in, out)
}

// checkName applies the write rules common to every mutating operation:
// the grant must allow writing the name, and it must not be a handed-over
// artifact or a frozen deliverable (or a directory holding one).
func (f *FS) checkName(ctx context.Context, op, rel string) syscall.Errno {
	switch {
	case rel == "":
		return f.deny(ctx, ledger.KindDenied, op, rel, syscall.EACCES, "the folder root cannot be changed")
	case rel == ControlDir:
		return f.deny(ctx, ledger.KindDenied, op, rel, syscall.EACCES, ".acpfs is reserved")
	case !f.matcher().Writable(rel):
		return f.deny(ctx, ledger.KindDenied, op, rel, syscall.EACCES, "not writable under the grant")
	}
	if _, ok := f.view.Load().handoffs[rel]; ok {
		return f.deny(ctx, ledger.KindDenied, op, rel, syscall.EACCES, "a handed-over artifact is read-only")
	}
	if f.frozen(rel) {
		return f.deny(ctx, ledger.KindFrozenRefused, op, rel, syscall.EROFS, "frozen deliverable")
	}
	return 0
}

// checkWrite applies checkName and refuses changes to the content or the
// metadata of a hard-linked file, whose other names may be hidden.
// Removing or renaming one name stays possible.
func (f *FS) checkWrite(ctx context.Context, op, rel string) syscall.Errno {
	if errno := f.checkName(ctx, op, rel); errno != 0 {
		return errno
	}
	if f.hardLinked(rel) {
		return f.deny(ctx, ledger.KindDenied, op, rel, syscall.EACCES, "hard-linked file: its other names cannot be checked against the grant")
	}
	return 0
}

// hardLinked reports whether rel is a regular file with several names.
func (f *FS) hardLinked(rel string) bool {
	var st unix.Stat_t
	return unix.Lstat(f.abs(rel), &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Nlink > 1
}

func (n *node) Open(ctx context.Context, flags uint32) (fh gofs.FileHandle, fuseFlags uint32, errno syscall.Errno) {
	rel := n.rel()
	defer n.fsys.guard(ctx, "open", rel, &errno)
	n.fsys.enter("open", rel)
	return n.fsys.open(ctx, n, rel, flags)
}

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fh gofs.FileHandle, fuseFlags uint32, errno syscall.Errno) {
	rel := n.rel()
	defer n.fsys.guard(ctx, "opendir", rel, &errno)
	n.fsys.enter("opendir", rel)
	if rel != "" && !n.fsys.matcher().Visible(rel) {
		return nil, 0, syscall.ENOENT
	}
	if _, errno := n.current(rel); errno != 0 {
		return nil, 0, errno
	}
	inner, flags2, errno := n.LoopbackNode.OpendirHandle(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	if err := n.fsys.record(ctx, ledger.KindList, "readdir", rel, "", ""); err != nil {
		if r, ok := inner.(gofs.FileReleasedirer); ok {
			r.Releasedir(ctx, 0)
		}
		return nil, 0, syscall.EIO
	}
	return &filteredDir{inner: inner, dir: rel, fsys: n.fsys}, flags2, 0
}

// Readdir is only used by go-fuse when OpendirHandle is absent; it is
// overridden so that an unfiltered listing can never be produced.
func (n *node) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	return nil, syscall.ENOTSUP
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (ch *gofs.Inode, fh gofs.FileHandle, fuseFlags uint32, errno syscall.Errno) {
	rel := join(n.rel(), name)
	defer n.fsys.guard(ctx, "create", rel, &errno)
	n.fsys.enter("create", rel)
	f := n.fsys
	if errno := f.checkName(ctx, "create", rel); errno != 0 {
		return nil, nil, 0, errno
	}
	if managed(rel) {
		return nil, nil, 0, f.deny(ctx, ledger.KindDenied, "create", rel, syscall.EPERM, "protocol files are created by acpfs init")
	}
	ch, lf, fuseFlags, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	f.record(ctx, ledger.KindWrite, "create", rel, "", "")
	return ch, &handle{LoopbackFile: lf.(*gofs.LoopbackFile), fsys: f, node: ch, rel: rel, writable: true, audit: f.auditReads}, fuseFlags, 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (ch *gofs.Inode, errno syscall.Errno) {
	rel := join(n.rel(), name)
	defer n.fsys.guard(ctx, "mkdir", rel, &errno)
	n.fsys.enter("mkdir", rel)
	if errno := n.fsys.checkName(ctx, "mkdir", rel); errno != 0 {
		return nil, errno
	}
	n.fsys.record(ctx, ledger.KindWrite, "mkdir", rel, "", "")
	return n.LoopbackNode.Mkdir(ctx, name, mode, out)
}

func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (ch *gofs.Inode, errno syscall.Errno) {
	rel := join(n.rel(), name)
	defer n.fsys.guard(ctx, "mknod", rel, &errno)
	n.fsys.enter("mknod", rel)
	if errno := n.fsys.checkName(ctx, "mknod", rel); errno != 0 {
		return nil, errno
	}
	if mode&syscall.S_IFMT != syscall.S_IFREG {
		return nil, n.fsys.deny(ctx, ledger.KindDenied, "mknod", rel, syscall.EPERM, "only regular files may be created")
	}
	n.fsys.record(ctx, ledger.KindWrite, "mknod", rel, "", "")
	return n.LoopbackNode.Mknod(ctx, name, mode, rdev, out)
}

func (n *node) Rmdir(ctx context.Context, name string) (errno syscall.Errno) {
	rel := join(n.rel(), name)
	defer n.fsys.guard(ctx, "rmdir", rel, &errno)
	n.fsys.enter("rmdir", rel)
	if errno := n.fsys.checkName(ctx, "rmdir", rel); errno != 0 {
		return errno
	}
	n.fsys.record(ctx, ledger.KindWrite, "rmdir", rel, "", "")
	return n.LoopbackNode.Rmdir(ctx, name)
}

func (n *node) Unlink(ctx context.Context, name string) (errno syscall.Errno) {
	rel := join(n.rel(), name)
	defer n.fsys.guard(ctx, "unlink", rel, &errno)
	n.fsys.enter("unlink", rel)
	if errno := n.fsys.checkName(ctx, "unlink", rel); errno != 0 {
		return errno
	}
	if managed(rel) {
		return n.fsys.deny(ctx, ledger.KindDenied, "unlink", rel, syscall.EPERM, "protocol files cannot be removed")
	}
	n.fsys.record(ctx, ledger.KindWrite, "unlink", rel, "", "")
	return n.LoopbackNode.Unlink(ctx, name)
}

func (n *node) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) (errno syscall.Errno) {
	from := join(n.rel(), name)
	to := join(newParent.EmbeddedInode().Path(nil), newName)
	defer n.fsys.guard(ctx, "rename", from, &errno)
	n.fsys.enter("rename", from)
	f := n.fsys
	// Both names are checked: renaming onto a hidden or frozen name
	// would otherwise replace a file the agent may not touch.
	if errno := f.checkName(ctx, "rename", from); errno != 0 {
		return errno
	}
	if errno := f.checkName(ctx, "rename", to); errno != 0 {
		return errno
	}
	if managed(from) || managed(to) {
		return f.deny(ctx, ledger.KindDenied, "rename", from, syscall.EPERM, "protocol files cannot be renamed or replaced")
	}
	f.record(ctx, ledger.KindWrite, "rename", from, "", "to "+to)
	return n.LoopbackNode.Rename(ctx, name, newParent, newName, flags)
}

// Link is refused: go-fuse keeps one node per inode and names it by the
// last path it saw, and the other names of a hard-linked file may be
// ones the grant hides, so no check on a hard-linked file could be
// trusted. Hard-linked files are refused at open for the same reason.
func (n *node) Link(ctx context.Context, target gofs.InodeEmbedder, name string, out *fuse.EntryOut) (ch *gofs.Inode, errno syscall.Errno) {
	rel := join(n.rel(), name)
	defer n.fsys.guard(ctx, "link", rel, &errno)
	n.fsys.enter("link", rel)
	f := n.fsys
	if errno := f.checkName(ctx, "link", rel); errno != 0 {
		return nil, errno
	}
	return nil, f.deny(ctx, ledger.KindDenied, "link", rel, syscall.EACCES, "hard links are not allowed in a view; copy the file instead")
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (ch *gofs.Inode, errno syscall.Errno) {
	rel := join(n.rel(), name)
	defer n.fsys.guard(ctx, "symlink", rel, &errno)
	n.fsys.enter("symlink", rel)
	f := n.fsys
	if errno := f.checkName(ctx, "symlink", rel); errno != 0 {
		return nil, errno
	}
	t, ok := cleanSymlinkTarget(rel, target)
	if !ok || (t != "" && !f.matcher().Visible(t)) {
		return nil, f.deny(ctx, ledger.KindDenied, "symlink", rel, syscall.EACCES, "symlink target is outside the visible folder")
	}
	f.record(ctx, ledger.KindWrite, "symlink", rel, "", "to "+target)
	return n.LoopbackNode.Symlink(ctx, target, name, out)
}

func (n *node) Readlink(ctx context.Context) (b []byte, errno syscall.Errno) {
	rel := n.rel()
	defer n.fsys.guard(ctx, "readlink", rel, &errno)
	n.fsys.enter("readlink", rel)
	if !n.fsys.matcher().Visible(rel) || !n.fsys.symlinkVisible(rel) {
		return nil, syscall.ENOENT
	}
	if _, errno := n.current(rel); errno != 0 {
		return nil, errno
	}
	return n.LoopbackNode.Readlink(ctx)
}

func (n *node) Getxattr(ctx context.Context, attr string, dest []byte) (sz uint32, errno syscall.Errno) {
	rel := n.rel()
	defer n.fsys.guard(ctx, "getxattr", rel, &errno)
	n.fsys.enter("getxattr", rel)
	if rel != "" && !n.fsys.matcher().Visible(rel) {
		return 0, syscall.ENOENT
	}
	// Most files have no such attribute (ls -l asks every file for its
	// ACL): answer that at once, and check the node only before handing
	// out a value.
	sz, errno = n.LoopbackNode.Getxattr(ctx, attr, dest)
	if errno != 0 && errno != syscall.ERANGE {
		return sz, errno
	}
	if e := n.xattrReadable(ctx, "getxattr", rel); e != 0 {
		return 0, e
	}
	return sz, errno
}

// xattrReadable applies the read rules to extended attributes: the node
// must still be itself, and not a hard-linked file (its attributes are
// those of every other name, hidden ones included).
func (n *node) xattrReadable(ctx context.Context, op, rel string) syscall.Errno {
	st, errno := n.current(rel)
	if errno != 0 {
		return errno
	}
	if st.Mode&syscall.S_IFMT == syscall.S_IFREG && st.Nlink > 1 {
		return n.fsys.deny(ctx, ledger.KindDenied, op, rel, syscall.EACCES, "hard-linked file: its other names cannot be checked against the grant")
	}
	return 0
}

func (n *node) Listxattr(ctx context.Context, dest []byte) (sz uint32, errno syscall.Errno) {
	rel := n.rel()
	defer n.fsys.guard(ctx, "listxattr", rel, &errno)
	n.fsys.enter("listxattr", rel)
	if rel != "" && !n.fsys.matcher().Visible(rel) {
		return 0, syscall.ENOENT
	}
	k, err := unix.Llistxattr(n.fsys.abs(rel), dest)
	if err != nil {
		return 0, gofs.ToErrno(err)
	}
	if k == 0 {
		return 0, 0
	}
	if errno := n.xattrReadable(ctx, "listxattr", rel); errno != 0 {
		return 0, errno
	}
	return uint32(k), 0
}

func (n *node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	return n.xattrWrite(ctx, "setxattr", attr, func() syscall.Errno {
		return n.LoopbackNode.Setxattr(ctx, attr, data, flags)
	})
}

func (n *node) Removexattr(ctx context.Context, attr string) syscall.Errno {
	return n.xattrWrite(ctx, "removexattr", attr, func() syscall.Errno {
		return n.LoopbackNode.Removexattr(ctx, attr)
	})
}

// xattrWrite applies the write rules to an extended-attribute change.
func (n *node) xattrWrite(ctx context.Context, op, attr string, change func() syscall.Errno) (errno syscall.Errno) {
	rel := n.rel()
	defer n.fsys.guard(ctx, op, rel, &errno)
	n.fsys.enter(op, rel)
	if errno := n.fsys.checkWrite(ctx, op, rel); errno != 0 {
		return errno
	}
	if managed(rel) {
		return n.fsys.deny(ctx, ledger.KindDenied, op, rel, syscall.EPERM, "protocol files are maintained by acpfs")
	}
	n.fsys.record(ctx, ledger.KindWrite, op, rel, "", attr)
	return change()
}

// CopyFileRange is refused so that the kernel falls back to read and
// write, which go through the checked file handles.
func (n *node) CopyFileRange(ctx context.Context, fhIn gofs.FileHandle, offIn uint64, out *gofs.Inode, fhOut gofs.FileHandle, offOut uint64, length uint64, flags uint64) (uint32, syscall.Errno) {
	return 0, syscall.ENOTSUP
}

func (n *node) Statx(ctx context.Context, fh gofs.FileHandle, flags uint32, mask uint32, out *fuse.StatxOut) (errno syscall.Errno) {
	rel := n.rel()
	defer n.fsys.guard(ctx, "statx", rel, &errno)
	n.fsys.enter("statx", rel)
	if rel != "" && !n.fsys.matcher().Visible(rel) {
		return syscall.ENOENT
	}
	errno = n.LoopbackNode.Statx(ctx, fh, flags, mask, out)
	if out.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		out.Nlink = 1
	}
	return errno
}

// Tmpfile is refused: an unnamed file has no path to check against the
// grant until it is linked, and tools fall back to a named temporary.
func (n *node) Tmpfile(ctx context.Context, flags uint32, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EOPNOTSUPP
}
