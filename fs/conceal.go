package fs

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/internal/fsid"
)

// whyConcealed is the ledger's reason for an entry known by identity.
const whyConcealed = "the coordinator's own (run directory, ledger, grants or a mountpoint)"

// concealed is what no view ever shows, known by what it is on disk
// (device and inode) rather than by a path: a symlink, a relative path,
// a bind mount or a rename cannot make it visible under another name.
// Each entry is held by an O_PATH descriptor so that its inode number
// cannot pass to another file while the view serves.
type concealed struct {
	held []*fsid.Held
}

// holdConcealed holds every path that exists. A path that does not (a
// ledger directory not made yet) cannot be inside the folder now; its
// spelling still hides it through the matcher.
func holdConcealed(paths []string) (*concealed, error) {
	c := &concealed{}
	for _, p := range paths {
		if p == "" {
			continue
		}
		h, err := fsid.Hold(p)
		if err != nil {
			if errors.Is(err, unix.ENOENT) || errors.Is(err, os.ErrNotExist) {
				continue
			}
			c.close()
			return nil, fmt.Errorf("hold %s: %w", p, err)
		}
		c.held = append(c.held, h)
	}
	return c, nil
}

// has reports whether st is one of the concealed entries.
func (c *concealed) has(st *unix.Stat_t) bool {
	if c == nil {
		return false
	}
	id := fsid.OfStat(st)
	for _, h := range c.held {
		if h.ID == id {
			return true
		}
	}
	return false
}

// drop lets go of the entry st, if held.
func (c *concealed) drop(st *unix.Stat_t) {
	id := fsid.OfStat(st)
	kept := c.held[:0]
	for _, h := range c.held {
		if h.ID == id {
			h.Close()
			continue
		}
		kept = append(kept, h)
	}
	c.held = kept
}

func (c *concealed) close() {
	if c == nil {
		return
	}
	for _, h := range c.held {
		h.Close()
	}
	c.held = nil
}
