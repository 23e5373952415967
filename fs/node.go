package fs

import (
	"context"
	"sync/atomic"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/protocol"
)

// node is one file or directory of a view. It holds no descriptor and no
// backing identity of its own: every operation passes the checkpoint
// (FS.at) with the node's current path in the view, which resolves the
// path strictly beneath the folder root and judges the op there. A node
// whose backing path was swapped, removed or turned into a symlink on
// disk therefore reaches nothing the grant does not show under that
// path.
type node struct {
	gofs.Inode
	fsys *FS
	// seen is the version of the file whose attributes the kernel was
	// last given for this node. An open that finds another version
	// learns that the file changed without an invalidation (a change
	// inotify does not report) and drops the kernel's pages and
	// attributes (see FS.open).
	seen atomic.Pointer[fileVersion]
}

// saw notes the version whose attributes the kernel now holds.
func (n *node) saw(st *unix.Stat_t) {
	if st.Mode&unix.S_IFMT == unix.S_IFREG {
		v := unixVersion(st)
		n.seen.Store(&v)
	}
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
)

// OnAdd marks the view as attached when go-fuse adopts the root.
func (n *node) OnAdd(ctx context.Context) {
	if n.IsRoot() {
		n.fsys.attached.Store(true)
	}
}

// rel is the node's folder-relative name ("" for the folder; see place).
func (n *node) rel() string { return n.fsys.loc.nameOf(n.Path(nil)) }

// child makes (or finds) the inode for a backing entry. Inodes are keyed
// by the backing inode number, so a rename through the view keeps the
// kernel's node; hard-linked files, the one case where two names would
// share a node, never reach here.
func (n *node) child(ctx context.Context, st *unix.Stat_t) *gofs.Inode {
	id := gofs.StableAttr{Mode: st.Mode & unix.S_IFMT, Ino: st.Ino}
	ch := n.NewInode(ctx, &node{fsys: n.fsys}, id)
	if cn, ok := ch.Operations().(*node); ok {
		cn.saw(st)
	}
	return ch
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (ch *gofs.Inode, errno syscall.Errno) {
	dir := n.rel()
	rel := n.fsys.loc.join(dir, name)
	defer n.fsys.guard(ctx, "lookup", rel, &errno)
	n.fsys.enter("lookup", rel)
	f := n.fsys
	if rel == ControlDir {
		return f.controlDir(ctx, n.EmbeddedInode(), out), 0
	}
	// An artifact handed to this agent is shown as handed over, even
	// where its grant would not show the live file.
	if snap, ok := f.view.Load().handoffs[rel]; ok {
		return f.snapshotNode(ctx, n.EmbeddedInode(), rel, snap, out)
	}
	t, errno := f.at(ctx, opLookup, rel)
	if errno != 0 {
		return nil, errno
	}
	defer t.close()
	f.fillAttr(rel, &t.e.st, &out.Attr)
	f.entryTimeouts(rel, out)
	return n.child(ctx, &t.e.st), 0
}

func (n *node) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) (errno syscall.Errno) {
	rel := n.rel()
	defer n.fsys.guard(ctx, "getattr", rel, &errno)
	n.fsys.enter("getattr", rel)
	f := n.fsys
	if h, ok := fh.(fileHandle); ok {
		// The open file itself, whatever its name has become since. Its
		// attributes are refused, like its reads, once the grant no
		// longer lets the agent read it.
		if errno := h.base().readable(ctx); errno != 0 {
			return errno
		}
		if errno := h.base().getattr(out); errno != 0 {
			return errno
		}
		f.attrTimeout(rel, out)
		return 0
	}
	t, errno := f.at(ctx, opGetattr, rel)
	if errno != 0 {
		return errno
	}
	defer t.close()
	f.fillAttr(rel, &t.e.st, &out.Attr)
	f.attrTimeout(rel, out)
	n.saw(&t.e.st)
	return 0
}

