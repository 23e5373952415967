package protocol

import (
	"context"
	"sync"
	"time"
)

// exclusive tells whether one of this process's writers of a Log holds
// the folder's exclusive lock. Such a writer takes the lock before the
// log's mutex (see Log.lock), so a reader that holds the mutex and waits
// for the shared lock would wait for it, and it for the mutex, until the
// reader gave up after LockTimeout. The reader stops waiting instead:
// while this process holds the exclusive lock no other process writes,
// and its own writer cannot write before the reader lets the mutex go.
type exclusive struct {
	mu   sync.Mutex
	n    int
	held chan struct{} // closed while n > 0
}

func (x *exclusive) chanLocked() chan struct{} {
	if x.held == nil {
		x.held = make(chan struct{})
	}
	return x.held
}

// take says that a writer of this process holds the exclusive lock.
func (x *exclusive) take() {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.n == 0 {
		close(x.chanLocked())
	}
	x.n++
}

// release undoes take; it is called before the lock is let go.
func (x *exclusive) release() {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.n--; x.n == 0 {
		x.held = make(chan struct{})
	}
}

// heldContext is done while a writer of this process holds the lock.
func (x *exclusive) heldContext() context.Context {
	x.mu.Lock()
	defer x.mu.Unlock()
	return heldCtx{done: x.chanLocked()}
}

// heldCtx is a context done when its channel is closed: waitFlock only
// watches Done.
type heldCtx struct{ done <-chan struct{} }

func (c heldCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c heldCtx) Done() <-chan struct{}       { return c.done }
func (c heldCtx) Value(any) any               { return nil }
func (c heldCtx) Err() error {
	select {
	case <-c.done:
		return context.Canceled
	default:
		return nil
	}
}

// sharedLockLocked takes the shared lock for a reader holding l.mu, or
// reads without it (a nil release) while a writer of this process holds
// the exclusive lock, or as soon as one takes it.
func (l *Log) sharedLockLocked() (func(), error) {
	ctx := l.ex.heldContext()
	if ctx.Err() != nil {
		return nil, nil
	}
	return sharedLockContext(ctx, l.folder)
}
