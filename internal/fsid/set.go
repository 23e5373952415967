package fsid

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Set is what a coordinator's views conceal by identity that changes
// while they serve: the grant files it loaded (each rewrite is a new
// inode), its views' mountpoints and the devices of the views
// themselves (a view reached from the folder through a bind mount is a
// directory of that device). Every view of the coordinator asks the
// same Set, so what one view's start or a reload adds is concealed by
// all of them at once.
//
// An entry is held by an O_PATH descriptor, so that its inode number
// cannot pass to another file while it is in the Set, and is dropped
// only once it has no name left (Prune): a grant file moved out of its
// directory into the folder stays concealed, one replaced by a rewrite
// is let go.
type Set struct {
	mu   sync.Mutex
	held map[ID]int // descriptor of each held entry
	max  int        // MaxSetHeld; tests lower it
	devs map[uint64]int
	// snap is what Has reads without the lock: every lookup of every
	// view asks it.
	snap atomic.Pointer[setSnap]
	// version counts the snapshots published (see Version).
	version atomic.Uint64
}

type setSnap struct {
	ids  map[ID]struct{}
	devs map[uint64]struct{}
}

// MaxSetHeld bounds the descriptors a Set keeps: past it, new entries
// are not held (ErrSetFull), and are concealed only where their place
// conceals them.
const MaxSetHeld = 4096

// ErrSetFull is wrapped by the error of a hold that found the Set
// holding MaxSetHeld entries already: the entry was not added.
var ErrSetFull = errors.New("the set of entries concealed by identity is full")

// NewSet returns an empty Set.
func NewSet() *Set {
	s := &Set{held: map[ID]int{}, max: MaxSetHeld, devs: map[uint64]int{}}
	s.publish()
	return s
}

// Hold adds the entry p leads to (symlinks followed: p is the
// coordinator's own spelling). A path that does not exist adds nothing.
func (s *Set) Hold(p string) error {
	fd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return &os.PathError{Op: "open", Path: p, Err: err}
	}
	return s.holdFD(fd)
}

// HoldAt adds the entry name of the directory dirfd, without following
// a symlink there.
func (s *Set) HoldAt(dirfd int, name string) error {
	fd, err := unix.Openat(dirfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return &os.PathError{Op: "open", Path: name, Err: err}
	}
	return s.holdFD(fd)
}

// HoldDup adds the entry the descriptor fd holds (the caller keeps fd).
func (s *Set) HoldDup(fd int) error {
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return err
	}
	return s.holdFD(dup)
}

// holdFD adds the entry fd holds, taking the descriptor.
func (s *Set) holdFD(fd int) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return err
	}
	id := OfStat(&st)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.held[id]; ok {
		unix.Close(fd)
		return nil
	}
	if len(s.held) >= s.max {
		unix.Close(fd)
		return fmt.Errorf("hold %s: %w (%d entries)", id, ErrSetFull, s.max)
	}
	s.held[id] = fd
	s.publishLocked()
	return nil
}

// AddDev adds every entry of the device dev (a view's own): counted, so
// that a view mounted again on a reused device number is not dropped by
// the stop of the one before.
func (s *Set) AddDev(dev uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.devs[dev]++
	s.publishLocked()
}

// DropDev undoes one AddDev.
func (s *Set) DropDev(dev uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.devs[dev]--; s.devs[dev] <= 0 {
		delete(s.devs, dev)
	}
	s.publishLocked()
}

// Prune lets go of the held entries that have no name left.
func (s *Set) Prune() {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := false
	for id, fd := range s.held {
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil && st.Nlink > 0 {
			continue
		}
		unix.Close(fd)
		delete(s.held, id)
		changed = true
	}
	if changed {
		s.publishLocked()
	}
}

// Has reports whether st is in the Set: one of its held entries, or an
// entry of one of its devices. A nil Set has nothing.
func (s *Set) Has(st *unix.Stat_t) bool {
	if s == nil {
		return false
	}
	snap := s.snap.Load()
	if _, ok := snap.devs[st.Dev]; ok {
		return true
	}
	_, ok := snap.ids[OfStat(st)]
	return ok
}

// Version counts the changes of the Set: it grows whenever what Has
// answers may have changed, so that an answer derived from Has may be
// kept while it stays the same. A nil Set is at version 0 for ever.
func (s *Set) Version() uint64 {
	if s == nil {
		return 0
	}
	return s.version.Load()
}

// Close lets go of every held entry.
func (s *Set) Close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, fd := range s.held {
		unix.Close(fd)
		delete(s.held, id)
	}
	s.publishLocked()
}

func (s *Set) publish() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.publishLocked()
}

func (s *Set) publishLocked() {
	snap := &setSnap{ids: make(map[ID]struct{}, len(s.held)), devs: make(map[uint64]struct{}, len(s.devs))}
	for id := range s.held {
		snap.ids[id] = struct{}{}
	}
	for d := range s.devs {
		snap.devs[d] = struct{}{}
	}
	s.snap.Store(snap)
	s.version.Add(1)
}
