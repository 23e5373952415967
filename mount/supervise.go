package mount

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/internal/procstat"
)

// The supervisor is a small process of its own, started by every daemon
// (acpfs up, acpfs mount, the daemon of acpfs run) before it mounts
// anything. It holds no /dev/fuse descriptor, so it lives on when the
// daemon dies in a way the kernel does not see as the end of its
// connections: a daemon killed while one of its threads is stuck in the
// kernel (a cache-invalidation notify waiting for a directory lock that a
// reader holds while it waits for the dead daemon's answer) stays a
// zombie with /dev/fuse open, and every caller of its views hangs. The
// supervisor sees the daemon dying and aborts its connections through
// fusectl, which frees the callers (ECONNABORTED, then ENOTCONN) and lets
// the daemon finish dying.

// SupervisePoll is how often the supervisor looks at its daemon: a dying
// daemon's connections are aborted within about this long.
const SupervisePoll = 100 * time.Millisecond

// supervisorLink is the daemon's end of the pipe to its supervisor.
type supervisorLink struct {
	mu     sync.Mutex
	w      *os.File
	pid    int
	broken bool
}

var supervisor supervisorLink

// StartSupervisor starts this daemon's supervisor: /proc/self/exe with
// args (the hidden command that calls Supervise). Call it before any
// view is mounted; a second call does nothing. Whatever /dev/fuse
// descriptor this process holds is made close-on-exec first, and the
// supervisor closes any it still finds, so it never holds a connection.
func StartSupervisor(args ...string) error {
	supervisor.mu.Lock()
	defer supervisor.mu.Unlock()
	if supervisor.w != nil {
		return nil
	}
	if err := closeOnExecFUSE(); err != nil {
		return fmt.Errorf("supervisor: protect /dev/fuse: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("supervisor: %w", err)
	}
	defer r.Close()
	c := exec.Command("/proc/self/exe", args...)
	c.Dir = "/" // holds no directory anyone may want to unmount
	c.Stderr = os.Stderr
	c.ExtraFiles = []*os.File{r}
	// Its own process group: a Ctrl-C meant for the daemon does not take
	// the supervisor with it before the daemon has unmounted.
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		w.Close()
		return fmt.Errorf("start the supervisor: %w", err)
	}
	go func() { _ = c.Wait() }()
	supervisor.w, supervisor.pid = w, c.Process.Pid
	return nil
}

// SupervisorPID is the pid of this daemon's supervisor, 0 when none was
// started.
func SupervisorPID() int {
	supervisor.mu.Lock()
	defer supervisor.mu.Unlock()
	return supervisor.pid
}

// superviseConn tells the supervisor that the connection of the view on
// device dev (major:minor) starts (add) or ended (!add).
func superviseConn(dev string, add bool) {
	_, minor, ok := strings.Cut(dev, ":")
	if !ok {
		return
	}
	op := "+"
	if !add {
		op = "-"
	}
	supervisor.mu.Lock()
	defer supervisor.mu.Unlock()
	if supervisor.w == nil || supervisor.broken {
		return
	}
	if _, err := supervisor.w.WriteString(op + minor + "\n"); err != nil {
		supervisor.broken = true
		slog.Warn("supervisor is gone: a crash of this daemon may leave its views hanging until `acpfs umount --force`", "err", err)
	}
}

// procInfo is what the supervisor reads of its daemon in /proc.
type procInfo struct {
	Gone        bool // no such process any more
	Leader      byte // state of the thread-group leader: R, S, D, T, Z...
	KillPending bool // some thread has SIGKILL pending: the group is exiting
}

// dying decides whether the daemon is dead or on its way out, so that its
// connections may be aborted. A leader that is a zombie while threads
// remain, or a SIGKILL still pending in a thread (one stuck in the kernel
// has not taken it yet), is a process that cannot answer any more: a
// pidfd does not fire until its last thread is gone. A stopped daemon
// (SIGSTOP, a debugger) is not dying: it answers once continued.
func dying(p procInfo) bool {
	return p.Gone || p.Leader == 'Z' || p.Leader == 'X' || p.KillPending
}

