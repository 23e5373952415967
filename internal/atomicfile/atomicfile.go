// Package atomicfile replaces files so that a reader, or the file after a
// crash, holds either the old content or the new, never a mix: the one
// atomic-write rule of acpfs for files it rewrites whole. Every writer
// that installs a file by temporary file and rename goes through it.
//
// The rule, and its one durability level: write a temporary file in the
// same directory (named ".<name>.tmp-<random>", so that loaders and views
// skip it), give it its mode, fsync it (the data is on disk before any
// name points at it), rename it over the name, fsync the directory (the
// name survives a crash once the call returns).
//
// WriteFile and Write apply the whole rule to a path. Dir applies it
// inside a directory held open by descriptor, by last names only, for
// writers that must never resolve a path someone else may change (the
// ledger's directory, a folder's directories). Temp exposes the steps
// for writers that must do more between them: choose the name from the
// content (a content-addressed copy), rename only under their own lock
// after checking that nobody replaced the file meanwhile, or exchange the
// new file with the old entry (renameat2 RENAME_EXCHANGE) to look at
// what it replaced.
//
// There is one durability level: every file is written by the whole
// rule. A cache whose loss would only cost time is written so too; the
// fsyncs cost less than two rules would.
package atomicfile

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// TempPrefix is how the temporary file for name starts.
func TempPrefix(name string) string { return "." + filepath.Base(name) + ".tmp-" }

// WriteFile replaces path with data, with mode perm.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	return Write(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// Write replaces path with what fill writes, with mode perm. Nothing
// replaces path when fill fails.
func Write(path string, perm os.FileMode, fill func(io.Writer) error) error {
	t, err := NewTemp(filepath.Dir(path), filepath.Base(path))
	if err != nil {
		return fmt.Errorf("replace %s: %w", path, err)
	}
	defer t.Discard()
	if err := fill(t); err != nil {
		return fmt.Errorf("replace %s: %w", path, err)
	}
	if err := t.Finish(perm); err != nil {
		return fmt.Errorf("replace %s: %w", path, err)
	}
	return t.Install(path)
}

// PermOf returns the permission bits of the file at path (not following
// a symbolic link), or def when there is none: a rewrite keeps the mode
// its file was given.
func PermOf(path string, def os.FileMode) os.FileMode {
	if fi, err := os.Lstat(path); err == nil {
		return fi.Mode().Perm()
	}
	return def
}

// Temp is a replacement being written: a temporary file in the directory
// of the file it will replace. Write to it, Finish it, then Install it
// (or Rename it and SyncDir the directory). Discard, safe to defer,
// removes it unless it was renamed.
type Temp struct {
	f   *os.File
	dir string // the directory's path; "" for a Temp made by a Dir
	// dirfd is the directory's descriptor for a Temp made by a Dir,
	// which acts by last names only; -1 otherwise.
	dirfd   int
	tmp     string // the temporary file's last name (Dir) or path
	renamed bool
}

// NewTemp creates the temporary file for a replacement of dir/name
// (O_EXCL, mode 0600 until Finish).
func NewTemp(dir, name string) (*Temp, error) {
	dir = filepath.Clean(dir) // "" is ".", not the system's temporary directory
	prefix := filepath.Join(dir, TempPrefix(name))
	for try := 0; ; try++ {
		tmp := prefix + randomSuffix()
		f, err := OpenFile(tmp, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW, 0o600)
		if errors.Is(err, fs.ErrExist) && try < 100 {
			continue
		}
		if err != nil {
			return nil, err
		}
		return &Temp{f: f, dir: dir, dirfd: -1, tmp: tmp}, nil
	}
}

// OpenFile is os.OpenFile for regular files and directories, always
// close-on-exec: os.OpenFile tries (and fails) to register them with the
// poller, four syscalls more per open, which the writers of every
// append and every replaced file pay.
func OpenFile(path string, flags int, perm uint32) (*os.File, error) {
	for {
		fd, err := unix.Open(path, flags|unix.O_CLOEXEC, perm)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "open", Path: path, Err: err}
		}
		return os.NewFile(uintptr(fd), path), nil
	}
}

// Name returns the temporary file's path (its last name for a Temp made
// by a Dir).
func (t *Temp) Name() string { return t.tmp }

// Write appends p to the temporary file.
func (t *Temp) Write(p []byte) (int, error) { return t.f.Write(p) }

