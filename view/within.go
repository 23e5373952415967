package view

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/grants"
)

// place is where the collaboration folder lies in the view. A view is
// rooted at the folder itself (within ""), or, for external deliverables,
// at the repository that holds it (within "collab", the folder's path
// below the view's root).
//
// Everything a view decides and records speaks of folder-relative names,
// as the grant does: "" is the folder, "events.jsonl" its log, and names
// with leading ".." segments lie beside it ("../docs/report.md"); a name
// made only of ".." segments is a directory above the folder. Only the
// backing folder's descriptors and the kernel's inode tree are reached by
// the view path, relative to the view's root, and place turns one into
// the other.
type place struct {
	within string
	// folder is the folder's absolute path, symbolic links resolved, as
	// the protocol names an external deliverable outside it (see
	// keyName).
	folder string
	// up is the view root's name: as many ".." segments as within has
	// names ("" when the view is rooted at the folder).
	up string
}

// placeOf checks Options.Within and makes its place.
func placeOf(within string) (place, error) {
	if within == "" {
		return place{}, nil
	}
	clean := path.Clean(within)
	if clean != within || strings.HasPrefix(within, "/") || clean == "." || isUp(clean) || strings.Contains(clean, "/../") {
		return place{}, fmt.Errorf("the folder's path in the view %q must be clean, relative and below the view's root", within)
	}
	return newPlace(within), nil
}

// dropAbove keeps the folder and each directory above it from being
// concealed by identity (a run directory's ledger may lie in one of
// them): the view conceals their entries by name instead. It returns the
// folder's path, as the kernel names its directory.
func dropAbove(b *backing, c *concealed) (string, error) {
	var folder string
	for name := ""; ; name = b.at.parentName(name) {
		fd, err := b.open(name, unix.O_PATH|unix.O_DIRECTORY, 0)
		if err != nil {
			return "", fmt.Errorf("open the folder's directory %q in the view: %w", name, err)
		}
		var st unix.Stat_t
		err = unix.Fstat(fd, &st)
		if err == nil && name == "" {
			folder, err = os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
		}
		unix.Close(fd)
		if err != nil {
			return "", fmt.Errorf("the folder's directory %q in the view: %w", name, err)
		}
		c.drop(&st)
		if name == b.at.up {
			return folder, nil
		}
	}
}

func newPlace(within string) place {
	if within == "" {
		return place{}
	}
	return place{within: within, up: strings.TrimSuffix(strings.Repeat("../", strings.Count(within, "/")+1), "/")}
}

// nameOf is the folder-relative name of the view path vp.
func (p place) nameOf(vp string) string {
	if p.within == "" {
		return vp
	}
	if vp == p.within {
		return ""
	}
	if len(vp) > len(p.within) && vp[len(p.within)] == '/' && strings.HasPrefix(vp, p.within) {
		return vp[len(p.within)+1:]
	}
	// Take off the names vp shares with the folder's path; each name of
	// that path left over is one ".." up.
	w, v := p.within, vp
	for v != "" {
		wn, wrest, _ := strings.Cut(w, "/")
		vn, vrest, _ := strings.Cut(v, "/")
		if wn != vn {
			break
		}
		w, v = wrest, vrest
	}
	ups := strings.Repeat("../", strings.Count(w, "/")+1)
	if v == "" {
		return strings.TrimSuffix(ups, "/")
	}
	return ups + v
}

// keyName is the name of a deliverable as protocol.Snapshot.Frozen keys
// it: folder-relative already, or an absolute path, which in a view rooted
// at the repository lies beside the folder. An absolute path the view
// does not reach is returned as it is.
func (p place) keyName(key string) string {
	if p.within == "" || !strings.HasPrefix(key, "/") || p.folder == "" {
		return key
	}
	rel, err := filepath.Rel(p.folder, key)
	if err != nil {
		return key
	}
	name := filepath.ToSlash(rel)
	if _, ok := p.viewPath(name); !ok || strings.Contains(strings.TrimLeft(name, "./"), "..") {
		return key
	}
	return name
}

// viewPath is the view path of a folder-relative name, and false for a
// name above the view's root (which no view path leads to).
func (p place) viewPath(name string) (string, bool) {
	if p.within == "" {
		if isUp(name) {
			return "", false
		}
		return name, true
	}
	ups, rest := grants.SplitUp(name)
	base := p.within
	for ; ups > 0; ups-- {
		if base == "" {
			return "", false
		}
		if i := strings.LastIndexByte(base, '/'); i >= 0 {
			base = base[:i]
		} else {
			base = ""
		}
	}
	if rest == "" {
		return base, true
	}
	return join(base, rest), true
}

// join names the entry name in the directory named dir. Below an
// ancestor of the folder the entry may be the next directory towards it,
// or the folder itself, which have shorter names.
func (p place) join(dir, name string) string {
	if p.within == "" || !isOnlyUp(dir) {
		return join(dir, name)
	}
	vp, ok := p.viewPath(dir)
	if !ok {
		return join(dir, name)
	}
	return p.nameOf(join(vp, name))
}

// aboveFolder reports whether name is the folder itself or a directory
// above it: what the view must never let be moved, replaced or removed,
// since every name of the protocol is reached through it.
func aboveFolder(name string) bool { return name == "" || isOnlyUp(name) }

// isUp reports whether name starts with a ".." segment.
func isUp(name string) bool {
	return len(name) >= 2 && name[0] == '.' && name[1] == '.' && (len(name) == 2 || name[2] == '/')
}

// isOnlyUp reports whether name is made only of ".." segments.
func isOnlyUp(name string) bool {
	if !isUp(name) {
		return false
	}
	ups, rest := grants.SplitUp(name)
	return ups > 0 && rest == ""
}

// parentName is the name of the directory holding name ("" for a name in
// the folder, and the next ".." up for the folder itself).
func (p place) parentName(name string) string {
	vp, ok := p.viewPath(name)
	if !ok || vp == "" {
		return name
	}
	d := path.Dir(vp)
	if d == "." {
		d = ""
	}
	return p.nameOf(d)
}
