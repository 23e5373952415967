// Package atomicfile replaces files so that a reader, or the file after a
// crash, holds either the old content or the new, never a mix: the one
// durability rule of acpfs for files it rewrites whole.
//
// The rule: write a temporary file in the same directory (named
// ".<name>.tmp-<random>", so that loaders and views skip it), give it its
// mode, fsync it, rename it over the name, fsync the directory.
//
// WriteFile and Write apply the whole rule. Temp exposes its steps for
// writers that must do more between them: choose the name from the
// content (a content-addressed copy), or rename only under their own
// lock and after checking that nobody else replaced the file meanwhile.
package atomicfile

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
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

// WriteCache replaces path with data, with mode perm, by the rule without
// its fsyncs: for files whose loss after a crash costs only time (a
// cache that is rebuilt), where an fsync would cost more than the cache
// saves. Readers still see the old content or the new, never a mix.
func WriteCache(path string, data []byte, perm os.FileMode) error {
	t, err := NewTemp(filepath.Dir(path), filepath.Base(path))
	if err != nil {
		return fmt.Errorf("replace %s: %w", path, err)
	}
	defer t.Discard()
	t.noSync = true
	if _, err := t.Write(data); err != nil {
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
	f       *os.File
	dir     string
	noSync  bool
	renamed bool
}

// NewTemp creates the temporary file for a replacement of dir/name
// (O_EXCL, mode 0600 until Finish).
func NewTemp(dir, name string) (*Temp, error) {
	dir = filepath.Clean(dir) // "" is ".", not the system's temporary directory
	f, err := os.CreateTemp(dir, TempPrefix(name)+"*")
	if err != nil {
		return nil, err
	}
	return &Temp{f: f, dir: dir}, nil
}

// Name returns the temporary file's path.
func (t *Temp) Name() string { return t.f.Name() }

// Write appends p to the temporary file.
func (t *Temp) Write(p []byte) (int, error) { return t.f.Write(p) }

// Finish ends the writing: the file gets mode perm, is fsynced and
// closed. It is then complete on disk, and renaming it is atomic and
// durable.
func (t *Temp) Finish(perm os.FileMode) error {
	if err := t.f.Chmod(perm); err != nil {
		_ = t.f.Close()
		return err
	}
	if !t.noSync {
		if err := t.f.Sync(); err != nil {
			_ = t.f.Close()
			return fmt.Errorf("fsync: %w", err)
		}
	}
	return t.f.Close()
}

// Install renames the finished file over path, which must be in the
// same directory, and fsyncs the directory.
func (t *Temp) Install(path string) error {
	if err := t.Rename(path); err != nil {
		return fmt.Errorf("replace %s: %w", path, err)
	}
	if t.noSync {
		return nil
	}
	return SyncDir(t.dir)
}

// Rename is Install without the fsync of the directory, for a caller
// that renames under a lock: it calls SyncDir once the lock is released.
// The error is the rename's (fs.ErrNotExist when the temporary file was
// removed meanwhile).
func (t *Temp) Rename(path string) error {
	if filepath.Dir(path) != t.dir {
		return fmt.Errorf("%s is not in %s, where the temporary file is", path, t.dir)
	}
	if err := os.Rename(t.f.Name(), path); err != nil {
		return err
	}
	t.renamed = true
	return nil
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
	_ = os.Remove(t.f.Name())
}

// SyncDir fsyncs a directory, so that a name just made or replaced in it
// survives a crash.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}