// readProc reads the state of pid from procRoot (normally /proc).
func readProc(procRoot string, pid int) (procInfo, error) {
	dir := filepath.Join(procRoot, strconv.Itoa(pid))
	b, err := os.ReadFile(filepath.Join(dir, "stat"))
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
		return procInfo{Gone: true}, nil
	}
	if err != nil {
		return procInfo{}, err
	}
	st, err := procstat.Parse(b)
	if err != nil {
		return procInfo{}, fmt.Errorf("%s/stat: %w", dir, err)
	}
	p := procInfo{Leader: st.State}
	tasks, _ := os.ReadDir(filepath.Join(dir, "task"))
	for _, t := range tasks {
		st, err := os.ReadFile(filepath.Join(dir, "task", t.Name(), "status"))
		if err != nil {
			continue // exited meanwhile
		}
		if killPending(st) {
			p.KillPending = true
			break
		}
	}
	return p, nil
}

// killPending tells whether a /proc/PID/task/TID/status shows SIGKILL
// pending, for the thread (SigPnd) or the whole group (ShdPnd).
func killPending(status []byte) bool {
	const sigkill = 1 << (syscall.SIGKILL - 1)
	for _, line := range strings.Split(string(status), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "SigPnd" && k != "ShdPnd") {
			continue
		}
		if mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64); err == nil && mask&sigkill != 0 {
			return true
		}
	}
	return false
}

// connAborter aborts FUSE connections by number. Each connection's abort
// file is opened when the daemon reports the connection, on a private,
// detached mount of fusectl: a write to it later aborts that very
// connection, or nothing once the connection is gone (its number may be
// another mount's by then), and nothing stays mounted anywhere.
type connAborter struct {
	files map[string]*os.File // minor -> its fusectl abort file
	pend  map[string]bool     // reported, but the abort file could not be opened
}

func newConnAborter() *connAborter {
	return &connAborter{files: map[string]*os.File{}, pend: map[string]bool{}}
}

// add remembers connection minor and opens its abort file. A number
// seen before is a new connection that reuses it: its file is opened
// again.
func (a *connAborter) add(minor string) {
	a.remove(minor)
	f, err := openAbortFile(minor)
	if err != nil {
		slog.Warn("supervisor: cannot open the abort file of a FUSE connection; will try again if the daemon dies", "connection", minor, "err", err)
		a.pend[minor] = true
		return
	}
	a.files[minor] = f
}

// remove forgets connection minor: its view was unmounted.
func (a *connAborter) remove(minor string) {
	if f, ok := a.files[minor]; ok {
		f.Close()
		delete(a.files, minor)
	}
	delete(a.pend, minor)
}

// abortAll aborts every connection still remembered and returns how many.
func (a *connAborter) abortAll() int {
	n := 0
	for minor, f := range a.files {
		if _, err := f.WriteString("1"); err != nil {
			slog.Warn("supervisor: abort FUSE connection", "connection", minor, "err", err)
			continue
		}
		n++
	}
	for minor := range a.pend {
		if f, err := openAbortFile(minor); err == nil {
			if _, err := f.WriteString("1"); err == nil {
				n++
			}
			f.Close()
		}
	}
	return n
}

func (a *connAborter) close() {
	for _, f := range a.files {
		f.Close()
	}
}

// openAbortFile opens fusectl's abort file of connection minor. As root,
// fusectl is mounted for the moment on a directory of our own and
// detached at once: the open file keeps what it needs. Otherwise only
// the system's fusectl mount can serve, if there is one; so too for the
// root of a user namespace (a rootless acpfs run's daemon), which may
// not mount fusectl but owns the abort files of the views it mounted.
func openAbortFile(minor string) (*os.File, error) {
	if _, err := strconv.Atoi(minor); err != nil {
		return nil, fmt.Errorf("connection %q: not a number", minor)
	}
	if os.Geteuid() == 0 {
		f, err := openAbortFileMounted(minor)
		if !errors.Is(err, unix.EPERM) {
			return f, err
		}
	}
	return os.OpenFile(filepath.Join(fusectl, minor, "abort"), os.O_WRONLY, 0)
}

