// Package view is the core of a per-grant view of one collaboration
// folder: what a context grant lets its agent see, read and write,
// appends to events.jsonl validated by the ACP state machine, frozen
// deliverables kept read-only, and every read and refusal recorded in the
// ledger. Every operation of a view is a plain Go call here, returning a
// result and an errno, judged at one checkpoint (View.at) and recorded
// before it acts; nothing here knows FUSE. Package fs is the go-fuse
// adapter that turns kernel requests into these calls.
//
// Visibility and writability come from grants.Matcher, protocol rules
// from protocol.Log, and every decision is recorded through
// ledger.Writer.
package view

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/internal/fsid"
	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/protocol"
)

// ControlDir is the view's control directory, relative to the folder
// root; protocol.EventsFile and protocol.ProtocolFile are the other names
// the filesystem treats specially.
const ControlDir = ".acpfs"

// maxLine bounds one buffered event line. Real events are a few hundred
// bytes; the bound keeps a runaway writer from growing daemon memory.
const maxLine = 1 << 20

// Options configures one filesystem instance (one grant, one folder).
type Options struct {
	// Folder is the backing collaboration folder (absolute path), or
	// with Within the directory the view is rooted at, which holds it.
	Folder string
	// Within, when set, is the collaboration folder's path below Folder
	// (slash-separated, no "..": "collab"), for a view rooted at the
	// repository that holds the folder, so that deliverables outside it
	// are judged, recorded and frozen as the folder's own are. Names
	// beside the folder are then "../docs/report.md", in grants, the
	// ledger and .acpfs alike; the folder and the directories above it
	// cannot be moved or removed through the view.
	Within string
	// Grant is the grant in force; SetGrant replaces it on a live mount.
	Grant *grants.Grant
	// Hidden lists folder-relative directories that are never visible
	// (the run directory when it lies inside the folder).
	Hidden []string
	// Conceal lists absolute paths of what no view ever shows (the run
	// directory, the ledger's and the grants' directories, mountpoints),
	// wherever they lie: each is held by descriptor at start and judged
	// by device and inode at every lookup, so no other spelling of its
	// path, no symlink, bind mount or rename makes it visible. The
	// folder itself, when listed, is left out.
	Conceal []string
	// Shared, when set, is concealed the same way and may change while
	// the view serves: the coordinator's grant files, its views'
	// mountpoints and devices, shared by all of its views (see
	// fsid.Set). The view adds its own staging directories to it.
	Shared *fsid.Set
	// Log is the protocol log of Folder. Several filesystems (the
	// coordinator's mounts) may share one.
	Log *protocol.Log
	// Ledger receives every record. It may be shared too.
	Ledger *ledger.Writer
	// Settings are what the operator chose on the command line.
	Settings
	// Handoffs maps folder-relative paths to content-addressed copies
	// (absolute paths) that this agent must see instead of the live file:
	// an artifact handed to it reads exactly as it was handed over.
	Handoffs map[string]string
	// Gate, when set, is asked before every change to the folder, and
	// while it returns an error the view is read-only (EROFS): a host
	// cut off from the store of a collaboration served from several
	// hosts must not change its copy, or the copies would fork.
	Gate func() error
	// Fault, when set, is called at the start of every handler; tests use
	// it to inject panics. It is never set in production.
	Fault func(op, rel string)
	// Caller names the process a request comes from (the FUSE adapter
	// reads it from the request); nil: none is known.
	Caller func(ctx context.Context) (Caller, bool)
}

