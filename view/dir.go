package view

import (
	"context"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/ledger"
)

// dirEntry is one visible entry of a directory listing.
type dirEntry struct {
	name    string
	st      unix.Stat_t
	handoff bool // shown as a handed-over snapshot
}

// visibleEntries lists the directory rel as the view shows it. Every
// entry is stat'ed relative to the directory descriptor (never followed)
// and judged like a lookup, so a listing shows exactly the names a
// lookup would find.
func (f *View) visibleEntries(rel string) ([]dirEntry, error) {
	return f.visibleEntriesUnder(f.gv.Load(), rel)
}

// visibleEntriesUnder is visibleEntries judged under the grant view v.
func (f *View) visibleEntriesUnder(v *grantView, rel string) ([]dirEntry, error) {
	fd, err := f.b.open(rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	names, err := readNames(fd)
	if err != nil {
		return nil, err
	}
	var out []dirEntry
	for _, name := range names {
		if rel == "" && (name == ControlDir || name == StagingDir) {
			// A backing .acpfs is shadowed by the control directory; the
			// staging directory is never shown.
			continue
		}
		crel := f.loc.join(rel, name)
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			continue // gone since getdents
		}
		if _, ok := v.handoffs[crel]; ok {
			out = append(out, dirEntry{name: name, st: st, handoff: true})
			continue
		}
		e := classify(v.matcher, f.conceal, f.loc, fd, name, crel, &st)
		if e.shownBy(v.matcher, crel) {
			out = append(out, dirEntry{name: name, st: st})
		}
		f.noteConcealed(crel, e)
	}
	return f.withStaged(rel, out), nil
}

// withStaged shows the view's private files of dir in its listing, in
// place of any backing entry of the same name.
func (f *View) withStaged(dir string, entries []dirEntry) []dirEntry {
	staged := f.stagedIn(dir)
	if len(staged) == 0 {
		return entries
	}
	kept := entries[:0]
	for _, e := range entries {
		if _, ok := staged[e.name]; !ok {
			kept = append(kept, e)
		}
	}
	dfd, err := f.stagingDir()
	if err != nil {
		return kept
	}
	defer unix.Close(dfd)
	for name, sname := range staged {
		var st unix.Stat_t
		if unix.Fstatat(dfd, sname, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			kept = append(kept, dirEntry{name: name, st: st})
		}
	}
	return kept
}

// readNames lists the names in the open directory fd.
func readNames(fd int) ([]string, error) {
	var out []string
	buf := make([]byte, 8<<10)
	for {
		k, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return out, err
		}
		if k <= 0 {
			return out, nil
		}
		for b := buf[:k]; len(b) > 0; {
			reclen := int(uint16(b[16]) | uint16(b[17])<<8)
			name := direntName(b[19:reclen])
			b = b[reclen:]
			if name != "." && name != ".." {
				out = append(out, name)
			}
		}
	}
}

