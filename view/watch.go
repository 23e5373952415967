package view

import (
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/protocol"
)

// Watcher turns changes in a backing folder (made through any mount, by
// `acpfs append`, or by hand) into kernel cache invalidations for every
// view of that folder, so that what one agent writes appears promptly in
// the other agents' mounts.
type Watcher struct {
	folder string
	skip   []string // folder-relative directories not watched (run directory)
	w      *fsnotify.Watcher
	// degraded is set once a directory of the folder could not be
	// watched: changes in it would go unnoticed, so the views stop
	// giving the kernel long timeouts (see CacheTimeout).
	degraded atomic.Bool

	// dirs maps the inode of every directory watched to its
	// folder-relative path, and paths each such path to its inode (only
	// the loop goroutine uses them once the watcher runs): inotify keeps
	// watching a directory that moves, but fsnotify would go on naming
	// its events by the old path; and a removal or a rename away is told
	// to be a directory's by its path alone.
	dirs  map[uint64]string
	paths map[string]uint64

	mu    sync.Mutex
	views map[*View]struct{}
	done  chan struct{}
}

// NewWatcher watches folder recursively, except the folder-relative
// directories in skip.
func NewWatcher(folder string, skip []string) (*Watcher, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", folder, err)
	}
	// The views' private temporary files concern their own view only.
	skip = append(append([]string(nil), skip...), StagingDir)
	wt := &Watcher{folder: folder, skip: skip, w: w, views: map[*View]struct{}{}, dirs: map[uint64]string{}, paths: map[string]uint64{},
		done: make(chan struct{})}
	if err := wt.addTree(folder); err != nil {
		w.Close()
		return nil, err
	}
	go wt.loop()
	return wt, nil
}

// Add subscribes a view. From then on the view may let the kernel keep
// what it shows for CacheTimeout: the watcher invalidates it.
func (wt *Watcher) Add(f *View) {
	wt.mu.Lock()
	wt.views[f] = struct{}{}
	wt.mu.Unlock()
	f.watch.Store(wt)
}

// Remove unsubscribes a view.
func (wt *Watcher) Remove(f *View) {
	f.watch.CompareAndSwap(wt, nil)
	wt.mu.Lock()
	delete(wt.views, f)
	wt.mu.Unlock()
}

// degrade notes that the folder is no longer fully watched.
func (wt *Watcher) degrade(why string, err error) {
	if !wt.degraded.Swap(true) {
		slog.Warn("watcher: the folder is not fully watched; views fall back to one-second kernel caches", "folder", wt.folder, "why", why, "err", err)
	}
	wt.each(func(f *View) { f.dropKernelCaches() })
}

// Close stops watching.
func (wt *Watcher) Close() error {
	err := wt.w.Close()
	<-wt.done
	return err
}

func (wt *Watcher) skipped(rel string) bool {
	for _, s := range wt.skip {
		if rel == s || strings.HasPrefix(rel, s+"/") {
			return true
		}
	}
	return false
}

func (wt *Watcher) addTree(root string) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // vanished while walking: nothing to watch
		}
		if !d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(wt.folder, p)
		if rel == "." {
			rel = ""
		}
		rel = filepath.ToSlash(rel)
		if rel != "" && wt.skipped(rel) {
			return filepath.SkipDir
		}
		if err := wt.w.Add(p); err != nil {
			return fmt.Errorf("watch %s: %w", p, err)
		}
		if info, err := d.Info(); err == nil {
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				wt.dirs[st.Ino], wt.paths[rel] = rel, st.Ino
			}
		}
		return nil
	})
}

// movedDir reports whether what was just created at rel is a
// directory. When it is one already watched under another path (moved
// within the folder), it drops the watches of its old paths, so that
// addTree watches it and everything below it under the paths they have
// now.
func (wt *Watcher) movedDir(rel, abs string) bool {
	var st unix.Stat_t
	if unix.Lstat(abs, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return false
	}
	old, ok := wt.dirs[st.Ino]
	if !ok || old == rel {
		return true
	}
	for ino, p := range wt.dirs {
		if p == old || strings.HasPrefix(p, old+"/") {
			_ = wt.w.Remove(filepath.Join(wt.folder, filepath.FromSlash(p))) // may be gone already
			delete(wt.dirs, ino)
			if wt.paths[p] == ino {
				delete(wt.paths, p)
			}
		}
	}
	return true
}

