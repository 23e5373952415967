package fs

import (
	"sync"

	gofs "github.com/hanwen/go-fuse/v2/fs"
)

// A cache-invalidation notify is a write to /dev/fuse that the kernel
// answers only once it holds the inode's lock (the directory's, for an
// entry): it waits for every request in flight on that directory, and
// so for this daemon's answers. Sent from the watcher, one view's busy
// directory would hold up the invalidations of every view of the
// folder, and inotify's events behind them; sent from a goroutine a FUSE
// request runs on, it could wait for that very request. The watcher's
// notifies therefore go through a queue per view, drained by a goroutine
// of their own that exists only while there is something to send: a
// request waits for nothing, and the watcher never blocks on the kernel.

// maxQueuedNotifies bounds the queue; past it, the view drops every
// kernel cache it holds in one walk instead (what the queued notifies
// would have done, and more).
const maxQueuedNotifies = 1 << 12

// notifyKey is one invalidation: the entry name of directory n, or the
// attributes and data of n when name is "" and !entry.
type notifyKey struct {
	n     *gofs.Inode
	name  string
	entry bool
}

// notifyQueue coalesces the invalidations of one view. Its zero value is
// ready to use.
type notifyQueue struct {
	mu      sync.Mutex
	pending map[notifyKey]struct{}
	order   []notifyKey
	all     bool // overflowed: drop every cache instead
	running bool // a drain goroutine exists
}

// queueContent queues the invalidation of n's attributes and data.
func (f *FS) queueContent(n *gofs.Inode) { f.notifyq.push(f, notifyKey{n: n}) }

// queueEntry queues the invalidation of name in directory dir.
func (f *FS) queueEntry(dir *gofs.Inode, name string) {
	f.notifyq.push(f, notifyKey{n: dir, name: name, entry: true})
}

// queueDropAll queues dropping every kernel cache of the view.
func (f *FS) queueDropAll() {
	q := &f.notifyq
	q.mu.Lock()
	q.all, q.pending, q.order = true, nil, nil
	q.startLocked(f)
	q.mu.Unlock()
}

func (q *notifyQueue) push(f *FS, k notifyKey) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.all {
		return // the walk to come covers it
	}
	if _, ok := q.pending[k]; ok {
		return
	}
	if len(q.order) >= maxQueuedNotifies {
		q.all, q.pending, q.order = true, nil, nil
	} else {
		if q.pending == nil {
			q.pending = map[notifyKey]struct{}{}
		}
		q.pending[k] = struct{}{}
		q.order = append(q.order, k)
	}
	q.startLocked(f)
}

// startLocked starts the drain goroutine unless one runs.
func (q *notifyQueue) startLocked(f *FS) {
	if !q.running {
		q.running = true
		go q.drain(f)
	}
}

// drain sends what is queued, in order, until the queue is empty.
func (q *notifyQueue) drain(f *FS) {
	for {
		q.mu.Lock()
		all, batch := q.all, q.order
		q.all, q.pending, q.order = false, nil, nil
		if !all && len(batch) == 0 {
			q.running = false
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
		if all {
			f.dropAllNow()
			continue
		}
		for _, k := range batch {
			if k.entry {
				k.n.NotifyEntry(k.name)
			} else {
				k.n.NotifyContent(0, 0)
			}
		}
	}
}

// idle tells whether nothing is queued or being sent (tests).
func (q *notifyQueue) idle() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return !q.running
}
