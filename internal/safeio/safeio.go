// Package safeio reads and replaces files beneath a folder that hostile
// parties can write, on behalf of a daemon that runs as root.
//
// No name is ever resolved from "/" and no symlink is ever followed:
// every path is resolved from a descriptor of the folder root with
// openat2 and RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS
// | RESOLVE_NO_XDEV, and the operation itself is a *at call on the
// parent directory found that way. A component swapped for a symlink
// between two calls makes the second fail, never leads elsewhere.
//
// Files are never written in place: new content goes to a temporary file
// in the same directory, which is swapped with the old entry by one
// renameat2(RENAME_EXCHANGE). The old entry is handed back to the caller
// (Detached), who decides whether it held something that must not be
// lost, so that no check-then-replace window can drop a write.
package safeio

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/internal/atomicfile"
)

// TempPrefix begins the names of the temporary files this package makes
// (and of the entries it moves out of the way); watchers skip them.
const TempPrefix = ".acpfs-sync-"

// ErrNotRegular says the entry is not a regular file with exactly one
// link: a symlink, a directory, a device, or a file whose other names
// cannot be checked (a hard link to a file outside the folder, say).
var ErrNotRegular = errors.New("not a regular file with a single link")

// ErrTooLarge says a file is larger than the caller accepts.
var ErrTooLarge = errors.New("file too large")

const resolveFlags = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS |
	unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// Root is a folder every access goes through.
type Root struct {
	f   *os.File // O_PATH descriptor of the folder root
	uid int
	gid int
}

// OpenRoot opens folder. The folder path itself is trusted (the
// coordinator chose it); only names beneath it are resolved strictly.
func OpenRoot(folder string) (*Root, error) {
	fd, err := unix.Open(folder, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open folder %s: %w", folder, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("stat folder %s: %w", folder, err)
	}
	return &Root{f: os.NewFile(uintptr(fd), folder), uid: int(st.Uid), gid: int(st.Gid)}, nil
}

// Close releases the root descriptor.
func (r *Root) Close() error { return r.f.Close() }

// Name is the folder's path as given to OpenRoot.
func (r *Root) Name() string { return r.f.Name() }

func (r *Root) fd() int { return int(r.f.Fd()) }

// Valid reports whether rel is a path this package accepts: relative,
// slash-separated, clean, without "." or ".." components, NUL or empty
// names. Paths that come from other hosts are checked with it before
// anything else.
func Valid(rel string) bool {
	if rel == "" || rel == "." || strings.HasPrefix(rel, "/") || strings.ContainsRune(rel, 0) ||
		len(rel) > 4096 || path.Clean(rel) != rel {
		return false
	}
	for _, c := range strings.Split(rel, "/") {
		if c == "" || c == "." || c == ".." || len(c) > 255 {
			return false
		}
	}
	return true
}

// open resolves rel strictly beneath the root. "" is the root itself.
func (r *Root) open(rel string, flags int) (int, error) {
	if rel == "" {
		rel = "."
	} else if !Valid(rel) {
		return -1, fmt.Errorf("path %q: %w", rel, unix.EINVAL)
	}
	return openat2(r.fd(), rel, flags)
}

// openat2 resolves name strictly beneath dirfd.
func openat2(dirfd int, name string, flags int) (int, error) {
	return OpenBeneath(dirfd, name, flags, 0)
}

// OpenBeneath opens name ("" or "." for the directory itself) strictly
// beneath the directory dirfd: the only open of acpfs that resolves a
// path someone else may change. Every component is resolved with
// openat2 and RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
// RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV, and O_NOFOLLOW and O_CLOEXEC
// are always added: a final symlink is opened as itself with O_PATH,
// refused otherwise. mode is used with O_CREAT or O_TMPFILE only.
//
// The errors are the kernel's, so that each caller says what they mean
// to it: ELOOP (a symlink on the way), EXDEV (a mount point, or a name
// leading above dirfd). EINTR and EAGAIN (a rename elsewhere raced the
// resolution) are retried here.
func OpenBeneath(dirfd int, name string, flags int, mode uint32) (int, error) {
	if name == "" {
		name = "."
	}
	how := unix.OpenHow{Flags: uint64(flags | unix.O_NOFOLLOW | unix.O_CLOEXEC), Resolve: resolveFlags}
	if flags&(unix.O_CREAT|unix.O_TMPFILE) != 0 {
		how.Mode = uint64(mode & 0o7777)
	}
	for {
		fd, err := unix.Openat2(dirfd, name, &how)
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		return fd, err
	}
}

