package view

import (
	"sync"
	"time"

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

// placeStamp is what the caches of directories' places and natures
// depend on (the ancestry hidesAbove found shown, the verdicts of
// read-only opens): the directory changes the watcher saw and the grant
// changes (dirGen), plus the changes of what the coordinator conceals by
// identity (its shared set), which no name change need come with. Both
// only grow, so an equal sum means neither moved. Such a cache holds
// only while a watcher vouches for the folder (cacheTimeout).
func (f *View) placeStamp() uint64 { return f.dirGen.Load() + f.conceal.shared.Version() }

// cacheTimeout is the timeout of entries and attributes of this view now.
func (f *View) cacheTimeout() time.Duration {
	if w := f.watch.Load(); w != nil && !w.degraded.Load() {
		return CacheTimeout
	}
	return ShortTimeout
}

// AttrTimeout is how long the kernel may keep the attributes of rel.
func (f *View) AttrTimeout(rel string) time.Duration {
	if managed(rel) {
		return volatileTimeout
	}
	return f.cacheTimeout()
}

// entryOf is the entry the view hands the kernel for the backing stat st
// found at rel.
func (f *View) entryOf(rel string, st *unix.Stat_t) Entry {
	return Entry{Attr: f.attrOf(rel, st), EntryTimeout: f.cacheTimeout(), AttrTimeout: f.AttrTimeout(rel)}
}

// dropKernelCaches makes the kernel forget everything it keeps about this
// view but the names of directories: the attributes and pages of every
// inode it knows and every directory listing, and the entries of files.
// Directory entries stay (dropping one would unhash a working directory
// under a shell in it); their attributes and listings are refetched, and
// every operation resolves its path afresh anyway. Used when the watcher
// lost events or stopped vouching for the folder.
func (f *View) dropKernelCaches() {
	k := f.kernel()
	if k == nil {
		return
	}
	f.entryGen.Add(1)
	f.dirGen.Add(1)
	k.DropAll()
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
func (f *View) noteConcealed(rel string, e entry) {
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
func (f *View) recheckConcealed() {
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
func (f *View) stillLinked(rel string) bool {
	d, err := f.b.parent(rel)
	if err != nil {
		return false
	}
	defer d.close()
	var st unix.Stat_t
	return unix.Fstatat(d.fd, d.name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil &&
		st.Mode&unix.S_IFMT == unix.S_IFREG && st.Nlink > 1
}
