package view

import (
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/ledger"
)

// The operations of the run that change names and contents through a
// view.

// nonProtocol is mFiles without events.jsonl and protocol.json, whose
// writes are the protocol operations' (model_protocol_test.go).
func nonProtocol() []string {
	var out []string
	for _, f := range mFiles {
		if !isProtocolFile(f) {
			out = append(out, f)
		}
	}
	return out
}

// opWriteFile rewrites a file whole: open with O_TRUNC, one write,
// close.
func (r *run) opWriteFile() {
	a := r.pickAgent()
	rel := r.pickWritable(a, nonProtocol())
	data := r.data(a)
	r.note("%s write %s %q", a.name, rel, data)
	_, private := a.staged[rel]
	v := r.judge(a, oOpenWrite, rel)
	symlink := !private && v == mAllow && r.w.entries[rel].kind == mSymlink
	if private {
		v = mAllow
	} else if symlink {
		v = mNoEnt
	}
	fh, _, errno := a.view.Open(r.ctx, nil, rel, syscall.O_WRONLY|syscall.O_TRUNC)
	r.refused(a, errno, v, ledger.OpOpen, rel)
	if errno != 0 {
		return
	}
	r.wrote(a, ledger.OpOpen, rel)
	n, errno := fh.Write(r.ctx, data, 0)
	fh.Release(r.ctx)
	if errno != 0 || int(n) != len(data) {
		r.failf("write %s by %s: %d bytes, %v", rel, a.name, n, errnoText(errno))
	}
	if private {
		a.staged[rel] = data
		return
	}
	f := r.w.file(rel)
	f.content = append([]byte(nil), data...)
	r.w.touch(r.w.entries[rel].id)
}

// opCreate makes a new file and writes it.
func (r *run) opCreate() {
	a := r.pickAgent()
	rel := r.pickWritable(a, mFiles)
	if a.holds(rel) {
		return // a private file under a name held open is not modelled
	}
	data := r.data(a)
	r.note("%s create %s %q", a.name, rel, data)
	_, private := a.staged[rel]
	stage := !private && r.stageable(a, rel)
	v := r.judge(a, oCreate, rel)
	switch {
	case private:
		v = mExists
	case stage:
		v = mAllow
	}
	_, fh, errno := a.view.Create(r.ctx, rel, syscall.O_RDWR, 0o644, nil)
	r.refused(a, errno, v, ledger.OpCreate, rel)
	if errno != 0 {
		return
	}
	r.wrote(a, ledger.OpCreate, rel)
	n, errno := fh.Write(r.ctx, data, 0)
	fh.Release(r.ctx)
	if errno != 0 || int(n) != len(data) {
		r.failf("write of the new %s by %s: %d bytes, %v", rel, a.name, n, errnoText(errno))
	}
	if stage {
		a.staged[rel] = data
		return
	}
	r.w.newFile(rel, data)
}

func (r *run) opMkdir() {
	a := r.pickAgent()
	dir := r.pickWritable(a, mDirs)
	r.note("%s mkdir %s", a.name, dir)
	v := r.judge(a, oMkdir, dir)
	_, errno := a.view.Mkdir(r.ctx, dir, 0o755)
	r.refused(a, errno, v, ledger.OpMkdir, dir)
	if errno == 0 {
		r.wrote(a, ledger.OpMkdir, dir)
		r.w.entries[dir] = mentry{kind: mDir}
	}
}

func (r *run) opRmdir() {
	a := r.pickAgent()
	dir := r.pickWritable(a, mDirs)
	r.note("%s rmdir %s", a.name, dir)
	v := r.judge(a, oRmdir, dir)
	after := syscall.Errno(0) // what the folder answers once the change is recorded
	if v == mAllow {
		switch {
		case r.w.entries[dir].kind != mDir:
			after = syscall.ENOTDIR
		case !r.w.empty(dir):
			after = syscall.ENOTEMPTY
		}
	}
	errno := a.view.Rmdir(r.ctx, dir)
	if v == mAllow {
		r.wrote(a, ledger.OpRmdir, dir)
		v = mverdict{errno: after}
	}
	r.refused(a, errno, v, ledger.OpRmdir, dir)
	if errno == 0 {
		delete(r.w.entries, dir)
	}
}

func (r *run) opUnlink() {
	a := r.pickAgent()
	rel := r.pickWritable(a, mFiles)
	r.note("%s unlink %s", a.name, rel)
	_, private := a.staged[rel]
	v := r.judge(a, oUnlink, rel)
	if private {
		v = mAllow
	}
	errno := a.view.Unlink(r.ctx, rel)
	r.refused(a, errno, v, ledger.OpUnlink, rel)
	if errno != 0 {
		return
	}
	r.wrote(a, ledger.OpUnlink, rel)
	if private {
		delete(a.staged, rel)
		return
	}
	r.w.drop(rel)
}