// Info describes an entry without following it.
type Info struct {
	Mode  uint32 // unix.S_IF* type and permission bits
	Nlink uint64
	Size  int64
	// Writing is set by ReadFile when someone holds the file open for
	// writing: the content read may be a write in progress.
	Writing bool
}

// Regular reports whether the entry is a regular file with one link.
func (i Info) Regular() bool { return i.Mode&unix.S_IFMT == unix.S_IFREG && i.Nlink == 1 }

// Dir reports whether the entry is a directory.
func (i Info) Dir() bool { return i.Mode&unix.S_IFMT == unix.S_IFDIR }

func infoOf(st *unix.Stat_t) Info {
	return Info{Mode: st.Mode, Nlink: uint64(st.Nlink), Size: st.Size}
}

// Lstat describes rel without following it. A path through a symlink
// does not exist (fs.ErrNotExist).
func (r *Root) Lstat(rel string) (Info, error) {
	d, name, err := r.parent(rel, false, 0)
	if err != nil {
		return Info{}, err
	}
	defer unix.Close(d)
	var st unix.Stat_t
	if err := unix.Fstatat(d, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return Info{}, pathErr("lstat", rel, err)
	}
	return infoOf(&st), nil
}

// ReadFile returns the content of rel if it is a regular file with one
// link and at most limit bytes: ErrNotRegular or ErrTooLarge otherwise,
// fs.ErrNotExist when nothing (or a path through a symlink) is there.
func (r *Root) ReadFile(rel string, limit int64) ([]byte, Info, error) {
	// O_PATH first: opening a fifo or a device for reading could block
	// or act; only a regular file is opened for real, and it must be the
	// one judged.
	pfd, err := r.open(rel, unix.O_PATH)
	if err != nil {
		return nil, Info{}, pathErr("open", rel, err)
	}
	defer unix.Close(pfd)
	var pst unix.Stat_t
	if err := unix.Fstat(pfd, &pst); err != nil {
		return nil, Info{}, pathErr("stat", rel, err)
	}
	if !infoOf(&pst).Regular() {
		return nil, infoOf(&pst), fmt.Errorf("read %s: %w", rel, ErrNotRegular)
	}
	fd, err := r.open(rel, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		return nil, Info{}, pathErr("open", rel, err)
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	return readJudged(f, rel, &pst, limit)
}

// readJudged reads f after checking it is the entry judged as st.
func readJudged(f *os.File, rel string, judged *unix.Stat_t, limit int64) ([]byte, Info, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, Info{}, pathErr("stat", rel, err)
	}
	info := infoOf(&st)
	if judged != nil && (st.Dev != judged.Dev || st.Ino != judged.Ino) {
		return nil, info, fmt.Errorf("read %s: replaced while opened: %w", rel, fs.ErrNotExist)
	}
	if !info.Regular() {
		return nil, info, fmt.Errorf("read %s: %w", rel, ErrNotRegular)
	}
	if st.Size > limit {
		return nil, info, fmt.Errorf("read %s (%d bytes, at most %d): %w", rel, st.Size, limit, ErrTooLarge)
	}
	// A writer that held the file open before or after the read, or
	// that came and went during it (the change time moved), may have
	// been read half-way.
	writing := openForWrite(int(f.Fd()))
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, info, fmt.Errorf("read %s: %w", rel, err)
	}
	var after unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &after); err != nil {
		return nil, info, pathErr("stat", rel, err)
	}
	info.Writing = writing || openForWrite(int(f.Fd())) || after.Ctim != st.Ctim || after.Size != st.Size
	if int64(len(data)) > limit {
		return nil, info, fmt.Errorf("read %s (grew past %d bytes): %w", rel, limit, ErrTooLarge)
	}
	info.Size = int64(len(data))
	return data, info, nil
}