// Settings are a view's options that an operator chooses: one field per
// flag of acpfs mount, up and run (cmd/acpfs registerViewFlags), carried
// unchanged through mount.Options to New, and as JSON to the daemon of
// acpfs run. The zero value is the default of every flag.
type Settings struct {
	// Audit is how much reading is recorded: AuditCompact (default),
	// AuditOpens or AuditReads. AuditReads records every read request
	// (offset, length) in addition to the open; it disables passthrough
	// so that reads reach the daemon.
	Audit string `json:"audit,omitempty"`
	// MaxWriteBytes and MaxFiles are the write quotas of a grant that
	// sets none: 0 takes DefaultMaxWriteBytes and DefaultMaxFiles, a
	// negative value means no cap.
	MaxWriteBytes int64 `json:"max_write_bytes,omitempty"`
	MaxFiles      int64 `json:"max_files,omitempty"`
	// MaxHandles bounds the files open at once through this view (0:
	// DefaultMaxHandles; negative: only the process cap).
	MaxHandles int64 `json:"max_handles,omitempty"`
	// Passthrough lets the kernel read files the grant can only read
	// straight from the backing folder. Reads are then near native, but
	// the daemon never sees them: a descriptor opened before a grant
	// change that takes the file away keeps reading (measured on Linux
	// 6.18: not even aborting the connection stops it). The view then
	// records, at the change, a read that it cannot refuse. Off by
	// default: every read is served, and checked, by the daemon, and
	// warm reads come from the kernel's page cache.
	Passthrough bool `json:"passthrough,omitempty"`
}

// View is one per-grant view. Its methods are safe for concurrent use.
type View struct {
	folder     string
	loc        place // where the collaboration folder lies in the view
	b          *backing
	started    time.Time
	log        *protocol.Log
	ledger     *ledger.Writer
	auditReads bool
	audit      string // AuditCompact, AuditOpens or AuditReads
	quota      quota
	// openHandles counts this view's open files, bounded by maxHandles.
	openHandles atomic.Int64
	maxHandles  int64
	pending     atomic.Int64 // bytes of unfinished event lines held (limits.go)
	maxBytes    int64        // default caps when the grant sets none (0: none)
	maxFiles    int64
	repeats     *repeats // aggregation of repeated reads and refusals (AuditCompact)
	fault       func(op, rel string)
	gate        func() error
	hidden      []string
	conceal     *concealed

	// view holds the grant, its compiled matcher and the handoff map; it
	// is swapped whole when the grant changes so readers never lock.
	gv atomic.Pointer[grantView]

	// kern is the kernel the view is mounted in (nil before): cache
	// invalidations act on what it keeps.
	kern     atomic.Pointer[Kernel]
	callerOf func(ctx context.Context) (Caller, bool)
	// watch is the watcher that invalidates this view's kernel caches;
	// while it vouches for the folder, the kernel keeps entries and
	// attributes for CacheTimeout.
	watch atomic.Pointer[Watcher]
	links concealedLinks
	// entryGen counts the name changes (create, remove, rename) the
	// watcher saw in the folder and the grant changes: what a listing
	// shows (see dirSummary) and whether a file is still at its name
	// (handle.inPlace) change with any of them.
	entryGen atomic.Uint64
	// dirGen counts, of those, the ones that can change where a
	// directory lies or what it is (see placeStamp): every append
	// renames protocol.json, every editor's save a file, and neither
	// moves or marks a directory.
	dirGen      atomic.Uint64
	sums        summaries
	handles     handleSet
	stage       staging
	passthrough bool
	hashes      hashCache
	store       *hashStore // hashes kept beside the ledger, across mounts
	deferred    deferredHashes
	evHash      appendHasher
	lastErr     atomic.Pointer[string]

	// turn is closed and replaced whenever the protocol state may have
	// changed, waking readers of .acpfs/wait.
	turnMu sync.Mutex
	turn   chan struct{}
}

type grantView struct {
	grant    *grants.Grant
	matcher  *grants.Matcher
	handoffs map[string]string
}