func (n *node) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) (errno syscall.Errno) {
	rel := n.rel()
	defer n.fsys.guard(ctx, "setattr", rel, &errno)
	n.fsys.enter("setattr", rel)
	f := n.fsys
	size, sizeSet := in.GetSize()
	_, modeSet := in.GetMode()
	_, uidSet := in.GetUID()
	_, gidSet := in.GetGID()
	if pf, ok := fh.(*protocolFile); ok && rel == protocol.ProtocolFile && sizeSet && !modeSet && !uidSet && !gidSet {
		// ftruncate of a protocol.json rewrite in progress: judged
		// with the rest of the rewrite at close.
		return pf.truncate(ctx, size, out)
	}
	o := opSetattr
	if sizeSet {
		o = opTruncate
	}
	t, errno := f.at(ctx, o, rel)
	if errno != 0 {
		return errno
	}
	defer t.close()
	op := "setattr"
	if sizeSet {
		op = "truncate"
	}
	if errno := f.recordSetattr(ctx, op, rel, in); errno != 0 {
		return errno
	}
	// The descriptor to act on: the open file when the kernel names one,
	// else the entry the checkpoint judged, opened relative to its
	// parent and checked to be that same entry.
	fd := -1
	if h, ok := fh.(fileHandle); ok {
		fd = h.base().fd()
	} else if t.e.kind == kindFile {
		flags := unix.O_RDONLY
		if sizeSet {
			flags = unix.O_WRONLY
		}
		ofd, err := t.openSame(flags | unix.O_NONBLOCK)
		if err != nil {
			return errnoOf(err)
		}
		defer unix.Close(ofd)
		fd = ofd
	}
	var grow int64
	if sizeSet && fd >= 0 {
		grow = growth(fd, int64(size), 0, false)
		if errno := f.chargeGrowth(ctx, "truncate", rel, grow); errno != 0 {
			return errno
		}
	}
	if errno := setattr(fd, t.d, in); errno != 0 {
		f.refund(grow)
		return errno
	}
	st, err := t.restat(fd)
	if err != nil {
		return errnoOf(err)
	}
	f.fillAttr(rel, &st, &out.Attr)
	f.attrTimeout(rel, out)
	n.saw(&st)
	return 0
}

// setattr applies in to the descriptor fd, or when fd is -1 (a directory
// or a symlink) to the name in d without following it.
func setattr(fd int, d dir, in *fuse.SetAttrIn) syscall.Errno {
	if mode, ok := in.GetMode(); ok {
		var err error
		if fd >= 0 {
			err = unix.Fchmod(fd, mode&0o7777)
		} else {
			err = unix.Fchmodat(d.fd, d.name, mode&0o7777, unix.AT_SYMLINK_NOFOLLOW)
		}
		if err != nil {
			return errnoOf(err)
		}
	}
	uid, uidSet := in.GetUID()
	gid, gidSet := in.GetGID()
	if uidSet || gidSet {
		u, g := -1, -1
		if uidSet {
			u = int(uid)
		}
		if gidSet {
			g = int(gid)
		}
		var err error
		if fd >= 0 {
			err = unix.Fchown(fd, u, g)
		} else {
			err = unix.Fchownat(d.fd, d.name, u, g, unix.AT_SYMLINK_NOFOLLOW)
		}
		if err != nil {
			return errnoOf(err)
		}
	}
	if size, ok := in.GetSize(); ok {
		if fd < 0 {
			return syscall.EISDIR
		}
		if err := unix.Ftruncate(fd, int64(size)); err != nil {
			return errnoOf(err)
		}
	}
	atime, aok := in.GetATime()
	mtime, mok := in.GetMTime()
	if aok || mok {
		ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_OMIT}}
		if aok {
			ts[0] = unix.NsecToTimespec(atime.UnixNano())
			if in.Valid&fuse.FATTR_ATIME_NOW != 0 {
				ts[0] = unix.Timespec{Nsec: unix.UTIME_NOW}
			}
		}
		if mok {
			ts[1] = unix.NsecToTimespec(mtime.UnixNano())
			if in.Valid&fuse.FATTR_MTIME_NOW != 0 {
				ts[1] = unix.Timespec{Nsec: unix.UTIME_NOW}
			}
		}
		var err error
		if fd >= 0 {
			err = unix.UtimesNanoAt(fd, "", ts, unix.AT_EMPTY_PATH)
		} else {
			err = unix.UtimesNanoAt(d.fd, d.name, ts, unix.AT_SYMLINK_NOFOLLOW)
		}
		if err != nil {
			return errnoOf(err)
		}
	}
	return 0
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
	t, errno := n.fsys.at(ctx, opReaddir, rel)
	if errno != 0 {
		return nil, 0, errno
	}
	t.close()
	if t.e.kind != kindDir {
		return nil, 0, syscall.ENOTDIR
	}
	if err := n.fsys.recordListing(ctx, rel); err != nil {
		return nil, 0, syscall.EIO
	}
	// The kernel may keep the listing between opens while the watcher
	// sees the whole folder: the watcher and grant changes drop it with
	// the directory's attributes. Every open still reaches this handler,
	// and its record.
	var keep uint32
	if n.fsys.cacheTimeout() == CacheTimeout {
		keep = fuse.FOPEN_CACHE_DIR | fuse.FOPEN_KEEP_CACHE
	}
	return &dirHandle{fsys: n.fsys, node: n, rel: rel}, keep, 0
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (ch *gofs.Inode, fh gofs.FileHandle, fuseFlags uint32, errno syscall.Errno) {
	rel := n.fsys.loc.join(n.rel(), name)
	defer n.fsys.guard(ctx, "create", rel, &errno)
	n.fsys.enter("create", rel)
	f := n.fsys
	if errno := f.handleRoom(ctx, "create", rel); errno != 0 {
		return nil, nil, 0, errno
	}
	var t *target
	var fd int
	if f.stageable(rel) && !f.shows(rel) {
		// A temporary file next to something the agent may write: made
		// privately (see staging).
		if t, fd, errno = f.createStaged(ctx, rel, flags, mode); errno != 0 {
			return nil, nil, 0, errno
		}
	} else {
		if t, errno = f.at(ctx, opCreate, rel); errno != 0 {
			return nil, nil, 0, errno
		}
		if errno := f.newName(ctx, "create", rel, ""); errno != 0 {
			t.close()
			return nil, nil, 0, errno
		}
		// O_EXCL always: the name was judged free, and if anyone took it
		// since, the new file must not be opened in its place.
		oflags := int(flags)&^(unix.O_TRUNC|unix.O_EXCL|unix.O_CREAT|unix.O_NOCTTY) | unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW | unix.O_CLOEXEC
		var err error
		if fd, err = unix.Openat(t.d.fd, t.d.name, oflags, mode&0o7777); err != nil {
			f.quota.files.Add(-1)
			t.close()
			return nil, nil, 0, errnoOf(err)
		}
	}
	defer t.close()
	f.chownToCaller(ctx, fd, t.d)
	// Exactly the mode asked for: the kernel has applied the caller's
	// umask already, the daemon's own must not apply again, and the
	// set-id bits survive only a chmod made after the chown.
	unix.Fchmod(fd, mode&0o7777)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, nil, 0, errnoOf(err)
	}
	f.fillAttr(rel, &st, &out.Attr)
	f.entryTimeouts(rel, out)
	ch = n.child(ctx, &st)
	cn, _ := ch.Operations().(*node)
	h := f.newHandle(fd, rel, cn)
	h.writable = true
	h.appending = flags&syscall.O_APPEND != 0
	return ch, f.track(h), 0, 0
}

