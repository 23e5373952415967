package view

import (
	"bytes"
	"fmt"
	"path"
	"sort"
	"syscall"

	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/protocol"
)

// The names the run picks from: files (the protocol's among them) and
// directories, and the targets of symlinks it makes.
var (
	mFiles = []string{"docs/a.md", "docs/b.md", "oracle/answer.md", "scratch/x.md", "scratch/y.md", "scratch/sub/z.md",
		"scratch/carol/c.md", "scratch/secret/s.md", "deliverables/extra.md", "notes.md", "x.md", "tmp.swp", "README.md",
		"review.md", "proposal.md", "readiness.md", "decisions.md", "conclusion.md", primaryRef, protocol.EventsFile, protocol.ProtocolFile}
	mDirs        = []string{"docs", "oracle", "scratch", "scratch/sub", "scratch/carol", "scratch/secret", "deliverables"}
	mLinkTargets = []string{"a.md", "x.md", "../docs/a.md", "../oracle/answer.md", "../x.md", "sub/z.md", "../scratch", "..",
		"../../outside", "/etc/passwd", "sub/../x.md", "../notes.md"}
)

// mop is an operation as the contract's table names it.
type mop uint8

const (
	oLookup mop = iota
	oGetattr
	oReadlink
	oReaddir
	oOpenRead
	oOpenWrite
	oTruncate
	oUnlink
	oRmdir
	oRenameFrom
	oRenameTo
	oCreate
	oMkdir
	oSymlink
	oLink
)

// ledgerOp is the name the ledger gives the operation.
func (o mop) ledgerOp() ledger.Op {
	return [...]ledger.Op{ledger.OpLookup, ledger.OpGetattr, ledger.OpReadlink, ledger.OpReaddir, ledger.OpOpen, ledger.OpOpen,
		ledger.OpTruncate, ledger.OpUnlink, ledger.OpRmdir, ledger.OpRename, ledger.OpRename, ledger.OpCreate, ledger.OpMkdir,
		ledger.OpSymlink, ledger.OpLink}[o]
}

func isProtocolFile(rel string) bool {
	return rel == protocol.EventsFile || rel == protocol.ProtocolFile
}

// judge is the contract's answer to o on rel by a, before anything is
// done.
func (r *run) judge(a *agent, o mop, rel string) mverdict {
	w, g := r.w, a.g
	if !w.reachable(rel) {
		return mNoEnt
	}
	e, exists := w.entries[rel]
	shown := g.shown(rel, w)
	switch o {
	case oLookup, oGetattr, oReadlink, oReaddir, oOpenRead:
		switch {
		case !exists:
			return mNoEnt
		case !shown:
			return mHidden
		case o == oReadlink && e.kind != mSymlink:
			return mInvalid
		}
		return mAllow
	case oCreate, oMkdir, oSymlink, oLink, oRenameTo:
		return r.judgeMake(a, o, rel, exists, shown)
	}
	switch {
	case !exists:
		return mNoEnt
	case !shown:
		return mHidden
	case !g.writable(rel):
		return mAccess
	case w.isFrozen(rel):
		return mFrozen
	case isProtocolFile(rel) && o != oOpenWrite:
		if rel == protocol.EventsFile && (o == oTruncate) {
			return mverdict{syscall.EPERM, ledger.KindAppendRejected}
		}
		return mPerm
	case requiredDoc(rel) && (o == oUnlink || o == oRenameFrom):
		return mPerm
	case isDeliverable(rel) && (o == oUnlink || o == oRenameFrom || o == oRmdir):
		return mPerm
	}
	return mAllow
}

// judgeMake is judge for an operation that makes a name.
func (r *run) judgeMake(a *agent, o mop, rel string, exists, shown bool) mverdict {
	switch {
	case !a.g.writable(rel):
		return mAccess
	case r.w.isFrozen(rel):
		return mFrozen
	case isProtocolFile(rel):
		return mPerm
	case exists && !shown:
		// EACCES, not EEXIST: the agent must not learn that a name it
		// cannot see is taken.
		return mAccess
	case o == oLink:
		return mAccess
	case exists && o != oRenameTo:
		return mExists
	}
	return mAllow
}

func (r *run) pickAgent() *agent { return r.agents[r.ch.intn(len(r.agents))] }

func (r *run) pick(names []string) string { return names[r.ch.intn(len(names))] }

// pickFor picks, half the time, among the names mine says the agent
// may act on, so that the run does more than be refused.
func (r *run) pickFor(names []string, mine func(rel string) bool) string {
	if r.ch.intn(2) == 0 {
		var some []string
		for _, n := range names {
			if mine(n) {
				some = append(some, n)
			}
		}
		if len(some) > 0 {
			return r.pick(some)
		}
	}
	return r.pick(names)
}

func (r *run) pickWritable(a *agent, names []string) string {
	return r.pickFor(names, func(rel string) bool { _, p := a.staged[rel]; return p || a.g.writable(rel) })
}

func (r *run) pickReadable(a *agent, names []string) string {
	return r.pickFor(names, func(rel string) bool { _, p := a.staged[rel]; return p || a.g.shown(rel, r.w) })
}

// data is what an agent writes: who and when, some lines long.
func (r *run) data(a *agent) []byte {
	line := fmt.Sprintf("%s, operation %d\n", a.name, len(r.log))
	return bytes.Repeat([]byte(line), 1+r.ch.intn(3))
}

func (a *agent) holds(rel string) bool {
	for _, h := range a.handles {
		if h.rel == rel {
			return true
		}
	}
	return false
}

