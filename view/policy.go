package view

import (
	"path"
	"strings"
	"syscall"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/protocol"
)

// op is a filesystem operation as the policy sees it. Every handler that
// touches the backing folder names its op when it passes the checkpoint
// (FS.at), which is where the op is judged: a handler cannot reach the
// folder without a verdict.
type op uint8

const (
	opLookup op = iota
	opGetattr
	opReadlink
	opReaddir
	opGetxattr
	opListxattr
	opOpenRead
	opOpenWrite
	opSetattr
	opTruncate
	opSetxattr
	opRemovexattr
	opUnlink
	opRmdir
	opRenameFrom
	opRenameTo
	opCreate
	opMkdir
	opMknod
	opSymlink
	opLink
	opCount // number of ops; keep last
)

var opNames = [opCount]ledger.Op{
	opLookup: ledger.OpLookup, opGetattr: ledger.OpGetattr, opReadlink: ledger.OpReadlink, opReaddir: ledger.OpReaddir,
	opGetxattr: ledger.OpGetxattr, opListxattr: ledger.OpListxattr, opOpenRead: ledger.OpOpen, opOpenWrite: ledger.OpOpen,
	opSetattr: ledger.OpSetattr, opTruncate: ledger.OpTruncate, opSetxattr: ledger.OpSetxattr, opRemovexattr: ledger.OpRemovexattr,
	opUnlink: ledger.OpUnlink, opRmdir: ledger.OpRmdir, opRenameFrom: ledger.OpRename, opRenameTo: ledger.OpRename,
	opCreate: ledger.OpCreate, opMkdir: ledger.OpMkdir, opMknod: ledger.OpMknod, opSymlink: ledger.OpSymlink, opLink: ledger.OpLink,
}

// name is the op's name in the ledger's records: a refused op and the
// same op allowed are recorded under one name.
func (o op) name() ledger.Op { return opNames[o] }

func (o op) String() string { return string(opNames[o]) }

// class is what an op's ops can be: an op reads what exists, changes
// what exists, or makes a new name.
type opClass uint8

const (
	classRead   opClass = iota // needs a visible entry
	classChange                // needs a visible, writable entry
	classMake                  // needs a writable name that is free
)

func (o op) class() opClass {
	switch o {
	case opLookup, opGetattr, opReadlink, opReaddir, opGetxattr, opListxattr, opOpenRead:
		return classRead
	case opCreate, opMkdir, opMknod, opSymlink, opLink, opRenameTo:
		return classMake
	}
	return classChange
}

// kind classifies a backing entry for the view.
type kind uint8

const (
	kindAbsent kind = iota
	kindDir
	kindFile
	kindSymlink // a symlink whose target, judged from where it is now, is visible
	// kindConcealed is an entry the view never shows whatever the grant
	// says: a regular file with several names (another name may be one
	// the grant hides, and all names share size, times and content), a
	// symlink leading to a hidden path or out of the folder, and any
	// device, fifo or socket.
	kindConcealed
)

// entry is a backing entry as the checkpoint found it.
type entry struct {
	kind kind
	st   unix.Stat_t
	why  string // for kindConcealed
}

// shownBy reports whether a view under m shows the entry found at rel.
func (e entry) shownBy(m *grants.Matcher, rel string) bool {
	return e.kind != kindAbsent && e.kind != kindConcealed && m.VisibleEntry(rel, e.kind == kindDir)
}

// present answers an op that needs an existing entry: ENOENT when it is
// absent, and, recorded quietly, when the view does not show it.
func present(e entry, visible bool) (verdict, bool) {
	switch {
	case e.kind == kindAbsent:
		return verdict{errno: syscall.ENOENT}, false
	case e.kind == kindConcealed:
		return hidden(e.why), false
	case !visible:
		return hidden("hidden by grant"), false
	}
	return allow, true
}

// policy is what a verdict depends on besides the entry: the grant in
// force and the protocol's view of the path.
type policy struct {
	m        *grants.Matcher
	handoffs map[string]string
	frozen   func(rel string) bool
	// deliverable reports whether rel is a deliverable protocol.json
	// names or a directory holding one (nil: none).
	deliverable func(rel string) bool
}

// verdict is the answer of the policy to one op on one path.
type verdict struct {
	errno syscall.Errno
	// record is the ledger kind of the refusal ("" for none).
	record ledger.Kind
	why    string
	// quiet refusals leave .acpfs/last-error alone: they are answered
	// as if the name did not exist, and the agent must not learn that
	// it does.
	quiet bool
}

var allow = verdict{}

func hidden(why string) verdict {
	return verdict{errno: syscall.ENOENT, record: ledger.KindDenied, why: why, quiet: true}
}

func refuse(errno syscall.Errno, kind ledger.Kind, why string) verdict {
	return verdict{errno: errno, record: kind, why: why}
}

