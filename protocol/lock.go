package protocol

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/internal/atomicfile"
)

// LockFile is the name, next to events.jsonl, of the file whose flock
// serializes the appends of every acpfs writer (every view of every
// daemon, `acpfs append`, the store's catch-up). It is created 0600, so
// only its owner (the coordinator's uid) can open it, and so hold it:
// events.jsonl itself is 0644, and a flock on it could be taken by any
// uid that can read it. Views never show it.
const LockFile = ".events.jsonl.lock"

// LockTimeout bounds how long an append waits for the lock. A holder
// that keeps it longer (a stuck writer of the coordinator's own uid: no
// other uid can open the lock file) makes the append fail with an error
// of rule RuleLockBusy instead of stalling the agent behind it.
const LockTimeout = 5 * time.Second

// RuleLockBusy is the rule of the Unavailable error an append or a
// catch-up gets when the lock was held by someone else for LockTimeout.
// Views answer it with EBUSY.
const RuleLockBusy = "events-lock-busy"

// ErrLockBusy is wrapped by the errors of LockEvents and its shared
// variant when the lock was not free within LockTimeout.
var ErrLockBusy = errors.New("the events lock is held by another writer")

// RuleInterrupted is the rule of the Unavailable error of an append
// whose context ended while it waited for the lock. Views answer it with
// EINTR, so that a caller interrupted by a signal is not held.
const RuleInterrupted = "interrupted"

// ErrLockInterrupted is wrapped by the error of LockEventsContext when
// its context ended first.
var ErrLockInterrupted = errors.New("interrupted while waiting for the events lock")

// RuleStore is the rule of the Unavailable error of an append or a
// catch-up of a collaboration served from several hosts when the store
// cannot be reached or did not confirm the line. Views answer it with
// EROFS.
const RuleStore = "store"

// RuleRecord is the rule of the Unavailable error of an append whose
// line was valid but could not be recorded in the communication ledger,
// so it was not appended. Views answer it with EIO.
const RuleRecord = "record"

// lockBusy is the error of an append or catch-up that did not get the
// lock in time.
func lockBusy() *Error {
	return unavailable(RuleLockBusy, "another writer has held the folder's lock %s for %v; nothing was written, try again (only a process of the lock's owner can hold it: look for a stuck acpfs)", LockFile, lockTimeout)
}

// lockTimeout is LockTimeout; tests shorten it.
var lockTimeout = LockTimeout

// Lock is an exclusive advisory lock (flock) on a folder's LockFile, with
// the folder's events.jsonl open for appending.
type Lock struct {
	lock int // the locked LockFile, -1 when the lock is on events.jsonl
	f    *os.File
	held bool // both files belong to a heldFiles, which keeps them open
}

// LockEvents takes the exclusive lock of folder (waiting at most
// LockTimeout) and opens folder/events.jsonl for appending, creating it
// if needed.
//
// On an acpfs view (a FUSE mount) the lock file is not reachable, and
// not needed to protect the backing folder: the daemon behind the view
// takes the real lock for each line it writes. There the lock is taken
// on the view's events.jsonl, which only serializes writers of that one
// view, as before the lock file existed.
func LockEvents(folder string) (*Lock, error) {
	return LockEventsContext(context.Background(), folder)
}

// LockEventsContext is LockEvents, giving up (ErrLockInterrupted) when
// ctx is done first.
func LockEventsContext(ctx context.Context, folder string) (*Lock, error) {
	if onFUSE(folder) {
		return lockViewEvents(ctx, folder)
	}
	fd, err := takeLockFile(ctx, folder, unix.LOCK_EX, unix.O_CREAT)
	if err != nil {
		return nil, err
	}
	f, err := atomicfile.OpenFile(filepath.Join(folder, EventsFile), unix.O_RDWR|unix.O_APPEND|unix.O_CREAT|unix.O_NOFOLLOW, 0o644)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("open %s: %w", EventsFile, err)
	}
	return &Lock{lock: fd, f: f}, nil
}

func lockViewEvents(ctx context.Context, folder string) (*Lock, error) {
	f, err := atomicfile.OpenFile(filepath.Join(folder, EventsFile), unix.O_RDWR|unix.O_APPEND|unix.O_CREAT|unix.O_NOFOLLOW, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", EventsFile, err)
	}
	if err := waitFlock(ctx, int(f.Fd()), unix.LOCK_EX, lockTimeout); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", EventsFile, err)
	}
	return &Lock{lock: -1, f: f}, nil
}

// File returns the locked events.jsonl, opened O_RDWR|O_APPEND.
func (l *Lock) File() *os.File { return l.f }

// Unlock releases the lock and closes the files. Closing the lock
// file's only descriptor releases its flock. A lock taken through a
// heldFiles releases the flock and leaves both files open for the next.
func (l *Lock) Unlock() error {
	if l == nil || l.f == nil {
		return nil
	}
	var err error
	switch {
	case l.held:
		err = flockFD(l.lock, unix.LOCK_UN)
		l.f = nil
		return err
	case l.lock < 0:
		err = flock(l.f, unix.LOCK_UN)
	default:
		err = unix.Close(l.lock)
		l.lock = -1
	}
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	l.f = nil
	return err
}