// Chown gives the temporary file an owner before it is installed.
func (t *Temp) Chown(uid, gid int) error { return t.f.Chown(uid, gid) }

// File is the temporary file itself, for a caller that keeps it open
// after InstallOpen.
func (t *Temp) File() *os.File { return t.f }

// InstallOpen is Finish and Install for a file that stays open: its data
// is fsynced, it is renamed over name in a Dir's directory, and the
// directory is fsynced. The file is the caller's from then on (Discard
// no longer closes it); on an error before the rename it is still the
// Temp's, which Discard closes and removes.
func (t *Temp) InstallOpen(name string) error {
	if t.dirfd < 0 {
		return errors.New("install: the temporary file was not made by a Dir")
	}
	if err := t.f.Sync(); err != nil {
		return fmt.Errorf("replace %s: fsync: %w", name, err)
	}
	if err := t.Rename(name); err != nil {
		return fmt.Errorf("replace %s: %w", name, err)
	}
	return t.syncDir()
}

// Renamed reports whether the file was renamed into place, for a caller
// of InstallOpen whose error came after the rename (the directory's
// fsync): the file is installed, and the caller's.
func (t *Temp) Renamed() bool { return t.renamed }

// Finish ends the writing: the file gets mode perm, is fsynced and
// closed. It is then complete on disk, and renaming it is atomic and
// durable.
func (t *Temp) Finish(perm os.FileMode) error {
	if err := t.f.Chmod(perm); err != nil {
		_ = t.f.Close()
		return err
	}
	if err := t.f.Sync(); err != nil {
		_ = t.f.Close()
		return fmt.Errorf("fsync: %w", err)
	}
	return t.f.Close()
}

// Install renames the finished file over path, which must be in the
// same directory (a last name for a Temp made by a Dir), and fsyncs the
// directory.
func (t *Temp) Install(path string) error {
	if err := t.Rename(path); err != nil {
		return fmt.Errorf("replace %s: %w", path, err)
	}
	return t.syncDir()
}

// Rename is Install without the fsync of the directory, for a caller
// that renames under a lock: it calls SyncDir once the lock is released.
// The error is the rename's (fs.ErrNotExist when the temporary file was
// removed meanwhile).
func (t *Temp) Rename(path string) error {
	if t.dirfd >= 0 {
		if err := lastName(path); err != nil {
			return err
		}
		if err := unix.Renameat(t.dirfd, t.tmp, t.dirfd, path); err != nil {
			return &os.LinkError{Op: "rename", Old: t.tmp, New: path, Err: err}
		}
		t.renamed = true
		return nil
	}
	if filepath.Dir(path) != t.dir {
		return fmt.Errorf("%s is not in %s, where the temporary file is", path, t.dir)
	}
	if err := os.Rename(t.f.Name(), path); err != nil {
		return err
	}
	t.renamed = true
	return nil
}

// Exchange swaps the finished file with the entry at name in a Dir's
// directory (renameat2 RENAME_EXCHANGE; ENOENT when nothing is there)
// and fsyncs the directory: name is the new file, and the temporary
// name (Name) is now the old entry, which Discard no longer removes. The
// caller looks at it and removes, restores or keeps it. The fsync of the
// directory is done even when the caller swaps back: it decides then.
func (t *Temp) Exchange(name string) error {
	return t.renameat2(name, unix.RENAME_EXCHANGE)
}

// InstallNew is Install into a Dir's directory when name is free: it
// fails (EEXIST) rather than replace an entry made meanwhile.
func (t *Temp) InstallNew(name string) error {
	return t.renameat2(name, unix.RENAME_NOREPLACE)
}

func (t *Temp) renameat2(name string, flags uint) error {
	if t.dirfd < 0 {
		return errors.New("exchange: the temporary file was not made by a Dir")
	}
	if err := lastName(name); err != nil {
		return err
	}
	if err := unix.Renameat2(t.dirfd, t.tmp, t.dirfd, name, flags); err != nil {
		return err
	}
	t.renamed = true
	return t.syncDir()
}

func (t *Temp) syncDir() error {
	if t.dirfd >= 0 {
		return Dir{fd: t.dirfd}.Sync()
	}
	return SyncDir(t.dir)
}