// decide is the access policy of a view, for every op on every kind of
// entry. It is pure, so the whole table is tested without a mount.
func decide(o op, rel string, e entry, p policy) verdict {
	if v, ok := decideReserved(o, rel, e); ok {
		return v
	}
	visible := e.shownBy(p.m, rel)
	switch o.class() {
	case classRead:
		return decideRead(o, rel, e, visible, p)
	case classChange:
		return decideChange(o, rel, e, visible, p)
	default: // classMake
		return decideMake(o, rel, e, visible, p)
	}
}

// decideReserved answers ops on the names a view reserves, whatever the
// grant says: the control directory, the folder root and the directories
// above it, the private temporary files and the appenders' lock. ok is
// false for any other name.
func decideReserved(o op, rel string, e entry) (verdict, bool) {
	switch {
	case rel == ControlDir:
		if o.class() == classRead {
			return allow, true // served by the control directory itself
		}
		return refuse(syscall.EACCES, ledger.KindDenied, ".acpfs is reserved"), true
	case aboveFolder(rel):
		// The folder, and in a view rooted at the repository holding
		// it the directories above it: every protocol name is reached
		// through them.
		if o.class() == classRead {
			return allow, true
		}
		return refuse(syscall.EACCES, ledger.KindDenied, "the folder root cannot be changed"), true
	case rel == StagingDir || strings.HasPrefix(rel, StagingDir+"/"):
		// The views' private temporary files: never shown, never
		// reachable by name.
		if o.class() == classMake && e.kind == kindAbsent {
			return refuse(syscall.EACCES, ledger.KindDenied, StagingDir+" is reserved"), true
		}
		return hidden("private temporary files of the views"), true
	case rel == protocol.LockFile:
		// The appenders' lock: whoever could open it could hold it.
		if o.class() == classMake && e.kind == kindAbsent {
			return refuse(syscall.EACCES, ledger.KindDenied, protocol.LockFile+" is reserved"), true
		}
		return hidden("the lock of the folder's appenders"), true
	}
	return verdict{}, false
}

// decideRead judges an op that reads what exists.
func decideRead(o op, rel string, e entry, visible bool, p policy) verdict {
	if v, ok := present(e, visible); !ok {
		return v
	}
	switch {
	case o == opOpenRead && !p.m.Readable(rel):
		return refuse(syscall.EACCES, ledger.KindDenied, "not readable under the grant")
	case o == opReadlink && e.kind != kindSymlink:
		return verdict{errno: syscall.EINVAL}
	}
	return allow
}

// decideChange judges an op that changes what exists.
func decideChange(o op, rel string, e entry, visible bool, p policy) verdict {
	if v, ok := present(e, visible); !ok {
		return v
	}
	if v := checkName(o, rel, p); v.errno != 0 {
		return v
	}
	if managed(rel) && o != opOpenWrite {
		// Opening is judged by the protocol handles, which accept
		// appends and identical rewrites only.
		return managedChange(o, rel)
	}
	if o == opRenameFrom && e.kind == kindDir && !p.m.ShowsAll(rel) {
		// Paths are what the grant judges: moving a directory moves
		// what lies below it, hidden entries included (another
		// agent's scratch, the run directory), to paths the grant
		// may show.
		return refuse(syscall.EACCES, ledger.KindDenied, "a directory holding entries the view does not show cannot be renamed")
	}
	if requiredDocs[rel] && (o == opUnlink || o == opRenameFrom) {
		// Renaming another file over it (an editor's save) is fine.
		return refuse(syscall.EPERM, ledger.KindDenied, "a document the protocol requires can be edited, not removed or renamed away")
	}
	if (o == opUnlink || o == opRenameFrom || o == opRmdir) && p.deliverable != nil && p.deliverable(rel) {
		// The same for the deliverables protocol.json names, and the
		// directories that hold them.
		return refuse(syscall.EPERM, ledger.KindDenied, "a deliverable protocol.json names can be edited, not removed or renamed away")
	}
	return allow
}

// decideMake judges an op that makes a new name.
func decideMake(o op, rel string, e entry, visible bool, p policy) verdict {
	if !utf8.ValidString(rel) {
		return refuse(syscall.EILSEQ, ledger.KindDenied, whyNotUTF8)
	}
	if v := checkName(o, rel, p); v.errno != 0 {
		return v
	}
	switch {
	case grants.IsReservedName(path.Base(rel)):
		// It would make the directory holding it look like a run
		// directory, which no view shows: an agent could hide a
		// folder others need.
		return refuse(syscall.EACCES, ledger.KindDenied, "a name acpfs reserves for run and ledger directories")
	case managed(rel) && o == opRenameTo:
		return refuse(syscall.EPERM, ledger.KindDenied, "protocol files cannot be renamed or replaced")
	case managed(rel):
		return refuse(syscall.EPERM, ledger.KindDenied, "protocol files are created by acpfs init")
	case e.kind == kindConcealed || (e.kind != kindAbsent && !visible):
		// The name is taken by an entry the agent cannot see.
		// EEXIST would tell it so; EACCES is what a name it may not
		// write answers (see docs/threat-model.md).
		return refuse(syscall.EACCES, ledger.KindDenied, "name held by an entry the view does not show")
	case o == opLink:
		return refuse(syscall.EACCES, ledger.KindDenied, "hard links are not allowed in a view; copy the file instead")
	case e.kind != kindAbsent && o != opRenameTo:
		return verdict{errno: syscall.EEXIST}
	}
	return allow
}