// chownToCaller gives a new entry to the caller, as a local filesystem
// would, instead of to the daemon (root).
func (f *FS) chownToCaller(ctx context.Context, fd int, d dir) {
	c, ok := fuse.FromContext(ctx)
	if !ok || unix.Geteuid() != 0 {
		return
	}
	if fd >= 0 {
		unix.Fchown(fd, int(c.Uid), int(c.Gid))
		return
	}
	unix.Fchownat(d.fd, d.name, int(c.Uid), int(c.Gid), unix.AT_SYMLINK_NOFOLLOW)
}

// made finishes an operation that made a new name in t.d: the caller
// owns it and the kernel learns its attributes.
func (n *node) made(ctx context.Context, t *target, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	n.fsys.chownToCaller(ctx, -1, t.d)
	if mode != 0 {
		// See Create: the mode asked for, set after the chown.
		unix.Fchmodat(t.d.fd, t.d.name, mode&0o7777, unix.AT_SYMLINK_NOFOLLOW)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(t.d.fd, t.d.name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, errnoOf(err)
	}
	n.fsys.fillAttr(t.rel, &st, &out.Attr)
	n.fsys.entryTimeouts(t.rel, out)
	return n.child(ctx, &st), 0
}

// newEntry is how Mkdir, Mknod and Symlink make a name: the operation,
// what the record of the new name says, a refusal of its own (nil: none)
// and the *at call that makes it.
type newEntry struct {
	name   string
	op     op
	detail string
	refuse func(rel string) syscall.Errno
	make   func(d dir) error
	mode   uint32
}

// makeAt resolves rel through the checkpoint, lets e refuse, charges and
// records the new name, and only then makes it; a name that could not be
// made gives its quota back.
func (n *node) makeAt(ctx context.Context, rel string, e newEntry, out *fuse.EntryOut) (ch *gofs.Inode, errno syscall.Errno) {
	defer n.fsys.guard(ctx, e.name, rel, &errno)
	n.fsys.enter(e.name, rel)
	t, errno := n.fsys.at(ctx, e.op, rel)
	if errno != 0 {
		return nil, errno
	}
	defer t.close()
	if e.refuse != nil {
		if errno := e.refuse(rel); errno != 0 {
			return nil, errno
		}
	}
	if errno := n.fsys.newName(ctx, e.name, rel, e.detail); errno != 0 {
		return nil, errno
	}
	if err := e.make(t.d); err != nil {
		n.fsys.quota.files.Add(-1)
		return nil, errnoOf(err)
	}
	return n.made(ctx, t, e.mode, out)
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return n.makeAt(ctx, n.fsys.loc.join(n.rel(), name), newEntry{
		name: "mkdir", op: opMkdir, mode: mode,
		make: func(d dir) error { return unix.Mkdirat(d.fd, d.name, mode&0o7777) },
	}, out)
}

func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return n.makeAt(ctx, n.fsys.loc.join(n.rel(), name), newEntry{
		name: "mknod", op: opMknod, mode: mode,
		refuse: func(rel string) syscall.Errno {
			if mode&syscall.S_IFMT != syscall.S_IFREG {
				return n.fsys.deny(ctx, ledger.KindDenied, "mknod", rel, syscall.EPERM, "only regular files may be created")
			}
			return 0
		},
		make: func(d dir) error { return unix.Mknodat(d.fd, d.name, mode, 0) },
	}, out)
}