// openAbortFileMounted is openAbortFile through a fusectl mount of our
// own.
func openAbortFileMounted(minor string) (*os.File, error) {
	dir, err := os.MkdirTemp("", "acpfs-fusectl-")
	if err != nil {
		return nil, err
	}
	defer os.Remove(dir)
	if err := unix.Mount("none", dir, "fusectl", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return nil, fmt.Errorf("mount fusectl: %w", err)
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	return os.OpenFile(filepath.Join(dir, minor, "abort"), os.O_WRONLY, 0)
}

// Supervise is the supervisor's body (see StartSupervisor): it reads the
// daemon's connections from in, one "+minor" or "-minor" a line, watches
// the daemon (its parent), and aborts the connections still open as soon
// as the daemon is dead or dying. It returns when the daemon has gone,
// by itself (in is closed when its last thread exits) or after the abort.
func Supervise(in *os.File) error {
	closeFUSEDescriptors()
	pid := os.Getppid()
	return superviseProcess(in, pid, "/proc", newConnAborter(), nil)
}

// superviseProcess watches pid; polled, when set, is called after each
// look at it (tests).
func superviseProcess(in *os.File, pid int, procRoot string, a *connAborter, polled func(procInfo)) error {
	defer a.close()
	pidfd := -1
	if fd, err := unix.PidfdOpen(pid, 0); err == nil {
		pidfd = fd
		defer unix.Close(fd)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	tick := time.NewTicker(SupervisePoll)
	defer tick.Stop()
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				// The daemon's last thread is gone (or it closed the pipe):
				// what it left the kernel has already aborted; whatever
				// else is remembered is aborted too, harmlessly.
				a.abortAll()
				return nil
			}
			switch {
			case strings.HasPrefix(l, "+"):
				a.add(l[1:])
			case strings.HasPrefix(l, "-"):
				a.remove(l[1:])
			}
		case <-tick.C:
			p, err := watchOnce(pid, pidfd, procRoot)
			if err != nil {
				slog.Debug("supervisor: read the daemon's state", "pid", pid, "err", err)
				continue
			}
			if polled != nil {
				polled(p)
			}
			if dying(p) {
				if n := a.abortAll(); n > 0 && !p.Gone {
					// Threads are left: if one is stuck in the kernel on a
					// view, every caller of these views would hang but for
					// this abort.
					slog.Warn("acpfs supervisor: the daemon is dying with threads left; its FUSE connections were aborted, so nothing waits on it",
						"pid", pid, "leader_state", string(p.Leader), "connections", n)
				}
				return nil
			}
		}
	}
}

// watchOnce looks at the daemon once. The pidfd, when there is one,
// tells an exited process from a pid that names another process since.
func watchOnce(pid, pidfd int, procRoot string) (procInfo, error) {
	if pidfd >= 0 && pidfdExited(pidfd) {
		return procInfo{Gone: true}, nil
	}
	p, err := readProc(procRoot, pid)
	if err != nil {
		return p, err
	}
	if pidfd >= 0 && pidfdExited(pidfd) {
		return procInfo{Gone: true}, nil // what was read may be another process
	}
	return p, nil
}

// pidfdExited tells whether the process of pidfd has exited (all its
// threads: a zombie leader with a thread alive does not count).
func pidfdExited(fd int) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n > 0
}

// closeFUSEDescriptors closes every /dev/fuse descriptor this process
// inherited: the supervisor must never keep a connection alive.
func closeFUSEDescriptors() {
	for _, fd := range fuseDescriptors(os.Getpid()) {
		_ = unix.Close(fd)
	}
}

// fuseDescriptors lists the /dev/fuse descriptors of process pid.
func fuseDescriptors(pid int) []int {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		if target, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && target == "/dev/fuse" {
			if fd, err := strconv.Atoi(e.Name()); err == nil {
				out = append(out, fd)
			}
		}
	}
	return out
}