// Writing reports whether rel is a regular file that someone holds open
// for writing now.
func (r *Root) Writing(rel string) bool {
	if info, err := r.Lstat(rel); err != nil || info.Mode&unix.S_IFMT != unix.S_IFREG {
		return false // only a regular file is opened for real
	}
	fd, err := r.open(rel, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return false
	}
	return openForWrite(fd)
}

// Entry is one name of a directory listing.
type Entry struct {
	Name string
	Type uint32 // unix.S_IF* type bits
}

// ReadDir lists the directory rel ("" for the root).
func (r *Root) ReadDir(rel string) ([]Entry, error) {
	fd, err := r.open(rel, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, pathErr("open directory", rel, err)
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	des, err := f.ReadDir(-1)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", rel, err)
	}
	out := make([]Entry, 0, len(des))
	for _, de := range des {
		var t uint32
		switch m := de.Type(); {
		case m.IsDir():
			t = unix.S_IFDIR
		case m.IsRegular():
			t = unix.S_IFREG
		case m&fs.ModeSymlink != 0:
			t = unix.S_IFLNK
		default:
			t = unix.S_IFIFO // anything else: not followed, not read
		}
		out = append(out, Entry{Name: de.Name(), Type: t})
	}
	return out, nil
}

// parent opens the directory holding rel and returns it with rel's last
// name. With mkdir, missing directories on the way are created (mode
// dirPerm less the umask, owned by the folder's owner); existing ones
// are left as they are.
func (r *Root) parent(rel string, mkdir bool, dirPerm uint32) (int, string, error) {
	if !Valid(rel) {
		return -1, "", fmt.Errorf("path %q: %w", rel, unix.EINVAL)
	}
	dir, name := path.Split(rel)
	dir = strings.TrimSuffix(dir, "/")
	if !mkdir {
		fd, err := r.open(dir, unix.O_RDONLY|unix.O_DIRECTORY)
		if err != nil {
			return -1, "", pathErr("open directory", dir, err)
		}
		return fd, name, nil
	}
	fd, err := r.open("", unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return -1, "", pathErr("open folder", "", err)
	}
	if dir == "" {
		return fd, name, nil
	}
	for _, c := range strings.Split(dir, "/") {
		err := unix.Mkdirat(fd, c, dirPerm&0o755)
		if err == nil {
			// Best effort: a directory the daemon makes belongs to
			// whoever owns the folder, as if it came with the copy.
			_ = unix.Fchownat(fd, c, r.uid, r.gid, unix.AT_SYMLINK_NOFOLLOW)
		} else if err != unix.EEXIST {
			unix.Close(fd)
			return -1, "", pathErr("mkdir", rel, err)
		}
		next, err := openat2(fd, c, unix.O_RDONLY|unix.O_DIRECTORY)
		unix.Close(fd)
		if err != nil {
			// ELOOP: a symlink stands where a directory should;
			// EXDEV: a mount point.
			return -1, "", pathErr("open directory", dir, err)
		}
		fd = next
	}
	return fd, name, nil
}

// Detached is an entry moved out of the way, under a temporary name in
// its directory: the caller looks at it, then discards or restores it.
type Detached struct {
	dir  int
	tmp  string
	name string
	rel  string
	// Info describes the entry.
	Info Info
	// Content is the entry's content when it is a regular file with
	// one link of at most the limit asked; nil otherwise.
	Content []byte
	// Err says why Content is nil for a regular file (ErrTooLarge...).
	Err error
}

// Discard removes the detached entry (never a directory: those are put
// back by Replace and refused by Detach).
func (d *Detached) Discard() error {
	defer unix.Close(d.dir)
	if err := unix.Unlinkat(d.dir, d.tmp, 0); err != nil && err != unix.ENOENT {
		return pathErr("remove", d.rel, err)
	}
	return unix.Fsync(d.dir)
}