// stageable reports whether a new file at rel is the agent's private
// file: a name it may not write in a directory where it writes
// something.
func (r *run) stageable(a *agent, rel string) bool {
	return !isProtocolFile(rel) && !a.g.writable(rel) && a.g.mayWriteIn(parentOf(rel)) && !a.g.shown(rel, r.w)
}

// statAs looks rel up through a's view (lookup, or getattr with
// getattr) and checks the answer and its size.
func (r *run) statAs(a *agent, rel string, getattr bool) {
	o := oLookup
	if getattr {
		o = oGetattr
	}
	r.note("%s %s %s", a.name, o.ledgerOp(), rel)
	v := r.judge(a, o, rel)
	want := int64(-1)
	if b, ok := a.staged[rel]; ok {
		v, want = mAllow, int64(len(b))
	} else if f := r.w.file(rel); f != nil && v == mAllow && !isProtocolFile(rel) {
		want = int64(len(f.content))
	}
	var size int64
	var errno syscall.Errno
	if getattr {
		st, e := a.view.Getattr(r.ctx, rel, nil)
		size, errno = st.Size, e
	} else {
		en, e := a.view.Lookup(r.ctx, rel)
		size, errno = en.Attr.Size, e
	}
	r.refused(a, errno, v, o.ledgerOp(), rel)
	if errno == 0 && want >= 0 && size != want {
		r.failf("%s of %s by %s: size %d, the model says %d", o.ledgerOp(), rel, a.name, size, want)
	}
}

func (r *run) opStat() {
	a := r.pickAgent()
	r.statAs(a, r.pickReadable(a, append(append([]string(nil), mFiles...), mDirs...)), r.ch.intn(2) == 0)
}

// opReadFile opens a file for reading, reads it whole and closes it.
func (r *run) opReadFile() {
	a := r.pickAgent()
	rel := r.pickReadable(a, mFiles)
	r.note("%s read %s", a.name, rel)
	v, want, records := r.judge(a, oOpenRead, rel), []byte(nil), true
	switch b, ok := a.staged[rel]; {
	case ok:
		v, want, records = mAllow, b, false
	case v == mAllow && r.w.entries[rel].kind == mSymlink:
		v = mNoEnt // a symlink is opened by the kernel, which follows it
	case v == mAllow && rel == protocol.ProtocolFile:
		want = []byte(r.c.read(rel))
	case v == mAllow:
		want = r.w.file(rel).content
	}
	fh, _, errno := a.view.Open(r.ctx, nil, rel, syscall.O_RDONLY)
	r.refused(a, errno, v, ledger.OpOpen, rel)
	if errno != 0 {
		return
	}
	got, errno := fh.Read(r.ctx, make([]byte, 1<<16), 0)
	got = append([]byte(nil), got...)
	fh.Release(r.ctx)
	if errno != 0 || !bytes.Equal(got, want) {
		r.failf("read %s by %s: %q (%v), the model says %q", rel, a.name, got, errnoText(errno), want)
	}
	r.read(a, rel, got, records)
}

// opList lists a directory and compares its names with the model's.
func (r *run) opList() {
	a := r.pickAgent()
	dir := r.pick(append([]string{""}, mDirs...))
	r.note("%s list %q", a.name, dir)
	v := mAllow
	if dir != "" {
		v = r.judge(a, oReaddir, dir)
	}
	if v == mAllow && dir != "" && r.w.entries[dir].kind != mDir {
		v = mverdict{errno: syscall.ENOTDIR}
	}
	d, _, errno := a.view.Opendir(r.ctx, dir)
	r.refused(a, errno, v, ledger.OpReaddir, dir)
	if errno != 0 {
		return
	}
	if !has(r.lt.all, ledger.KindList, a.name, ledger.OpReaddir, dir) {
		r.failf("no list record of %q by %s", dir, a.name)
	}
	var got []string
	for {
		e, ok, errno := d.Next(r.ctx)
		if errno != 0 {
			r.failf("list %q by %s: %v", dir, a.name, errnoText(errno))
		}
		if !ok {
			break
		}
		if e.Name != "." && e.Name != ".." {
			got = append(got, e.Name)
		}
	}
	sort.Strings(got)
	if want := r.listing(a, dir); fmt.Sprint(got) != fmt.Sprint(want) {
		r.failf("list %q by %s: %v, the model says %v", dir, a.name, got, want)
	}
}

// listing is what the model says a listing of dir shows to a.
func (r *run) listing(a *agent, dir string) []string {
	names := map[string]bool{}
	for _, name := range r.w.below(dir) {
		if a.g.shown(join(dir, name), r.w) {
			names[name] = true
		}
	}
	for rel := range a.staged {
		if parentOf(rel) == dir {
			names[path.Base(rel)] = true
		}
	}
	return sortedKeys(names)
}

func (r *run) opReadlink() {
	a := r.pickAgent()
	rel := r.pick(append(append([]string(nil), mFiles...), mDirs...))
	r.note("%s readlink %s", a.name, rel)
	v := r.judge(a, oReadlink, rel)
	if _, ok := a.staged[rel]; ok {
		v = mInvalid
	}
	got, errno := a.view.Readlink(r.ctx, rel)
	r.refused(a, errno, v, ledger.OpReadlink, rel)
	if want := r.w.entries[rel].target; errno == 0 && string(got) != want {
		r.failf("readlink %s by %s: %q, the model says %q", rel, a.name, got, want)
	}
}
