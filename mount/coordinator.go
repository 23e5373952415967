package mount

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/internal/atomicfile"
	"github.com/acpfs/acpfs/internal/fsid"
	"github.com/acpfs/acpfs/internal/procstat"
	"github.com/acpfs/acpfs/internal/safeio"
	"github.com/acpfs/acpfs/internal/sandbox"
	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/protocol"
	"github.com/acpfs/acpfs/view"
)

// CoordinatorConfig describes `acpfs up`: every grant of a run directory
// mounted under one root, sharing one protocol log, one ledger writer and
// one folder watcher.
type CoordinatorConfig struct {
	// Options apply to every view.
	Options
	Runs   grants.RunDir
	Folder string
	// ViewRoot, when set, is the directory holding Folder that every view
	// is rooted at (see Config.ViewRoot).
	ViewRoot string
	Root     string // views are mounted at Root/<agent_id>
	Log      *protocol.Log
	Ledger   *ledger.Writer
	// Participants are the ACP participants of the folder; a grant for
	// anyone else is refused.
	Participants []string
	// Gate makes every view read-only while it returns an error (a host
	// cut off from the store; see fs.Options.Gate).
	Gate func() error
	// Notify receives one line per event an operator should see: a view
	// unmounted because its grant was revoked or removed, a new grant
	// mounted, a dead view of a killed coordinator detached. Nil means
	// os.Stderr.
	Notify io.Writer
}

// StatusFile is written in the run directory so that `acpfs status` (a
// separate process) can list what the coordinator serves.
const StatusFile = "acpfs-up.json"

// LockFile, in the run directory, is held (flock) by the one coordinator
// of that run directory; it contains that coordinator's pid.
const LockFile = ".acpfs-up.lock"

// Coordinator states, as ReadStatus reports them.
const (
	StateRunning = "running"
	StateDead    = "dead"  // the pid no longer runs
	StateStale   = "stale" // the pid now belongs to another process
)

// ViewStatus is one mounted view as listed by `acpfs status`.
type ViewStatus struct {
	Agent      string `json:"agent"`
	Grant      string `json:"grant"`
	Mountpoint string `json:"mountpoint"`
	// Dev is the view's device (major:minor in mountinfo): after a
	// crash, the next coordinator detaches exactly these mounts.
	Dev string `json:"dev,omitempty"`
	// Lost, when set, says why the view is not being served: it went
	// away without the coordinator stopping it, and is not (yet)
	// mounted again. `acpfs status` exits 2 while a view is lost.
	Lost string `json:"lost,omitempty"`
}

// CoordinatorStatus is the content of StatusFile.
type CoordinatorStatus struct {
	PID int `json:"pid"`
	// PIDStart is the coordinator's start time (field 22 of
	// /proc/PID/stat) and BootID the boot it ran in: together with the
	// pid they tell a live coordinator from a reused pid.
	PIDStart uint64       `json:"pid_start,omitempty"`
	BootID   string       `json:"boot_id,omitempty"`
	Folder   string       `json:"folder"`
	Root     string       `json:"root"`
	Started  string       `json:"started"`
	Views    []ViewStatus `json:"views"`
	// Problems are the grants the coordinator refused (a file that does
	// not load, an unknown participant, two active grants for one agent,
	// a grant showing the run directory): their agents have no view
	// until the file is fixed.
	Problems []string `json:"problems,omitempty"`
	// State and StateDetail are not stored: ReadStatus fills them from
	// the process table (StateRunning, StateDead, StateStale).
	State       string `json:"state,omitempty"`
	StateDetail string `json:"state_detail,omitempty"`
}

// Coordinator keeps the mounted views in line with the grant files.
type Coordinator struct {
	cfg      CoordinatorConfig
	watcher  *view.Watcher
	fsw      *fsnotify.Watcher
	started  time.Time
	pidStart uint64
	bootID   string
	lock     *os.File // flock on LockFile, held until Stop
	notify   io.Writer
	// shared is concealed by every view of the coordinator, wherever
	// it goes: the run directory's entries (grant files, the ledger and
	// its key, the agents' homes), each view's mountpoint and device.
	shared *fsid.Set

	mu    sync.Mutex
	views map[string]*coordView // by agent id
	// problems are the grants refused by the latest reconcile.
	problems []string
	done     chan struct{}
	stop     chan struct{}
	// lost receives the views that went away without being stopped;
	// the loop remounts them.
	lost chan lostView
}

type coordView struct {
	grantID string
	m       *Mount
	// lost says why the view is gone, "" while it is served; attempts
	// counts the remounts tried since.
	lost     string
	attempts int
}

// lostView is a view found gone: m is the mount that went away (a later
// one of the same agent is not concerned), why says how.
type lostView struct {
	agent string
	m     *Mount
	why   string
}

// Remounting a view that went away: viewCheckEvery is how often every
// view is checked to still be this process's mount at its mountpoint
// (an unmount is also seen at once, when the view's serve loop ends);
// a lost view is mounted again up to maxRemounts times, remountPause
// apart. If none succeeds, that is said (stderr, ledger, `acpfs
// status`) and the view is tried again later, laterRemount first, each
// wait twice the one before up to maxRemountWait: what kept it from
// mounting (a mountpoint in use, a full table of mounts) is often fixed
// by someone later, and the view then comes back by itself within
// maxRemountWait, while a cause that stays costs one attempt per
// maxRemountWait.
const (
	viewCheckEvery = 2 * time.Second
	maxRemounts    = 3
	remountPause   = time.Second
	laterRemount   = 2 * time.Second
	maxRemountWait = 2 * time.Minute
)

