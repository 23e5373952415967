// Package mount starts and stops acpfs views: one grant on one
// mountpoint, the coordinator that mounts every grant of a run directory,
// and private mount namespaces for sandboxed commands. It owns the
// lifecycle; view/ owns the behaviour of a view and fs/ adapts it to FUSE.
package mount

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	acpfs "github.com/acpfs/acpfs/fs"
	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/internal/fsid"
	"github.com/acpfs/acpfs/internal/sandbox"
	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/protocol"
	"github.com/acpfs/acpfs/view"
)

// maxWrite is the largest FUSE request a view takes (see Start).
const maxWrite = 128 << 10

// Options are what the operator chose for every view a command mounts:
// the view's own settings and how the kernel mounts it. acpfs mount, up
// and run fill one from their flags (cmd/acpfs registerViewFlags) and it
// reaches each view unchanged: Config, CoordinatorConfig and RunConfig
// embed it.
type Options struct {
	view.Settings
	// AllowOther lets other uids use the mount, with the kernel checking
	// permissions (default_permissions) so they do not act as the daemon.
	AllowOther bool `json:"allow_other,omitempty"`
	// Debug logs every FUSE request.
	Debug bool `json:"debug,omitempty"`
}

// Config describes one view.
type Config struct {
	Options
	Folder string // backing collaboration folder
	// ViewRoot, when set, is a directory holding Folder (the repository
	// of an external-deliverables folder) that the view is rooted at
	// instead of Folder (see fs.Options.Within).
	ViewRoot   string
	Mountpoint string
	Grant      *grants.Grant
	// Gate makes the view read-only while it returns an error (see
	// fs.Options.Gate).
	Gate func() error
	// GrantPath, when set, is watched: a changed grant applies to the
	// live view, a revoked or removed one hides everything at once.
	GrantPath string
	Log       *protocol.Log
	Ledger    *ledger.Writer
	// Hidden lists what the view never shows (the run directory, the
	// ledger's and the grant's directories): each is concealed by
	// identity wherever it lies in Folder, and no mountpoint may lie in
	// one. Conceal adds entries concealed the same way that a mountpoint
	// may lie in (the coordinator's mount root).
	Hidden  []string
	Conceal []string
	// Shared is concealed by every view given it, and changes while
	// they serve (see fsid.Set): Start adds the view's mountpoint, its
	// grant file and, once mounted, its device, so that none of them is
	// shown by any view of the coordinator wherever it goes (moved into
	// the folder, bind-mounted there). Without it, the view has a Set of
	// its own.
	Shared *fsid.Set
	// Owner, when set, makes the view serve that one user (see Owner):
	// it implies AllowOther.
	Owner    *Owner
	Handoffs map[string]string
	// Watcher, when set, is shared with other views of the same folder.
	Watcher *view.Watcher
	// Fault is passed to view.Options.Fault (tests only).
	Fault func(op, rel string)
}

// Mount is one running view.
type Mount struct {
	cfg      Config
	FS       *acpfs.FS
	server   *fuse.Server
	watcher  *view.Watcher
	ownWatch bool
	grantW   *fsnotify.Watcher
	stopOnce sync.Once
	stopErr  error
	// served is closed when the serve loop ends: the kernel unmounted
	// the view (acpfs umount) or its connection was aborted.
	served chan struct{}
	// realMP is the mountpoint with symbolic links resolved, as
	// mountinfo lists it; dev is the view's device (major:minor), which
	// tells our mount from anything mounted there later.
	realMP, dev string
	// ownShared is set when cfg.Shared is this view's own.
	ownShared bool
}