// New builds the view for opts; the adapter that mounts it calls Attach.
func New(opts Options) (*View, error) {
	if opts.Folder == "" || !filepath.IsAbs(opts.Folder) {
		return nil, fmt.Errorf("folder %q must be an absolute path", opts.Folder)
	}
	if opts.Log == nil || opts.Ledger == nil || opts.Grant == nil {
		return nil, errors.New("fs: Log, Ledger and Grant are required")
	}
	at, err := placeOf(opts.Within)
	if err != nil {
		return nil, err
	}
	b, err := openBacking(opts.Folder, at)
	if err != nil {
		return nil, err
	}
	conceal, err := holdConcealed(opts.Conceal, opts.Shared)
	if err != nil {
		b.root.Close()
		return nil, err
	}
	var rootSt unix.Stat_t
	if err := unix.Fstat(b.rootFd(), &rootSt); err != nil {
		conceal.close()
		b.root.Close()
		return nil, fmt.Errorf("stat folder: %w", err)
	}
	// The folder itself cannot be hidden (a ledger lying directly in it
	// has the folder as its directory): its entries are, by name. Nor can
	// the directories on the way to it.
	conceal.drop(&rootSt)
	if at.within != "" {
		if at.folder, err = dropAbove(b, conceal); err != nil {
			conceal.close()
			b.root.Close()
			return nil, err
		}
		b.at = at
	}
	f := &View{
		folder:      opts.Folder,
		loc:         at,
		b:           b,
		started:     time.Now(),
		passthrough: opts.Passthrough,
		log:         opts.Log,
		ledger:      opts.Ledger,
		auditReads:  opts.Audit == AuditReads,
		audit:       opts.Audit,
		maxBytes:    capOr(opts.MaxWriteBytes, DefaultMaxWriteBytes),
		maxFiles:    capOr(opts.MaxFiles, DefaultMaxFiles),
		maxHandles:  capOr(opts.MaxHandles, DefaultMaxHandles),
		repeats:     newRepeats(),
		fault:       opts.Fault,
		gate:        opts.Gate,
		hidden:      opts.Hidden,
		conceal:     conceal,
		callerOf:    opts.Caller,
		turn:        make(chan struct{}),
	}
	if err := f.SetGrant(opts.Grant, opts.Handoffs); err != nil {
		conceal.close()
		b.root.Close()
		return nil, err
	}
	if p := opts.Ledger.Path(); p != "" {
		f.store = openHashStore(filepath.Join(filepath.Dir(p), HashStoreName))
	}
	f.stage.fd, f.stage.names = -1, map[string]string{}
	f.sweepStaging()
	f.startRepeats()
	return f, nil
}

// Close releases the folder descriptor once the view is unmounted.
// Its private temporary files go with it.
func (f *View) Close() error {
	// Every read recorded without its hash gets it before the view is
	// reported stopped.
	f.waitHashes()
	f.store.release()
	f.stopRepeats()
	f.removeStaging()
	f.conceal.close()
	return f.b.root.Close()
}

// Folder is the backing folder.
func (f *View) Folder() string { return f.folder }

// Handoffs returns the handed-over artifacts shown in place of live files.
func (f *View) Handoffs() map[string]string { return f.gv.Load().handoffs }

// Grant returns the grant in force.
func (f *View) Grant() *grants.Grant { return f.gv.Load().grant }

// SetGrant replaces the grant (and the handoffs shown) of a live view.
// Names that are no longer visible are dropped from the kernel's caches
// at once, so a revoked grant stops resolving paths immediately.
func (f *View) SetGrant(g *grants.Grant, handoffs map[string]string) error {
	m, err := grants.Compile(g, grants.MatcherOptions{Hidden: f.hidden})
	if err != nil {
		return fmt.Errorf("compile grant %s: %w", g.GrantID, err)
	}
	if cur := f.gv.Load(); cur != nil {
		// The repeats counted so far were judged under the grant in
		// force until now: its records say so.
		f.flushRepeatsAs(cur.grant)
	}
	old := f.gv.Swap(&grantView{grant: g, matcher: m, handoffs: handoffs})
	// What a directory shows (its listing, size and times) follows the
	// grant: cached summaries are stale, and so is what was found of
	// the directories above a name (the grant says whether git
	// directories are hidden).
	f.entryGen.Add(1)
	f.dirGen.Add(1)
	// Which version of the grant was in force, for the audit (once per
	// version: a grant file rewritten unchanged is no new version).
	if h := g.Hash(); old == nil || old.grant.Hash() != h {
		if _, err := f.ledger.Append(ledger.Record{Kind: ledger.KindGrantApplied, Agent: g.AgentID, Grant: g.GrantID, SHA256: h}); err != nil {
			slog.Error("ledger: cannot record the grant applied", "grant", g.GrantID, "err", err)
		}
	}
	f.reachOpenFiles(g, m)
	if k := f.kernel(); k != nil {
		k.Rejudge(f.Keeps)
		// A path handed over (or no longer) changes from the live file to
		// the snapshot (or back): drop the cached entry either way.
		for rel := range handoffs {
			f.invalidateNameNow(rel)
		}
		if old != nil {
			for rel := range old.handoffs {
				f.invalidateNameNow(rel)
			}
		}
	}
	f.wake()
	return nil
}

