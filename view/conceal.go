package view

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/grants"
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
	// shared is what changes while the view serves (see
	// Options.Shared); the view's own staging directories are added to
	// it.
	shared    *fsid.Set
	ownShared bool

	// marks remember what directories were found to be (a run or ledger
	// directory, a git directory), by identity and change time: a mark
	// made or removed in a directory changes its ctime, which makes it
	// looked at again.
	mu    sync.Mutex
	marks [markKinds]map[markKey]bool
	above map[aboveKey]struct{} // see hidesAbove
}

// The kinds of mark a directory is cached for.
const (
	markRunDir = iota // grants.IsCoordinatorDir
	markGit           // grants.IsGitDir
	markKinds
)

// whyGit is the ledger's reason for a git directory the grant does not
// name.
const whyGit = "a git repository's directory (every committed file, past and present), which the grant does not name"

// gitDir reports whether the directory name in dirfd, of stat st, is a
// git repository's directory under another name than .git.
func (c *concealed) gitDir(dirfd int, name string, st *unix.Stat_t) bool {
	return c.cached(markGit, st, func() bool { return grants.IsGitDirAt(dirfd, name) })
}

// coordinatorDir reports whether the directory name in dirfd, of stat
// st, is someone's run directory or ledger's directory: no view shows
// one, whoever's it is (another coordinator's run directory in the
// folder holds its ledger key and its grants).
func (c *concealed) coordinatorDir(dirfd int, name string, st *unix.Stat_t) bool {
	return c.cached(markRunDir, st, func() bool { return grants.IsCoordinatorDirAt(dirfd, name) })
}

type markKey struct {
	id    fsid.ID
	ctime unix.Timespec
}

// maxMarked bounds the memory of each cache; past it, it starts afresh.
const maxMarked = 1 << 14

// cached answers whether a directory of stat st is of the kind of mark
// from the cache, asking compute when it is not known. A nil
// concealed (a policy test) always asks.
func (c *concealed) cached(kind int, st *unix.Stat_t, compute func() bool) bool {
	if c == nil {
		return compute()
	}
	k := markKey{id: fsid.OfStat(st), ctime: st.Ctim}
	c.mu.Lock()
	v, ok := c.marks[kind][k]
	c.mu.Unlock()
	if ok {
		return v
	}
	v = compute()
	c.mu.Lock()
	if c.marks[kind] == nil || len(c.marks[kind]) >= maxMarked {
		c.marks[kind] = make(map[markKey]bool)
	}
	c.marks[kind][k] = v
	c.mu.Unlock()
	return v
}

// hidesDir reports whether the directory held by fd is concealed (held,
// marked as a run or ledger directory, or with git a git directory). The
// checkpoint asks it of the parent of every name it resolves below the
// root: the kernel may have kept a directory's entry from before it was
// marked, and must not reach its entries through it.
func (c *concealed) hidesDir(fd int, git bool) bool {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil {
		return true
	}
	return c.hidesDirOf(fd, &st, git)
}

// hidesDirOf is hidesDir of a directory whose stat is known.
func (c *concealed) hidesDirOf(fd int, st *unix.Stat_t, git bool) bool {
	if c.has(st) || c.cached(markRunDir, st, func() bool { return grants.IsCoordinatorDir(fd) }) {
		return true
	}
	return git && c.cached(markGit, st, func() bool { return grants.IsGitDir(fd) })
}

// holdConcealed holds every path that exists. A path that does not (a
// ledger directory not made yet) cannot be inside the folder now; its
// spelling still hides it through the matcher.
func holdConcealed(paths []string, shared *fsid.Set) (*concealed, error) {
	c := &concealed{shared: shared}
	if shared == nil {
		c.shared, c.ownShared = fsid.NewSet(), true
	}
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
	return c.shared.Has(st)
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
	if c.ownShared {
		c.shared.Close()
	}
}

// holdStaging adds a staging directory, held by fd, to what the view
// conceals by identity: renamed on the backing side, it keeps no other
// view's private files from being shown. A failure leaves it concealed
// by its reserved name only.
func (c *concealed) holdStaging(fd int) {
	if c == nil {
		return
	}
	if err := c.shared.HoldDup(fd); err != nil {
		level := slog.LevelDebug
		if errors.Is(err, fsid.ErrSetFull) {
			// Other views would show this view's private files once
			// the directory was renamed on the backing side.
			level = slog.LevelWarn
		}
		slog.Log(context.Background(), level, "hold the staging directory", "err", err)
	}
}

// maxRenameScan bounds how many entries holdsConcealed looks at: past
// it, a directory counts as holding something the view does not show.
const maxRenameScan = 4096