// Start mounts the view and returns once the kernel serves it.
func Start(cfg Config) (*Mount, error) {
	folder, err := filepath.Abs(cfg.Folder)
	if err != nil {
		return nil, err
	}
	cfg.Folder = folder
	root, within, err := viewRoot(folder, cfg.ViewRoot)
	if err != nil {
		return nil, err
	}
	realMP, err := checkMountpointFor(cfg, root)
	if err != nil {
		return nil, err
	}
	readyLog(cfg.Log, folder)
	own := cfg.Shared == nil
	if own {
		cfg.Shared = fsid.NewSet()
	}
	holdShared(cfg)
	if own {
		// A coordinator holds its run directory's entries in the set it
		// shares (Coordinator.holdRunDir).
		holdHiddenEntries(cfg)
	}
	m, err := newMount(cfg, root, within)
	if err != nil {
		if own {
			cfg.Shared.Close()
		}
		return nil, err
	}
	m.ownShared = own
	server, err := m.serve(fuseOptions(cfg))
	if err != nil {
		m.watcher.Remove(m.FS.View)
		m.FS.Close()
		if m.ownWatch {
			m.watcher.Close()
		}
		if own {
			cfg.Shared.Close()
		}
		return nil, fmt.Errorf("mount %s: %w", cfg.Mountpoint, err)
	}
	m.server = server
	m.served = make(chan struct{})
	go func() { server.Wait(); close(m.served) }()
	if err := m.started(realMP); err != nil {
		m.Stop()
		return nil, err
	}
	return m, nil
}

// checkMountpointFor refuses a mountpoint that is no place for the view
// (see CheckMountpointPlace and CheckMountpoint) and returns it with
// symbolic links resolved, as mountinfo will list the view: resolved
// now, while it is a plain directory.
func checkMountpointFor(cfg Config, root string) (string, error) {
	if err := CheckMountpointPlace(cfg.Mountpoint, root, cfg.Hidden); err != nil {
		return "", err
	}
	if err := CheckMountpoint(cfg.Mountpoint); err != nil {
		return "", err
	}
	realMP, err := filepath.EvalSymlinks(cfg.Mountpoint)
	if err != nil {
		return "", fmt.Errorf("mountpoint: %w", err)
	}
	return realMP, nil
}

// readyLog puts the folder's protocol log in step before a view serves
// it: a daemon killed between an event line and its protocol.json
// rewrite leaves the two out of step. Views serve protocol.json from the
// derived state, so its rewrite leaves the appends' critical path
// (docs/benchmarks.md).
func readyLog(log *protocol.Log, folder string) {
	if changed, err := log.Reconcile(); err != nil {
		slog.Warn("cannot reconcile protocol.json with events.jsonl", "folder", folder, "err", err)
	} else if changed {
		slog.Warn("protocol.json was behind events.jsonl (interrupted append); rewritten", "folder", folder)
	}
	log.DeferProtocolWrites()
}

// newMount makes the view of cfg, rooted at root, and adds it to its
// watcher (cfg.Watcher, or one of its own).
func newMount(cfg Config, root, within string) (*Mount, error) {
	f, err := acpfs.New(view.Options{
		Settings: cfg.Settings, Folder: root, Within: within, Grant: cfg.Grant, Hidden: relHidden(cfg.Folder, cfg.Hidden), Conceal: concealList(cfg), Shared: cfg.Shared,
		Log: cfg.Log, Ledger: cfg.Ledger, Handoffs: cfg.Handoffs, Fault: cfg.Fault, Gate: cfg.Gate,
	})
	if err != nil {
		return nil, err
	}
	m := &Mount{cfg: cfg, FS: f, watcher: cfg.Watcher}
	if m.watcher == nil {
		if m.watcher, err = view.NewWatcher(root, relHidden(root, cfg.Hidden)); err != nil {
			return nil, err
		}
		m.ownWatch = true
	}
	m.watcher.Add(f.View)
	return m, nil
}

