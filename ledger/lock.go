package ledger

import (
	"errors"

	"golang.org/x/sys/unix"
)

// lockFile takes the exclusive flock that serialises "read the tail, then
// append" between processes. flock locks belong to the open file
// description, so two Writers in one process exclude each other too.
func lockFile(fd int) error { return flock(fd, unix.LOCK_EX) }

// lockFileShared lets readers take a consistent snapshot of the size.
func lockFileShared(fd int) error { return flock(fd, unix.LOCK_SH) }

func unlockFile(fd int) error { return flock(fd, unix.LOCK_UN) }

func flock(fd, how int) error {
	for {
		err := unix.Flock(fd, how)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

func fstatSize(fd int) (int64, error) {
	var st unix.Stat_t
	for {
		err := unix.Fstat(fd, &st)
		if err == nil {
			return st.Size, nil
		}
		if !errors.Is(err, unix.EINTR) {
			return 0, err
		}
	}
}