// remountWait is how long to wait before the attempt after the attempts
// tried so far (remountPause for the first maxRemounts).
func remountWait(attempts int) time.Duration {
	if attempts < maxRemounts {
		return remountPause
	}
	d := laterRemount
	for i := maxRemounts; i < attempts && d < maxRemountWait; i++ {
		d *= 2
	}
	return min(d, maxRemountWait)
}

// StartCoordinator takes the run directory's lock, checks the run
// directory and the mount root, mounts every active grant and starts
// following changes. Any problem found before mounting (another
// coordinator on the run directory, an unknown participant, two grants
// for one agent, a mount root that is not empty) is returned with nothing
// mounted. What a killed coordinator left behind (its status file, dead
// views under the root, the empty directories they were mounted on) is
// cleared or reused.
func StartCoordinator(cfg CoordinatorConfig) (c *Coordinator, err error) {
	notify := cfg.Notify
	if notify == nil {
		notify = os.Stderr
	}
	if err := cfg.Runs.MakeRoot(); err != nil {
		return nil, err
	}
	lock, err := lockRunDir(cfg.Runs.Root)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			lock.Close()
		}
	}()
	if err := checkRootPlace(cfg); err != nil {
		return nil, err
	}
	reusable, deadViews, err := leftBehind(cfg)
	if err != nil {
		return nil, err
	}
	if err := prepareRoot(cfg.Root, cmp.Or(cfg.ViewRoot, cfg.Folder), reusable, deadViews, notify); err != nil {
		return nil, err
	}
	if _, err := cfg.Runs.HiddenIn(cfg.Folder); err != nil {
		return nil, err
	}
	watched := cmp.Or(cfg.ViewRoot, cfg.Folder)
	hidden := relHidden(watched, []string{cfg.Runs.Root, cfg.Root})
	w, err := view.NewWatcher(watched, hidden)
	if err != nil {
		return nil, err
	}
	c = &Coordinator{cfg: cfg, watcher: w, started: time.Now().UTC(), lock: lock, notify: notify, shared: fsid.NewSet(),
		views: map[string]*coordView{}, done: make(chan struct{}), stop: make(chan struct{}), lost: make(chan lostView, 16)}
	self, _ := procstat.Read(os.Getpid())
	c.pidStart = self.Start
	c.bootID = bootID()
	if err := c.watchRunDir(); err != nil {
		w.Close()
		return nil, err
	}
	// Replace a dead coordinator's status at once, before mounting.
	c.mu.Lock()
	err = c.writeStatus()
	c.mu.Unlock()
	if err != nil {
		c.fsw.Close()
		w.Close()
		return nil, err
	}
	go c.loop()
	if err := c.reconcile(true); err != nil && !c.serving() {
		// Nothing to serve: the one line says why.
		c.Stop() // releases the lock
		return nil, err
	}
	// The refused grants were said on Notify, recorded and listed in the
	// status: the other agents' views serve.
	return c, nil
}

// leftBehind is what the previous coordinator of this run directory,
// dead since we hold its lock, left under the root that is ours to clear:
// the names of the mountpoints that may be reused (those of its views and
// of the grants) and the device of each of its dead views, by name. A
// coordinator still running (its lock taken over by pid reuse, say) is an
// error.
func leftBehind(cfg CoordinatorConfig) (reusable map[string]bool, deadViews map[string]string, err error) {
	// A grant that does not load, names no participant or clashes with
	// another is refused alone (see reconcile): the others' agents work.
	gs, _ := cfg.Runs.LoadGrants()
	reusable = map[string]bool{}
	for _, gf := range gs {
		reusable[gf.Grant.AgentID] = true
	}
	deadViews = map[string]string{} // agent -> device of its dead view
	prev, err := ReadStatus(cfg.Runs)
	if err != nil {
		return reusable, deadViews, nil
	}
	if prev.State == StateRunning && prev.PID != os.Getpid() {
		return nil, nil, fmt.Errorf("a coordinator (pid %d) is still running on run directory %s; stop it first", prev.PID, cfg.Runs.Root)
	}
	if realPath(prev.Root) == realPath(cfg.Root) {
		for _, v := range prev.Views {
			name := filepath.Base(v.Mountpoint)
			reusable[name] = true
			if v.Dev != "" {
				deadViews[name] = v.Dev
			}
		}
	}
	return reusable, deadViews, nil
}

// watchRunDir makes the grants' and handoffs' directories and watches
// them: a change there is a grant to reconcile.
func (c *Coordinator) watchRunDir() error {
	dirs := []string{c.cfg.Runs.GrantsDir(), c.cfg.Runs.HandoffsDir()}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	for _, d := range dirs {
		if err := fsw.Add(d); err != nil {
			fsw.Close()
			return fmt.Errorf("watch %s: %w", d, err)
		}
	}
	c.fsw = fsw
	return nil
}

// serving reports whether any view is mounted.
func (c *Coordinator) serving() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.views) > 0
}

// ErrRunDirBusy means another coordinator holds the run directory.
var ErrRunDirBusy = errors.New("run directory is in use by another acpfs up")

