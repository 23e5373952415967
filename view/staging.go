package view

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"github.com/acpfs/acpfs/internal/procstat"
	"log/slog"
	"path"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/internal/safeio"
	"github.com/acpfs/acpfs/ledger"
)

// StagingDir is the folder-relative directory holding each view's private
// temporary files. No view ever shows it.
const StagingDir = ".acpfs-staging"

// staging keeps the private temporary files of one view.
//
// Tools save a file by writing a temporary file next to it and renaming
// it over the target (sed -i, perl -pi, mkstemp + os.replace, editors).
// The grant rarely lets the agent write those temporary names, and must
// not: another agent's grant could read them. So a file created under a
// name the agent may not write, in a directory where it may write
// something, is made in the view's own directory under StagingDir instead
// and shown under its name in this view only. Renaming it onto a name the
// agent may write commits it: one renameat2 on the backing folder, so a
// reader sees the old content or the new, never a partial file. What is
// left when the view stops is removed.
type staging struct {
	mu    sync.Mutex
	fd    int               // O_PATH descriptor of this view's directory; -1 until needed
	id    string            // its name under StagingDir
	names map[string]string // view path -> file name in fd
	seq   uint64
}

// stagedName reports whether rel is one of the view's private files.
func (f *View) stagedName(rel string) (string, bool) {
	f.stage.mu.Lock()
	defer f.stage.mu.Unlock()
	name, ok := f.stage.names[rel]
	return name, ok
}

// stagedIn lists the private files shown in the directory dir.
func (f *View) stagedIn(dir string) map[string]string {
	f.stage.mu.Lock()
	defer f.stage.mu.Unlock()
	var out map[string]string
	for rel, name := range f.stage.names {
		if path.Dir(rel) == dir || (dir == "" && !strings.Contains(rel, "/")) {
			if out == nil {
				out = make(map[string]string)
			}
			out[path.Base(rel)] = name
		}
	}
	return out
}

// stageable reports whether a new file at rel is made privately: the
// grant does not let the agent write rel, but it may write something in
// rel's directory.
func (f *View) stageable(rel string) bool {
	m := f.matcher()
	if managed(rel) || m.Writable(rel) || rel == ControlDir {
		return false
	}
	dir := path.Dir(rel)
	if dir == "." {
		dir = ""
	}
	return m.MayWriteIn(dir)
}

// stagingDir returns a duplicate of the view's staging directory
// descriptor, creating the directory on first use. The caller closes it.
func (f *View) stagingDir() (int, error) {
	s := &f.stage
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fd < 0 {
		folder, err := f.b.open("", unix.O_PATH|unix.O_DIRECTORY, 0)
		if err != nil {
			return -1, fmt.Errorf("open the folder: %w", err)
		}
		err = unix.Mkdirat(folder, StagingDir, 0o700)
		unix.Close(folder)
		if err != nil && err != unix.EEXIST {
			return -1, fmt.Errorf("make %s: %w", StagingDir, err)
		}
		top, err := f.b.open(StagingDir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			return -1, fmt.Errorf("open %s: %w", StagingDir, err)
		}
		defer unix.Close(top)
		if err := claimStagingTop(top); err != nil {
			return -1, err
		}
		f.conceal.holdStaging(top)
		var rnd [6]byte
		rand.Read(rnd[:])
		id := strconv.Itoa(unix.Getpid()) + "-" + hex.EncodeToString(rnd[:])
		if err := unix.Mkdirat(top, id, 0o700); err != nil {
			return -1, fmt.Errorf("make staging directory: %w", err)
		}
		fd, err := unix.Openat(top, id, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, fmt.Errorf("open staging directory: %w", err)
		}
		s.fd, s.id = fd, id
		f.conceal.holdStaging(fd)
	}
	return unix.FcntlInt(uintptr(s.fd), unix.F_DUPFD_CLOEXEC, 0)
}

// claimStagingTop makes the folder's staging directory, held by fd, one
// that nobody but the daemon's user may write: made first by another uid,
// or left writable to others, it would let them rename a view's private
// directory away under it, and every private temporary file of the view
// would fail. Root takes it over; another user refuses to use it.
func claimStagingTop(fd int) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat %s: %w", StagingDir, err)
	}
	euid := unix.Geteuid()
	if int(st.Uid) != euid {
		if euid != 0 {
			return fmt.Errorf("%s belongs to uid %d, not to this daemon's uid %d: remove it, or let it be made by the coordinator", StagingDir, st.Uid, euid)
		}
		if err := unix.Fchown(fd, 0, 0); err != nil {
			return fmt.Errorf("take over %s from uid %d: %w", StagingDir, st.Uid, err)
		}
		slog.Warn("took over a staging directory another uid made", "dir", StagingDir, "uid", st.Uid)
	}
	if st.Mode&0o7777 != 0o700 {
		if err := unix.Fchmod(fd, 0o700); err != nil {
			return fmt.Errorf("make %s private: %w", StagingDir, err)
		}
	}
	return nil
}