// heldFiles keeps a long-lived log's LockFile and events.jsonl open from
// one lock to the next (a view appends through the same log for hours):
// each lock is then a flock and a check of both names, not two opens and
// two closes. Whoever holds the log's mutex uses it; the zero value
// holds nothing.
type heldFiles struct {
	lockFile *os.File // the LockFile, nil when none is open
	lockID   fileKey
	events   *os.File
	eventsID fileKey
	checked  bool // the fields below are known
	fuse     bool // the folder is on FUSE (a view): nothing is kept
	euid     uint32
}

// fileKey is what names a file: its device and inode.
type fileKey struct{ dev, ino uint64 }

func keyOf(st *unix.Stat_t) fileKey { return fileKey{uint64(st.Dev), st.Ino} }

// lock takes folder's exclusive lock as LockEventsContext does.
func (h *heldFiles) lock(ctx context.Context, folder string) (*Lock, error) {
	if !h.checked {
		h.checked, h.fuse, h.euid = true, onFUSE(folder), uint32(os.Geteuid())
	}
	if h.fuse {
		return lockViewEvents(ctx, folder)
	}
	fd, err := h.flockLockFile(ctx, folder)
	if err != nil {
		return nil, err
	}
	f, err := h.eventsFile(folder)
	if err != nil {
		flockFD(fd, unix.LOCK_UN)
		return nil, err
	}
	return &Lock{lock: fd, f: f, held: true}, nil
}

// flockLockFile flocks the LockFile kept open when its name still leads
// to it (and it still passes the checks of takeLockFile), else opens it
// again. It returns the locked descriptor.
func (h *heldFiles) flockLockFile(ctx context.Context, folder string) (int, error) {
	if h.lockFile != nil {
		fd := int(h.lockFile.Fd())
		if err := waitFlock(ctx, fd, unix.LOCK_EX, lockTimeout); err != nil {
			return -1, fmt.Errorf("lock %s: %w", LockFile, err)
		}
		var st unix.Stat_t
		if unix.Lstat(filepath.Join(folder, LockFile), &st) == nil && keyOf(&st) == h.lockID &&
			checkLockFileAs(folder, fd, &st, h.euid) == nil {
			return fd, nil
		}
		h.lockFile.Close() // releases the flock
		h.lockFile = nil
	}
	fd, err := takeLockFile(ctx, folder, unix.LOCK_EX, unix.O_CREAT)
	if err != nil {
		return -1, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("stat %s: %w", LockFile, err)
	}
	h.lockFile, h.lockID = os.NewFile(uintptr(fd), LockFile), keyOf(&st)
	return fd, nil
}

