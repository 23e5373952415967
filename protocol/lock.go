package protocol

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// Lock is an exclusive advisory lock (flock) on a folder's events.jsonl.
// Every acpfs writer, in any process, holds it while it checks and
// appends an event, so appends are serialized and each one sees the
// complete history.
type Lock struct {
	f *os.File
}

// LockEvents opens folder/events.jsonl for appending (creating it if
// needed) and blocks until it holds the exclusive lock.
func LockEvents(folder string) (*Lock, error) {
	path := filepath.Join(folder, EventsFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", EventsFile, err)
	}
	if err := flock(f, unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", EventsFile, err)
	}
	return &Lock{f: f}, nil
}

// File returns the locked events.jsonl, opened O_RDWR|O_APPEND.
func (l *Lock) File() *os.File { return l.f }

// Unlock releases the lock and closes the file.
func (l *Lock) Unlock() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := flock(l.f, unix.LOCK_UN)
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	l.f = nil
	return err
}

func flock(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}
