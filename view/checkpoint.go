package view

import (
	"context"
	"fmt"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/protocol"
)

// target is a path that passed the checkpoint: its parent directory,
// reached without following any symlink, and the entry found there.
type target struct {
	rel string
	d   dir // parent of rel; fd -1 for the root
	e   entry
	// opened is the stat of the descriptor openSame returned.
	opened unix.Stat_t
}

func (t *target) close() {
	if t.d.fd >= 0 {
		t.d.close()
	}
}

// at is the checkpoint every operation on the backing folder passes. It
// resolves rel beneath the folder root without following symlinks,
// classifies what it finds, and asks the policy whether op may act on
// it. A refusal is recorded and answered here; on success the caller
// acts on the returned parent directory with *at calls and
// AT_SYMLINK_NOFOLLOW / O_NOFOLLOW, never on a path.
func (f *View) at(ctx context.Context, o op, rel string) (*target, syscall.Errno) {
	if b := f.ledger.Broken(); b != nil && !f.ledger.Resume() {
		// Fail closed, and alike for every name: answers that differed
		// between hidden and absent names would tell what the view
		// hides while the ledger cannot record the probes.
		f.ledgerDown(o.name(), rel, b)
		return nil, syscall.EIO
	}
	if f.ledger.Failing() {
		f.ledgerDown(o.name(), rel, errLedgerFull)
		return nil, syscall.EIO
	}
	if name, ok := f.stagedName(rel); ok {
		return f.stagedTarget(o, rel, name)
	}
	v := f.gv.Load()
	t, errno := f.resolve(v.matcher, rel)
	if errno != 0 {
		return nil, errno
	}
	verdict := decide(o, rel, t.e, policy{m: v.matcher, handoffs: v.handoffs, frozen: f.frozen, deliverable: f.deliverable})
	if verdict.errno != 0 {
		t.close()
		if verdict.record != "" {
			if verdict.quiet {
				if err := f.recordRefusal(ctx, verdict.record, o.name(), rel, verdict.why, verdict.why); err != nil {
					f.ledgerDown(o.name(), rel, err)
					return nil, syscall.EIO
				}
			} else {
				return nil, f.deny(ctx, verdict.record, o.name(), rel, verdict.errno, verdict.why)
			}
		}
		return nil, verdict.errno
	}
	if o.class() != classRead {
		// Judged after the policy, so a hidden name stays ENOENT.
		if errno := f.gated(ctx, o.name(), rel); errno != 0 {
			t.close()
			return nil, errno
		}
	}
	return t, 0
}

// gated refuses a change while the gate is closed.
func (f *View) gated(ctx context.Context, op ledger.Op, rel string) syscall.Errno {
	if f.gate == nil {
		return 0
	}
	if err := f.gate(); err != nil {
		return f.deny(ctx, ledger.KindDenied, op, rel, syscall.EROFS, "read-only: "+err.Error())
	}
	return 0
}

// shows reports whether the view shows an entry at rel now (a private
// file of the view counts).
func (f *View) shows(rel string) bool {
	if _, ok := f.stagedName(rel); ok {
		return true
	}
	m := f.matcher()
	t, errno := f.resolve(m, rel)
	if errno != 0 {
		return false
	}
	t.close()
	return t.e.shownBy(m, rel)
}

// resolve finds rel beneath the folder root without following symlinks
// and classifies what is there under m.
func (f *View) resolve(m *grants.Matcher, rel string) (*target, syscall.Errno) {
	t := &target{rel: rel, d: dir{fd: -1}}
	if rel == f.loc.up {
		if err := unix.Fstat(f.b.rootFd(), &t.e.st); err != nil {
			return nil, errnoOf(err)
		}
		t.e.kind = kindDir
		return t, 0
	}
	d, err := f.b.parent(rel)
	if err != nil {
		// The way to rel is gone, or leads through a symlink: for the
		// view nothing is there.
		return nil, errnoOf(err)
	}
	if i := strings.LastIndexByte(rel, '/'); i >= 0 && f.hiddenParent(d.fd, rel[:i], !m.NamesGit()) {
		// rel lies in a directory no view shows, or below one (reached
		// through an entry the kernel kept from before it was one).
		d.close()
		return nil, syscall.ENOENT
	}
	t.d = d
	var st unix.Stat_t
	switch err := unix.Fstatat(d.fd, d.name, &st, unix.AT_SYMLINK_NOFOLLOW); err {
	case nil:
		t.e = classify(m, f.conceal, f.loc, d.fd, d.name, rel, &st)
		f.noteConcealed(rel, t.e)
	case unix.ENOENT:
		t.e.kind = kindAbsent
	default:
		d.close()
		return nil, errnoOf(err)
	}
	return t, 0
}

