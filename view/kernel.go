package view

import (
	"context"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Kernel is what a view asks of the kernel's caches once it is mounted.
// The FUSE adapter (package fs) implements it over go-fuse's inode tree;
// a view that is not mounted has none, and nothing is cached to drop.
type Kernel interface {
	// Invalidate drops what the kernel keeps of vp, a path below the
	// view's root: with entry, its directory entry and everything known
	// below it, with the attributes and listings of the directories on
	// the way, which summarise it; without, its attributes and pages.
	// With now the notifies are sent before Invalidate returns (never
	// from a request's goroutine), otherwise queued.
	Invalidate(vp string, entry, now bool)
	// DropAll forgets the attributes, pages and listings of every inode
	// the kernel knows and the entries of files (queued).
	DropAll()
	// Rejudge walks the entries the kernel knows after a grant change:
	// an entry keep refuses (keep takes a folder-relative name) is
	// dropped, every other one has its attributes and listing dropped.
	Rejudge(keep func(name string) bool)
}

// Node is the adapter's inode of an open file: the view asks it for the
// file's name now (a rename through the view moves the inode) and drops
// the kernel's pages of it.
type Node interface {
	// ViewPath is the node's path below the view's root now, "" when
	// the kernel has forgotten it.
	ViewPath() string
	// DropContent drops the kernel's attributes and pages of the node:
	// with now before it returns (never from a request's goroutine),
	// otherwise from a goroutine of its own, since the kernel may wait
	// for the request that asks for it.
	DropContent(now bool)
	// Seen is the version of the file whose attributes the kernel holds.
	Seen() *Seen
}

// Seen is the version of a file whose attributes the kernel was last
// given for a node. An open that finds another version learns that the
// file changed without an invalidation (a change inotify does not
// report) and drops the kernel's pages and attributes (see keepCache).
// Its zero value is ready to use.
type Seen struct {
	v atomic.Pointer[fileVersion]
	// open is the node's last judgement of a read-only open (see
	// View.openCached).
	open atomic.Pointer[openVerdict]
}

// Saw notes the version whose attributes the kernel now holds.
func (s *Seen) Saw(st *unix.Stat_t) {
	if st.Mode&unix.S_IFMT == unix.S_IFREG {
		v := unixVersion(st)
		s.v.Store(&v)
	}
}

// Found notes the entry a lookup or a listing handed the kernel for the
// node: its attributes (Saw) and the judgement an open of it may reuse.
func (s *Seen) Found(e *Entry) {
	s.Saw(&e.Attr)
	s.open.Store(e.open)
}

// Caller is the process a request comes from, as the kernel names it.
type Caller struct {
	PID, UID, GID uint32
}

// Entry is what a lookup found and how the kernel may keep it.
type Entry struct {
	// Attr is the entry's attributes as the agent sees them (see
	// fillAttr).
	Attr unix.Stat_t
	// EntryTimeout and AttrTimeout bound how long the kernel keeps the
	// name and the attributes.
	EntryTimeout, AttrTimeout time.Duration
	// Control is set for the control directory, which the adapter
	// serves.
	Control bool
	// Snapshot is the content-addressed copy of a handed-over artifact
	// shown in place of the live file ("" for none).
	Snapshot string
	// open is the judgement a read-only open of the entry may reuse
	// (nil for none); the adapter keeps it with the node (Seen.Found).
	open *openVerdict
}

// SetAttr is a change of attributes, as setattr(2)'s family asks it.
type SetAttr struct {
	Mode, UID, GID                  uint32
	Size                            uint64
	ATime, MTime                    time.Time
	HasMode, HasUID, HasGID         bool
	HasSize, HasATime, HasMTime     bool
	ATimeNow, MTimeNow, KillSUIDGID bool
}

// timesOnly reports whether a setattr changes the times of a file and
// nothing else (touch, utime, utimensat).
func (in *SetAttr) timesOnly() bool {
	return (in.HasATime || in.HasMTime) && !in.HasMode && !in.HasUID && !in.HasGID && !in.HasSize && !in.KillSUIDGID
}

// Attach gives the view the kernel it is mounted in: from then on,
// changes in the folder and grant changes drop what the kernel keeps.
func (f *View) Attach(k Kernel) { f.kern.Store(&k) }

// kernel is the view's kernel, nil until it is mounted.
func (f *View) kernel() Kernel {
	if p := f.kern.Load(); p != nil {
		return *p
	}
	return nil
}

// caller is the process a request comes from, when the adapter says.
func (f *View) caller(ctx context.Context) (Caller, bool) {
	if f.callerOf == nil {
		return Caller{}, false
	}
	return f.callerOf(ctx)
}
