package fs

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/protocol"
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
	return d.fsys.deny(ctx, ledger.KindDenied, "setxattr", ControlDir, syscall.EACCES, ".acpfs is read-only")
}

func (d *ctlDir) Removexattr(ctx context.Context, attr string) syscall.Errno {
	return d.fsys.deny(ctx, ledger.KindDenied, "removexattr", ControlDir, syscall.EACCES, ".acpfs is read-only")
}

func (c *ctlFile) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	return c.fsys.deny(ctx, ledger.KindDenied, "setxattr", c.rel(), syscall.EACCES, ".acpfs is read-only")
}

func (c *ctlFile) Removexattr(ctx context.Context, attr string) syscall.Errno {
	return c.fsys.deny(ctx, ledger.KindDenied, "removexattr", c.rel(), syscall.EACCES, ".acpfs is read-only")
}

func (d *ctlDir) refuse(ctx context.Context, op, name string) syscall.Errno {
	return d.fsys.deny(ctx, ledger.KindDenied, op, ControlDir+"/"+name, syscall.EACCES, ".acpfs is read-only")
}

func (d *ctlDir) Unlink(ctx context.Context, name string) syscall.Errno {
	return d.refuse(ctx, "unlink", name)
}

func (d *ctlDir) Rmdir(ctx context.Context, name string) syscall.Errno {
	return d.refuse(ctx, "rmdir", name)
}

func (d *ctlDir) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	return d.refuse(ctx, "rename", name)
}

func (d *ctlDir) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, d.refuse(ctx, "mkdir", name)
}

func (d *ctlDir) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, d.refuse(ctx, "create", name)
}

func (d *ctlDir) Mknod(ctx context.Context, name string, mode, dev uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, d.refuse(ctx, "mknod", name)
}

func (d *ctlDir) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, d.refuse(ctx, "symlink", name)
}