// dyingWait bounds how long a new coordinator waits for a killed one to
// finish dying (its supervisor aborts what holds it up within
// SupervisePoll, and its lock goes with its last thread).
const dyingWait = 5 * time.Second

// flockOrOutwaitDying takes the exclusive flock on f without blocking;
// while the holder is a coordinator that is dying, it tries again until
// dyingWait has passed.
func flockOrOutwaitDying(f *os.File) error {
	deadline := time.Now().Add(dyingWait)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(deadline) {
			return err
		}
		pid := lockHolder(f)
		if pid <= 0 {
			return err
		}
		if p, perr := readProc("/proc", pid); perr != nil || p.Gone || !dying(p) {
			if perr == nil && p.Gone {
				continue // gone just now: the lock is free
			}
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Health of a view, as CheckViews finds it.
const (
	ViewServing   = "serving"   // its coordinator runs
	ViewDead      = "dead"      // answers ENOTCONN: `acpfs up` clears it
	ViewHung      = "hung"      // its daemon is dying and the connection is not aborted: callers block
	ViewUnmounted = "unmounted" // nothing of the coordinator's is mounted there
)

// ViewHealth is one view a coordinator's status lists, with what became
// of it and the command that clears it.
type ViewHealth struct {
	Agent      string `json:"agent"`
	Mountpoint string `json:"mountpoint"`
	State      string `json:"state"`
	Fix        string `json:"fix,omitempty"`
}

// Stopped reports whether the coordinator's process is stopped (SIGSTOP,
// a debugger): its views then hang, every caller blocked, until it runs
// again, though its status still says it runs.
func (st CoordinatorStatus) Stopped() bool {
	if st.PID <= 0 {
		return false
	}
	ps, err := procstat.Read(st.PID)
	if err != nil || (st.PIDStart != 0 && ps.Start != st.PIDStart) {
		return false
	}
	return ps.State == 'T' || ps.State == 't'
}

// DaemonDying tells whether the coordinator st names is dying: its pid is
// that process still (same start time), which was killed or has exited
// but cannot finish (a thread stuck in the kernel holds its views).
func (st CoordinatorStatus) DaemonDying() bool {
	if st.PID <= 0 {
		return false
	}
	p, err := readProc("/proc", st.PID)
	if err != nil || p.Gone || !dying(p) {
		return false
	}
	if ps, err := procstat.Read(st.PID); err != nil || (st.PIDStart != 0 && ps.Start != st.PIDStart) {
		return false
	}
	return true
}

// CheckViews tells, for each view of a coordinator that is not running,
// whether it is dead (ENOTCONN), hung (its daemon is dying with the
// connection alive, so every caller blocks) or gone. A hung view is told
// from the daemon's state, never by touching it: a stat on it would hang
// the caller too. The views of a running coordinator are reported
// serving.
func CheckViews(st CoordinatorStatus) []ViewHealth {
	out := make([]ViewHealth, len(st.Views))
	dyingNow := !st.Running() && st.DaemonDying()
	var wg sync.WaitGroup
	for i, v := range st.Views {
		out[i] = ViewHealth{Agent: v.Agent, Mountpoint: v.Mountpoint, State: ViewServing}
		if st.Running() {
			continue
		}
		mi, ok, err := mountAt(realPath(v.Mountpoint))
		if err != nil || !ok || !mi.IsView() || (v.Dev != "" && mi.Dev != v.Dev) {
			out[i].State = ViewUnmounted
			continue
		}
		if dyingNow {
			out[i].State = ViewHung
			out[i].Fix = fmt.Sprintf("acpfs umount --force %s", v.Mountpoint)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch probeMount(v.Mountpoint) {
			case mountDead:
				out[i].State, out[i].Fix = ViewDead, "acpfs up (it detaches the dead view)"
			case mountHung:
				out[i].State, out[i].Fix = ViewHung, fmt.Sprintf("acpfs umount --force %s", v.Mountpoint)
			default:
				out[i].State = ViewServing // someone else's daemon serves it now
			}
		}()
	}
	wg.Wait()
	return out
}
