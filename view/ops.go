package view

import (
	"context"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/protocol"
)

// The operations of a view on names. Each takes folder-relative names
// (see place: "" is the folder, "../x" lies beside it), passes the
// checkpoint (View.at), which judges it and records a refusal, records
// a change before making it, and acts on the backing folder only with
// *at calls relative to the directory the checkpoint resolved.

// Name is the folder-relative name of a path below the view's root.
func (f *View) Name(viewPath string) string { return f.loc.nameOf(viewPath) }

// Join names the entry name in the directory named dir.
func (f *View) Join(dir, name string) string { return f.loc.join(dir, name) }

// FolderPath is the folder's path below the view's root ("" when the
// view is rooted at the folder), where the control directory lies.
func (f *View) FolderPath() string { return f.loc.within }

// Lookup finds the entry at rel. An artifact handed to this agent is
// shown as handed over, even where its grant would not show the live
// file (Entry.Snapshot); .acpfs is the adapter's (Entry.Control).
func (f *View) Lookup(ctx context.Context, rel string) (Entry, syscall.Errno) {
	if rel == ControlDir {
		var e Entry
		e.Control = true
		e.Attr.Mode, e.Attr.Nlink = syscall.S_IFDIR|0o555, 1
		return e, 0
	}
	if snap, ok := f.gv.Load().handoffs[rel]; ok {
		st, errno := SnapshotAttr(snap)
		return Entry{Attr: st, Snapshot: snap}, errno
	}
	gen, gv := f.placeStamp(), f.gv.Load()
	t, errno := f.at(ctx, opLookup, rel)
	if errno != 0 {
		return Entry{}, errno
	}
	defer t.close()
	e := f.entryOf(rel, &t.e.st)
	if t.e.kind == kindFile {
		e.open = f.lookupVerdict(gv, gen, rel, &t.e.st)
	}
	return e, 0
}

// Getattr is the attributes of the entry at rel, or of the open file fh
// when the kernel names one (whatever its name has become since).
func (f *View) Getattr(ctx context.Context, rel string, fh File) (unix.Stat_t, syscall.Errno) {
	if fh != nil {
		return fh.Getattr(ctx)
	}
	t, errno := f.at(ctx, opGetattr, rel)
	if errno != 0 {
		return unix.Stat_t{}, errno
	}
	defer t.close()
	return f.attrOf(rel, &t.e.st), 0
}

// Setattr changes the attributes of the entry at rel, or of the open
// file fh when the kernel names one, and returns the attributes after
// the change.
func (f *View) Setattr(ctx context.Context, rel string, fh File, in *SetAttr) (unix.Stat_t, syscall.Errno) {
	if pf, ok := fh.(*protocolFile); ok && rel == protocol.ProtocolFile && in.HasSize && !in.HasMode && !in.HasUID && !in.HasGID {
		// ftruncate of a protocol.json rewrite in progress: judged
		// with the rest of the rewrite at close.
		return pf.truncate(in.Size)
	}
	o := opSetattr
	if in.HasSize {
		o = opTruncate
	}
	t, errno := f.at(ctx, o, rel)
	if errno != 0 {
		return unix.Stat_t{}, errno
	}
	defer t.close()
	if errno := f.recordSetattr(ctx, o.name(), rel, in); errno != 0 {
		return unix.Stat_t{}, errno
	}
	// The descriptor to act on: the open file when the kernel names one,
	// else the entry the checkpoint judged, opened relative to its
	// parent and checked to be that same entry.
	fd := -1
	if fh != nil {
		fd = fh.base().fd()
	} else if t.e.kind == kindFile {
		flags := unix.O_RDONLY
		if in.HasSize {
			flags = unix.O_WRONLY
		}
		ofd, err := t.openSame(flags | unix.O_NONBLOCK)
		if err != nil {
			return unix.Stat_t{}, errnoOf(err)
		}
		defer unix.Close(ofd)
		fd = ofd
	}
	var grow int64
	if in.HasSize && fd >= 0 {
		grow = growth(fd, int64(in.Size), 0, false)
		if errno := f.chargeGrowth(ctx, ledger.OpTruncate, rel, grow); errno != 0 {
			return unix.Stat_t{}, errno
		}
	}
	if errno := setattr(fd, t.d, in); errno != 0 {
		f.refund(grow)
		return unix.Stat_t{}, errno
	}
	st, err := t.restat(fd)
	if err != nil {
		return unix.Stat_t{}, errnoOf(err)
	}
	return f.attrOf(rel, &st), 0
}