func (d *ctlDir) Link(ctx context.Context, target gofs.InodeEmbedder, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, d.refuse(ctx, "link", name)
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
func (f *FS) controlDir(ctx context.Context, root *gofs.Inode, out *fuse.EntryOut) *gofs.Inode {
	f.ctl.once.Do(func() {
		dir := root.NewPersistentInode(ctx, &ctlDir{fsys: f}, gofs.StableAttr{Mode: syscall.S_IFDIR, Ino: ctlIno})
		files := []struct {
			name string
			gen  func(ctx context.Context) ([]byte, syscall.Errno)
		}{
			{"status", f.statusText},
			{"grant.md", func(context.Context) ([]byte, syscall.Errno) {
				return []byte(grants.Render(f.Grant())), 0
			}},
			{"last-error", func(context.Context) ([]byte, syscall.Errno) { return []byte(f.LastError()), 0 }},
			{"wait", f.waitTurn},
		}
		for i, c := range files {
			ch := dir.NewPersistentInode(ctx, &ctlFile{fsys: f, gen: c.gen}, gofs.StableAttr{Mode: syscall.S_IFREG, Ino: ctlIno + 1 + uint64(i)})
			dir.AddChild(c.name, ch, true)
		}
		f.ctl.listed = []fuse.DirEntry{
			{Name: "status", Mode: syscall.S_IFREG, Ino: ctlIno + 1},
			{Name: "grant.md", Mode: syscall.S_IFREG, Ino: ctlIno + 2},
			{Name: "last-error", Mode: syscall.S_IFREG, Ino: ctlIno + 3},
		}
		f.ctl.dir = dir
	})
	out.Mode = syscall.S_IFDIR | 0o555
	out.Nlink = 1
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
	return c.fsys.deny(ctx, ledger.KindDenied, "setattr", c.rel(), syscall.EACCES, ".acpfs is read-only")
}

func (c *ctlFile) rel() string {
	name, _ := c.Parent()
	return ControlDir + "/" + name
}

func (c *ctlFile) Open(ctx context.Context, flags uint32) (fh gofs.FileHandle, fuseFlags uint32, errno syscall.Errno) {
	if flags&syscall.O_ACCMODE != syscall.O_RDONLY || flags&syscall.O_TRUNC != 0 {
		return nil, 0, c.fsys.deny(ctx, ledger.KindDenied, "open", c.rel(), syscall.EACCES, ".acpfs is read-only")
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
	defer h.fsys.guard(ctx, "read", ControlDir, &errno)
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
		return fuse.ReadResultData(nil), 0
	}
	end := min(int(off)+len(dest), len(h.content))
	return fuse.ReadResultData(h.content[off:end]), 0
}

// statusText is .acpfs/status: who this agent is and where the
// collaboration stands.
func (f *FS) statusText(ctx context.Context) ([]byte, syscall.Errno) {
	if err := f.log.Refresh(); err != nil {
		return []byte(fmt.Sprintf("error: %v\n", err)), 0
	}
	s := f.log.Snapshot()
	g := f.Grant()
	me := g.ParticipantID()
	ready, reason := protocol.Ready(s, me)
	var b strings.Builder
	fmt.Fprintf(&b, "agent: %s\ngrant: %s\nparticipant: %s\n", g.AgentID, g.GrantID, me)
	fmt.Fprintf(&b, "phase: %s\nproposal owner: %s\nwaiting for: %s\n", orNone(s.Phase), orNone(s.Owner), orNone(strings.Join(s.WaitingFor, ", ")))
	fmt.Fprintf(&b, "last seq: %d\n", s.LastSeq)
	if p := f.log.HistoryProblem(); p != "" {
		fmt.Fprintf(&b, "history: broken, every append fails with EIO until it is repaired (%s)\n", p)
	}
	b.WriteString(f.quotaText())
	if f.ledger.Failing() {
		b.WriteString("ledger: cannot be written (disk full or immutable), every operation fails with EIO until it can\n")
	} else if br := f.ledger.Broken(); br != nil {
		fmt.Fprintf(&b, "ledger: stopped, every recorded operation fails with EIO until an operator repairs it (%s)\n", br.Reason)
	} else {
		b.WriteString("ledger: recording\n")
	}
	if f.gate != nil {
		if err := f.gate(); err != nil {
			fmt.Fprintf(&b, "writes: refused with EROFS, reads go on (%v)\n", err)
		} else {
			b.WriteString("writes: open\n")
		}
	}
	turn := "no"
	if ready {
		turn = "yes"
	}
	fmt.Fprintf(&b, "your turn: %s (%s)\n", turn, reason)
	if st, err := f.log.Status(me); err == nil {
		fmt.Fprintf(&b, "next action: %s\n", strings.TrimRight(st.Action, "\n"))
	}
	return []byte(b.String()), 0
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// waitTurn blocks until this agent is waited for or the collaboration has
// ended, then returns the next action. Appends through any mount of this
// daemon wake it at once; the periodic re-check covers appends made by
// other processes between two notifications.
func (f *FS) waitTurn(ctx context.Context) ([]byte, syscall.Errno) {
	me := f.participant()
	for {
		ch := f.turnChan()
		if err := f.log.Refresh(); err != nil {
			return nil, syscall.EIO
		}
		if ready, reason := protocol.Ready(f.log.Snapshot(), me); ready {
			// The live log, not a fresh replay: its cost must not grow
			// with the history.
			next := ""
			if st, err := f.log.Status(me); err == nil {
				next = st.String()
			} else {
				next = fmt.Sprintf("error: %v\n", err)
			}
			return []byte("ready: " + reason + "\n" + next), 0
		}
		select {
		case <-ctx.Done():
			return nil, syscall.EINTR
		case <-ch:
		case <-time.After(time.Second):
		}
	}
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
	return s.fsys.deny(ctx, ledger.KindDenied, "setxattr", s.rel, syscall.EACCES, "a handed-over artifact is read-only")
}

func (s *snapshotFile) Removexattr(ctx context.Context, attr string) syscall.Errno {
	return s.fsys.deny(ctx, ledger.KindDenied, "removexattr", s.rel, syscall.EACCES, "a handed-over artifact is read-only")
}

func (f *FS) snapshotNode(ctx context.Context, parent *gofs.Inode, rel, src string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	var st unix.Stat_t
	if err := unix.Lstat(src, &st); err != nil {
		return nil, errnoOf(err)
	}
	attrFromStat(&out.Attr, &st)
	out.Attr.Mode = syscall.S_IFREG | 0o444
	n := &snapshotFile{fsys: f, rel: rel, src: src}
	return parent.NewInode(ctx, n, gofs.StableAttr{Mode: syscall.S_IFREG, Ino: st.Ino}), 0
}

func (s *snapshotFile) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	var st unix.Stat_t
	if err := unix.Lstat(s.src, &st); err != nil {
		return errnoOf(err)
	}
	attrFromStat(&out.Attr, &st)
	out.Mode = syscall.S_IFREG | 0o444
	return 0
}

func (s *snapshotFile) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return s.fsys.deny(ctx, ledger.KindDenied, "setattr", s.rel, syscall.EACCES, "a handed-over artifact is read-only")
}

func (s *snapshotFile) Open(ctx context.Context, flags uint32) (fh gofs.FileHandle, fuseFlags uint32, errno syscall.Errno) {
	defer s.fsys.guard(ctx, "open", s.rel, &errno)
	if flags&syscall.O_ACCMODE != syscall.O_RDONLY || flags&syscall.O_TRUNC != 0 {
		return nil, 0, s.fsys.deny(ctx, ledger.KindDenied, "open", s.rel, syscall.EACCES, "a handed-over artifact is read-only")
	}
	// The artifact lives in the coordinator's run directory; a symlink
	// in its place is never followed.
	fd, err := unix.Open(s.src, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, 0, errnoOf(err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, 0, errnoOf(err)
	}
	if _, errno := s.fsys.recordReadOf(ctx, s.rel, fd, versionOf(&st), "handoff snapshot"); errno != 0 {
		unix.Close(fd)
		return nil, 0, errno
	}
	h := s.fsys.newHandle(fd, s.rel, nil)
	h.passthrough = !s.fsys.auditReads && s.fsys.passthrough
	return s.fsys.track(h), 0, 0
}