// lockRunDir takes the run directory's lock without waiting. The lock is
// an flock, so the kernel releases it when its holder dies, even by
// SIGKILL: a lock file left by a dead coordinator (a stale lock) is
// simply taken again.
//
// The lock file is 0600 and must be this process's own regular file with
// one name: a lock file another uid can open is one it can hold, and
// stop every later coordinator. One made readable by others (an older
// acpfs made it 0644) is replaced by a fresh inode once we hold it, so
// that a descriptor opened earlier by someone else locks nothing.
func lockRunDir(root string) (*os.File, error) {
	p := filepath.Join(root, LockFile)
	for attempt := 0; ; attempt++ {
		f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0o600)
		if err != nil {
			return nil, fmt.Errorf("lock run directory: %w", err)
		}
		st, err := checkUpLock(f)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("lock run directory: %w", err)
		}
		if err := flockOrOutwaitDying(f); err != nil {
			defer f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, runDirBusy(root, p, lockHolder(f))
			}
			return nil, fmt.Errorf("lock run directory: %w", err)
		}
		// The name may lead elsewhere now (replaced by a coordinator
		// that started meanwhile): our lock must be on what it names.
		var now unix.Stat_t
		if err := unix.Lstat(p, &now); err != nil || now.Dev != st.Dev || now.Ino != st.Ino {
			f.Close()
			if attempt == 3 {
				return nil, fmt.Errorf("lock run directory: %s keeps being replaced", p)
			}
			continue
		}
		if st.Mode&0o077 != 0 {
			nf, err := replaceUpLock(p)
			f.Close() // after the rename: whoever opens p now finds nf, held
			if err != nil {
				return nil, fmt.Errorf("lock run directory: %w", err)
			}
			f = nf
		}
		if err := f.Truncate(0); err == nil {
			_, _ = f.WriteAt([]byte(fmt.Sprintf("%d\n", os.Getpid())), 0)
		}
		return f, nil
	}
}

// checkUpLock refuses a run directory lock that is not this process's
// own regular file with a single name.
func checkUpLock(f *os.File) (unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return st, err
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return st, fmt.Errorf("%s is not a regular file; remove it", f.Name())
	case st.Nlink != 1:
		return st, fmt.Errorf("%s has %d names; remove it", f.Name(), st.Nlink)
	case st.Uid != uint32(os.Geteuid()):
		return st, fmt.Errorf("%s belongs to uid %d, not to this coordinator's (%d); remove it", f.Name(), st.Uid, os.Geteuid())
	}
	return st, nil
}

// replaceUpLock puts a new 0600 lock file, already locked, in place of
// p (which the caller holds), by the one rule of internal/atomicfile
// inside the run directory held by descriptor: others may write there,
// so no name in it is resolved twice or followed.
func replaceUpLock(p string) (*os.File, error) {
	dir, err := unix.Open(filepath.Dir(p), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dir)
	tmp, err := atomicfile.At(dir).NewTempOpen(filepath.Base(p), unix.O_RDWR)
	if err != nil {
		return nil, err
	}
	defer tmp.Discard()
	if err := unix.Flock(int(tmp.File().Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return nil, err
	}
	if err := tmp.InstallOpen(filepath.Base(p)); err != nil && !tmp.Renamed() {
		return nil, err
	}
	// Renamed, the lock is in place even when the directory's fsync
	// failed: a lock need not survive a crash.
	// Named p, not the temporary name, for the messages about it: a
	// duplicate shares the open file and its lock.
	f := tmp.File()
	defer f.Close()
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), p), nil
}

// runDirBusy explains who holds the run directory's lock: a live
// coordinator, one that exited but is stuck in its views, or a process
// that is no coordinator at all (the holder is named as such, never as
// an acpfs up).
func runDirBusy(root, p string, pid int) error {
	if pid <= 0 {
		return fmt.Errorf("%w: the lock %s is held by a process this host does not show (another pid namespace?); one coordinator per run directory", ErrRunDirBusy, p)
	}
	if ps, err := procstat.Read(pid); err == nil && ps.State == 'Z' {
		return fmt.Errorf("%w: acpfs up (pid %d) on %s has exited but cannot finish (stuck in one of its views); run `acpfs umount --force` on each view under its root", ErrRunDirBusy, pid, root)
	}
	if isCoordinator(pid) {
		return fmt.Errorf("%w: acpfs up (pid %d) already runs on %s (lock %s); one coordinator per run directory", ErrRunDirBusy, pid, root, p)
	}
	return fmt.Errorf("%w: the lock %s is held by pid %d (%s), which is not an acpfs up; stop that process (no coordinator runs on %s)", ErrRunDirBusy, p, pid, procCommand(pid), root)
}