func direntName(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// dirSummary is what a directory's attributes show when the grant does
// not show everything below it (see fillAttr).
type dirSummary struct {
	time unix.Timespec
}

// summaries caches dirSummary per directory and entry generation: a
// directory's visible entries only change through a name change in the
// folder, which the watcher counts, so a quiet tree is listed once.
type summaries struct {
	mu sync.Mutex
	m  map[string]cachedSummary
}

type cachedSummary struct {
	gen uint64
	s   dirSummary
}

const maxSummaries = 1 << 14

func (f *View) dirSummary(rel string) dirSummary {
	gen := f.entryGen.Load()
	f.sums.mu.Lock()
	c, ok := f.sums.m[rel]
	f.sums.mu.Unlock()
	if ok && c.gen == gen {
		return c.s
	}
	s := dirSummary{time: unix.NsecToTimespec(f.started.UnixNano())}
	if entries, err := f.visibleEntries(rel); err == nil {
		m := f.matcher()
		var newest unix.Timespec
		for _, e := range entries {
			if e.st.Mode&unix.S_IFMT == unix.S_IFDIR && !m.ShowsAll(f.loc.join(rel, e.name)) {
				// Its own times move with what it hides.
				continue
			}
			for _, t := range []unix.Timespec{e.st.Mtim, e.st.Ctim} {
				if t.Sec > newest.Sec || (t.Sec == newest.Sec && t.Nsec > newest.Nsec) {
					newest = t
				}
			}
		}
		if newest.Sec != 0 || newest.Nsec != 0 {
			s.time = newest
		}
	}
	f.sums.mu.Lock()
	if f.sums.m == nil || len(f.sums.m) >= maxSummaries {
		f.sums.m = make(map[string]cachedSummary)
	}
	f.sums.m[rel] = cachedSummary{gen: gen, s: s}
	f.sums.mu.Unlock()
	return s
}

// Opendir opens the directory at rel for a listing, recorded (once per
// directory and session by default, see recordListing). keep says
// whether the kernel may keep the listing between opens: while the
// watcher sees the whole folder, it and grant changes drop it with the
// directory's attributes, and every open still reaches the view, and
// its record.
func (f *View) Opendir(ctx context.Context, rel string) (d *Dir, keep bool, errno syscall.Errno) {
	t, errno := f.at(ctx, opReaddir, rel)
	if errno != 0 {
		return nil, false, errno
	}
	t.close()
	if t.e.kind != kindDir {
		return nil, false, syscall.ENOTDIR
	}
	if err := f.recordListing(ctx, rel); err != nil {
		return nil, false, syscall.EIO
	}
	return &Dir{fsys: f, rel: rel}, f.cacheTimeout() == CacheTimeout, 0
}

// DirEntry is one entry of a listing as a view hands it out.
type DirEntry struct {
	Name string
	Mode uint32 // the type bits of st_mode
	Ino  uint64
	Off  uint64 // the offset of the next entry
}

// Dir is an open directory of a view. Its listing is taken at the first
// read (and again after a rewind) and served with the view's own
// offsets, 1, 2, 3..., so nothing of the backing directory's layout (on
// ext4, d_off values are hashes that reveal where hidden names lie)
// reaches the agent.
type Dir struct {
	fsys *View
	rel  string

	mu      sync.Mutex
	entries []dirEntry
	loaded  bool
	pos     uint64 // index of the next entry; 0 and 1 are "." and ".."
	// gv and gen are the grant view and the placeStamp the listing was
	// judged under (see openVerdict).
	gv  *grantView
	gen uint64
}

// Next is the next entry of the listing, and false at its end.
func (d *Dir) Next(ctx context.Context) (de DirEntry, ok bool, errno syscall.Errno) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.loaded {
		d.fsys.Enter(ledger.OpReaddir, d.rel)
		gen, gv := d.fsys.placeStamp(), d.fsys.gv.Load()
		entries, err := d.fsys.visibleEntriesUnder(gv, d.rel)
		if err != nil {
			return de, false, errnoOf(err)
		}
		d.entries, d.loaded, d.gv, d.gen = entries, true, gv, gen
	}
	i := d.pos
	d.pos++
	switch {
	case i == 0:
		return DirEntry{Name: ".", Mode: syscall.S_IFDIR, Off: 1}, true, 0
	case i == 1:
		return DirEntry{Name: "..", Mode: syscall.S_IFDIR, Off: 2}, true, 0
	case i-2 < uint64(len(d.entries)):
		e := &d.entries[i-2]
		mode := e.st.Mode & unix.S_IFMT
		if e.handoff {
			mode = syscall.S_IFREG
		}
		return DirEntry{Name: e.name, Mode: mode, Ino: e.st.Ino, Off: i + 1}, true, 0
	}
	d.pos = i
	return de, false, 0
}

// Seek moves to the entry at off; 0 rewinds, and lists the directory
// again.
func (d *Dir) Seek(off uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if off == 0 {
		d.loaded = false
	}
	d.pos = off
}

// Last answers the lookup READDIRPLUS makes of the entry just listed from
// the listing, which was judged entry by entry, instead of resolving the
// name again; false when the lookup must be made (the name is not the
// one just listed, or a handed-over artifact, or no longer shown).
func (d *Dir) Last(name string) (Entry, bool) {
	d.mu.Lock()
	var e *dirEntry
	if d.pos >= 3 && d.pos-3 < uint64(len(d.entries)) && d.entries[d.pos-3].name == name {
		e = &d.entries[d.pos-3]
	}
	gv, gen := d.gv, d.gen
	d.mu.Unlock()
	rel := d.fsys.loc.join(d.rel, name)
	if e == nil || e.handoff || !d.fsys.matcher().VisibleEntry(rel, e.st.Mode&unix.S_IFMT == unix.S_IFDIR) {
		return Entry{}, false
	}
	out := d.fsys.entryOf(rel, &e.st)
	// Judged as a lookup judges it: a read-only open of it need not be
	// judged again (see openCached).
	out.open = d.fsys.lookupVerdict(gv, gen, rel, &e.st)
	return out, true
}

// Fsync flushes the backing directory.
func (d *Dir) Fsync(ctx context.Context) syscall.Errno {
	fd, err := d.fsys.b.open(d.rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return errnoOf(err)
	}
	defer unix.Close(fd)
	return errnoOf(unix.Fsync(fd))
}