// Restore puts the detached entry back at its name, unless something
// took the name meanwhile (fs.ErrExist: the entry stays detached and
// the caller may Discard it after keeping its content).
func (d *Detached) Restore() error {
	err := unix.Renameat2(d.dir, d.tmp, d.dir, d.name, unix.RENAME_NOREPLACE)
	if err != nil {
		return pathErr("restore", d.rel, err)
	}
	unix.Close(d.dir)
	return nil
}

// Leave gives up the handle and leaves the entry under its temporary
// name (TempPrefix...), for a person to look at.
func (d *Detached) Leave() { unix.Close(d.dir) }

// Busy reports whether someone holds the detached file open for
// writing: what they write next lands in it, not in the name it left, so
// the caller waits (and reads it again) before discarding it. A read
// lease is refused exactly while the file is open for writing.
func (d *Detached) Busy() bool {
	if d.Info.Mode&unix.S_IFMT != unix.S_IFREG {
		return false
	}
	fd, err := openat2(d.dir, d.tmp, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	return openForWrite(fd)
}

// openForWrite reports whether the file of fd (opened read-only) is open
// for writing anywhere: a read lease is refused exactly then. Where
// leases are not available, nobody is taken to be writing.
func openForWrite(fd int) bool {
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETLEASE, unix.F_RDLCK); err != nil {
		return err == unix.EAGAIN || err == unix.EBUSY
	}
	_, _ = unix.FcntlInt(uintptr(fd), unix.F_SETLEASE, unix.F_UNLCK)
	return false
}

// Reread reads the detached entry again (after its writer closed it).
func (d *Detached) Reread(limit int64) {
	d.Content, d.Err = nil, nil
	d.fill(limit)
}

// KeepAs gives the detached entry the name name in its directory
// (a last name, not a path), unless that name is taken (fs.ErrExist).
func (d *Detached) KeepAs(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return fmt.Errorf("keep %s as %q: %w", d.rel, name, unix.EINVAL)
	}
	if err := unix.Renameat2(d.dir, d.tmp, d.dir, name, unix.RENAME_NOREPLACE); err != nil {
		return pathErr("keep", d.rel, err)
	}
	unix.Close(d.dir)
	return nil
}

func tempName() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return TempPrefix + hex.EncodeToString(b[:])
}

// detachAt moves name in dir to a temporary name and reads it.
func detachAt(dir int, name, rel string, limit int64) (*Detached, error) {
	tmp := tempName()
	if err := unix.Renameat2(dir, name, dir, tmp, unix.RENAME_NOREPLACE); err != nil {
		return nil, pathErr("detach", rel, err)
	}
	d := &Detached{dir: dir, tmp: tmp, name: name, rel: rel}
	d.fill(limit)
	return d, nil
}

// fill describes the detached entry and reads it if it is a document.
func (d *Detached) fill(limit int64) {
	var st unix.Stat_t
	if err := unix.Fstatat(d.dir, d.tmp, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		d.Err = err
		return
	}
	d.Info = infoOf(&st)
	if !d.Info.Regular() {
		return
	}
	fd, err := openat2(d.dir, d.tmp, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		d.Err = err
		return
	}
	f := os.NewFile(uintptr(fd), d.rel)
	defer f.Close()
	d.Content, d.Info, d.Err = readJudged(f, d.rel, &st, limit)
}

// Detach moves rel out of the way and returns it (nil, fs.ErrNotExist
// when nothing is there). A directory is refused (ErrNotRegular).
func (r *Root) Detach(rel string, limit int64) (*Detached, error) {
	dir, name, err := r.parent(rel, false, 0)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		unix.Close(dir)
		return nil, pathErr("lstat", rel, err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		unix.Close(dir)
		return nil, fmt.Errorf("detach %s: a directory: %w", rel, ErrNotRegular)
	}
	d, err := detachAt(dir, name, rel, limit)
	if err != nil {
		unix.Close(dir)
		return nil, err
	}
	if d.Info.Dir() {
		// Swapped for a directory after the check: put it back.
		if err := d.Restore(); err != nil {
			unix.Close(dir)
		}
		return nil, fmt.Errorf("detach %s: a directory: %w", rel, ErrNotRegular)
	}
	return d, nil
}

