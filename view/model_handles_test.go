package view

import (
	"bytes"
	"syscall"

	"github.com/acpfs/acpfs/ledger"
)

// The operations of the run on files held open, and grant changes,
// which reach them.

// maxHeld bounds the files an agent of the run holds open.
const maxHeld = 3

func (r *run) opOpenHandle() {
	a := r.pickAgent()
	rw := r.ch.intn(2) == 0
	rel := r.pickReadable(a, nonProtocol())
	if rw {
		rel = r.pickWritable(a, nonProtocol())
	}
	if _, private := a.staged[rel]; private || len(a.handles) >= maxHeld {
		return
	}
	o, flags := oOpenRead, syscall.O_RDONLY
	if rw {
		o, flags = oOpenWrite, syscall.O_RDWR
	}
	r.note("%s open %s (flags %#o)", a.name, rel, flags)
	v := r.judge(a, o, rel)
	if v == mAllow && r.w.entries[rel].kind == mSymlink {
		v = mNoEnt
	}
	fh, _, errno := a.view.Open(r.ctx, nil, rel, uint32(flags))
	r.refused(a, errno, v, ledger.OpOpen, rel)
	if errno != 0 {
		return
	}
	e := r.w.entries[rel]
	f := r.w.files[e.id]
	r.read(a, rel, f.content, true)
	a.handles = append(a.handles, &mhandle{rel: rel, id: e.id, ver: f.ver, write: rw, fh: fh})
}

func (r *run) pickHandle() (*agent, *mhandle, int) {
	a := r.pickAgent()
	if len(a.handles) == 0 {
		return a, nil, 0
	}
	i := r.ch.intn(len(a.handles))
	return a, a.handles[i], i
}

// inPlace reports whether the name h was opened by still leads to its
// file, and only to it.
func (r *run) inPlace(h *mhandle) bool {
	e := r.w.entries[h.rel]
	return r.w.reachable(h.rel) && e.kind == mFile && e.id == h.id && r.w.files[e.id].links == 1
}

// opHandleRead reads a file held open: refused once the grant no longer
// reads its name or the name leads elsewhere; a version the ledger does
// not hold for the descriptor is recorded before it is served.
func (r *run) opHandleRead() {
	a, h, _ := r.pickHandle()
	if h == nil {
		return
	}
	r.note("%s read held %s", a.name, h.rel)
	v := mAllow
	if !a.g.readable(h.rel) || !r.inPlace(h) {
		v = mAccess
	}
	got, errno := h.fh.Read(r.ctx, make([]byte, 1<<16), 0)
	got = append([]byte(nil), got...)
	r.refused(a, errno, v, ledger.OpRead, h.rel)
	if errno != 0 {
		return
	}
	f := r.w.files[h.id]
	if !bytes.Equal(got, f.content) {
		r.failf("read of held %s by %s: %q, the model says %q", h.rel, a.name, got, f.content)
	}
	r.read(a, h.rel, got, f.ver != h.ver)
	h.ver = f.ver
}

// opHandleWrite writes at the start of a file held open: refused once
// the grant no longer writes its name, the file is frozen, or the name
// leads elsewhere.
func (r *run) opHandleWrite() {
	a, h, _ := r.pickHandle()
	if h == nil {
		return
	}
	data := r.data(a)
	r.note("%s write held %s %q", a.name, h.rel, data)
	v := mAllow
	switch {
	case !h.write:
		v = mverdict{errno: syscall.EBADF}
	case !a.g.writable(h.rel):
		v = mAccess
	case r.w.isFrozen(h.rel):
		v = mFrozen
	case !r.inPlace(h):
		v = mAccess
	}
	n, errno := h.fh.Write(r.ctx, data, 0)
	r.refused(a, errno, v, ledger.OpWrite, h.rel)
	if errno != 0 {
		return
	}
	if int(n) != len(data) {
		r.failf("write of held %s by %s: %d of %d bytes", h.rel, a.name, n, len(data))
	}
	if !h.wrote {
		r.wrote(a, ledger.OpOpen, h.rel) // the open, recorded before its first change
	}
	h.wrote = true
	f := r.w.files[h.id]
	if len(data) >= len(f.content) {
		f.content = append([]byte(nil), data...)
	} else {
		f.content = append(append([]byte(nil), data...), f.content[len(data):]...)
	}
	r.w.touch(h.id)
	h.ver = f.ver
}

func (r *run) opHandleRelease() {
	a, h, i := r.pickHandle()
	if h == nil {
		return
	}
	r.note("%s release %s", a.name, h.rel)
	if errno := h.fh.Release(r.ctx); errno != 0 {
		r.failf("release of %s by %s: %v", h.rel, a.name, errnoText(errno))
	}
	a.handles = append(a.handles[:i], a.handles[i+1:]...)
	if h.write && !h.wrote && !has(r.since(), ledger.KindWrite, a.name, ledger.OpOpen, h.rel) &&
		!has(r.lt.all, ledger.KindWrite, a.name, ledger.OpOpen, h.rel) {
		r.failf("an open of %s for writing by %s is not in the ledger", h.rel, a.name)
	}
}

// opSetGrant gives an agent another of its grants: a narrower one, a
// revoked one, or back as it was.
func (r *run) opSetGrant() {
	a := r.pickAgent()
	i := r.ch.intn(len(a.variants))
	g := a.variants[i]
	r.note("%s grant %s", a.name, g.GrantID)
	if err := a.view.SetGrant(g, nil); err != nil {
		r.failf("set grant %s: %v", g.GrantID, err)
		return
	}
	applied := false
	for _, rec := range r.since() {
		applied = applied || (rec.Kind == ledger.KindGrantApplied && rec.Agent == a.name && rec.Grant == g.GrantID)
	}
	if applied != (i != a.cur) {
		r.failf("grant %s applied to %s: recorded %v, the model says %v", g.GrantID, a.name, applied, i != a.cur)
	}
	a.cur, a.g = i, modelGrant(g)
}