// lockHolder finds the pid holding an flock on f from /proc/locks, which
// the kernel keeps exact. The pid written in the file is not used: it
// may be a dead coordinator's, reused by any process since.
func lockHolder(f *os.File) int {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err == nil {
		if b, err := os.ReadFile("/proc/locks"); err == nil {
			return flockHolder(string(b), unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
		}
	}
	return 0
}

// isCoordinator reports whether pid is an `acpfs up` of this uid (this
// very process included, which a second lockRunDir can meet).
func isCoordinator(pid int) bool {
	if pid == os.Getpid() {
		return true
	}
	var st unix.Stat_t
	if err := unix.Stat(fmt.Sprintf("/proc/%d", pid), &st); err != nil || st.Uid != uint32(os.Geteuid()) {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	if len(args) < 2 || !strings.HasPrefix(filepath.Base(args[0]), "acpfs") {
		return false
	}
	return slices.Contains(args[1:], "up")
}

// procCommand is pid's command line, for an error message.
func procCommand(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(b) == 0 {
		return "command unknown"
	}
	cmd := strings.ReplaceAll(strings.TrimRight(string(b), "\x00"), "\x00", " ")
	if len(cmd) > 80 {
		cmd = cmd[:80] + "..."
	}
	return fmt.Sprintf("%q", cmd)
}

// flockHolder parses /proc/locks ("1: FLOCK  ADVISORY  WRITE 1234
// 00:2d:5678 0 EOF") for the holder of an flock on the given inode.
func flockHolder(locks string, major, minor uint32, ino uint64) int {
	want := fmt.Sprintf("%02x:%02x:%d", major, minor, ino)
	for _, line := range strings.Split(locks, "\n") {
		fields := strings.Fields(line)
		if len(fields) < 6 || fields[1] != "FLOCK" {
			continue
		}
		if fields[5] != want {
			continue
		}
		var pid int
		if _, err := fmt.Sscanf(fields[4], "%d", &pid); err == nil {
			return pid
		}
	}
	return 0
}

// checkRootPlace refuses a mount root inside the folder or the run
// directory, before anything is mounted.
func checkRootPlace(cfg CoordinatorConfig) error {
	root, folder, runs := realPath(cfg.Root), realPath(cfg.Folder), realPath(cfg.Runs.Root)
	switch {
	case root == folder || within(root, folder):
		return fmt.Errorf("mount root %s is inside the collaboration folder %s; choose a root outside it", cfg.Root, cfg.Folder)
	case root == runs || within(root, runs):
		return fmt.Errorf("mount root %s is inside the run directory %s; choose a root outside it", cfg.Root, cfg.Runs.Root)
	}
	if cfg.Ledger != nil {
		if ld := realPath(filepath.Dir(cfg.Ledger.Path())); root == ld || within(root, ld) {
			return fmt.Errorf("mount root %s is inside the ledger's directory %s; choose a root outside it", cfg.Root, ld)
		}
	}
	return nil
}

// prepareRoot makes sure the mount root exists and holds nothing but
// what a killed coordinator of this folder left: its dead views
// (detached here, one line each on notify) and the empty directories
// they were mounted on, when named after an agent in reusable. A view is
// dead when it answers ENOTCONN, or when it hangs and is the very mount
// (same device, in deadViews) that the dead coordinator recorded.
// Anything else (a file, a non-empty or unknown directory, a live mount)
// is refused.
func prepareRoot(root, folder string, reusable map[string]bool, deadViews map[string]string, notify io.Writer) error {
	entries, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return os.MkdirAll(root, 0o755)
	}
	if err != nil {
		return fmt.Errorf("mount root: %w", err)
	}
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return fmt.Errorf("mount root: %w", err)
	}
	notEmpty := fmt.Errorf("mount root %s is not empty; views are mounted at <root>/<agent_id>", root)
	for _, e := range entries {
		p := filepath.Join(realRoot, e.Name())
		mi, mounted, err := mountAt(p)
		if err != nil {
			return fmt.Errorf("mount root: %w", err)
		}
		if mounted {
			ours := mi.IsView() && mi.Source == ViewSourcePrefix+folder && reusable[e.Name()]
			recorded := ours && deadViews[e.Name()] != "" && deadViews[e.Name()] == mi.Dev
			state := mountAlive
			if ours {
				state = probeMount(p)
			}
			// A dead view answers ENOTCONN. One the dead coordinator
			// recorded may hang instead, when its process cannot finish
			// dying: aborting its connection frees it.
			if state == mountAlive || (state == mountHung && !recorded) {
				return fmt.Errorf("mount root %s is not empty: %s is a mount point (%s); unmount it or choose another root", root, p, mi.describe())
			}
			if err := detachDeadView(p, state == mountHung); err != nil {
				return err
			}
			fmt.Fprintf(notify, "acpfs up: detached the dead view at %s (left by a coordinator that was killed)\n", p)
		}
		if !e.IsDir() || !reusable[e.Name()] {
			return notEmpty
		}
		if empty, err := emptyDir(p); err != nil || !empty {
			return notEmpty
		}
	}
	return nil
}

// emptyDir tells whether the directory p has no entries.
func emptyDir(p string) (bool, error) {
	f, err := os.Open(p)
	if err != nil {
		return false, err
	}
	defer f.Close()
	names, err := f.Readdirnames(1)
	if len(names) > 0 {
		return false, nil
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return false, err
	}
	return true, nil
}

func checkParticipant(g *grants.Grant, participants []string) error {
	if len(participants) == 0 {
		return nil
	}
	for _, p := range participants {
		if p == g.ParticipantID() {
			return nil
		}
	}
	return fmt.Errorf("grant %s: participant %q is not listed in protocol.json (%s)", g.GrantID, g.ParticipantID(), strings.Join(participants, ", "))
}

// loop applies grant and handoff changes. Events are coalesced briefly
// because one save is several events (create, write, rename).
func (c *Coordinator) loop() {
	defer close(c.done)
	var timer <-chan time.Time
	check := time.NewTicker(viewCheckEvery)
	defer check.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-check.C:
			c.checkViews()
		case lv := <-c.lost:
			c.recoverView(lv)
		case _, ok := <-c.fsw.Events:
			if !ok {
				return
			}
			if timer == nil {
				timer = time.After(20 * time.Millisecond)
			}
		case err, ok := <-c.fsw.Errors:
			if !ok {
				return
			}
			slog.Warn("grant watcher", "err", err)
		case <-timer:
			timer = nil
			if err := c.reconcile(false); err != nil {
				slog.Warn("reconcile grants", "err", err)
			}
		}
	}
}