// Replace puts data at rel (mode perm&0o777, owned by the folder's
// owner), creating the directories on the way (see dirPermFor), and returns
// what was there before, detached (nil when the name was free). The caller must Discard
// or Restore it. A directory at rel is left alone and refused
// (ErrNotRegular). Readers of rel see the old file or the new one, never
// a mix, and the new one survives a crash once Replace returns.
func (r *Root) Replace(rel string, data []byte, perm uint32, limit int64) (*Detached, error) {
	dir, name, err := r.parent(rel, true, dirPermFor(perm))
	if err != nil {
		return nil, err
	}
	keepDir := false
	defer func() {
		if !keepDir {
			unix.Close(dir)
		}
	}()
	// The one rule of internal/atomicfile, by last names inside the
	// directory found beneath the root.
	tmp, err := atomicfile.At(dir).NewTempPrefix(TempPrefix)
	if err != nil {
		return nil, pathErr("create", rel, err)
	}
	defer tmp.Discard()
	if err := writeAll(tmp, data, perm, r.uid, r.gid); err != nil {
		return nil, fmt.Errorf("write %s: %w", rel, err)
	}
	for try := 0; ; try++ {
		err = tmp.Exchange(name)
		if err == unix.ENOENT {
			// Nothing at rel: take the name, unless it was made
			// meanwhile (then exchange with it).
			err = tmp.InstallNew(name)
			if err == unix.EEXIST && try < 8 {
				continue
			}
			if err != nil && !tmp.Renamed() {
				return nil, pathErr("rename", rel, err)
			}
			if err != nil {
				return nil, pathErr("fsync directory of", rel, err)
			}
			return nil, nil
		}
		if err != nil && !tmp.Renamed() {
			return nil, pathErr("rename", rel, err)
		}
		break
	}
	fsyncErr := err
	// tmp now names the old entry.
	old := &Detached{dir: dir, tmp: tmp.Name(), name: name, rel: rel}
	old.fill(limit)
	if old.Info.Dir() {
		// Never replace a directory: swap back and drop the new file.
		if err := unix.Renameat2(dir, old.tmp, dir, name, unix.RENAME_EXCHANGE); err != nil {
			return nil, pathErr("restore directory", rel, err)
		}
		_ = unix.Unlinkat(dir, old.tmp, 0)
		return nil, fmt.Errorf("replace %s: a directory: %w", rel, ErrNotRegular)
	}
	if fsyncErr != nil {
		keepDir = true
		return old, pathErr("fsync directory of", rel, fsyncErr)
	}
	keepDir = true
	return old, nil
}

// dirPermFor is the mode Replace gives the directories it creates for a
// file of mode perm: never wider than that file needs, so that making a
// private file's directories does not expose their listing. The owner
// gets rwx; group and others get r-x where the file grants them anything,
// nothing otherwise; nobody else gets write.
func dirPermFor(perm uint32) uint32 {
	d := uint32(0o700)
	if perm&0o070 != 0 {
		d |= 0o050
	}
	if perm&0o007 != 0 {
		d |= 0o005
	}
	return d
}

func writeAll(t *atomicfile.Temp, data []byte, perm uint32, uid, gid int) error {
	if _, err := t.Write(data); err != nil {
		return err
	}
	// Best effort, as for directories: the file belongs to the folder's
	// owner, not to the daemon.
	_ = t.Chown(uid, gid)
	return t.Finish(os.FileMode(perm & 0o777))
}