// hiddenParent reports whether the directory parent, held by fd, is
// concealed or lies below a concealed directory.
func (f *View) hiddenParent(fd int, parent string, git bool) bool {
	for _, name := range strings.Split(parent, "/") {
		if grants.IsReservedName(name) {
			return true
		}
	}
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || f.conceal.hidesDirOf(fd, &st, git) {
		return true
	}
	if !strings.Contains(parent, "/") && f.loc.up == "" {
		// A directory of the root: nothing lies between them.
		return false
	}
	return f.conceal.hidesAbove(fd, &st, f.b.rootID(), git, f.placeStamp(), f.cacheTimeout() == CacheTimeout)
}

// openSame opens the judged entry relative to its parent and checks that
// the descriptor is that entry: a rename between the judgement and the
// open must not hand out a different file.
func (t *target) openSame(flags int) (int, error) {
	fd, err := unix.Openat(t.d.fd, t.d.name, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if err == unix.ELOOP {
			err = unix.ENOENT
		}
		return -1, err
	}
	st := &t.opened
	if err := unix.Fstat(fd, st); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if !sameEntry(st, &t.e.st) {
		unix.Close(fd)
		return -1, errReplaced
	}
	return fd, nil
}

// errReplaced is openSame's answer when the name now leads to another
// entry than the one judged: ENOENT for the agent, a new judgement for a
// caller that can make one (openJudged).
var errReplaced error = unix.ENOENT

// sameEntry reports whether a descriptor's stat is the judged entry, and
// that entry is still one a view may show (a second name made since the
// judgement would share its content with a name the grant may hide).
func sameEntry(got, judged *unix.Stat_t) bool {
	if got.Dev != judged.Dev || got.Ino != judged.Ino || got.Mode&unix.S_IFMT != judged.Mode&unix.S_IFMT {
		return false
	}
	return got.Mode&unix.S_IFMT != unix.S_IFREG || got.Nlink <= 1
}

// restat is the entry's stat after a change, from fd when there is one.
func (t *target) restat(fd int) (unix.Stat_t, error) {
	var st unix.Stat_t
	var err error
	switch {
	case fd >= 0:
		err = unix.Fstat(fd, &st)
	case t.d.fd >= 0:
		err = unix.Fstatat(t.d.fd, t.d.name, &st, unix.AT_SYMLINK_NOFOLLOW)
	default:
		err = fmt.Errorf("restat of the folder root: %w", unix.EINVAL)
	}
	return st, err
}

// dirBlockSize is the size every directory of a view reports, whatever
// it holds (see fillAttr).
const dirBlockSize = 4096

// attrOf turns a backing stat into the attributes the agent sees.
//
// Regular files and symlinks show their own attributes. A directory's
// link count is always 1 ("unknown" to find and friends): the real count
// grows with every subdirectory, hidden ones included. Its size, blocks
// and times would move with hidden entries too, so unless the grant shows
// everything below it, they come from its visible entries only: size
// 4096, 8 blocks, and as times the newest change among its visible
// files, symlinks and fully shown subdirectories (the view's start when
// it has none).
func (f *View) attrOf(rel string, st *unix.Stat_t) unix.Stat_t {
	a := *st
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if rel == protocol.ProtocolFile && st.Mode&unix.S_IFMT == unix.S_IFREG {
			f.protocolAttr(&a)
		}
		return a
	}
	a.Nlink = 1
	if f.matcher().ShowsAll(rel) {
		return a
	}
	s := f.dirSummary(rel)
	a.Size, a.Blocks = dirBlockSize, dirBlockSize/512
	a.Atim, a.Mtim, a.Ctim = s.time, s.time, s.time
	return a
}