// opTruncate changes a file's size by its name.
func (r *run) opTruncate() {
	a := r.pickAgent()
	rel := r.pickWritable(a, mFiles)
	size := r.ch.intn(40)
	r.note("%s truncate %s to %d", a.name, rel, size)
	b, private := a.staged[rel]
	v := r.judge(a, oTruncate, rel)
	if private {
		v = mAllow
	}
	after := syscall.Errno(0)
	if v == mAllow && !private && r.w.entries[rel].kind == mSymlink {
		after = syscall.EISDIR // no descriptor to truncate
	}
	_, errno := a.view.Setattr(r.ctx, rel, nil, &SetAttr{HasSize: true, Size: uint64(size)})
	if v == mAllow {
		r.wrote(a, ledger.OpTruncate, rel)
		v = mverdict{errno: after}
	}
	r.refused(a, errno, v, ledger.OpTruncate, rel)
	if errno != 0 {
		return
	}
	if private {
		a.staged[rel] = resize(b, size)
		return
	}
	f := r.w.file(rel)
	f.content = resize(f.content, size)
	r.w.touch(r.w.entries[rel].id)
}

func resize(b []byte, n int) []byte {
	if n <= len(b) {
		return append([]byte(nil), b[:n]...)
	}
	return append(append([]byte(nil), b...), make([]byte, n-len(b))...)
}

func (r *run) opSymlink() {
	a := r.pickAgent()
	rel := r.pick(append(append([]string(nil), mFiles...), mDirs...))
	target := r.pick(mLinkTargets)
	r.note("%s symlink %s -> %s", a.name, rel, target)
	v := r.judge(a, oSymlink, rel)
	if _, ok := a.staged[rel]; ok {
		v = mExists
	} else if v == mAllow {
		if t, ok := linkTarget(rel, target); !ok || !a.g.visibleName(t) {
			v = mAccess
		}
	}
	_, errno := a.view.Symlink(r.ctx, rel, target)
	r.refused(a, errno, v, ledger.OpSymlink, rel)
	if errno == 0 {
		r.wrote(a, ledger.OpSymlink, rel)
		r.w.entries[rel] = mentry{kind: mSymlink, target: target}
	}
}

// opLink: a hard link is never made through a view.
func (r *run) opLink() {
	a, rel := r.pickAgent(), r.pick(mFiles)
	r.note("%s link %s", a.name, rel)
	v := r.judge(a, oLink, rel)
	if _, ok := a.staged[rel]; ok {
		v = mverdict{errno: syscall.EACCES}
	}
	r.refused(a, a.view.Link(r.ctx, rel), v, ledger.OpLink, rel)
}

// opRename moves a name onto another, through a's view.
func (r *run) opRename() {
	a := r.pickAgent()
	from, to := r.pickWritable(a, mFiles), r.pickWritable(a, mFiles)
	noreplace := r.ch.intn(4) == 0
	_, fromPrivate := a.staged[from]
	_, toPrivate := a.staged[to]
	if from == to || (fromPrivate && a.holds(to)) {
		return
	}
	flags := uint32(0)
	if noreplace {
		flags = unix.RENAME_NOREPLACE
	}
	r.note("%s rename %s -> %s (flags %d)", a.name, from, to, flags)
	v, at := r.judgeRename(a, from, to, noreplace)
	errno := a.view.Rename(r.ctx, from, to, flags)
	r.refused(a, errno, v, ledger.OpRename, at)
	if errno != 0 && errno != syscall.EEXIST {
		return
	}
	switch {
	case fromPrivate && !toPrivate && !noreplace && r.stageable(a, to):
		// One private name to another: nothing recorded, nothing on disk.
		a.staged[to] = a.staged[from]
		delete(a.staged, from)
		return
	case fromPrivate && !toPrivate:
		r.wrote(a, ledger.OpRename, to)
	default:
		r.wrote(a, ledger.OpRename, from)
	}
	if errno == 0 {
		r.renamed(a, from, to, fromPrivate, toPrivate)
	}
}

// judgeRename is the contract's answer to a rename, and the name its
// refusal is recorded under.
func (r *run) judgeRename(a *agent, from, to string, noreplace bool) (mverdict, string) {
	_, fromPrivate := a.staged[from]
	_, toPrivate := a.staged[to]
	if !fromPrivate {
		if v := r.judge(a, oRenameFrom, from); v != mAllow {
			return v, from
		}
	}
	if toPrivate && !fromPrivate {
		return mAccess, to
	}
	if fromPrivate && !toPrivate && !noreplace && r.stageable(a, to) {
		return mAllow, to
	}
	if !toPrivate {
		if v := r.judge(a, oRenameTo, to); v != mAllow {
			return v, to
		}
	}
	exists := toPrivate
	if !toPrivate {
		_, exists = r.w.entries[to]
	}
	if noreplace && exists {
		// Recorded, then refused by the folder.
		return mExists, to
	}
	return mAllow, to
}

// renamed applies a rename the view made to the model.
func (r *run) renamed(a *agent, from, to string, fromPrivate, toPrivate bool) {
	switch {
	case fromPrivate && toPrivate:
		a.staged[to] = a.staged[from]
		delete(a.staged, from)
	case fromPrivate:
		r.w.drop(to)
		r.w.newFile(to, a.staged[from])
		delete(a.staged, from)
	default:
		e := r.w.entries[from]
		r.w.drop(to)
		delete(r.w.entries, from)
		r.w.entries[to] = e
		r.w.touch(e.id)
	}
}