// fuseOptions are how the kernel mounts the view of cfg.
func fuseOptions(cfg Config) *gofs.Options {
	// The view gives each entry and attribute its own timeout (long
	// while the watcher sees the whole folder, see fs.CacheTimeout);
	// anything it does not is not cached. Negative entries are never
	// cached, so a name a new grant reveals appears at once.
	zero := time.Duration(0)
	opts := &gofs.Options{
		EntryTimeout:    &zero,
		AttrTimeout:     &zero,
		NegativeTimeout: &zero,
		// A file whose mode is 0000 shows 0000 (go-fuse would show
		// 0644): the kernel checks permissions on what the view says.
		NullPermissions: true,
		MountOptions: fuse.MountOptions{
			FsName:     "acpfs:" + cfg.Folder,
			Name:       "acpfs",
			AllowOther: cfg.AllowOther,
			// O_TRUNC must arrive with the open (not as a separate
			// truncate before it) so protocol.json rewrites can be judged
			// as a whole and events.jsonl can refuse O_TRUNC at open.
			ExtraCapabilities: fuse.CAP_ATOMIC_O_TRUNC,
			DirectMount:       os.Geteuid() == 0,
			// go-fuse keeps one buffer of MaxWrite for every request
			// being read or served, a write's for as long as it waits
			// (an append queues for the log's lock): at 1 MiB, 16
			// views with writers queued held 70 MB and more. 128 KiB
			// (the kernel's default) bounds that to a tenth; a larger
			// write only takes more requests.
			MaxWrite: maxWrite,
			Debug:    cfg.Debug,
		},
	}
	if cfg.AllowOther || cfg.Owner != nil {
		opts.MountOptions.AllowOther = true
		opts.MountOptions.Options = append(opts.MountOptions.Options, "default_permissions")
	}
	return opts
}

// started does what follows the kernel's first answer: the supervisor
// learns the view's connection, /dev/fuse is kept from every command this
// process starts, the ledger records the mount and the grant file is
// watched. The caller stops m on an error.
func (m *Mount) started(realMP string) error {
	if mi, ok, _ := mountAt(realMP); ok && mi.IsView() {
		m.realMP, m.dev = realMP, mi.Dev
		if d, ok := devNumber(mi.Dev); ok {
			m.cfg.Shared.AddDev(d)
		}
		// The supervisor aborts this connection if the daemon dies in a
		// way that would leave the view hanging.
		superviseConn(mi.Dev, true)
	}
	// go-fuse's direct mount opens /dev/fuse without O_CLOEXEC: every
	// command this process started afterwards (the sandboxed command of
	// `acpfs run` first of all) would inherit the device and could answer
	// the kernel's requests itself, bypassing every check.
	if err := closeOnExecFUSE(); err != nil {
		return fmt.Errorf("protect /dev/fuse: %w", err)
	}
	g := m.cfg.Grant
	if _, err := m.cfg.Ledger.Append(ledger.Record{Kind: ledger.KindMountStarted, Agent: g.AgentID, Grant: g.GrantID, Path: m.cfg.Mountpoint, PID: uint32(os.Getpid())}); err != nil {
		slog.Error("ledger", "err", err)
	}
	if m.cfg.GrantPath != "" {
		return m.watchGrant()
	}
	return nil
}

// serve mounts the view and starts serving it, as gofs.Mount does, with
// the owner guard in front when the view has an owner.
func (m *Mount) serve(opts *gofs.Options) (*fuse.Server, error) {
	var raw fuse.RawFileSystem = gofs.NewNodeFS(m.FS.Root(), opts)
	if o := m.cfg.Owner; o != nil {
		g := m.cfg.Grant
		guard, err := newOwnerFS(raw, *o, func(op ledger.Op, c fuse.Caller) {
			r := ledger.Record{Kind: ledger.KindDenied, Agent: g.AgentID, Grant: g.GrantID, Op: op, PID: c.Pid,
				Detail: fmt.Sprintf("uid %d is not the view's owner (uid %d): every operation of this uid is refused", c.Uid, o.UID)}
			if _, err := m.cfg.Ledger.Append(r); err != nil {
				slog.Error("ledger", "err", err)
			}
		})
		if err != nil {
			return nil, err
		}
		raw = guard
	}
	server, err := fuse.NewServer(paceFS{raw}, m.cfg.Mountpoint, &opts.MountOptions)
	if err != nil {
		return nil, err
	}
	liveViews.Add(1)
	go func() {
		server.Serve()
		liveViews.Add(-1)
	}()
	if err := server.WaitMount(); err != nil {
		return nil, err
	}
	return server, nil
}