// Keeps reports whether the kernel may keep the entry it knows at the
// folder-relative name after a grant change: the view still shows it,
// judged as a lookup would judge it (a symlink by its target, a file by
// its link count), not by its name alone.
func (f *View) Keeps(name string) bool {
	if name == ControlDir {
		return true
	}
	if _, ok := f.gv.Load().handoffs[name]; ok {
		return true
	}
	return f.shows(name)
}

// wake tells .acpfs/wait readers that the state may have changed.
func (f *View) wake() {
	f.turnMu.Lock()
	close(f.turn)
	f.turn = make(chan struct{})
	f.turnMu.Unlock()
}

func (f *View) turnChan() <-chan struct{} {
	f.turnMu.Lock()
	defer f.turnMu.Unlock()
	return f.turn
}

// record writes one ledger record for this view's agent. The error only
// matters to reads, which fail closed (see recordRead); a refusal is
// refused whether or not its record could be written.
func (f *View) record(ctx context.Context, kind ledger.Kind, op ledger.Op, rel, sha, detail string) error {
	_, err := f.recordFull(ctx, kind, op, rel, sha, detail)
	return err
}

// recordChange records a change before it is made. Without its record
// the change does not happen: the ledger must hold every write an agent
// made, so a ledger that cannot be written refuses them all (EIO).
func (f *View) recordChange(ctx context.Context, op ledger.Op, rel, detail string) syscall.Errno {
	if err := f.record(ctx, ledger.KindWrite, op, rel, "", detail); err != nil {
		f.ledgerDown(op, rel, err)
		return syscall.EIO
	}
	return 0
}

// errLedgerFull is why a view refuses everything while its ledger's
// writes fail.
var errLedgerFull = errors.New("the ledger's last write failed and its file is still unwritable (disk full, immutable)")

// ledgerDown says why a recorded operation was refused.
func (f *View) ledgerDown(op ledger.Op, rel string, err error) {
	what := "the ledger cannot be written"
	if errors.Is(err, ledger.ErrBroken) {
		what = "the ledger was tampered with and is stopped until an operator repairs it"
	}
	f.setLastError(fmt.Sprintf("%s %s: %s; recorded operations are refused (EIO): %v", op, displayPath(rel), what, err))
}

// recordRead records a read before the open returns. Without its record
// the read does not happen: an agent must never see content the ledger
// cannot prove it saw.
func (f *View) recordRead(ctx context.Context, rel, sha, detail string) syscall.Errno {
	k := repeatKey{kind: ledger.KindRead, op: ledger.OpOpen, path: rel, sha: sha}
	if err := f.recordOnce(ctx, k, func() error { return f.record(ctx, ledger.KindRead, ledger.OpOpen, rel, sha, detail) }); err != nil {
		f.ledgerDown(ledger.OpOpen, rel, err)
		return syscall.EIO
	}
	return 0
}

// deny records a refusal, remembers it for .acpfs/last-error and returns
// errno so call sites read `return f.deny(...)`.
//
// A refusal whose record cannot be written is answered with EIO: the
// ledger must show every refusal, and an agent probing hidden names must
// not learn more from a broken ledger than from a working one.
func (f *View) deny(ctx context.Context, kind ledger.Kind, op ledger.Op, rel string, errno syscall.Errno, why string) syscall.Errno {
	return f.denyAs(ctx, kind, op, rel, errno, why, why)
}

