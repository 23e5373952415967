package fs

import (
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"

	"github.com/fsnotify/fsnotify"
	gofs "github.com/hanwen/go-fuse/v2/fs"
)

// Watcher turns changes in a backing folder (made through any mount, by
// `acpfs append`, or by hand) into kernel cache invalidations for every
// view of that folder, so that what one agent writes appears promptly in
// the other agents' mounts.
type Watcher struct {
	folder string
	skip   []string // folder-relative directories not watched (run directory)
	w      *fsnotify.Watcher

	mu    sync.Mutex
	views map[*FS]struct{}
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
	wt := &Watcher{folder: folder, skip: skip, w: w, views: map[*FS]struct{}{}, done: make(chan struct{})}
	if err := wt.addTree(folder); err != nil {
		w.Close()
		return nil, err
	}
	go wt.loop()
	return wt, nil
}

// Add subscribes a view.
func (wt *Watcher) Add(f *FS) {
	wt.mu.Lock()
	wt.views[f] = struct{}{}
	wt.mu.Unlock()
}

// Remove unsubscribes a view.
func (wt *Watcher) Remove(f *FS) {
	wt.mu.Lock()
	delete(wt.views, f)
	wt.mu.Unlock()
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
		if rel != "" && wt.skipped(filepath.ToSlash(rel)) {
			return filepath.SkipDir
		}
		if err := wt.w.Add(p); err != nil {
			return fmt.Errorf("watch %s: %w", p, err)
		}
		return nil
	})
}

func (wt *Watcher) loop() {
	defer close(wt.done)
	for {
		select {
		case ev, ok := <-wt.w.Events:
			if !ok {
				return
			}
			wt.handle(ev)
		case err, ok := <-wt.w.Errors:
			if !ok {
				return
			}
			// An overflow means events were lost: treat everything as
			// changed.
			slog.Warn("watcher error", "folder", wt.folder, "err", err)
			wt.each(func(f *FS) { f.entryGen.Add(1); f.wake() })
		}
	}
}

func (wt *Watcher) each(fn func(f *FS)) {
	wt.mu.Lock()
	views := make([]*FS, 0, len(wt.views))
	for f := range wt.views {
		views = append(views, f)
	}
	wt.mu.Unlock()
	for _, f := range views {
		fn(f)
	}
}

func (wt *Watcher) handle(ev fsnotify.Event) {
	rel, err := filepath.Rel(wt.folder, ev.Name)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return
	}
	rel = filepath.ToSlash(rel)
	if wt.skipped(rel) {
		return
	}
	if ev.Has(fsnotify.Create) {
		if err := wt.addTree(ev.Name); err != nil {
			slog.Debug("watch new directory", "path", ev.Name, "err", err)
		}
	}
	entry := ev.Has(fsnotify.Create) || ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename)
	wt.each(func(f *FS) { f.invalidate(rel, entry) })
}

// invalidate drops what the kernel caches about rel in this view: its
// directory entry when names changed, its attributes and data otherwise.
func (f *FS) invalidate(rel string, entry bool) {
	if entry {
		f.entryGen.Add(1)
	}
	if rel == EventsFile || rel == ProtocolFile {
		defer f.wake()
	}
	if !f.attached.Load() {
		return // not mounted yet
	}
	if rel == EventsFile {
		// The protocol.json a view serves is derived from the events.
		if ch := f.root.EmbeddedInode().GetChild(ProtocolFile); ch != nil {
			notifyContent(ch)
		}
	}
	dir := f.root.EmbeddedInode()
	segs := strings.Split(rel, "/")
	for _, s := range segs[:len(segs)-1] {
		if dir = dir.GetChild(s); dir == nil {
			return // never looked up: nothing cached
		}
	}
	name := segs[len(segs)-1]
	if entry {
		dir.NotifyEntry(name)
		return
	}
	if ch := dir.GetChild(name); ch != nil {
		notifyContent(ch)
	}
}

func notifyContent(n *gofs.Inode) {
	if !n.IsDir() {
		n.NotifyContent(0, 0)
	}
}