// createStaged makes the private file for rel and opens it.
func (f *View) createStaged(ctx context.Context, rel string, flags, mode uint32) (*target, int, syscall.Errno) {
	dfd, err := f.stagingDir()
	if err != nil {
		slog.Error("staging", "err", err)
		return nil, -1, syscall.EIO
	}
	f.stage.mu.Lock()
	f.stage.seq++
	name := "t" + strconv.FormatUint(f.stage.seq, 10)
	f.stage.mu.Unlock()
	if errno := f.newName(ctx, ledger.OpCreate, rel, "private temporary file of this view"); errno != 0 {
		unix.Close(dfd)
		return nil, -1, errno
	}
	oflags := int(flags)&^(unix.O_TRUNC|unix.O_EXCL|unix.O_CREAT|unix.O_NOCTTY) | unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err := unix.Openat(dfd, name, oflags, mode&0o7777)
	if err != nil {
		f.quota.files.Add(-1)
		unix.Close(dfd)
		return nil, -1, errnoOf(err)
	}
	t := &target{rel: rel, d: dir{fd: dfd, name: name}, e: entry{kind: kindFile}}
	if err := unix.Fstat(fd, &t.e.st); err != nil {
		unix.Close(fd)
		t.close()
		return nil, -1, errnoOf(err)
	}
	f.stage.mu.Lock()
	f.stage.names[rel] = name
	f.stage.mu.Unlock()
	return t, fd, 0
}

// stagedTarget is the checkpoint for a private file: it is the agent's
// own, so every op may act on it except making a second name.
func (f *View) stagedTarget(o op, rel, name string) (*target, syscall.Errno) {
	dfd, err := f.stagingDir()
	if err != nil {
		return nil, syscall.EIO
	}
	t := &target{rel: rel, d: dir{fd: dfd, name: name}}
	if err := unix.Fstatat(dfd, name, &t.e.st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		t.close()
		return nil, errnoOf(err)
	}
	t.e.kind = kindFile
	switch {
	case o == opLink:
		t.close()
		return nil, syscall.EACCES
	case o.class() == classMake && o != opRenameTo:
		t.close()
		return nil, syscall.EEXIST
	}
	return t, 0
}

// renamedStaged updates the private names after a rename of from onto to
// on the backing folder. A private name maps to a file in the staging
// directory, and renameat2 moved files between those places: after a
// plain rename the file of a private to is wherever to's staging name
// is, and a private from is gone; an exchange swaps contents and keeps
// every name where it was.
func (f *View) renamedStaged(from string, fromStaged, exchange bool) {
	if exchange || !fromStaged {
		return
	}
	f.stage.mu.Lock()
	delete(f.stage.names, from)
	f.stage.mu.Unlock()
}

// unstage forgets a private file that was removed.
func (f *View) unstage(rel string) {
	f.stage.mu.Lock()
	delete(f.stage.names, rel)
	f.stage.mu.Unlock()
}

// removeStaging deletes the view's private files and their directory.
func (f *View) removeStaging() {
	s := &f.stage
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fd < 0 {
		return
	}
	for _, name := range s.names {
		unix.Unlinkat(s.fd, name, 0)
	}
	s.names = map[string]string{}
	unix.Close(s.fd)
	s.fd = -1
	if top, err := f.b.open(StagingDir, unix.O_PATH|unix.O_DIRECTORY, 0); err == nil {
		removeTree(top, s.id, 4)
		if folder, err := f.b.open("", unix.O_PATH|unix.O_DIRECTORY, 0); err == nil {
			unix.Unlinkat(folder, StagingDir, unix.AT_REMOVEDIR) // fails while other views use it
			unix.Close(folder)
		}
		unix.Close(top)
	}
}

// sweepStaging removes the staging directories of daemons that are gone
// (a crash leaves them behind).
func (f *View) sweepStaging() {
	top, err := f.b.open(StagingDir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return
	}
	defer unix.Close(top)
	f.conceal.holdStaging(top)
	names, err := readNames(top)
	if err != nil {
		return
	}
	for _, n := range names {
		pid, _, ok := strings.Cut(n, "-")
		p, err := strconv.Atoi(pid)
		if !ok || err != nil || p <= 0 || p == unix.Getpid() {
			continue
		}
		if !alive(p) {
			removeTree(top, n, 4)
		}
	}
}

// alive reports whether pid is a running process: a zombie (killed, not
// yet reaped) is not.
func alive(pid int) bool {
	st, err := procstat.Read(pid)
	return err == nil && !st.Zombie()
}

// removeTree removes the directory name in dirfd and what it holds, at
// most depth levels down, beneath dirfd (safeio.Empty: no symlink
// followed, no mount crossed). What it cannot remove stays.
func removeTree(dirfd int, name string, depth int) {
	fd, err := safeio.OpenBeneath(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return
	}
	_ = safeio.Empty(fd, depth, 0)
	unix.Close(fd)
	unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
}
