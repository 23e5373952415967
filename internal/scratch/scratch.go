// Package scratch makes the directories acpfs keeps for the life of one
// process under the temporary directory (a turn's inputs, a sandbox's
// empty root and view), named after that process, and removes those
// whose process is gone: a process killed with SIGKILL cannot remove its
// own.
//
// A name is PREFIX<pid namespace>-<pid>-<start time>-<random>: the pid
// with its start time (clock ticks after boot, /proc/PID/stat) names one
// process whatever pids are reused, and the pid namespace says which
// pids the name speaks of (a process of another namespace sharing the
// directory is never judged by a pid of ours).
package scratch

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/internal/procstat"
	"github.com/acpfs/acpfs/internal/safeio"
)

// maker is this process as a name states it.
type maker struct {
	ns    uint64
	pid   int
	start uint64
}

// self is the calling process.
func self() (maker, error) {
	ns, err := pidNamespace()
	if err != nil {
		return maker{}, err
	}
	st, err := procstat.Read(os.Getpid())
	if err != nil {
		return maker{}, fmt.Errorf("scratch: this process's start time: %w", err)
	}
	return maker{ns: ns, pid: os.Getpid(), start: st.Start}, nil
}

// pidNamespace is the inode of the caller's pid namespace.
func pidNamespace() (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/pid", &st); err != nil {
		return 0, fmt.Errorf("scratch: the pid namespace: %w", err)
	}
	return st.Ino, nil
}

// Mkdir makes a new directory PREFIX... (see the package's doc) in dir,
// the temporary directory when "", mode 0700, and returns its path.
func Mkdir(dir, prefix string) (string, error) {
	m, err := self()
	if err != nil {
		return "", err
	}
	return os.MkdirTemp(dir, fmt.Sprintf("%s%d-%d-%d-*", prefix, m.ns, m.pid, m.start))
}

// parse reads the maker a name states; ok is false for a name of
// another form (one an older acpfs made, which says nothing of its
// maker, is left alone).
func parse(name, prefix string) (m maker, ok bool) {
	rest, found := strings.CutPrefix(name, prefix)
	parts := strings.Split(rest, "-")
	if !found || len(parts) != 4 {
		return m, false
	}
	var errs [4]error
	m.ns, errs[0] = strconv.ParseUint(parts[0], 10, 64)
	m.pid, errs[1] = strconv.Atoi(parts[1])
	m.start, errs[2] = strconv.ParseUint(parts[2], 10, 64)
	_, errs[3] = strconv.ParseUint(parts[3], 10, 64)
	return m, errors.Join(errs[:]...) == nil && m.pid > 0
}

// gone reports whether the process m names is no more: no process of
// that pid, one started at another time, or a zombie whose threads are
// all gone (it can never act again; a parent that died with it leaves
// it to init, which reaps it when it will). A process whose state
// cannot be read counts as alive.
func (m maker) gone() bool {
	st, err := procstat.Read(m.pid)
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ESRCH) {
		return true
	}
	if err != nil {
		return false
	}
	return st.Start != m.start || st.Zombie() && lastThreadGone(m.pid)
}

// lastThreadGone reports whether a zombie's threads are all gone: a
// thread group whose first thread exited shows as a zombie while its
// other threads still run.
func lastThreadGone(pid int) bool {
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	return err == nil && len(tasks) <= 1
}

// Sweep removes from dir (the temporary directory when "") the
// directories named PREFIX... whose maker, a process of the caller's
// pid namespace, is gone, and that are the caller's (owned by its
// effective uid): opened without following a symlink, emptied beneath
// that descriptor without crossing a mount, then removed if the name
// still leads to it. It returns the names it removed; a directory it
// could not remove is left as it is, and the first such error returned.
func Sweep(dir, prefix string) ([]string, error) {
	if dir == "" {
		dir = os.TempDir()
	}
	me, err := self()
	if err != nil {
		return nil, err
	}
	d, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("scratch: %w", err)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("scratch: list %s: %w", dir, err)
	}
	var removed []string
	var first error
	for _, name := range names {
		m, ok := parse(name, prefix)
		if !ok || m.ns != me.ns || m == me || !m.gone() {
			continue
		}
		switch err := removeDir(int(d.Fd()), name, os.Geteuid()); {
		case err == nil:
			removed = append(removed, name)
		case notOurs(err):
			// Someone else's, or not a directory (a symlink planted
			// under the name): none of the caller's business.
		case first == nil:
			first = fmt.Errorf("scratch: remove %s: %w", name, err)
		}
	}
	return removed, first
}

// errNotOurs says a leftover's name matched but it is not the caller's
// directory.
var errNotOurs = errors.New("not a directory of the caller's")

// notOurs reports an error of removeDir that says the name is not the
// caller's directory.
func notOurs(err error) bool {
	return errors.Is(err, errNotOurs) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) ||
		errors.Is(err, unix.EACCES) || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EXDEV)
}

// removeDir removes the directory name of parent, owned by uid.
func removeDir(parent int, name string, uid int) error {
	fd, err := safeio.OpenBeneath(parent, name, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if int(st.Uid) != uid || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return errNotOurs
	}
	if err := safeio.Empty(fd, maxDepth, maxEntries); err != nil {
		return err
	}
	// Removed only if the name still leads to the directory emptied.
	var now unix.Stat_t
	if err := unix.Fstatat(parent, name, &now, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	if now.Dev != st.Dev || now.Ino != st.Ino {
		return errors.New("replaced while it was emptied")
	}
	return unix.Unlinkat(parent, name, unix.AT_REMOVEDIR)
}

// The bounds of what removeDir empties: acpfs's scratch directories hold
// a few entries, a level or two deep. Anything larger is not one of them.
const (
	maxDepth   = 4
	maxEntries = 256
)
