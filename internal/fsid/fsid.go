// Package fsid tells what a file or directory is on disk (its device and
// inode), whatever path, symlink, relative spelling or bind mount led to
// it. What a view must never show (the run directory, the ledger's
// directory, the grants' directory, mountpoints) is known by its ID, not
// by the spelling of the path the coordinator typed.
package fsid

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ID is an entry's identity: its device and inode number.
type ID struct {
	Dev, Ino uint64
}

// OfStat is the identity a stat describes.
func OfStat(st *unix.Stat_t) ID { return ID{Dev: st.Dev, Ino: st.Ino} }

func (id ID) String() string { return fmt.Sprintf("%d:%d", id.Dev, id.Ino) }

// Held is an entry held open by an O_PATH descriptor: while it is held,
// its inode number cannot be given to another file.
type Held struct {
	ID   ID
	Path string // as given, for messages
	fd   int
}

// Hold opens p (following symlinks: p is the coordinator's own spelling)
// with O_PATH and keeps the descriptor.
func Hold(p string) (*Held, error) {
	fd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "stat", Path: p, Err: err}
	}
	return &Held{ID: OfStat(&st), Path: p, fd: fd}, nil
}

// Fd is the held O_PATH descriptor.
func (h *Held) Fd() int { return h.fd }

// Close lets the entry go.
func (h *Held) Close() error {
	if h == nil || h.fd < 0 {
		return nil
	}
	err := unix.Close(h.fd)
	h.fd = -1
	return err
}

// maxDepth bounds the walk up from an entry to the root of its tree.
const maxDepth = 4096

// ErrNotFound means the entry's name could not be found in its parent
// (it was renamed away during the walk).
var ErrNotFound = errors.New("entry not found in its parent directory")

// Locate reports whether the directory held by target lies inside the
// directory held by folder (strictly below it), and if so its path
// relative to folder. It walks up from target through "..", so a symlink,
// a relative spelling or a bind mount of either side cannot hide that
// one is inside the other. Only directories can be located: a file's
// parent is not known from its descriptor.
func Locate(folder, target *Held) (rel string, inside bool, err error) {
	if folder.ID == target.ID {
		return "", true, nil
	}
	cur, err := unix.Openat(target.fd, ".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", false, fmt.Errorf("locate %s: %w", target.Path, err)
	}
	curID := target.ID
	var names []string
	defer func() { unix.Close(cur) }()
	for i := 0; i < maxDepth; i++ {
		parent, err := unix.Openat(cur, "..", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", false, fmt.Errorf("locate %s: open parent: %w", target.Path, err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(parent, &st); err != nil {
			unix.Close(parent)
			return "", false, fmt.Errorf("locate %s: %w", target.Path, err)
		}
		pid := OfStat(&st)
		if pid == curID {
			// The root of the tree: folder is not above target.
			unix.Close(parent)
			return "", false, nil
		}
		name, err := nameOf(parent, curID)
		if err != nil {
			unix.Close(parent)
			return "", false, fmt.Errorf("locate %s: %w", target.Path, err)
		}
		names = append(names, name)
		unix.Close(cur)
		cur, curID = parent, pid
		if pid == folder.ID {
			for l, r := 0, len(names)-1; l < r; l, r = l+1, r-1 {
				names[l], names[r] = names[r], names[l]
			}
			return path.Join(names...), true, nil
		}
	}
	return "", false, fmt.Errorf("locate %s: deeper than %d directories", target.Path, maxDepth)
}

// nameOf finds the name under which the directory dirfd holds id.
func nameOf(dirfd int, id ID) (string, error) {
	// The descriptor stays the caller's: read it through a duplicate.
	dup, err := unix.Dup(dirfd)
	if err != nil {
		return "", err
	}
	f := os.NewFile(uintptr(dup), "parent")
	defer f.Close()
	for {
		ents, err := f.ReadDir(256)
		for _, e := range ents {
			name := e.Name()
			if strings.Contains(name, "/") {
				continue
			}
			var st unix.Stat_t
			if unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
				continue
			}
			if OfStat(&st) == id {
				return name, nil
			}
		}
		if err != nil || len(ents) == 0 {
			return "", ErrNotFound
		}
	}
}

// Found is an entry found inside a folder.
type Found struct {
	Path string // as the coordinator gave it
	Rel  string // where it lies in the folder
}

// LocateIn finds which of paths (the run directory, the ledger,
// the grant file, their directories, mountpoints) lie inside folder, by
// identity: it walks up from each entry through "..", so another
// spelling of the same directory (a symlink, a relative path, "." or
// "..", a bind mount) is found as surely as the canonical one. A file is
// located through its directory. Paths that do not exist, and the folder
// itself, are skipped.
func LocateIn(folder string, paths []string) ([]Found, error) {
	fh, err := Hold(folder)
	if err != nil {
		return nil, fmt.Errorf("folder: %w", err)
	}
	defer fh.Close()
	var out []Found
	seen := map[string]bool{}
	for _, p := range paths {
		if p == "" {
			continue
		}
		rel, inside, err := locate(fh, p)
		if err != nil {
			return nil, err
		}
		if inside && !seen[rel] {
			seen[rel] = true
			out = append(out, Found{Path: p, Rel: rel})
		}
	}
	return out, nil
}

// locate places one path relative to the held folder.
func locate(folder *Held, p string) (string, bool, error) {
	h, err := Hold(p)
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ENOENT) {
		// Not made yet (a ledger opened after the check): where it
		// will be is where its directory is.
		return locateIn(folder, filepath.Dir(p), filepath.Base(p))
	}
	if err != nil {
		return "", false, err
	}
	defer h.Close()
	var st unix.Stat_t
	if err := unix.Fstat(h.Fd(), &st); err != nil {
		return "", false, fmt.Errorf("stat %s: %w", p, err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		rel, inside, err := Locate(folder, h)
		if err != nil {
			return "", false, err
		}
		// The folder itself (a ledger's directory when the ledger lies
		// directly in it) cannot be hidden: what lies in it is, by name.
		return rel, inside && rel != "", nil
	}
	// A file: where its directory lies, and its name there. p names it
	// with the file's own name last, whatever led to the directory.
	return locateIn(folder, filepath.Dir(p), filepath.Base(p))
}

// locateIn places the name base of the directory dir relative to the
// held folder; a directory that does not exist places nothing.
func locateIn(folder *Held, dir, base string) (string, bool, error) {
	d, err := Hold(dir)
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ENOENT) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	defer d.Close()
	rel, inside, err := Locate(folder, d)
	if err != nil || !inside {
		return "", false, err
	}
	return path.Join(rel, base), true, nil
}

// Holds reports whether the directory dir is p or lies above it, by
// identity (see Locate): a directory that holds a collaboration folder
// cannot be concealed from that folder's views without concealing the
// folder. A dir or p that does not exist holds nothing.
func Holds(dir, p string) (bool, error) {
	d, err := Hold(dir)
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer d.Close()
	t, err := Hold(p)
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer t.Close()
	_, inside, err := Locate(d, t)
	return inside, err
}