// denyAs is deny for a reason that holds text the agent chose (a refused
// event line): class names the kind of refusal for the aggregation, so
// that varying the text does not make every refusal a new full record.
func (f *View) denyAs(ctx context.Context, kind ledger.Kind, op ledger.Op, rel string, errno syscall.Errno, why, class string) syscall.Errno {
	if err := f.recordRefusal(ctx, kind, op, rel, why, class); err != nil {
		f.ledgerDown(op, rel, err)
		return syscall.EIO
	}
	f.setLastError(fmt.Sprintf("%s %s: %s (%s)", op, displayPath(rel), why, errnoName(errno)))
	return errno
}

// maxRefusalDetail bounds the reason a refusal record keeps: enough to
// name the rule and the event, not a channel for an agent to fill the
// ledger with.
const maxRefusalDetail = 512

// recordRefusal records a refusal once per (kind, op, path, class) in
// full and counts its repeats (see recordOnce).
//
// Past maxRefusalPaths distinct refused paths in a view session, refusals
// are kept per directory instead (path "dir/*"): probing many made-up
// names costs one record per directory, not one per name.
func (f *View) recordRefusal(ctx context.Context, kind ledger.Kind, op ledger.Op, rel, why, class string) error {
	k := repeatKey{kind: kind, op: op, path: rel, why: class}
	if f.audit == AuditCompact && f.repeats.crowded(k) {
		dir := path.Dir(rel)
		if dir == "." {
			dir = ""
		}
		rel = strings.TrimPrefix(dir+"/*", "/")
		k.path = rel
		why = "names refused past the view's distinct-path budget, counted per directory: " + why
	}
	return f.recordOnce(ctx, k, func() error { return f.record(ctx, kind, op, rel, "", clip(why, maxRefusalDetail)) })
}

// clip cuts s to at most n bytes at a rune boundary, saying so.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… [%d bytes cut]", s[:cut], len(s)-cut)
}

func (f *View) setLastError(msg string) {
	s := time.Now().UTC().Format(time.RFC3339) + " " + msg + "\n"
	f.lastErr.Store(&s)
}

// LastError is the text of .acpfs/last-error.
func (f *View) LastError() string {
	if p := f.lastErr.Load(); p != nil {
		return *p
	}
	return ""
}

// Guard turns a panic in a handler into EIO and a ledger record, so that
// a bug answers one request with an error instead of killing the mount.
// Every entry point of the adapter defers it.
func (f *View) Guard(ctx context.Context, op ledger.Op, rel string, errno *syscall.Errno) {
	if r := recover(); r != nil {
		slog.Error("panic in handler", "op", op, "path", rel, "panic", r, "stack", string(debug.Stack()))
		f.record(ctx, ledger.KindPanic, op, rel, "", fmt.Sprint(r))
		f.setLastError(fmt.Sprintf("%s %s: internal error (EIO)", op, displayPath(rel)))
		*errno = syscall.EIO
	}
}

// Enter runs the fault hook; handlers call it first, under Guard.
func (f *View) Enter(op ledger.Op, rel string) {
	if f.fault != nil {
		f.fault(string(op), rel)
	}
}

func (f *View) matcher() *grants.Matcher { return f.gv.Load().matcher }

func (f *View) participant() string { return f.gv.Load().grant.ParticipantID() }

// frozen reports whether rel is a frozen deliverable or a directory
// holding one (moving or removing the directory would move the
// deliverable out from under its path). Hard links, the other way to
// reach a frozen file's bytes, are never shown in a view.
func (f *View) frozen(rel string) bool {
	frozen, err := f.log.FrozenNow()
	if err != nil {
		slog.Warn("protocol refresh failed", "err", err)
	}
	if len(frozen) == 0 {
		return false
	}
	if _, ok := frozen[rel]; ok {
		return true
	}
	for p := range frozen {
		p = f.loc.keyName(p)
		if p == rel || aboveFolder(rel) || strings.HasPrefix(p, rel+"/") {
			return true
		}
	}
	return false
}

// policy is the policy input of the grant in force.
func (f *View) policy() policy {
	v := f.gv.Load()
	return policy{m: v.matcher, handoffs: v.handoffs, frozen: f.frozen, deliverable: f.deliverable}
}