// eventsFile returns events.jsonl kept open when the name still leads to
// it, else opens it as LockEventsContext does (creating it if needed,
// never through a symbolic link).
func (h *heldFiles) eventsFile(folder string) (*os.File, error) {
	path := filepath.Join(folder, EventsFile)
	if h.events != nil {
		var st unix.Stat_t
		if unix.Lstat(path, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && keyOf(&st) == h.eventsID {
			return h.events, nil
		}
		h.events.Close()
		h.events = nil
	}
	f, err := atomicfile.OpenFile(path, unix.O_RDWR|unix.O_APPEND|unix.O_CREAT|unix.O_NOFOLLOW, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", EventsFile, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("stat %s: %w", EventsFile, err)
	}
	h.events, h.eventsID = f, keyOf(&st)
	return h.events, nil
}

// close closes what is kept open.
func (h *heldFiles) close() {
	for _, f := range []**os.File{&h.lockFile, &h.events} {
		if *f != nil {
			(*f).Close()
			*f = nil
		}
	}
}

// sharedLock takes the shared lock of folder for a reader that wants
// protocol.json and events.jsonl as one pair. It returns a release
// function, or nil when the folder cannot be locked by this process (a
// view, a lock file it may not open, a folder no acpfs appender wrote
// yet, which a reader does not change): the pair is then read without
// the lock, as from a writer that does not take it.
func sharedLock(folder string) (func(), error) {
	return sharedLockContext(context.Background(), folder)
}

// sharedLockContext is sharedLock, giving up when ctx is done: the pair
// is then read without the lock.
func sharedLockContext(ctx context.Context, folder string) (func(), error) {
	if onFUSE(folder) {
		return nil, nil
	}
	fd, err := takeLockFile(ctx, folder, unix.LOCK_SH, 0)
	if err != nil {
		if errors.Is(err, ErrLockBusy) {
			return nil, err
		}
		return nil, nil
	}
	return func() { unix.Close(fd) }, nil
}

// takeLockFile opens (with create, creating it if needed) folder's LockFile and
// flocks it with how, waiting at most LockTimeout. It refuses a lock file
// that is not a regular file with one name, owned by this process's
// euid or by the folder's owner and accessible to its owner only: any
// other could be opened, and held, by someone else.
func takeLockFile(ctx context.Context, folder string, how, create int) (int, error) {
	path := filepath.Join(folder, LockFile)
	for attempt := 0; ; attempt++ {
		fd, err := unix.Open(path, unix.O_RDWR|create|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0o600)
		if err != nil {
			return -1, fmt.Errorf("open %s: %w", LockFile, err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("stat %s: %w", LockFile, err)
		}
		if err := checkLockFile(folder, fd, &st); err != nil {
			unix.Close(fd)
			return -1, err
		}
		if err := waitFlock(ctx, fd, how, lockTimeout); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("lock %s: %w", LockFile, err)
		}
		// The name may have been unlinked or replaced while we waited
		// (by someone who may write the folder): a lock on an inode the
		// name no longer leads to excludes nobody.
		var now unix.Stat_t
		if err := unix.Lstat(path, &now); err == nil && now.Dev == st.Dev && now.Ino == st.Ino {
			return fd, nil
		}
		unix.Close(fd)
		if attempt == 3 {
			return -1, fmt.Errorf("lock %s: the file keeps being replaced", LockFile)
		}
	}
}

func checkLockFile(folder string, fd int, st *unix.Stat_t) error {
	return checkLockFileAs(folder, fd, st, uint32(os.Geteuid()))
}

// checkLockFileAs is checkLockFile for a process of effective uid euid.
func checkLockFileAs(folder string, fd int, st *unix.Stat_t, euid uint32) error {
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("%s is not a regular file: remove it", LockFile)
	}
	if st.Nlink != 1 {
		return fmt.Errorf("%s has %d names: remove it", LockFile, st.Nlink)
	}
	if st.Uid != euid {
		var dir unix.Stat_t
		if err := unix.Stat(folder, &dir); err != nil {
			return fmt.Errorf("stat %s: %w", folder, err)
		}
		if st.Uid != dir.Uid {
			return fmt.Errorf("%s is owned by uid %d, neither this process's (%d) nor the folder's owner (%d): remove it", LockFile, st.Uid, euid, dir.Uid)
		}
	}
	if st.Mode&0o077 != 0 {
		if st.Uid != euid {
			return fmt.Errorf("%s is mode %04o: other users could hold it; make it 0600", LockFile, st.Mode&0o7777)
		}
		if err := unix.Fchmod(fd, 0o600); err != nil {
			return fmt.Errorf("chmod %s: %w", LockFile, err)
		}
	}
	return nil
}

// waitFlock takes flock how on fd, polling with LOCK_NB so that it never
// blocks past timeout or the end of ctx: a blocking flock cannot be
// abandoned, and a thread left blocked for each abandoned wait would pile
// up behind a stuck holder.
func waitFlock(ctx context.Context, fd, how int, timeout time.Duration) error {
	err := unix.Flock(fd, how|unix.LOCK_NB)
	if err == nil || !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
		return err
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	pause := 50 * time.Microsecond
	tick := time.NewTimer(pause)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ErrLockInterrupted
		case <-deadline.C:
			return fmt.Errorf("%w for %v", ErrLockBusy, timeout)
		case <-tick.C:
		}
		err := unix.Flock(fd, how|unix.LOCK_NB)
		if err == nil || !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			return err
		}
		if pause < 2*time.Millisecond {
			pause *= 2
		}
		tick.Reset(pause)
	}
}

func flock(f *os.File, how int) error { return flockFD(int(f.Fd()), how) }

func flockFD(fd, how int) error {
	for {
		err := unix.Flock(fd, how)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// fuseSuperMagic is statfs's f_type of a FUSE mount.
const fuseSuperMagic = 0x65735546

func onFUSE(folder string) bool {
	var s unix.Statfs_t
	return unix.Statfs(folder, &s) == nil && s.Type == fuseSuperMagic
}

// heldTurn hands the files a Log keeps open (heldFiles) to one writer of
// this process at a time: the flock of a descriptor is the descriptor's,
// so a second goroutine flocking the same one would not wait.
type heldTurn struct {
	once sync.Once
	c    chan struct{}
}

func (t *heldTurn) ch() chan struct{} {
	t.once.Do(func() { t.c = make(chan struct{}, 1) })
	return t.c
}

// take waits for the turn, as waitFlock waits for a lock: at most
// timeout (ErrLockBusy), and no longer than ctx (ErrLockInterrupted).
func (t *heldTurn) take(ctx context.Context, timeout time.Duration) error {
	select {
	case t.ch() <- struct{}{}:
		return nil
	default:
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	select {
	case t.ch() <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ErrLockInterrupted
	case <-deadline.C:
		return fmt.Errorf("%w for %v", ErrLockBusy, timeout)
	}
}

// release gives the turn back.
func (t *heldTurn) release() { <-t.ch() }