// changeAt resolves rel through the checkpoint for o, records the change
// (name and detail) and only then applies it with act on the parent
// directory: a change the ledger cannot hold is never made.
func (n *node) changeAt(ctx context.Context, name string, o op, rel, detail string, act func(d dir) error) (errno syscall.Errno) {
	defer n.fsys.guard(ctx, name, rel, &errno)
	n.fsys.enter(name, rel)
	t, errno := n.fsys.at(ctx, o, rel)
	if errno != 0 {
		return errno
	}
	defer t.close()
	if errno := n.fsys.recordChange(ctx, name, rel, detail); errno != 0 {
		return errno
	}
	return errnoOf(act(t.d))
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	return n.changeAt(ctx, "rmdir", opRmdir, n.fsys.loc.join(n.rel(), name), "", func(d dir) error {
		return unix.Unlinkat(d.fd, d.name, unix.AT_REMOVEDIR)
	})
}

func (n *node) Unlink(ctx context.Context, name string) (errno syscall.Errno) {
	rel := n.fsys.loc.join(n.rel(), name)
	defer n.fsys.guard(ctx, "unlink", rel, &errno)
	n.fsys.enter("unlink", rel)
	t, errno := n.fsys.at(ctx, opUnlink, rel)
	if errno != 0 {
		return errno
	}
	defer t.close()
	if t.e.kind == kindDir {
		return syscall.EISDIR
	}
	if errno := n.fsys.recordChange(ctx, "unlink", rel, ""); errno != 0 {
		return errno
	}
	if err := unix.Unlinkat(t.d.fd, t.d.name, 0); err != nil {
		return errnoOf(err)
	}
	n.fsys.unstage(rel)
	return 0
}

func (n *node) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) (errno syscall.Errno) {
	from := n.fsys.loc.join(n.rel(), name)
	to := n.fsys.loc.join(n.fsys.loc.nameOf(newParent.EmbeddedInode().Path(nil)), newName)
	defer n.fsys.guard(ctx, "rename", from, &errno)
	n.fsys.enter("rename", from)
	f := n.fsys
	if flags&^uint32(unix.RENAME_NOREPLACE|unix.RENAME_EXCHANGE) != 0 {
		// RENAME_WHITEOUT would make the daemon create a device node.
		return syscall.EINVAL
	}
	src, errno := f.at(ctx, opRenameFrom, from)
	if errno != 0 {
		return errno
	}
	defer src.close()
	_, fromStaged := f.stagedName(from)
	_, toStaged := f.stagedName(to)
	if toStaged && !fromStaged {
		// A private name only ever holds what the agent wrote there: a
		// file of the folder moved onto it would leave the folder.
		return f.deny(ctx, ledger.KindDenied, "rename", to, syscall.EACCES, "a file of the folder cannot be moved onto a temporary file of this view")
	}
	if fromStaged && !toStaged && flags&unix.RENAME_EXCHANGE != 0 {
		return f.deny(ctx, ledger.KindDenied, "rename", from, syscall.EACCES, "a temporary file of this view cannot be exchanged with a file of the folder")
	}
	if fromStaged && !toStaged && flags == 0 && f.stageable(to) && !f.shows(to) {
		// One private file renamed to another private name: only the
		// view's own map changes.
		f.stage.mu.Lock()
		f.stage.names[to] = f.stage.names[from]
		delete(f.stage.names, from)
		f.stage.mu.Unlock()
		return 0
	}
	// Both names are judged: renaming onto a hidden, frozen or managed
	// name would otherwise replace a file the agent may not touch. An
	// exchange moves the target too, so it must be changeable as well.
	dstOp := opRenameTo
	if flags&unix.RENAME_EXCHANGE != 0 {
		dstOp = opRenameFrom
	}
	dst, errno := f.at(ctx, dstOp, to)
	if errno != 0 {
		return errno
	}
	defer dst.close()
	// What moves: the source, and with an exchange the target too.
	moved := []*target{src}
	if flags&unix.RENAME_EXCHANGE != 0 {
		moved = append(moved, dst)
	}
	for _, t := range moved {
		if t.e.kind == kindDir {
			if why := f.holdsConcealed(t); why != "" {
				// The grant shows everything below it, yet something
				// there is no view's to move (another coordinator's run
				// directory, a file with several names, a bad symlink).
				return f.deny(ctx, ledger.KindDenied, "rename", t.rel, syscall.EACCES, "a directory holding entries the view does not show cannot be renamed ("+why+")")
			}
		}
	}
	if fromStaged && !toStaged {
		// The commit of a temporary file: a write of the target.
		errno = f.recordChange(ctx, "rename", to, "committed from a private temporary file ("+from+")")
	} else {
		errno = f.recordChange(ctx, "rename", from, "to "+to)
	}
	if errno != 0 {
		return errno
	}
	if err := unix.Renameat2(src.d.fd, src.d.name, dst.d.fd, dst.d.name, uint(flags)); err != nil {
		return errnoOf(err)
	}
	f.renamedStaged(from, fromStaged, flags&unix.RENAME_EXCHANGE != 0)
	return 0
}