func (wt *Watcher) loop() {
	defer close(wt.done)
	for {
		select {
		case ev, ok := <-wt.w.Events:
			if !ok {
				return
			}
			wt.handleSafely(ev)
		case err, ok := <-wt.w.Errors:
			if !ok {
				return
			}
			// An overflow means events were lost: treat everything as
			// changed.
			slog.Warn("watcher error", "folder", wt.folder, "err", err)
			wt.each(func(f *View) { f.dropKernelCaches(); f.wake() })
		}
	}
}

func (wt *Watcher) each(fn func(f *View)) {
	wt.mu.Lock()
	views := make([]*View, 0, len(wt.views))
	for f := range wt.views {
		views = append(views, f)
	}
	wt.mu.Unlock()
	for _, f := range views {
		fn(f)
	}
}

// handleSafely is handle, with a panic turned into a degraded watcher:
// fsnotify can fault on its own bookkeeping when directories are swapped
// fast (renameat2 RENAME_EXCHANGE in a loop, by an agent or by anyone
// who can write the folder), and a panic here would kill the daemon and
// every view it serves. The views then keep one-second kernel caches,
// which need no watcher to be right.
func (wt *Watcher) handleSafely(ev fsnotify.Event) {
	defer func() {
		if r := recover(); r != nil {
			slog.Error("watcher: internal error while following the folder", "folder", wt.folder, "event", ev.String(), "panic", r, "stack", string(debug.Stack()))
			wt.degrade("the watcher failed on an event", fmt.Errorf("%v", r))
		}
	}()
	wt.handle(ev)
}

func (wt *Watcher) handle(ev fsnotify.Event) {
	rel, err := filepath.Rel(wt.folder, ev.Name)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return
	}
	rel = filepath.ToSlash(rel)
	if wt.skipped(rel) || strings.HasPrefix(rel, protocol.ProtocolTempPrefix) {
		// Views never show a protocol.json rewrite's temporary file;
		// the rename over protocol.json is seen under its name.
		return
	}
	// A directory's name (made, or known before the removal or rename)
	// or a name that marks what a directory is: what lies above a name
	// may have changed (see View.placeStamp).
	_, place := wt.paths[rel]
	place = place || grants.MarksDir(path.Base(rel))
	if ev.Has(fsnotify.Create) {
		if wt.movedDir(rel, ev.Name) {
			place = true
		}
		if err := wt.addTree(ev.Name); err != nil {
			wt.degrade("cannot watch a new directory", err)
		}
	}
	entry := ev.Has(fsnotify.Create) || ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename)
	if ev.Has(fsnotify.Create) && secondName(ev.Name) {
		// A new name for a file that had one: every view conceals
		// it now under all its names (see classify), but inotify
		// reports only the new one. The others may be anywhere.
		wt.each(func(f *View) { f.dropKernelCaches() })
		return
	}
	wt.each(func(f *View) {
		if entry && place {
			f.dirGen.Add(1)
		}
		f.invalidate(rel, entry)
		if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
			f.recheckConcealed()
		}
	})
}

// invalidate drops what the kernel caches about rel in this view: its
// directory entry when names changed, its attributes and data otherwise
// (see Kernel.Invalidate). rel is the path below the view's root, as the
// watcher has it. The notifies are queued: invalidate returns at once.
func (f *View) invalidate(rel string, entry bool) { f.invalidateBy(rel, entry, false) }

// invalidateNameNow is invalidate for a folder-relative name (see place)
// with the notifies sent before it returns, for a grant change, which
// must apply at once. Never call it from a request's goroutine.
func (f *View) invalidateNameNow(name string) {
	if vp, ok := f.loc.viewPath(name); ok {
		f.invalidateBy(vp, true, true)
	}
}

// invalidateName is invalidate for a folder-relative name.
func (f *View) invalidateName(name string) {
	if vp, ok := f.loc.viewPath(name); ok {
		f.invalidate(vp, true)
	}
}

func (f *View) invalidateBy(rel string, entry, now bool) {
	if entry {
		f.entryGen.Add(1)
	}
	if managed(f.loc.nameOf(rel)) {
		defer f.wake()
		if !entry {
			// Served with direct I/O and attributes the kernel never
			// keeps (volatileTimeout): nothing cached to drop.
			return
		}
	}
	if k := f.kernel(); k != nil {
		k.Invalidate(rel, entry, now)
	}
}

// secondName reports whether p is a regular file with more than one name
// (a hard link just made).
func secondName(p string) bool {
	var st unix.Stat_t
	return unix.Lstat(p, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Nlink > 1
}