// reconcile mounts new grants, applies changed ones, and unmounts revoked
// or removed ones, saying so on Notify. Mounts made at start are listed
// by the caller instead.
func (c *Coordinator) reconcile(starting bool) error {
	c.holdRunDir()
	want, fate, problems, errs := c.wanted()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setProblems(problems)
	errs = append(errs, c.unmountUnwanted(want, fate)...)
	errs = append(errs, c.mountWanted(want, starting)...)
	if err := c.writeStatus(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// wanted loads the grants and judges each: want holds the one grant that
// governs each agent's view; fate says why every other grant has none;
// problems are the refusals `acpfs status` lists, and errs the errors.
func (c *Coordinator) wanted() (want map[string]grants.GrantFile, fate map[string]string, problems []string, errs []error) {
	gs, loadErr := c.cfg.Runs.LoadGrants()
	want = map[string]grants.GrantFile{}
	fate = map[string]string{} // grant id -> why it has no view
	if loadErr != nil {
		errs = append(errs, loadErr)
		problems = append(problems, strings.Split(loadErr.Error(), "\n")...)
	}
	active := map[string][]string{} // agent -> its active grant ids
	for _, gf := range gs {
		if !gf.Grant.Revoked {
			active[gf.Grant.AgentID] = append(active[gf.Grant.AgentID], gf.Grant.GrantID)
		}
	}
	for _, gf := range gs {
		g := gf.Grant
		if g.Revoked {
			fate[g.GrantID] = "revoked"
			continue
		}
		if ids := active[g.AgentID]; len(ids) > 1 {
			// Which one would govern is no one's guess to make: the
			// agent gets no view until one is revoked (CheckSet said so).
			fate[g.GrantID] = fmt.Sprintf("refused: agent %q has %d active grants (%s)", g.AgentID, len(ids), strings.Join(ids, ", "))
			continue
		}
		err := checkParticipant(g, c.cfg.Participants)
		if err == nil {
			err = CheckConcealed(c.cfg.Folder, c.concealed(), g)
		}
		if err != nil {
			errs = append(errs, err)
			fate[g.GrantID] = "refused: " + err.Error()
			problems = append(problems, fmt.Sprintf("%s: %v", gf.Path, err))
			continue
		}
		want[g.AgentID] = gf
	}
	return want, fate, problems, errs
}

// unmountUnwanted unmounts every view whose grant is no longer the one
// want holds for its agent, saying why on Notify. c.mu is held.
func (c *Coordinator) unmountUnwanted(want map[string]grants.GrantFile, fate map[string]string) []error {
	var errs []error
	for agent, v := range c.views {
		gf, ok := want[agent]
		if ok && gf.Grant.GrantID == v.grantID {
			continue
		}
		// Hide everything first, so the view is dark even if an open
		// file keeps the unmount waiting.
		closed := *v.m.FS.Grant()
		closed.Revoked = true
		_ = v.m.FS.SetGrant(&closed, nil)
		err := v.m.Stop()
		if err != nil {
			errs = append(errs, err)
		}
		os.Remove(v.m.cfg.Mountpoint)
		delete(c.views, agent)
		reason := fmt.Sprintf("grant %s removed", v.grantID)
		if ok {
			reason = fmt.Sprintf("grant %s replaced by %s", v.grantID, gf.Grant.GrantID)
		} else if f, known := fate[v.grantID]; known {
			reason = fmt.Sprintf("grant %s %s", v.grantID, f)
		} else if _, serr := os.Stat(c.cfg.Runs.GrantPath(v.grantID)); serr == nil {
			reason = fmt.Sprintf("grant %s no longer loads", v.grantID)
		}
		if err != nil {
			c.notifyf("unmounted %s's view at %s (%s), with an error: %v", agent, v.m.cfg.Mountpoint, reason, err)
		} else {
			c.notifyf("unmounted %s's view at %s (%s)", agent, v.m.cfg.Mountpoint, reason)
		}
	}
	return errs
}

// mountWanted applies each wanted grant to its agent's live view, or
// mounts a view for it, saying so on Notify unless starting. c.mu is
// held.
func (c *Coordinator) mountWanted(want map[string]grants.GrantFile, starting bool) []error {
	var errs []error
	for agent, gf := range want {
		handoffs := c.handoffsFor(gf.Grant)
		if v, ok := c.views[agent]; ok {
			if err := v.m.FS.SetGrant(gf.Grant, handoffs); err != nil {
				errs = append(errs, err)
			}
			v.m.cfg.Handoffs = handoffs
			continue
		}
		mp := filepath.Join(c.cfg.Root, agent)
		m, err := c.startView(mp, gf.Grant, handoffs)
		if err != nil {
			errs = append(errs, fmt.Errorf("mount %s: %w", agent, err))
			continue
		}
		c.views[agent] = &coordView{grantID: gf.Grant.GrantID, m: m}
		c.watchServed(agent, m)
		if !starting {
			c.notifyf("mounted %s's view at %s (grant %s)", agent, mp, gf.Grant.GrantID)
		}
	}
	return errs
}

// startView prepares the mountpoint mp and mounts a view of g there.
func (c *Coordinator) startView(mp string, g *grants.Grant, handoffs map[string]string) (*Mount, error) {
	if err := prepareMountpoint(mp); err != nil {
		return nil, err
	}
	return Start(Config{
		Options: c.cfg.Options, Folder: c.cfg.Folder, ViewRoot: c.cfg.ViewRoot, Mountpoint: mp, Grant: g, Log: c.cfg.Log, Ledger: c.cfg.Ledger,
		Hidden: c.concealed(), Conceal: []string{c.cfg.Root}, Shared: c.shared, Handoffs: handoffs, Watcher: c.watcher, Gate: c.cfg.Gate,
	})
}

// holdRunDir adds to what every view conceals the entries of the run
// directory, of its grants' directory, of its agents' homes and of the
// ledger's: each is concealed where it lies already (its directory is),
// and by holding it a grant file, the ledger, its key or an agent's home
// moved out into the folder stays concealed too, whatever it is called
// there. What was replaced since (a grant rewritten) is let go once it
// has no name.
func (c *Coordinator) holdRunDir() {
	dirs := []string{c.cfg.Runs.Root, c.cfg.Runs.GrantsDir(), filepath.Join(c.cfg.Runs.Root, sandbox.HomesDir)}
	if c.cfg.Ledger != nil {
		dirs = append(dirs, filepath.Dir(c.cfg.Ledger.Path()))
	}
	// Pruned first: what has no name left makes room in a full set.
	c.shared.Prune()
	holdEntriesOf(c.shared, dirs)
}

// holdEntriesOf adds the entries of each directory of dirs to s (see
// holdEntries); a name that is not a directory holds nothing.
func holdEntriesOf(s *fsid.Set, dirs []string) {
	for _, d := range dirs {
		if err := holdEntries(s, d); err != nil && !errors.Is(err, unix.ENOTDIR) {
			slog.Warn("hold the entries of what no view may show", "dir", d, "err", err)
		}
	}
}

// holdEntries adds every entry of the directory d to s, symlinks
// unfollowed.
func holdEntries(s *fsid.Set, d string) error {
	f, err := atomicfile.OpenFile(d, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	defer f.Close()
	names, err := f.Readdirnames(fsid.MaxSetHeld)
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	for _, n := range names {
		if err := s.HoldAt(int(f.Fd()), n); err != nil {
			return err
		}
	}
	return nil
}

// prepareMountpoint makes mp, the directory a view covers, the
// coordinator's and 0500. Uncovered (the view unmounted from outside, its
// daemon dead), it then takes no agent's writes: another uid gets
// EACCES, and even the coordinator's uid, without CAP_DAC_OVERRIDE
// (root has it), must chmod it first. Whatever lands there is outside
// the collaboration and unrecorded.
func prepareMountpoint(mp string) error {
	if err := os.Mkdir(mp, 0o500); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	// Acted on through one descriptor, and only while no other mount
	// covers it: a directory bind-mounted there (the folder itself, say)
	// must not be made the coordinator's.
	fd, err := unix.Open(mp, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
			return fmt.Errorf("mountpoint %s is not a directory", mp)
		}
		return fmt.Errorf("mountpoint %s: %w", mp, err)
	}
	defer unix.Close(fd)
	var sx unix.Stat_t
	switch err := safeio.StatAt(fd, "", &sx); {
	case errors.Is(err, safeio.ErrMountPoint):
		return fmt.Errorf("mountpoint %s is covered by another mount; unmount it first", mp)
	case err != nil:
		return fmt.Errorf("mountpoint %s: %w", mp, err)
	}
	if int(sx.Uid) != os.Geteuid() || int(sx.Gid) != os.Getegid() {
		if err := unix.Fchown(fd, os.Geteuid(), os.Getegid()); err != nil {
			return fmt.Errorf("mountpoint %s: %w", mp, err)
		}
	}
	if uint32(sx.Mode)&0o7777 != 0o500 {
		if err := unix.Fchmod(fd, 0o500); err != nil {
			return fmt.Errorf("mountpoint %s: %w", mp, err)
		}
	}
	return nil
}

// watchServed reports m lost when its serve loop ends while the
// coordinator did not stop it: `acpfs umount`, an aborted connection.
func (c *Coordinator) watchServed(agent string, m *Mount) {
	go func() {
		select {
		case <-m.served:
			c.reportLost(lostView{agent: agent, m: m, why: "its serving ended: unmounted from outside, or its connection aborted"})
		case <-c.stop:
		}
	}()
}

func (c *Coordinator) reportLost(lv lostView) {
	select {
	case c.lost <- lv:
	case <-c.stop:
	}
}

// checkViews finds views whose mountpoint is no longer their mount, which
// the serve loop may not tell (a lazy unmount, a mount stacked over the
// view).
func (c *Coordinator) checkViews() {
	// One read of the mount table for every view: it lists them all, and
	// reading it once per view made each check quadratic in the views. A
	// view mounted after that read is not in it: one missing is looked
	// up again, in a table read after its mount.
	mis, err := readMountInfo()
	if err != nil {
		slog.Warn("check views: read the mount table", "err", err)
		return
	}
	c.mu.Lock()
	var gone []lostView
	for agent, v := range c.views {
		if v.lost == "" && v.m.dev != "" && !v.m.Unmounted() && !v.m.mountedIn(mis) && !v.m.stillMounted() {
			gone = append(gone, lostView{agent: agent, m: v.m, why: "its mountpoint no longer holds it"})
		}
	}
	c.mu.Unlock()
	for _, lv := range gone {
		c.recoverView(lv)
	}
}

// recoverView says that a view went away (stderr, ledger, status) and
// mounts it again, retrying up to maxRemounts times.
func (c *Coordinator) recoverView(lv lostView) {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.stop:
		return
	default:
	}
	v, ok := c.views[lv.agent]
	if !ok || v.m != lv.m {
		return // stopped or replaced by the coordinator meanwhile
	}
	mp := v.m.cfg.Mountpoint
	g := v.m.FS.Grant()
	if v.lost == "" {
		v.lost, v.attempts = lv.why, 0
		c.record(ledger.Record{Kind: ledger.KindViewLost, Agent: g.AgentID, Grant: g.GrantID, Path: mp, Detail: lv.why})
		if err := c.writeStatus(); err != nil {
			slog.Warn("write coordinator status", "err", err)
		}
		c.notifyf("%s's view at %s went away (%s); mounting it again", lv.agent, mp, lv.why)
		// The old mount is finished: detach what is left of it and
		// release its view.
		if err := v.m.Stop(); err != nil {
			slog.Warn("stop a lost view", "agent", lv.agent, "err", err)
		}
	}
	v.attempts++
	m, err := c.startView(mp, g, v.m.cfg.Handoffs)
	if err != nil {
		c.remountFailed(lv, v, err)
		return
	}
	v.m, v.lost = m, ""
	c.watchServed(lv.agent, m)
	// The ledger and the status first: whoever reads the line below
	// finds both up to date.
	c.record(ledger.Record{Kind: ledger.KindViewRemounted, Agent: g.AgentID, Grant: g.GrantID, Path: mp, Detail: fmt.Sprintf("after %s; attempt %d", lv.why, v.attempts)})
	if err := c.writeStatus(); err != nil {
		slog.Warn("write coordinator status", "err", err)
	}
	c.notifyf("mounted %s's view at %s again (grant %s)", lv.agent, mp, g.GrantID)
}

// remountFailed schedules the next attempt to mount the lost view v
// again. Once the first attempts have failed it says so, on stderr, in
// the ledger and in the status, which keeps saying why and when the
// next attempt comes. c.mu is held.
func (c *Coordinator) remountFailed(lv lostView, v *coordView, err error) {
	wait := remountWait(v.attempts)
	if v.attempts >= maxRemounts {
		mp, g := v.m.cfg.Mountpoint, v.m.FS.Grant()
		v.lost = fmt.Sprintf("%s; not mounted again after %d attempts (%v); next attempt in %v", lv.why, v.attempts, err, wait)
		if v.attempts == maxRemounts {
			detail := fmt.Sprintf("not mounted again after %d attempts: %v; tried again in %v, then further apart up to every %v", v.attempts, err, wait, maxRemountWait)
			c.record(ledger.Record{Kind: ledger.KindViewRemountFailed, Agent: g.AgentID, Grant: g.GrantID, Path: mp, Detail: detail})
			c.notifyf("could not mount %s's view at %s again (%d attempts): %v; it stays missing and is tried again in %v, then further apart up to every %v",
				lv.agent, mp, v.attempts, err, wait, maxRemountWait)
		}
		if err := c.writeStatus(); err != nil {
			slog.Warn("write coordinator status", "err", err)
		}
	}
	old := v.m
	time.AfterFunc(wait, func() { c.reportLost(lostView{agent: lv.agent, m: old, why: lv.why}) })
}

// record appends one coordinator record to the ledger and flushes it:
// these are rare, and an operator reading the ledger after the stderr
// line must find them.
func (c *Coordinator) record(r ledger.Record) {
	r.PID = uint32(os.Getpid())
	if _, err := c.cfg.Ledger.Append(r); err != nil {
		slog.Error("ledger", "kind", r.Kind, "err", err)
		return
	}
	if err := c.cfg.Ledger.Sync(); err != nil {
		slog.Error("ledger", "kind", r.Kind, "err", err)
	}
}

// concealed is what none of the coordinator's views may show, by
// identity wherever it lies: the run directory and its parts (each may
// be a symlink to a directory elsewhere), the ledger's directory (the
// mount root is concealed too, see Start's Conceal).
func (c *Coordinator) concealed() []string {
	h := []string{c.cfg.Runs.Root, c.cfg.Runs.GrantsDir(), c.cfg.Runs.HandoffsDir(), c.cfg.Runs.ArtifactsDir()}
	if c.cfg.Ledger != nil {
		h = append(h, filepath.Dir(c.cfg.Ledger.Path()))
	}
	return h
}

// notifyf writes one line for the operator.
func (c *Coordinator) notifyf(format string, args ...any) {
	fmt.Fprintf(c.notify, "acpfs up: "+format+"\n", args...)
}

// handoffsFor maps each artifact handed to g's agent to its stored copy.
func (c *Coordinator) handoffsFor(g *grants.Grant) map[string]string {
	hs, err := c.cfg.Runs.HandoffsFor(g.GrantID, g.AgentID)
	if err != nil {
		slog.Warn("load handoffs", "err", err)
	}
	if len(hs) == 0 {
		return nil
	}
	out := make(map[string]string, len(hs))
	for _, h := range hs {
		out[h.ArtifactPath] = c.cfg.Runs.ArtifactPath(h.ArtifactSHA256)
	}
	return out
}

// Status lists the mounted views.
func (c *Coordinator) Status() CoordinatorStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.statusLocked()
}