// Link is refused: every name of a hard-linked file shares its content
// and attributes, and the other names may be ones the grant hides. Such
// files are not shown in a view either.
func (n *node) Link(ctx context.Context, target gofs.InodeEmbedder, name string, out *fuse.EntryOut) (ch *gofs.Inode, errno syscall.Errno) {
	rel := n.fsys.loc.join(n.rel(), name)
	defer n.fsys.guard(ctx, "link", rel, &errno)
	n.fsys.enter("link", rel)
	t, errno := n.fsys.at(ctx, opLink, rel)
	if errno == 0 {
		t.close()
		errno = syscall.EACCES // decide refuses every link; never reached
	}
	return nil, errno
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	f := n.fsys
	return n.makeAt(ctx, n.fsys.loc.join(n.rel(), name), newEntry{
		name: "symlink", op: opSymlink, detail: "to " + target,
		refuse: func(rel string) syscall.Errno {
			if tr, ok := f.loc.symlinkTarget(rel, target); !ok || !targetVisible(f.matcher(), tr) {
				return f.deny(ctx, ledger.KindDenied, "symlink", rel, syscall.EACCES, "symlink target is outside the visible folder")
			}
			return 0
		},
		make: func(d dir) error { return unix.Symlinkat(target, d.fd, d.name) },
	}, out)
}

func (n *node) Readlink(ctx context.Context) (b []byte, errno syscall.Errno) {
	rel := n.rel()
	defer n.fsys.guard(ctx, "readlink", rel, &errno)
	n.fsys.enter("readlink", rel)
	t, errno := n.fsys.at(ctx, opReadlink, rel)
	if errno != 0 {
		return nil, errno
	}
	defer t.close()
	s, err := readlinkat(t.d.fd, t.d.name)
	if err != nil {
		return nil, errnoOf(err)
	}
	return []byte(s), 0
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
	return n.changeAt(ctx, "setxattr", opSetxattr, n.rel(), attr, func(d dir) error {
		return setxattrat(d.fd, d.name, attr, data, flags)
	})
}

func (n *node) Removexattr(ctx context.Context, attr string) syscall.Errno {
	return n.changeAt(ctx, "removexattr", opRemovexattr, n.rel(), attr, func(d dir) error {
		return removexattrat(d.fd, d.name, attr)
	})
}

// Statfs reports the backing filesystem's figures: they are shared by
// everything on it, visible or not, and `df` needs them.
func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	var st unix.Statfs_t
	if err := unix.Fstatfs(n.fsys.b.rootFd(), &st); err != nil {
		return errnoOf(err)
	}
	out.Blocks, out.Bfree, out.Bavail = st.Blocks, st.Bfree, st.Bavail
	out.Files, out.Ffree = st.Files, st.Ffree
	out.Bsize, out.Frsize = uint32(st.Bsize), uint32(st.Frsize)
	out.NameLen = uint32(st.Namelen)
	return 0
}