// watchGrant reloads the grant when its file changes. The directory is
// watched, not the file, because grant tools replace the file by rename.
func (m *Mount) watchGrant() error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	if err := w.Add(filepath.Dir(m.cfg.GrantPath)); err != nil {
		w.Close()
		return fmt.Errorf("watch grant: %w", err)
	}
	m.grantW = w
	go func() {
		for {
			select {
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if filepath.Clean(ev.Name) == filepath.Clean(m.cfg.GrantPath) {
					m.ReloadGrant()
				}
			case _, ok := <-w.Errors:
				if !ok {
					return
				}
			}
		}
	}()
	return nil
}

// ReloadGrant reads the grant file again and applies it. A grant that is
// gone or no longer valid fails closed: the view shows nothing.
func (m *Mount) ReloadGrant() {
	// A rewrite is a new file: conceal it too, and let the one it
	// replaced go once it has no name left (first: it makes room in a
	// full set).
	m.cfg.Shared.Prune()
	if err := m.cfg.Shared.Hold(m.cfg.GrantPath); err != nil {
		slog.Warn("hold the grant file", "grant", m.cfg.GrantPath, "err", err)
	}
	if m.ownShared {
		// Grants and homes made since are the run directory's too.
		holdHiddenEntries(m.cfg)
	}
	g, err := grants.Load(m.cfg.GrantPath)
	if err != nil {
		slog.Warn("grant reload failed; hiding everything", "grant", m.cfg.GrantPath, "err", err)
		closed := *m.FS.Grant()
		closed.Revoked = true
		g = &closed
	}
	if err := m.FS.SetGrant(g, m.cfg.Handoffs); err != nil {
		slog.Error("apply grant", "err", err)
	}
}

// Wait blocks until the filesystem is unmounted.
func (m *Mount) Wait() { m.server.Wait() }

// Stop unmounts the view, records it and flushes the ledger. It is safe
// to call more than once. A view the kernel already unmounted (`acpfs
// umount`) is not unmounted again.
func (m *Mount) Stop() error {
	m.stopOnce.Do(func() {
		if m.grantW != nil {
			m.grantW.Close()
		}
		if m.server != nil {
			m.stopErr = m.unmount()
		}
		if m.dev != "" {
			superviseConn(m.dev, false)
			if d, ok := devNumber(m.dev); ok {
				m.cfg.Shared.DropDev(d)
			}
		}
		m.watcher.Remove(m.FS.View)
		if m.ownWatch {
			m.watcher.Close()
		}
		m.FS.Close()
		if m.ownShared {
			m.cfg.Shared.Close()
		}
		g := m.FS.Grant()
		if _, err := m.cfg.Ledger.Append(ledger.Record{Kind: ledger.KindMountStopped, Agent: g.AgentID, Grant: g.GrantID, Path: m.cfg.Mountpoint, PID: uint32(os.Getpid())}); err != nil {
			slog.Error("ledger", "err", err)
		}
		if err := m.cfg.Ledger.Sync(); err != nil && m.stopErr == nil {
			m.stopErr = err
		}
	})
	return m.stopErr
}

// Unmounted reports whether the serve loop has ended: the view is no
// longer mounted, or its connection was aborted.
func (m *Mount) Unmounted() bool {
	select {
	case <-m.served:
		return true
	default:
		return false
	}
}

// serveGrace bounds how long Stop waits for the serve loop to end after
// the kernel accepted the unmount.
const serveGrace = 5 * time.Second