func (c *Coordinator) statusLocked() CoordinatorStatus {
	st := CoordinatorStatus{PID: os.Getpid(), PIDStart: c.pidStart, BootID: c.bootID, Folder: c.cfg.Folder, Root: c.cfg.Root, Started: c.started.Format(time.RFC3339)}
	for agent, v := range c.views {
		vs := ViewStatus{Agent: agent, Grant: v.grantID, Mountpoint: v.m.cfg.Mountpoint, Dev: v.m.dev, Lost: v.lost}
		if v.lost != "" {
			vs.Dev = ""
		}
		st.Views = append(st.Views, vs)
	}
	sort.Slice(st.Views, func(i, j int) bool { return st.Views[i].Agent < st.Views[j].Agent })
	st.Problems = append([]string(nil), c.problems...)
	return st
}

// setProblems keeps the grants refused by the latest reconcile; each new
// one is said on Notify and recorded (grant_refused), once until it is
// fixed. Called with c.mu held.
func (c *Coordinator) setProblems(problems []string) {
	sort.Strings(problems)
	problems = slices.Compact(problems)
	known := map[string]bool{}
	for _, p := range c.problems {
		known[p] = true
	}
	for _, p := range problems {
		if p == "" || known[p] {
			continue
		}
		c.notifyf("refused: %s; the other agents' views are served", p)
		c.record(ledger.Record{Kind: ledger.KindGrantRefused, Detail: p})
	}
	c.problems = problems
}

