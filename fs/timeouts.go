package fs

import (
	"sync"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// How long the kernel may keep the entries and attributes a view gave it.
//
// The kernel asks the daemon again only when a timeout expires or the
// daemon invalidates what it keeps. A view invalidates on every change
// that can alter what it shows: the watcher reports every name, content
// and attribute change in the folder, and a grant change, a revocation
// or a changed handoff walks every inode the kernel knows (SetGrant).
// Opens, reads of served files and every change always reach the daemon,
// whatever is cached, so the grant in force is checked and the ledger
// records them; what the kernel keeps is only what a lookup, a stat or a
// listing showed earlier under the same grant.
const (
	// CacheTimeout is the timeout while the watcher sees every directory
	// of the folder. It bounds how long a change that inotify does not
	// report goes unnoticed: a write through a hard link made outside
	// the folder, or through a shared mapping. Reopening such a file
	// notices it (see FS.open).
	CacheTimeout = 10 * time.Minute
	// ShortTimeout is the timeout while the watcher cannot vouch for the
	// folder (a directory it could not watch): the kernel then asks again
	// within a second, as a plain go-fuse loopback does.
	ShortTimeout = time.Second
	// volatileTimeout is for events.jsonl and protocol.json, whose size
	// moves with every append and whose protocol.json content comes from
	// memory: the kernel asks at every stat. A view is mounted with zero
	// default timeouts (mount.Start), so that anything not given a
	// timeout here is not cached at all.
	volatileTimeout = 0
)

// cacheTimeout is the timeout of entries and attributes of this view now.
func (f *FS) cacheTimeout() time.Duration {
	if w := f.watch.Load(); w != nil && !w.degraded.Load() {
		return CacheTimeout
	}
	return ShortTimeout
}

// entryTimeouts sets the timeouts of an entry the view hands the kernel.
func (f *FS) entryTimeouts(rel string, out *fuse.EntryOut) {
	d := f.cacheTimeout()
	out.SetEntryTimeout(d)
	if managed(rel) {
		d = volatileTimeout
	}
	out.SetAttrTimeout(d)
}

// attrTimeout sets the timeout of attributes the view hands the kernel.
func (f *FS) attrTimeout(rel string, out *fuse.AttrOut) {
	d := f.cacheTimeout()
	if managed(rel) {
		d = volatileTimeout
	}
	out.SetTimeout(d)
}

// dropKernelCaches makes the kernel forget everything it keeps about this
// view but the names of directories: the attributes and pages of every
// inode it knows and every directory listing, and the entries of files.
// Directory entries stay (dropping one would unhash a working directory
// under a shell in it); their attributes and listings are refetched, and
// every operation resolves its path afresh anyway. Used when the watcher
// lost events or stopped vouching for the folder.
func (f *FS) dropKernelCaches() {
	if !f.attached.Load() {
		return
	}
	f.entryGen.Add(1)
	f.queueDropAll()
}

// dropKernelCachesNow is dropKernelCaches' walk, on the notify queue's
// goroutine (notifyq.go).
func (f *FS) dropKernelCachesNow() {
	var walk func(dir *gofs.Inode)
	walk = func(dir *gofs.Inode) {
		dir.NotifyContent(0, 0)
		for name, ch := range dir.Children() {
			if name == ControlDir && f.loc.nameOf(dir.Path(nil)) == "" {
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

// concealedLinks remembers the names a view concealed because their file
// had several names. When the other names go, inotify reports only
// their removal, not the change of the names remembered here, which the
// view shows again: recheck finds them.
type concealedLinks struct {
	mu sync.Mutex
	m  map[string]struct{}
}

// maxConcealedLinks bounds the memory; past it, any removal drops every
// kernel cache of the view instead.
const maxConcealedLinks = 1 << 12

// noteConcealed records rel if e is a file concealed for its link count.
func (f *FS) noteConcealed(rel string, e entry) {
	if e.kind != kindConcealed || e.st.Mode&unix.S_IFMT != unix.S_IFREG || e.st.Nlink <= 1 {
		return
	}
	f.links.mu.Lock()
	defer f.links.mu.Unlock()
	if f.links.m == nil {
		f.links.m = map[string]struct{}{}
	}
	if len(f.links.m) < maxConcealedLinks {
		f.links.m[rel] = struct{}{}
	} else {
		f.links.m[""] = struct{}{} // overflow marker
	}
}

// recheckConcealed runs after a name was removed in the folder: a file
// concealed for its link count that has one name left is shown again,
// so the kernel must forget its entry (and the listing without it).
func (f *FS) recheckConcealed() {
	f.links.mu.Lock()
	if len(f.links.m) == 0 {
		f.links.mu.Unlock()
		return
	}
	if _, overflow := f.links.m[""]; overflow {
		f.links.m = nil
		f.links.mu.Unlock()
		f.dropKernelCaches()
		return
	}
	var changed []string
	for rel := range f.links.m {
		if !f.stillLinked(rel) {
			delete(f.links.m, rel)
			changed = append(changed, rel)
		}
	}
	f.links.mu.Unlock()
	for _, rel := range changed {
		f.invalidateName(rel)
	}
}

// stillLinked reports whether rel is still a file with several names.
func (f *FS) stillLinked(rel string) bool {
	d, err := f.b.parent(rel)
	if err != nil {
		return false
	}
	defer d.close()
	var st unix.Stat_t
	return unix.Fstatat(d.fd, d.name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil &&
		st.Mode&unix.S_IFMT == unix.S_IFREG && st.Nlink > 1
}