// unmount takes the view off its mountpoint. It acts only on the mount
// this process made (same device at the same place), treats "already
// unmounted" as success, retries while the view is busy (a shell still
// sitting in it), then detaches it lazily so that Stop never leaves it
// behind.
func (m *Mount) unmount() error {
	if m.dev == "" || os.Geteuid() != 0 {
		// Mounted through fusermount, or not found in mountinfo: let
		// go-fuse unmount it.
		if m.Unmounted() {
			return nil
		}
		return unmountServer(m.server, m.cfg.Mountpoint, m.Unmounted)
	}
	for i := 0; i < 20; i++ {
		if m.Unmounted() || !m.stillMounted() {
			// Unmounted from outside (`acpfs umount`), or aborted: there
			// is nothing to unmount, only a dead mount to detach.
			m.detachIfDead()
			return nil
		}
		err := syscall.Unmount(m.realMP, 0)
		if err == nil || errors.Is(err, syscall.EINVAL) {
			// Unmounted now (or just before, from outside): the serve
			// loop ends once the kernel has said goodbye.
			select {
			case <-m.served:
			case <-time.After(serveGrace):
			}
			return nil
		}
		select {
		case <-m.served:
		case <-time.After(50 * time.Millisecond):
		}
	}
	if !m.stillMounted() {
		return nil
	}
	if err := syscall.Unmount(m.realMP, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
		return fmt.Errorf("unmount %s: %w", m.cfg.Mountpoint, err)
	}
	return nil
}

// stillMounted tells whether our view is still the mount at realMP.
func (m *Mount) stillMounted() bool {
	mis, err := readMountInfo()
	if err != nil {
		return true // cannot tell: try to unmount
	}
	return m.mountedIn(mis)
}

// mountedIn is stillMounted against a mount table already read.
func (m *Mount) mountedIn(mis []MountInfo) bool {
	mi, ok := topmostAt(mis, m.realMP)
	return ok && mi.Dev == m.dev
}

// detachIfDead detaches the view when its serve loop ended but it is
// still mounted (its connection was aborted): a dead mount must not stay.
func (m *Mount) detachIfDead() {
	if m.Unmounted() && m.stillMounted() {
		_ = syscall.Unmount(m.realMP, syscall.MNT_DETACH)
	}
}

// unmountServer unmounts through go-fuse (fusermount when not root),
// retrying while the mount is busy, then detaches it lazily. gone tells
// whether the kernel has already unmounted it, which is success.
func unmountServer(s *fuse.Server, mountpoint string, gone func() bool) error {
	var err error
	for i := 0; i < 20; i++ {
		if gone() {
			return nil
		}
		if err = s.Unmount(); err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	if gone() {
		return nil
	}
	if derr := syscall.Unmount(mountpoint, syscall.MNT_DETACH); derr != nil {
		return fmt.Errorf("unmount %s: %w", mountpoint, err)
	}
	return nil
}

// ErrStale means the mountpoint belongs to a FUSE daemon that is gone.
var ErrStale = errors.New("transport endpoint is not connected: a previous acpfs mount died; run `acpfs umount` on it")

// ErrMountpoint marks a mountpoint that acpfs refuses to mount on.
var ErrMountpoint = errors.New("unusable mountpoint")

// mountpointError is a refusal of a mountpoint, with one clear line.
type mountpointError struct{ msg string }

func (e *mountpointError) Error() string        { return e.msg }
func (e *mountpointError) Is(target error) bool { return target == ErrMountpoint }

func refuseMountpoint(format string, args ...any) error {
	return &mountpointError{msg: fmt.Sprintf(format, args...)}
}

// CheckMountpoint verifies that p is an existing, empty directory that is
// not a mount point already (of anything: another view, a dead view, a
// tmpfs). A dead view is reported as ErrStale, with the command that
// clears it; every other refusal is an ErrMountpoint.
func CheckMountpoint(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		if errors.Is(err, syscall.ENOTCONN) {
			return fmt.Errorf("mountpoint %s: %w", p, ErrStale)
		}
		if errors.Is(err, os.ErrNotExist) {
			return refuseMountpoint("mountpoint %s does not exist (create an empty directory for the view)", p)
		}
		return fmt.Errorf("mountpoint: %w", err)
	}
	if !st.IsDir() {
		return refuseMountpoint("mountpoint %s is not a directory", p)
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return fmt.Errorf("mountpoint: %w", err)
	}
	if mi, ok, err := isMountpoint(real); err != nil {
		return fmt.Errorf("mountpoint: %w", err)
	} else if ok {
		what := "a mount point"
		if mi.IsView() {
			what = "an acpfs view"
		}
		return refuseMountpoint("mountpoint %s is already %s (%s); unmount it first or choose another directory", p, what, mi.describe())
	}
	f, err := os.Open(real)
	if err != nil {
		return fmt.Errorf("mountpoint: %w", err)
	}
	names, err := f.Readdirnames(1)
	f.Close()
	if len(names) > 0 {
		return refuseMountpoint("mountpoint %s is not empty (it holds %s); mount views on an empty directory", p, names[0])
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("mountpoint: %w", err)
	}
	return nil
}