// holdsConcealed reports why the directory t judged holds, at any depth,
// an entry the view does not show ("" for none). The policy refuses to
// rename a directory the grant does not show whole; this is for one it
// does, where a concealed entry may still lie (a run directory, a file
// with several names, a symlink leading out).
func (f *View) holdsConcealed(t *target) string {
	fd, err := unix.Openat(t.d.fd, t.d.name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return "it cannot be read"
	}
	defer unix.Close(fd)
	budget := maxRenameScan
	return f.scanConcealed(fd, t.rel, &budget, 0)
}

func (f *View) scanConcealed(fd int, rel string, budget *int, depth int) string {
	if depth > 64 {
		return "it is too deep to check"
	}
	names, err := readNames(fd)
	if err != nil {
		return "it cannot be read"
	}
	m := f.matcher()
	for _, name := range names {
		if *budget--; *budget < 0 {
			return fmt.Sprintf("it holds more than %d entries to check", maxRenameScan)
		}
		crel := f.loc.join(rel, name)
		var st unix.Stat_t
		if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			continue
		}
		e := classify(m, f.conceal, f.loc, fd, name, crel, &st)
		if e.kind == kindConcealed {
			return e.why
		}
		if !e.shownBy(m, crel) {
			return "hidden by grant"
		}
		if e.kind == kindDir {
			sub, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return "it cannot be read"
			}
			why := f.scanConcealed(sub, crel, budget, depth+1)
			unix.Close(sub)
			if why != "" {
				return why
			}
		}
	}
	return ""
}

// maxAbove bounds the directories whose ancestry hidesAbove remembers;
// past it, it starts afresh.
const maxAbove = 1 << 14

// maxDepth bounds the walk up from a directory to the folder root.
const maxDepth = 256

// aboveKey is a directory whose ancestors were found shown, at a
// placeStamp (gen), with git directories hidden or not (git): a git
// directory above it hides it under one setting only.
type aboveKey struct {
	id  fsid.ID
	gen uint64
	git bool
}

// hidesAbove reports whether a directory above the one held by fd (of
// stat dst), up to the view's root (root), is concealed: hidesDir looks
// at the parent of a name only, and the kernel may keep a directory of
// the view (a working directory, say) whose path came to lead, after a
// rename on the backing side, through a run directory or another
// concealed entry. A directory that is no longer below the root counts
// as hidden. With remember (a watcher vouches for the folder), what was
// found shown is kept per directory and gen (View.placeStamp): a
// directory's ancestry changes only by a directory's rename and what the
// directories above it are only by their marks, each of which moves gen;
// the walk costs a few system calls per level.
func (c *concealed) hidesAbove(fd int, dst *unix.Stat_t, root fsid.ID, git bool, gen uint64, remember bool) bool {
	k := aboveKey{id: fsid.OfStat(dst), gen: gen, git: git}
	if k.id == root {
		return false
	}
	// A nil concealed (a policy test) hides nothing by identity and
	// remembers nothing, as everywhere else.
	remember = remember && c != nil
	if remember && c.remembered(k) {
		return false
	}
	if c.walkUpHides(fd, root, git) {
		return true
	}
	if remember {
		c.mu.Lock()
		if c.above == nil || len(c.above) >= maxAbove {
			c.above = make(map[aboveKey]struct{})
		}
		c.above[k] = struct{}{}
		c.mu.Unlock()
	}
	return false
}

// remembered reports whether hidesAbove found the ancestors of k shown.
func (c *concealed) remembered(k aboveKey) bool {
	c.mu.Lock()
	_, ok := c.above[k]
	c.mu.Unlock()
	return ok
}

// walkUpHides is hidesAbove's walk from the parent of the directory
// held by fd up to root.
func (c *concealed) walkUpHides(fd int, root fsid.ID, git bool) bool {
	cur, err := unix.Openat(fd, "..", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return true
	}
	defer func() { unix.Close(cur) }()
	var st unix.Stat_t
	for depth := 0; ; depth++ {
		if unix.Fstat(cur, &st) != nil || depth > maxDepth {
			return true
		}
		if fsid.OfStat(&st) == root {
			return false
		}
		if c.hidesDirOf(cur, &st, git) {
			return true
		}
		up, err := unix.Openat(cur, "..", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return true
		}
		var ust unix.Stat_t
		if unix.Fstat(up, &ust) != nil || fsid.OfStat(&ust) == fsid.OfStat(&st) {
			// The top of the file system: the directory left the
			// folder after it was resolved.
			unix.Close(up)
			return true
		}
		unix.Close(cur)
		cur = up
	}
}
