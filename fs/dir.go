package fs

import (
	"context"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// filteredDir wraps the loopback directory handle and drops the entries
// the grant hides. READDIRPLUS looks each returned name up through
// node.Lookup, which filters too, so neither form of listing leaks.
type filteredDir struct {
	inner gofs.FileHandle
	dir   string
	fsys  *FS
}

var (
	_ gofs.FileReaddirenter = (*filteredDir)(nil)
	_ gofs.FileSeekdirer    = (*filteredDir)(nil)
	_ gofs.FileReleasedirer = (*filteredDir)(nil)
	_ gofs.FileFsyncdirer   = (*filteredDir)(nil)
)

func (d *filteredDir) Readdirent(ctx context.Context) (e *fuse.DirEntry, errno syscall.Errno) {
	defer d.fsys.guard(ctx, "readdir", d.dir, &errno)
	m := d.fsys.matcher()
	next := d.inner.(gofs.FileReaddirenter)
	for {
		e, errno = next.Readdirent(ctx)
		if e == nil || errno != 0 {
			return e, errno
		}
		if e.Name == "." || e.Name == ".." {
			return e, 0
		}
		rel := join(d.dir, e.Name)
		if d.dir == "" && e.Name == ControlDir {
			continue // a backing .acpfs is shadowed by the control directory
		}
		if _, handed := d.fsys.view.Load().handoffs[rel]; handed {
			return e, 0
		}
		if !m.VisibleEntry(rel, e.Mode&syscall.S_IFMT == syscall.S_IFDIR) {
			continue
		}
		if e.Mode&syscall.S_IFMT == syscall.S_IFLNK && !d.fsys.symlinkVisible(rel) {
			continue
		}
		return e, 0
	}
}

func (d *filteredDir) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	if s, ok := d.inner.(gofs.FileSeekdirer); ok {
		return s.Seekdir(ctx, off)
	}
	return syscall.ENOTSUP
}

func (d *filteredDir) Releasedir(ctx context.Context, flags uint32) {
	if r, ok := d.inner.(gofs.FileReleasedirer); ok {
		r.Releasedir(ctx, flags)
	}
}

func (d *filteredDir) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	if s, ok := d.inner.(gofs.FileFsyncdirer); ok {
		return s.Fsyncdir(ctx, flags)
	}
	return 0
}