// CheckMountpointPlace refuses a mountpoint that is the folder itself or
// lies inside it, or inside one of the hidden directories (the run
// directory, the ledger's directory): a view there would shadow the files
// it serves or show what must stay hidden.
func CheckMountpointPlace(p, folder string, hidden []string) error {
	mp := realPath(p)
	f := realPath(folder)
	switch {
	case mp == f:
		return refuseMountpoint("mountpoint %s is the collaboration folder itself; mount the view on an empty directory outside it", p)
	case within(mp, f):
		return refuseMountpoint("mountpoint %s is inside the collaboration folder %s; mount the view outside it", p, folder)
	}
	if same, _ := sameFile(p, folder); same {
		return refuseMountpoint("mountpoint %s is the collaboration folder itself; mount the view on an empty directory outside it", p)
	}
	// The same questions by identity: another spelling of the folder or
	// of a hidden directory (a bind mount, a symlink above it) must not
	// place a view where it serves itself or where no view may be.
	if found, err := fsid.LocateIn(folder, []string{p}); err == nil && len(found) > 0 {
		return refuseMountpoint("mountpoint %s is inside the collaboration folder %s (at %s); mount the view outside it", p, folder, found[0].Rel)
	}
	for _, h := range hidden {
		if h == "" {
			continue
		}
		if hr := realPath(h); mp == hr || within(mp, hr) {
			return refuseMountpoint("mountpoint %s is inside %s, which no view may show (run directory or ledger directory); mount the view elsewhere", p, h)
		}
		if st, err := os.Stat(h); err == nil && st.IsDir() {
			if found, err := fsid.LocateIn(h, []string{p}); err == nil && len(found) > 0 {
				return refuseMountpoint("mountpoint %s is inside %s, which no view may show (run directory or ledger directory); mount the view elsewhere", p, h)
			}
			if same, _ := sameFile(p, h); same {
				return refuseMountpoint("mountpoint %s is %s, which no view may show (run directory or ledger directory); mount the view elsewhere", p, h)
			}
		}
	}
	return nil
}

// concealList is everything the view conceals by identity: what it
// hides, what the caller adds and its own mountpoint (the directory
// under the mount, shown to nobody when uncovered).
// viewRoot is the directory a view is rooted at and the folder's path
// below it ("" when that is the folder). A root that does not hold the
// folder is refused.
func viewRoot(folder, root string) (string, string, error) {
	if root == "" {
		return folder, "", nil
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return "", "", err
	}
	rel, err := filepath.Rel(realPath(abs), realPath(folder))
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") || filepath.IsAbs(rel) {
		return "", "", fmt.Errorf("the view's root %s does not hold the collaboration folder %s", root, folder)
	}
	return abs, filepath.ToSlash(rel), nil
}