func pathErr(op, rel string, err error) error {
	if err == unix.ELOOP || err == unix.EXDEV || err == unix.ENOTDIR {
		// A symlink or a mount point on the way: for us nothing is
		// there.
		err = fmt.Errorf("%w (%v)", fs.ErrNotExist, err)
	}
	if rel == "" {
		rel = "."
	}
	return &fs.PathError{Op: op, Path: rel, Err: err}
}

// ErrMountPoint says a name is the root of a mount (a file or directory
// bind-mounted over it, say): what it leads to lies on another mount,
// which no resolution beneath the folder may cross.
var ErrMountPoint = fmt.Errorf("a mount point: %w", unix.EXDEV)

// StatAt is fstatat(dirfd, name, AT_SYMLINK_NOFOLLOW), refusing a name
// that is a mount point (ErrMountPoint); name "" is dirfd itself. fstatat alone would describe
// the mounted entry: a file bind-mounted over a shown name would be
// judged as the file it hides, its content then served through a view
// that never resolved a path across the mount. One statx call: it costs
// what fstatat costs.
func StatAt(dirfd int, name string, st *unix.Stat_t) error {
	var sx unix.Statx_t
	flags := unix.AT_SYMLINK_NOFOLLOW | unix.AT_NO_AUTOMOUNT
	if name == "" {
		flags |= unix.AT_EMPTY_PATH
	}
	for {
		err := unix.Statx(dirfd, name, flags, unix.STATX_BASIC_STATS, &sx)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		break
	}
	if sx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 && sx.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0 {
		return ErrMountPoint
	}
	*st = unix.Stat_t{
		Dev:     unix.Mkdev(sx.Dev_major, sx.Dev_minor),
		Ino:     sx.Ino,
		Nlink:   uint64(sx.Nlink),
		Mode:    uint32(sx.Mode),
		Uid:     sx.Uid,
		Gid:     sx.Gid,
		Rdev:    unix.Mkdev(sx.Rdev_major, sx.Rdev_minor),
		Size:    int64(sx.Size),
		Blksize: int64(sx.Blksize),
		Blocks:  int64(sx.Blocks),
		Atim:    unix.Timespec{Sec: sx.Atime.Sec, Nsec: int64(sx.Atime.Nsec)},
		Mtim:    unix.Timespec{Sec: sx.Mtime.Sec, Nsec: int64(sx.Mtime.Nsec)},
		Ctim:    unix.Timespec{Sec: sx.Ctime.Sec, Nsec: int64(sx.Ctime.Nsec)},
	}
	return nil
}

// Empty removes what the directory fd holds, beneath fd: each
// subdirectory is opened with OpenBeneath (no symlink followed, no mount
// crossed) and emptied in turn, at most maxDepth levels below fd and
// maxEntries entries in each (0: no bound); a directory past either
// bound is an error. It stops at the first error; what it removed stays
// removed.
func Empty(fd, maxDepth, maxEntries int) error {
	return empty(fd, 0, maxDepth, maxEntries)
}

func empty(fd, depth, maxDepth, maxEntries int) error {
	if depth > maxDepth {
		return errors.New("directory nested too deep to empty")
	}
	dup, err := unix.Dup(fd)
	if err != nil {
		return err
	}
	d := os.NewFile(uintptr(dup), "empty")
	n := -1
	if maxEntries > 0 {
		n = maxEntries + 1
	}
	names, err := d.Readdirnames(n)
	d.Close()
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	if maxEntries > 0 && len(names) > maxEntries {
		return errors.New("too many entries in a directory to empty")
	}
	for _, name := range names {
		err := unix.Unlinkat(fd, name, 0)
		if !errors.Is(err, unix.EISDIR) {
			if err != nil && !errors.Is(err, unix.ENOENT) {
				return err
			}
			continue
		}
		sub, err := OpenBeneath(fd, name, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			return err
		}
		err = empty(sub, depth+1, maxDepth, maxEntries)
		unix.Close(sub)
		if err != nil {
			return err
		}
		if err := unix.Unlinkat(fd, name, unix.AT_REMOVEDIR); err != nil {
			return err
		}
	}
	return nil
}