// Discard removes the temporary file unless it was renamed. It is safe
// to call more than once and after Finish.
func (t *Temp) Discard() {
	if t.renamed {
		return
	}
	// Errors only say it was closed or removed already; a leftover
	// would be skipped by every loader for its name.
	_ = t.f.Close()
	if t.dirfd >= 0 {
		_ = unix.Unlinkat(t.dirfd, t.tmp, 0)
		return
	}
	_ = os.Remove(t.tmp)
}

// SyncDir fsyncs a directory, so that a name just made or replaced in it
// survives a crash.
func SyncDir(dir string) error {
	d, err := OpenFile(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}

// Dir is a directory held open by descriptor (O_PATH is enough), in which
// files are replaced by the same rule, by last names only: nothing
// above the directory is resolved again, and a name is never followed
// when it is a symlink (O_NOFOLLOW, O_EXCL). The descriptor stays the
// caller's.
type Dir struct {
	fd int
}

// At returns the Dir of the open directory fd.
func At(fd int) Dir { return Dir{fd: fd} }

// WriteFile replaces name in d with data, with mode perm. A directory at
// name is never replaced (the rename fails); a symlink at name is
// replaced, never followed.
func (d Dir) WriteFile(name string, data []byte, perm os.FileMode) error {
	return d.write(name, data, perm, (*Temp).Install)
}

// WriteFileNew is WriteFile for a name that must be free: it fails with
// an error that matches fs.ErrExist when something is there already, or
// appears meanwhile (a writer starting at the same moment), and never
// replaces it.
func (d Dir) WriteFileNew(name string, data []byte, perm os.FileMode) error {
	return d.write(name, data, perm, (*Temp).InstallNew)
}

func (d Dir) write(name string, data []byte, perm os.FileMode, install func(*Temp, string) error) error {
	t, err := d.NewTemp(name)
	if err != nil {
		return fmt.Errorf("replace %s: %w", name, err)
	}
	defer t.Discard()
	if _, err := t.Write(data); err != nil {
		return fmt.Errorf("replace %s: %w", name, err)
	}
	if err := t.Finish(perm); err != nil {
		return fmt.Errorf("replace %s: %w", name, err)
	}
	if err := install(t, name); err != nil {
		return fmt.Errorf("replace %s: %w", name, err)
	}
	return nil
}

// NewTemp creates the temporary file for a replacement of name in d
// (".<name>.tmp-<random>", O_EXCL, mode 0600 until Finish).
func (d Dir) NewTemp(name string) (*Temp, error) {
	if err := lastName(name); err != nil {
		return nil, err
	}
	return d.NewTempPrefix(TempPrefix(name))
}

// NewTempPrefix is NewTemp with a temporary name that begins with prefix
// instead, for a caller whose watchers skip names of their own.
func (d Dir) NewTempPrefix(prefix string) (*Temp, error) {
	return d.newTemp(prefix, unix.O_WRONLY)
}

// NewTempOpen is NewTemp for a file its caller keeps open after it is
// installed (a lock file, a ledger's next segment), opened with access
// (unix.O_RDWR, with unix.O_APPEND say): write to File, then InstallOpen.
func (d Dir) NewTempOpen(name string, access int) (*Temp, error) {
	if err := lastName(name); err != nil {
		return nil, err
	}
	return d.newTemp(TempPrefix(name), access)
}

// randomSuffix ends a temporary name; a variable so that a test can plant
// a symlink at the name it will draw.
var randomSuffix = func() string {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	return hex.EncodeToString(rnd[:])
}

func (d Dir) newTemp(prefix string, access int) (*Temp, error) {
	for try := 0; ; try++ {
		tmp := prefix + randomSuffix()
		// O_EXCL|O_NOFOLLOW: a name planted in the directory, a
		// symlink above all, is never opened; another one is drawn.
		fd, err := unix.Openat(d.fd, tmp, access|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err == unix.EEXIST && try < 8 {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "create", Path: tmp, Err: err}
		}
		return &Temp{f: os.NewFile(uintptr(fd), tmp), dirfd: d.fd, tmp: tmp}, nil
	}
}

// Sync fsyncs the directory. Its descriptor may be O_PATH, which fsync
// refuses, so the directory is opened for it through the descriptor.
func (d Dir) Sync() error {
	fd, err := unix.Openat(d.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("fsync directory: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Fsync(fd); err != nil {
		return fmt.Errorf("fsync directory: %w", err)
	}
	return nil
}

// lastName refuses anything but a name in the directory itself.
func lastName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return fmt.Errorf("%q is not a name in the directory: %w", name, unix.EINVAL)
	}
	return nil
}