// holdShared adds to cfg.Shared what the view of cfg brings that every
// view must conceal wherever it goes: its mountpoint, held before the
// view covers it, and its grant file. Each is concealed by the view
// itself too (concealList); in Shared, the coordinator's other views
// conceal it as well, and a grant file rewritten later is added again.
func holdShared(cfg Config) {
	for _, p := range []string{cfg.Mountpoint, cfg.GrantPath} {
		if p == "" {
			continue
		}
		if err := cfg.Shared.Hold(p); err != nil {
			slog.Warn("hold what no view may show", "path", p, "err", err)
		}
	}
}

// holdHiddenEntries adds to cfg.Shared the entries of every directory
// cfg.Hidden names (the run directory and its parts, the ledger's
// directory) and of their agents' homes: a view of its own does what a
// coordinator does for its views (Coordinator.holdRunDir), so that the
// ledger's key, another agent's grant or home, moved out into the folder
// after the view started, stays concealed whatever it is called there.
func holdHiddenEntries(cfg Config) {
	dirs := make([]string, 0, 2*len(cfg.Hidden))
	for _, d := range cfg.Hidden {
		dirs = append(dirs, d, filepath.Join(d, sandbox.HomesDir))
	}
	holdEntriesOf(cfg.Shared, dirs)
}

// devNumber is the device number of a mountinfo "major:minor".
func devNumber(majMin string) (uint64, bool) {
	var maj, mnr uint32
	if _, err := fmt.Sscanf(majMin, "%d:%d", &maj, &mnr); err != nil {
		return 0, false
	}
	return unix.Mkdev(maj, mnr), true
}

func concealList(cfg Config) []string {
	out := append(append([]string(nil), cfg.Hidden...), cfg.Conceal...)
	return append(out, cfg.Mountpoint)
}

// sameFile reports whether a and b are the same entry on disk.
func sameFile(a, b string) (bool, error) {
	sa, err := os.Stat(a)
	if err != nil {
		return false, err
	}
	sb, err := os.Stat(b)
	if err != nil {
		return false, err
	}
	return os.SameFile(sa, sb), nil
}

// realPath is p made absolute, with symbolic links resolved as far as it
// exists.
func realPath(p string) string {
	abs, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	rest := ""
	for cur := abs; ; {
		if r, err := filepath.EvalSymlinks(cur); err == nil {
			return filepath.Join(r, rest)
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return abs
		}
		rest = filepath.Join(filepath.Base(cur), rest)
		cur = parent
	}
}

// within tells whether p lies strictly below dir (both absolute, clean).
func within(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, "../") && !filepath.IsAbs(rel)
}

// ErrNotView marks a path that `acpfs umount` refuses: not a mount point,
// or a mount that is not an acpfs view.
var ErrNotView = errors.New("not an acpfs view")

// ErrBusy marks a view that a process still uses (an open file, a
// working directory), so that a plain unmount fails.
var ErrBusy = errors.New("view is busy")

type umountError struct {
	msg  string
	kind error
}

func (e *umountError) Error() string        { return e.msg }
func (e *umountError) Is(target error) bool { return target == e.kind }

