// Package fs is the go-fuse adapter of a per-grant view: it turns the
// kernel's requests into calls of the view core (package view) and their
// answers into go-fuse's types, and keeps the inode tree the kernel's
// caches are invalidated through. It decides nothing and records nothing
// itself: every verdict and every ledger record comes from the core.
package fs

import (
	"context"
	"strings"
	"sync/atomic"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/acpfs/acpfs/view"
)

// FS is one mounted view: the core and the inodes the kernel knows.
type FS struct {
	*view.View
	root *node
	ctl  control
	// attached is set once go-fuse has adopted the root, so that cache
	// invalidations have an inode tree to act on.
	attached atomic.Bool
	// notifyq sends the watcher's cache invalidations (notifyq.go).
	notifyq notifyQueue
}

// Compile-time check: the adapter is the core's kernel.
var _ view.Kernel = (*FS)(nil)

// New builds the view for opts and the adapter that mounts it. Mount its
// Root.
func New(opts view.Options) (*FS, error) {
	opts.Caller = callerOf
	v, err := view.New(opts)
	if err != nil {
		return nil, err
	}
	f := &FS{View: v}
	f.root = &node{fsys: f}
	return f, nil
}

// callerOf names the process of a request, as the kernel gives it.
func callerOf(ctx context.Context) (view.Caller, bool) {
	c, ok := fuse.FromContext(ctx)
	if !ok {
		return view.Caller{}, false
	}
	return view.Caller{PID: c.Pid, UID: c.Uid, GID: c.Gid}, true
}

// Root is the node to mount.
func (f *FS) Root() gofs.InodeEmbedder { return f.root }

// Invalidate: see view.Kernel. vp is the path below the view's root, as
// the inode tree has it.
func (f *FS) Invalidate(vp string, entry, now bool) {
	if !f.attached.Load() {
		return // not mounted yet
	}
	content, entryOf := f.queueContent, f.queueEntry
	if now {
		content = func(n *gofs.Inode) { n.NotifyContent(0, 0) }
		entryOf = func(dir *gofs.Inode, name string) { dir.NotifyEntry(name) }
	}
	dir := f.root.EmbeddedInode()
	segs := strings.Split(vp, "/")
	chain := []*gofs.Inode{dir}
	for _, s := range segs[:len(segs)-1] {
		if dir = dir.GetChild(s); dir == nil {
			break // never looked up below: nothing cached there
		}
		chain = append(chain, dir)
	}
	if dir == nil {
		if entry {
			for _, d := range chain {
				content(d)
			}
		}
		return
	}
	name := segs[len(segs)-1]
	if entry {
		if ch := dir.GetChild(name); ch != nil {
			// What the kernel keeps of the old entry and below it (a
			// directory moved away, replaced, or made anew) goes too: a
			// lookup of the name may find the same inode again.
			dropSubtree(ch, content)
		}
		entryOf(dir, name)
		for _, d := range chain {
			content(d)
		}
		return
	}
	if ch := dir.GetChild(name); ch != nil {
		content(ch)
	}
}

// dropSubtree drops the attributes, pages and listings the kernel keeps of
// n and of every inode it knows below it.
func dropSubtree(n *gofs.Inode, content func(*gofs.Inode)) {
	content(n)
	if n.IsDir() {
		for _, ch := range n.Children() {
			dropSubtree(ch, content)
		}
	}
}

// DropAll: see view.Kernel.
func (f *FS) DropAll() {
	if f.attached.Load() {
		f.queueDropAll()
	}
}

// dropAllNow is DropAll's walk, on the notify queue's goroutine. Directory
// entries stay (dropping one would unhash a working directory under a
// shell in it); their attributes and listings are refetched, and every
// operation resolves its path afresh anyway.
func (f *FS) dropAllNow() {
	var walk func(dir *gofs.Inode)
	walk = func(dir *gofs.Inode) {
		dir.NotifyContent(0, 0)
		for name, ch := range dir.Children() {
			if name == view.ControlDir && dir.Path(nil) == f.FolderPath() {
				continue // virtual, never cached
			}
			if ch.IsDir() {
				walk(ch)
				continue
			}
			ch.NotifyContent(0, 0)
			dir.NotifyEntry(name)
		}
	}
	walk(f.root.EmbeddedInode())
}

// Rejudge: see view.Kernel. Every entry the view no longer shows is
// dropped, and every other one has its attributes and, for directories,
// its cached listing dropped, so that the kernel asks again under the
// new grant.
func (f *FS) Rejudge(keep func(name string) bool) {
	if !f.attached.Load() {
		return
	}
	var walk func(dir *gofs.Inode)
	walk = func(dir *gofs.Inode) {
		dir.NotifyContent(0, 0)
		for name, ch := range dir.Children() {
			if name == view.ControlDir && dir.Path(nil) == f.FolderPath() {
				continue // the view's own, whatever the grant
			}
			if !keep(f.Name(ch.Path(nil))) {
				dir.NotifyEntry(name)
				continue
			}
			if ch.IsDir() {
				walk(ch)
			} else {
				ch.NotifyContent(0, 0)
			}
		}
	}
	walk(f.root.EmbeddedInode())
}