func (c *Coordinator) writeStatus() error {
	b, err := json.MarshalIndent(c.statusLocked(), "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(c.cfg.Runs.Root, StatusFile), append(b, '\n'), 0o644)
}

// writeFileAtomic replaces p by the one rule of internal/atomicfile.
func writeFileAtomic(p string, data []byte, perm os.FileMode) error {
	return atomicfile.WriteFile(p, data, perm)
}

// ReadStatus reads the status a coordinator left in a run directory and
// tells whether that coordinator still runs: State is StateRunning only
// when its pid is alive and is the same process (same start time, same
// boot).
func ReadStatus(runs grants.RunDir) (CoordinatorStatus, error) {
	var st CoordinatorStatus
	b, err := os.ReadFile(filepath.Join(runs.Root, StatusFile))
	if err != nil {
		return st, fmt.Errorf("no coordinator status in %s (is `acpfs up` running?): %w", runs.Root, err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("coordinator status: %w", err)
	}
	st.State, st.StateDetail = st.liveness()
	return st, nil
}

// liveness judges the recorded coordinator against the process table.
func (st CoordinatorStatus) liveness() (state, detail string) {
	if st.PID <= 0 {
		return StateDead, "the status file names no pid"
	}
	if st.BootID != "" {
		if cur := bootID(); cur != "" && cur != st.BootID {
			return StateDead, fmt.Sprintf("pid %d ran before the machine rebooted", st.PID)
		}
	}
	if !processAlive(st.PID) {
		return StateDead, fmt.Sprintf("pid %d is not running", st.PID)
	}
	ps, err := procstat.Read(st.PID)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return StateDead, fmt.Sprintf("pid %d is not running", st.PID)
		}
		return StateRunning, ""
	}
	if st.PIDStart != 0 && ps.Start != st.PIDStart {
		return StateStale, fmt.Sprintf("pid %d is now another process (the coordinator died and its pid was reused)", st.PID)
	}
	if ps.Zombie() {
		return StateDead, fmt.Sprintf("pid %d has exited", st.PID)
	}
	return StateRunning, ""
}