// UnmountView unmounts the acpfs view at p, and nothing else: p must be
// the mount point of a FUSE mount whose type and source say acpfs, as
// /proc/self/mountinfo lists it; anything else is refused with
// ErrNotView. The mount is never touched before that check.
//
// A plain unmount comes first. A view whose daemon died (stat answers
// ENOTCONN) is detached even when something still holds it. A live view
// that is busy is refused with ErrBusy unless force is set; force aborts
// the FUSE connection (processes blocked in it get an error instead of
// hanging) and detaches the mount lazily.
func UnmountView(p string, force bool) error {
	abs, err := resolveMountpointPath(p)
	if err != nil {
		return &umountError{msg: fmt.Sprintf("%s: %v", p, err), kind: ErrNotView}
	}
	mi, ok, err := mountAt(abs)
	if err != nil {
		return fmt.Errorf("read %s: %w", mountinfoPath, err)
	}
	if !ok {
		// p may be a symbolic link to a mountpoint; it is not one itself,
		// so resolving it touches no mount.
		if real, rerr := filepath.EvalSymlinks(abs); rerr == nil && real != abs {
			abs = real
			mi, ok, err = mountAt(abs)
			if err != nil {
				return fmt.Errorf("read %s: %w", mountinfoPath, err)
			}
		}
	}
	if !ok {
		return &umountError{msg: fmt.Sprintf("%s is not a mount point; nothing to unmount", p), kind: ErrNotView}
	}
	if !mi.IsView() {
		return &umountError{msg: fmt.Sprintf("%s is not an acpfs view (it is a %s mount); refusing to unmount it", p, mi.describe()), kind: ErrNotView}
	}
	if os.Geteuid() != 0 {
		return unmountWithFusermount(p, abs, force)
	}
	err = syscall.Unmount(abs, 0)
	if err == nil || errors.Is(err, syscall.EINVAL) {
		return nil // EINVAL: unmounted meanwhile
	}
	if !errors.Is(err, syscall.EBUSY) {
		return fmt.Errorf("unmount %s: %w", p, err)
	}
	if !force && !deadMount(abs) {
		return &umountError{kind: ErrBusy, msg: fmt.Sprintf("%s is busy (a process has a file open or its working directory in it); "+
			"stop it, or run `acpfs umount --force %s` to abort the view's connection and detach it", p, p)}
	}
	if aerr := abortConnection(abs); aerr != nil {
		slog.Debug("abort FUSE connection", "mountpoint", abs, "err", aerr)
	}
	if derr := syscall.Unmount(abs, syscall.MNT_DETACH); derr != nil && !errors.Is(derr, syscall.EINVAL) {
		return fmt.Errorf("unmount %s: %w", p, derr)
	}
	return nil
}

// Unmount unmounts the acpfs view at p whatever holds it: UnmountView
// with force. Anything that is not an acpfs view is refused.
func Unmount(p string) error { return UnmountView(p, true) }

// unmountWithFusermount unmounts as an unprivileged user, through
// fusermount3 (which itself only unmounts the caller's FUSE mounts).
func unmountWithFusermount(p, abs string, force bool) error {
	tool := ""
	for _, name := range []string{"fusermount3", "fusermount"} {
		if path, err := lookPath(name); err == nil {
			tool = path
			break
		}
	}
	if tool == "" {
		return fmt.Errorf("unmount %s: not root and fusermount3 is not installed", p)
	}
	err := runQuiet(tool, "-u", abs)
	if err == nil {
		return nil
	}
	if !force && !deadMount(abs) {
		if strings.Contains(err.Error(), "busy") {
			return &umountError{kind: ErrBusy, msg: fmt.Sprintf("%s is busy (a process has a file open or its working directory in it); "+
				"stop it, or run `acpfs umount --force %s` to detach it", p, p)}
		}
		return err
	}
	return runQuiet(tool, "-u", "-z", abs)
}

// detachDeadView detaches the dead view at abs: unmounted normally when
// nothing holds it, lazily otherwise. With abort, its FUSE connection is
// aborted first, which frees any process stuck waiting for the daemon.
func detachDeadView(abs string, abort bool) error {
	if abort {
		if err := abortConnection(abs); err != nil {
			slog.Debug("abort FUSE connection", "mountpoint", abs, "err", err)
		}
	}
	err := syscall.Unmount(abs, 0)
	if err == nil || errors.Is(err, syscall.EINVAL) {
		return nil
	}
	if err := syscall.Unmount(abs, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
		return fmt.Errorf("detach dead view %s: %w", abs, err)
	}
	return nil
}