// whyNotUTF8 is why a name that is not valid UTF-8 is never shown or
// made: the ledger could not record it exactly.
const whyNotUTF8 = "a name that is not valid UTF-8, which the ledger cannot record exactly"

// requiredDocs are the documents every ACP folder must hold (validate
// fails without them).
var requiredDocs = func() map[string]bool {
	m := map[string]bool{}
	for _, d := range protocol.ProtocolDocs() {
		m[d] = true
	}
	return m
}()

// managedChange refuses a change to events.jsonl or protocol.json other
// than through their handles.
func managedChange(o op, rel string) verdict {
	switch o {
	case opUnlink, opRmdir:
		return refuse(syscall.EPERM, ledger.KindDenied, "protocol files cannot be removed")
	case opRenameFrom:
		return refuse(syscall.EPERM, ledger.KindDenied, "protocol files cannot be renamed or replaced")
	case opSetxattr, opRemovexattr:
		return refuse(syscall.EPERM, ledger.KindDenied, "protocol files are maintained by acpfs")
	}
	if rel == protocol.EventsFile {
		return refuse(syscall.EPERM, ledger.KindAppendRejected, "events.jsonl is append-only and maintained by acpfs")
	}
	return refuse(syscall.EPERM, ledger.KindDenied, "protocol.json is maintained by acpfs")
}

// checkName applies the write rules every change shares: the grant must
// let the agent write the name, and it must not be a handed-over
// artifact or a frozen deliverable (or a directory holding one).
func checkName(o op, rel string, p policy) verdict {
	switch {
	case !p.m.Writable(rel):
		return refuse(syscall.EACCES, ledger.KindDenied, "not writable under the grant")
	}
	if _, ok := p.handoffs[rel]; ok {
		return refuse(syscall.EACCES, ledger.KindDenied, "a handed-over artifact is read-only")
	}
	if p.frozen != nil && p.frozen(rel) {
		return refuse(syscall.EROFS, ledger.KindFrozenRefused, "frozen deliverable")
	}
	return allow
}

// targetVisible reports whether a symlink target (folder-relative, as
// place.symlinkTarget gives it) leads to something the view shows.
func targetVisible(m *grants.Matcher, t string) bool {
	if t == StagingDir || strings.HasPrefix(t, StagingDir+"/") || t == protocol.LockFile {
		return false
	}
	if grants.HasReservedSegment(t) {
		// Into a run or ledger directory, wherever it is.
		return false
	}
	return t == "" || m.Visible(t)
}

// classify judges a backing entry found as name in the directory dirfd,
// at the folder-relative path rel. Symlinks are judged here, at every
// lookup, from where they are now: a rename cannot turn a harmless link
// into a door.
func classify(m *grants.Matcher, c *concealed, loc place, dirfd int, name, rel string, st *unix.Stat_t) entry {
	e := entry{st: *st}
	if c.has(st) {
		// Whatever name leads here: the coordinator's run directory,
		// ledger, grants or a mountpoint.
		e.kind, e.why = kindConcealed, whyConcealed
		return e
	}
	if strings.HasPrefix(rel, protocol.ProtocolTempPrefix) {
		// acpfs's own, renamed over protocol.json within milliseconds.
		e.kind, e.why = kindConcealed, "a temporary file of a protocol.json rewrite"
		return e
	}
	if rel == protocol.LockFile {
		e.kind, e.why = kindConcealed, "the lock of the folder's appenders"
		return e
	}
	if !utf8.ValidString(name) {
		// The ledger is JSON: such a name would be recorded with its
		// invalid bytes replaced, so that several files share one
		// recorded name and the audit could not tell which was read.
		e.kind, e.why = kindConcealed, whyNotUTF8
		return e
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		e.kind = kindDir
		if grants.IsReservedName(name) || c.coordinatorDir(dirfd, name, st) {
			e.kind, e.why = kindConcealed, whyConcealed
		} else if !m.NamesGit() && c.gitDir(dirfd, name, st) {
			e.kind, e.why = kindConcealed, whyGit
		}
	case unix.S_IFREG:
		e.kind = kindFile
		if st.Nlink > 1 {
			e.kind, e.why = kindConcealed, "hard-linked file: its other names cannot be checked against the grant"
		}
	case unix.S_IFLNK:
		e.kind = kindSymlink
		target, err := readlinkat(dirfd, name)
		if err != nil {
			e.kind, e.why = kindConcealed, "unreadable symlink"
			break
		}
		if t, ok := loc.symlinkTarget(rel, target); !ok || !targetVisible(m, t) {
			e.kind, e.why = kindConcealed, "symlink target hidden or outside the folder"
		}
	default:
		e.kind, e.why = kindConcealed, "devices, fifos and sockets are not shown in a view"
	}
	return e
}