// Missing tells why a view a running coordinator lists is not being
// served, or "" when it is: lost by the coordinator's own account, or no
// longer the mount it recorded at its mountpoint (which the coordinator
// may not have noticed yet). Only mountinfo is read: a hung view is not
// touched.
func (v ViewStatus) Missing() string {
	if v.Lost != "" {
		return v.Lost
	}
	dir, err := filepath.EvalSymlinks(filepath.Dir(v.Mountpoint))
	if err != nil {
		return fmt.Sprintf("its mount root: %v", err)
	}
	mi, ok, err := mountAt(filepath.Join(dir, filepath.Base(v.Mountpoint)))
	switch {
	case err != nil:
		return "" // cannot tell
	case !ok:
		return "not mounted"
	case !mi.IsView() || (v.Dev != "" && mi.Dev != v.Dev):
		return fmt.Sprintf("another mount is at its mountpoint (%s)", mi.describe())
	}
	return ""
}

// Running tells whether ReadStatus found the coordinator alive.
func (st CoordinatorStatus) Running() bool { return st.State == StateRunning }

// Stop unmounts every view, flushes the ledger, removes the status file
// if it is still this coordinator's, and releases the run directory.
func (c *Coordinator) Stop() error {
	select {
	case <-c.stop:
		return nil
	default:
	}
	close(c.stop)
	c.fsw.Close()
	<-c.done
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for agent, v := range c.views {
		if err := v.m.Stop(); err != nil {
			errs = append(errs, err)
		}
		os.Remove(v.m.cfg.Mountpoint)
		delete(c.views, agent)
	}
	c.watcher.Close()
	c.shared.Close()
	c.removeOwnStatus()
	errs = append(errs, c.cfg.Ledger.Sync())
	if c.lock != nil {
		c.lock.Close() // releases the flock
	}
	return errors.Join(errs...)
}

// removeOwnStatus removes the status file only when it still describes
// this process.
func (c *Coordinator) removeOwnStatus() {
	p := filepath.Join(c.cfg.Runs.Root, StatusFile)
	b, err := os.ReadFile(p)
	if err != nil {
		return
	}
	var st CoordinatorStatus
	if json.Unmarshal(b, &st) != nil || st.PID != os.Getpid() || st.PIDStart != c.pidStart {
		return
	}
	os.Remove(p)
}