// managed reports whether rel is a protocol file that only acpfs writes.
func managed(rel string) bool { return rel == protocol.EventsFile || rel == protocol.ProtocolFile }

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

func displayPath(rel string) string {
	if rel == "" {
		return "/"
	}
	return rel
}

func errnoName(e syscall.Errno) string {
	switch e {
	case syscall.ENOENT:
		return "ENOENT"
	case syscall.EACCES:
		return "EACCES"
	case syscall.EPERM:
		return "EPERM"
	case syscall.EROFS:
		return "EROFS"
	case syscall.EINVAL:
		return "EINVAL"
	case syscall.EIO:
		return "EIO"
	}
	return e.Error()
}

// symlinkTarget resolves a symlink target found at the folder-relative
// name rel. It returns the target's folder-relative name, in the one
// spelling the grant judges (a link beside the folder that leads into it
// names "oracle.md", not "../collab/oracle.md"), and false when the target
// is absolute or climbs above the view's root: the kernel follows symlinks
// itself, so either would lead out of the view.
func (p place) symlinkTarget(rel, target string) (string, bool) {
	if strings.HasPrefix(target, "/") {
		return "", false
	}
	vp, ok := p.viewPath(rel)
	if !ok {
		return "", false
	}
	// Resolved in view paths, which have no ".." segments: popping past
	// the view's root is then a plain empty stack.
	var out []string
	if d := path.Dir(vp); d != "." && d != "" {
		out = strings.Split(d, "/")
	}
	named := false // a name of the target itself came before
	for _, seg := range strings.Split(target, "/") {
		switch seg {
		case "", ".":
		case "..":
			if len(out) == 0 || named {
				// "a/../b" means b only if a is a directory, not a
				// symlink leading elsewhere: the kernel resolves it
				// physically, so a lexical judgement could be wrong.
				return "", false
			}
			out = out[:len(out)-1]
		default:
			out = append(out, seg)
			named = true
		}
	}
	return p.nameOf(strings.Join(out, "/")), true
}

// handleSet is the set of open file handles of a view, so that a grant
// change reaches descriptors opened under the previous grant.
type handleSet struct {
	mu sync.Mutex
	m  map[*handle]struct{}
}

func (s *handleSet) add(h *handle) {
	s.mu.Lock()
	if s.m == nil {
		s.m = make(map[*handle]struct{})
	}
	s.m[h] = struct{}{}
	s.mu.Unlock()
}

func (s *handleSet) remove(h *handle) {
	s.mu.Lock()
	delete(s.m, h)
	s.mu.Unlock()
}

func (s *handleSet) list() []*handle {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*handle, 0, len(s.m))
	for h := range s.m {
		out = append(out, h)
	}
	return out
}

// reachOpenFiles applies a new grant to the files already open. Reads
// the daemon serves check the grant each time (handle.readable), but the
// kernel may hold their pages: those are dropped, so that the next read
// and the next fault of a mapping reach the check. Reads of a
// passthrough descriptor never reach the daemon: the view cannot stop
// them, so it records them now, as reads of whatever the file will hold.
func (f *View) reachOpenFiles(g *grants.Grant, m *grants.Matcher) {
	for _, h := range f.handles.list() {
		p := h.path()
		if m.Readable(p) || h.isSnapshotOf(p) || h.isStaged(p) {
			continue
		}
		if h.passthrough {
			r := ledger.Record{Kind: ledger.KindRead, Agent: g.AgentID, Grant: g.GrantID, Path: p, Op: ledger.OpPassthrough,
				Detail: "descriptor opened under an earlier grant: its later reads cannot be refused or seen"}
			if _, err := f.ledger.Append(r); err != nil {
				slog.Error("ledger append failed", "kind", r.Kind, "path", p, "err", err)
			}
			continue
		}
		if h.node != nil {
			h.node.DropContent(true)
		}
	}
}

// capOr is v, def when v is 0, and no cap (0) when v is negative.
func capOr(v, def int64) int64 {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}
