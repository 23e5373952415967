package view

import (
	"errors"
	"fmt"
	"os"
	"path"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/internal/fsid"
	"github.com/acpfs/acpfs/internal/safeio"
)

// backing is the only way the daemon touches the collaboration folder.
//
// The daemon runs as root and the folder is written by parties it does
// not trust (agents through their views, anyone with access to the
// folder itself). So no path is ever resolved from "/" and no symlink is
// ever followed: every name is resolved from a descriptor of the folder
// root by the one resolver beneath a root, internal/safeio.OpenBeneath
// (which says how), and the operation itself is a *at call on the parent
// directory found that way, with AT_SYMLINK_NOFOLLOW or O_NOFOLLOW. A component swapped for a symlink
// between two calls makes the second fail (ELOOP), never leads elsewhere.
type backing struct {
	root *os.File // O_PATH descriptor of the view's root
	id   fsid.ID  // the root's identity
	// at turns the folder-relative names the view speaks of into paths
	// below root (see place).
	at place
}

func openBacking(folder string, at place) (*backing, error) {
	// The folder path itself is the coordinator's choice and may be
	// reached through a symlink (acpfs run serves it from /proc/self/fd):
	// only names below it are resolved strictly.
	fd, err := unix.Open(folder, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open folder %s: %w", folder, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("stat folder %s: %w", folder, err)
	}
	return &backing{root: os.NewFile(uintptr(fd), folder), id: fsid.OfStat(&st), at: at}, nil
}

func (b *backing) rootFd() int { return int(b.root.Fd()) }

// rootID is the identity of the view's root.
func (b *backing) rootID() fsid.ID { return b.id }

// open resolves rel (folder-relative, "" for the folder) strictly
// beneath the root and opens it with flags. O_NOFOLLOW is always added: a
// final symlink is opened as itself with O_PATH, refused (ELOOP)
// otherwise.
func (b *backing) open(rel string, flags int, mode uint32) (int, error) {
	vp, ok := b.at.viewPath(rel)
	if !ok {
		return -1, unix.ENOENT
	}
	return b.openView(vp, flags, mode)
}

// openView is open for a path relative to the view's root, through the
// one resolver beneath a root (internal/safeio).
func (b *backing) openView(rel string, flags int, mode uint32) (int, error) {
	fd, err := safeio.OpenBeneath(b.rootFd(), rel, flags, mode)
	if err == unix.ELOOP || err == unix.EXDEV {
		// A component (or the final name) is a symlink or a mount
		// point: the path leads nowhere inside the view, so for the
		// view it does not exist.
		return -1, unix.ENOENT
	}
	return fd, err
}

// dir is a parent directory reached through the checkpoint, with the
// last name of the path to act on inside it.
type dir struct {
	fd   int
	name string
}

func (d dir) close() { unix.Close(d.fd) }

// parent opens the directory holding rel. rel must not be the view's
// root.
func (b *backing) parent(rel string) (dir, error) {
	vp, ok := b.at.viewPath(rel)
	if !ok {
		return dir{}, unix.ENOENT
	}
	p, name := path.Split(vp)
	if name == "" || name == "." || name == ".." {
		return dir{}, unix.EINVAL
	}
	fd, err := b.openView(trimSlash(p), unix.O_PATH|unix.O_DIRECTORY, 0)
	if err == unix.ENOTDIR {
		// Something other than a directory (a symlink above all) is in
		// the way: the view has nothing there.
		err = unix.ENOENT
	}
	if err != nil {
		return dir{}, err
	}
	return dir{fd: fd, name: name}, nil
}

func trimSlash(p string) string {
	if len(p) > 0 && p[len(p)-1] == '/' {
		return p[:len(p)-1]
	}
	return p
}

func readlinkat(dirfd int, name string) (string, error) {
	buf := make([]byte, 256)
	for {
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if n < len(buf) {
			return string(buf[:n]), nil
		}
		if len(buf) >= 1<<16 {
			return "", unix.ENAMETOOLONG
		}
		buf = make([]byte, 2*len(buf))
	}
}

// xattrArgs is struct xattr_args of the *xattrat system calls.
type xattrArgs struct {
	value uint64
	size  uint32
	flags uint32
}

// The *xattrat calls (Linux 6.13) act on a name inside a directory
// descriptor without following a final symlink, which no other xattr
// call can do for a symlink or a file the daemon should not open.
func setxattrat(dirfd int, name, attr string, data []byte, flags uint32) error {
	args := xattrArgs{size: uint32(len(data)), flags: flags}
	if len(data) > 0 {
		args.value = uint64(uintptr(unsafe.Pointer(&data[0])))
	}
	err := xattrat(unix.SYS_SETXATTRAT, dirfd, name, attr, unsafe.Pointer(&args), unsafe.Sizeof(args))
	// The kernel reads data through args.value, which the collector does
	// not see as a pointer.
	runtime.KeepAlive(data)
	return err
}

func removexattrat(dirfd int, name, attr string) error {
	return xattrat(unix.SYS_REMOVEXATTRAT, dirfd, name, attr, nil, 0)
}

// xattrat makes one *xattrat call (trap) on name in dirfd, with
// AT_SYMLINK_NOFOLLOW, and args and size as the call's last two
// arguments.
func xattrat(trap uintptr, dirfd int, name, attr string, args unsafe.Pointer, size uintptr) error {
	p, err := unix.BytePtrFromString(name)
	if err != nil {
		return err
	}
	a, err := unix.BytePtrFromString(attr)
	if err != nil {
		return err
	}
	_, _, e := unix.Syscall6(trap, uintptr(dirfd), uintptr(unsafe.Pointer(p)),
		unix.AT_SYMLINK_NOFOLLOW, uintptr(unsafe.Pointer(a)), uintptr(args), size)
	if e != 0 {
		return e
	}
	return nil
}

// errnoOf maps an error of the checkpoint to the errno the agent sees.
func errnoOf(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var e syscall.Errno
	if !errors.As(err, &e) {
		return syscall.EIO
	}
	return e
}