// setattr applies in to the descriptor fd, or when fd is -1 (a directory
// or a symlink) to the name in d without following it.
func setattr(fd int, d dir, in *SetAttr) syscall.Errno {
	if in.HasMode {
		var err error
		if fd >= 0 {
			err = unix.Fchmod(fd, in.Mode&0o7777)
		} else {
			err = unix.Fchmodat(d.fd, d.name, in.Mode&0o7777, unix.AT_SYMLINK_NOFOLLOW)
		}
		if err != nil {
			return errnoOf(err)
		}
	}
	if in.HasUID || in.HasGID {
		u, g := -1, -1
		if in.HasUID {
			u = int(in.UID)
		}
		if in.HasGID {
			g = int(in.GID)
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
	if in.HasSize {
		if fd < 0 {
			return syscall.EISDIR
		}
		if err := unix.Ftruncate(fd, int64(in.Size)); err != nil {
			return errnoOf(err)
		}
	}
	if in.HasATime || in.HasMTime {
		ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_OMIT}}
		if in.HasATime {
			ts[0] = unix.NsecToTimespec(in.ATime.UnixNano())
			if in.ATimeNow {
				ts[0] = unix.Timespec{Nsec: unix.UTIME_NOW}
			}
		}
		if in.HasMTime {
			ts[1] = unix.NsecToTimespec(in.MTime.UnixNano())
			if in.MTimeNow {
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

// Create makes and opens a new file at rel. mk is called with the new
// file's stat, before the handle is made, and returns the adapter's node
// for it.
func (f *View) Create(ctx context.Context, rel string, flags, mode uint32, mk func(e Entry) Node) (Entry, File, syscall.Errno) {
	if errno := f.handleRoom(ctx, ledger.OpCreate, rel); errno != 0 {
		return Entry{}, nil, errno
	}
	var t *target
	var fd int
	var errno syscall.Errno
	if f.stageable(rel) && !f.shows(rel) {
		// A temporary file next to something the agent may write: made
		// privately (see staging).
		if t, fd, errno = f.createStaged(ctx, rel, flags, mode); errno != 0 {
			return Entry{}, nil, errno
		}
	} else {
		if t, errno = f.at(ctx, opCreate, rel); errno != 0 {
			return Entry{}, nil, errno
		}
		if errno := f.newName(ctx, ledger.OpCreate, rel, ""); errno != 0 {
			t.close()
			return Entry{}, nil, errno
		}
		// O_EXCL always: the name was judged free, and if anyone took it
		// since, the new file must not be opened in its place.
		oflags := int(flags)&^(unix.O_TRUNC|unix.O_EXCL|unix.O_CREAT|unix.O_NOCTTY) | unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW | unix.O_CLOEXEC
		var err error
		if fd, err = unix.Openat(t.d.fd, t.d.name, oflags, mode&0o7777); err != nil {
			f.quota.files.Add(-1)
			t.close()
			return Entry{}, nil, errnoOf(err)
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
		return Entry{}, nil, errnoOf(err)
	}
	e := f.entryOf(rel, &st)
	var n Node
	if mk != nil {
		n = mk(e)
	}
	h := f.newHandle(fd, rel, n)
	h.writable = true
	h.appending = flags&syscall.O_APPEND != 0
	return e, f.track(h), 0
}

// chownToCaller gives a new entry to the caller, as a local filesystem
// would, instead of to the daemon (root).
func (f *View) chownToCaller(ctx context.Context, fd int, d dir) {
	c, ok := f.caller(ctx)
	if !ok || unix.Geteuid() != 0 {
		return
	}
	if fd >= 0 {
		unix.Fchown(fd, int(c.UID), int(c.GID))
		return
	}
	unix.Fchownat(d.fd, d.name, int(c.UID), int(c.GID), unix.AT_SYMLINK_NOFOLLOW)
}

// newEntry is how Mkdir, Mknod and Symlink make a name: the operation,
// what the record of the new name says, a refusal of its own (nil: none)
// and the *at call that makes it.
type newEntry struct {
	op     op
	detail string
	refuse func(rel string) syscall.Errno
	make   func(d dir) error
	mode   uint32
}

// makeAt resolves rel through the checkpoint, lets e refuse, charges and
// records the new name, and only then makes it; a name that could not be
// made gives its quota back. The caller then owns it.
func (f *View) makeAt(ctx context.Context, rel string, e newEntry) (Entry, syscall.Errno) {
	t, errno := f.at(ctx, e.op, rel)
	if errno != 0 {
		return Entry{}, errno
	}
	defer t.close()
	if e.refuse != nil {
		if errno := e.refuse(rel); errno != 0 {
			return Entry{}, errno
		}
	}
	if errno := f.newName(ctx, e.op.name(), rel, e.detail); errno != 0 {
		return Entry{}, errno
	}
	if err := e.make(t.d); err != nil {
		f.quota.files.Add(-1)
		return Entry{}, errnoOf(err)
	}
	f.chownToCaller(ctx, -1, t.d)
	if e.mode != 0 {
		// See Create: the mode asked for, set after the chown.
		unix.Fchmodat(t.d.fd, t.d.name, e.mode&0o7777, unix.AT_SYMLINK_NOFOLLOW)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(t.d.fd, t.d.name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return Entry{}, errnoOf(err)
	}
	return f.entryOf(rel, &st), 0
}

// Mkdir makes the directory rel.
func (f *View) Mkdir(ctx context.Context, rel string, mode uint32) (Entry, syscall.Errno) {
	return f.makeAt(ctx, rel, newEntry{
		op: opMkdir, mode: mode,
		make: func(d dir) error { return unix.Mkdirat(d.fd, d.name, mode&0o7777) },
	})
}

// Mknod makes the regular file rel; every other kind is refused.
func (f *View) Mknod(ctx context.Context, rel string, mode uint32) (Entry, syscall.Errno) {
	return f.makeAt(ctx, rel, newEntry{
		op: opMknod, mode: mode,
		refuse: func(rel string) syscall.Errno {
			if mode&syscall.S_IFMT != syscall.S_IFREG {
				return f.deny(ctx, ledger.KindDenied, ledger.OpMknod, rel, syscall.EPERM, "only regular files may be created")
			}
			return 0
		},
		make: func(d dir) error { return unix.Mknodat(d.fd, d.name, mode, 0) },
	})
}

// Symlink makes rel a symlink to target, which must lead to something
// the view shows.
func (f *View) Symlink(ctx context.Context, rel, target string) (Entry, syscall.Errno) {
	return f.makeAt(ctx, rel, newEntry{
		op: opSymlink, detail: "to " + target,
		refuse: func(rel string) syscall.Errno {
			if tr, ok := f.loc.symlinkTarget(rel, target); !ok || !targetVisible(f.matcher(), tr) {
				return f.deny(ctx, ledger.KindDenied, ledger.OpSymlink, rel, syscall.EACCES, "symlink target is outside the visible folder")
			}
			return 0
		},
		make: func(d dir) error { return unix.Symlinkat(target, d.fd, d.name) },
	})
}

// changeAt resolves rel through the checkpoint for o, records the change
// (name and detail) and only then applies it with act on the parent
// directory: a change the ledger cannot hold is never made.
func (f *View) changeAt(ctx context.Context, name ledger.Op, o op, rel, detail string, act func(d dir) error) syscall.Errno {
	t, errno := f.at(ctx, o, rel)
	if errno != 0 {
		return errno
	}
	defer t.close()
	if errno := f.recordChange(ctx, name, rel, detail); errno != 0 {
		return errno
	}
	return errnoOf(act(t.d))
}

// Rmdir removes the directory rel.
func (f *View) Rmdir(ctx context.Context, rel string) syscall.Errno {
	return f.changeAt(ctx, ledger.OpRmdir, opRmdir, rel, "", func(d dir) error {
		return unix.Unlinkat(d.fd, d.name, unix.AT_REMOVEDIR)
	})
}

// Setxattr sets the extended attribute attr of rel.
func (f *View) Setxattr(ctx context.Context, rel, attr string, data []byte, flags uint32) syscall.Errno {
	return f.changeAt(ctx, ledger.OpSetxattr, opSetxattr, rel, attr, func(d dir) error {
		return setxattrat(d.fd, d.name, attr, data, flags)
	})
}

// Removexattr removes the extended attribute attr of rel.
func (f *View) Removexattr(ctx context.Context, rel, attr string) syscall.Errno {
	return f.changeAt(ctx, ledger.OpRemovexattr, opRemovexattr, rel, attr, func(d dir) error {
		return removexattrat(d.fd, d.name, attr)
	})
}

// Unlink removes the name rel.
func (f *View) Unlink(ctx context.Context, rel string) syscall.Errno {
	t, errno := f.at(ctx, opUnlink, rel)
	if errno != 0 {
		return errno
	}
	defer t.close()
	if t.e.kind == kindDir {
		return syscall.EISDIR
	}
	if errno := f.recordChange(ctx, ledger.OpUnlink, rel, ""); errno != 0 {
		return errno
	}
	if err := unix.Unlinkat(t.d.fd, t.d.name, 0); err != nil {
		return errnoOf(err)
	}
	f.unstage(rel)
	return 0
}

// Rename moves from to to (flags: RENAME_NOREPLACE, RENAME_EXCHANGE).
func (f *View) Rename(ctx context.Context, from, to string, flags uint32) syscall.Errno {
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
		return f.deny(ctx, ledger.KindDenied, ledger.OpRename, to, syscall.EACCES, "a file of the folder cannot be moved onto a temporary file of this view")
	}
	if fromStaged && !toStaged && flags&unix.RENAME_EXCHANGE != 0 {
		return f.deny(ctx, ledger.KindDenied, ledger.OpRename, from, syscall.EACCES, "a temporary file of this view cannot be exchanged with a file of the folder")
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
	if errno := f.movable(ctx, src, dst, flags); errno != 0 {
		return errno
	}
	if fromStaged && !toStaged {
		// The commit of a temporary file: a write of the target.
		errno = f.recordChange(ctx, ledger.OpRename, to, "committed from a private temporary file ("+from+")")
	} else {
		errno = f.recordChange(ctx, ledger.OpRename, from, "to "+to)
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

// movable refuses a rename that would move a directory holding entries
// the view does not show: the source, and with an exchange the target.
func (f *View) movable(ctx context.Context, src, dst *target, flags uint32) syscall.Errno {
	moved := []*target{src}
	if flags&unix.RENAME_EXCHANGE != 0 {
		moved = append(moved, dst)
	}
	for _, t := range moved {
		if t.e.kind != kindDir {
			continue
		}
		if why := f.holdsConcealed(t); why != "" {
			// The grant shows everything below it, yet something there
			// is no view's to move (another coordinator's run
			// directory, a file with several names, a bad symlink).
			return f.deny(ctx, ledger.KindDenied, ledger.OpRename, t.rel, syscall.EACCES, "a directory holding entries the view does not show cannot be renamed ("+why+")")
		}
	}
	return 0
}

// Link is refused: every name of a hard-linked file shares its content
// and attributes, and the other names may be ones the grant hides. Such
// files are not shown in a view either.
func (f *View) Link(ctx context.Context, rel string) syscall.Errno {
	t, errno := f.at(ctx, opLink, rel)
	if errno == 0 {
		t.close()
		errno = syscall.EACCES // decide refuses every link; never reached
	}
	return errno
}

// Readlink is the target of the symlink rel.
func (f *View) Readlink(ctx context.Context, rel string) ([]byte, syscall.Errno) {
	t, errno := f.at(ctx, opReadlink, rel)
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

// Statfs reports the backing filesystem's figures: they are shared by
// everything on it, visible or not, and `df` needs them.
func (f *View) Statfs() (unix.Statfs_t, syscall.Errno) {
	var st unix.Statfs_t
	err := unix.Fstatfs(f.b.rootFd(), &st)
	return st, errnoOf(err)
}
