package ledger

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/internal/atomicfile"
)

// ledgerDir is the ledger's directory, held open. A writer reaches its
// file's name, the head, the broken note and the preserved copy through
// it, so that it keeps working inside a mount namespace that hides the
// run directory (acpfs run), and never resolves a path someone else may
// have changed.
type ledgerDir struct {
	fd   int
	base string // the ledger's file name in it
}

func openLedgerDir(dir, base string) (ledgerDir, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return ledgerDir{fd: -1}, fmt.Errorf("open ledger directory %s: %w", dir, err)
	}
	if err := checkPrivate(fd, dir); err != nil {
		unix.Close(fd)
		return ledgerDir{fd: -1}, err
	}
	return ledgerDir{fd: fd, base: base}, nil
}

// checkPrivate refuses a ledger directory that anyone but the writer's
// user may change. The head file, the broken-ledger note and the
// preserved copies live there: whoever can replace them could roll the
// ledger back to an older signed state that verifies.
func checkPrivate(fd int, dir string) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat ledger directory %s: %w", dir, err)
	}
	if int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0 {
		return fmt.Errorf("ledger directory %s must be owned by uid %d and writable by no one else (it is uid %d, mode %04o): whoever can write it can roll the ledger back; run chmod go-w on it",
			dir, os.Geteuid(), st.Uid, st.Mode&0o7777)
	}
	return nil
}

func (d ledgerDir) close() {
	if d.fd >= 0 {
		unix.Close(d.fd)
	}
}

func (d ledgerDir) lstat(name string, st *unix.Stat_t) error {
	return unix.Fstatat(d.fd, name, st, unix.AT_SYMLINK_NOFOLLOW)
}

func (d ledgerDir) open(name string, flags int, mode uint32) (*os.File, error) {
	fd, err := unix.Openat(d.fd, name, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	return os.NewFile(uintptr(fd), name), nil
}

func (d ledgerDir) readFile(name string) ([]byte, error) {
	f, err := d.open(name, unix.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, MaxLineBytes+1))
}

func (d ledgerDir) remove(name string) error {
	err := unix.Unlinkat(d.fd, name, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	return err
}

// writeAtomic replaces name with data by the one rule of
// internal/atomicfile (temporary file, fsync, rename, fsync of the
// directory), by last name inside the held directory.
func (d ledgerDir) writeAtomic(name string, data []byte) error {
	return atomicfile.At(d.fd).WriteFile(name, data, 0o600)
}

// keepPrivate makes the ledger file the writer's alone: one another user
// owns is refused, and permissions for group and others are taken away.
func keepPrivate(f *os.File) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return errors.New("not a regular file")
	}
	if int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("owned by uid %d, not by this writer (uid %d)", st.Uid, os.Geteuid())
	}
	if st.Mode&0o077 != 0 {
		slog.Warn("ledger: taking permissions for group and others away", "path", f.Name(), "mode", fmt.Sprintf("%04o", st.Mode&0o7777))
		return unix.Fchmod(int(f.Fd()), 0o600)
	}
	return nil
}
