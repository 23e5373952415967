package mount

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/acpfs/acpfs/internal/mountinfo"
)

func lookPath(name string) (string, error) { return exec.LookPath(name) }

func runQuiet(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Doctor describes whether this machine can mount acpfs views.
type Doctor struct {
	Root        bool
	DevFUSE     error  // nil when /dev/fuse opens read-write
	Fusermount  string // path of fusermount3, if any
	Passthrough bool   // running as root, so read-only files use FUSE passthrough
}

// Check inspects the machine.
func Check() Doctor {
	d := Doctor{Root: os.Geteuid() == 0}
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		d.DevFUSE = err
	} else {
		f.Close()
	}
	if p, err := exec.LookPath("fusermount3"); err == nil {
		d.Fusermount = p
	}
	d.Passthrough = d.Root
	return d
}

// Usable returns nil when views can be mounted, or the reason they cannot.
func (d Doctor) Usable() error {
	if d.DevFUSE != nil {
		return fmt.Errorf("/dev/fuse is not usable: %w (%s)", d.DevFUSE, fuseFix(d.DevFUSE, d.Root))
	}
	if !d.Root && d.Fusermount == "" {
		return errors.New("not root and fusermount3 is not installed: install fuse3 (apt-get install fuse3) or run acpfs as root")
	}
	return nil
}

// UsableForRun is Usable for `acpfs run`, which never needs fusermount3:
// as root it mounts directly, and without root it mounts inside the user
// namespace it builds the sandbox in.
func (d Doctor) UsableForRun() error {
	if d.DevFUSE != nil {
		return fmt.Errorf("/dev/fuse is not usable: %w (%s)", d.DevFUSE, fuseFix(d.DevFUSE, d.Root))
	}
	return nil
}

// fuseFix is the fix that matches why /dev/fuse could not be opened.
func fuseFix(err error, root bool) string {
	switch {
	case errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM):
		if root {
			return "the container denies the device: start it with --device /dev/fuse"
		}
		return `this user may not open it: run acpfs as root, or give users access with "chmod 0666 /dev/fuse", the mode fuse3's udev rule sets`
	case errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ENODEV) || errors.Is(err, syscall.ENXIO):
		return `load the module with "modprobe fuse", or start the container with --device /dev/fuse`
	}
	return "check that the fuse module is loaded and the device is available"
}

const fusectl = "/sys/fs/fuse/connections"

// abortConnection aborts the FUSE connection serving mountpoint through
// the fusectl filesystem, mounting it for the occasion if needed.
func abortConnection(mountpoint string) error {
	abs, err := filepath.Abs(mountpoint)
	if err != nil {
		return err
	}
	minor, err := fuseMinor(abs)
	if err != nil {
		return err
	}
	ctl := filepath.Join(fusectl, minor, "abort")
	if _, err := os.Stat(ctl); err != nil {
		if merr := syscall.Mount("none", fusectl, "fusectl", 0, ""); merr != nil {
			return fmt.Errorf("mount fusectl: %w", merr)
		}
		defer syscall.Unmount(fusectl, 0)
	}
	return os.WriteFile(ctl, []byte("1"), 0o200)
}

// fuseMinor returns the device minor (the fusectl connection number) of
// the FUSE mount at abs.
func fuseMinor(abs string) (string, error) {
	mi, ok, err := mountAt(abs)
	if err != nil {
		return "", err
	}
	if !ok || !strings.HasPrefix(mi.FSType, "fuse") {
		return "", fmt.Errorf("%s is not a FUSE mount", abs)
	}
	_, minor, ok := strings.Cut(mi.Dev, ":")
	if !ok {
		return "", fmt.Errorf("%s: bad device %q in mountinfo", abs, mi.Dev)
	}
	return minor, nil
}

// MountInfo is one line of /proc/self/mountinfo.
type MountInfo struct {
	ID, Parent int
	Dev        string // major:minor
	Mountpoint string // unescaped
	FSType     string // "fuse.acpfs" for a view
	Source     string // "acpfs:<folder>" for a view
}

// ViewFSType and ViewSourcePrefix are how a view shows in mountinfo.
const (
	ViewFSType       = "fuse.acpfs"
	ViewSourcePrefix = "acpfs:"
)

// IsView tells whether the mount is an acpfs view.
func (mi MountInfo) IsView() bool {
	return mi.FSType == ViewFSType && strings.HasPrefix(mi.Source, ViewSourcePrefix)
}

// describe names the mount for messages: "tmpfs (source tmpfs)".
func (mi MountInfo) describe() string {
	return fmt.Sprintf("%s (source %s)", mi.FSType, mi.Source)
}

const mountinfoPath = "/proc/self/mountinfo"

// readMountInfo lists the mounts of this mount namespace, parents before
// children, as the kernel orders them.
func readMountInfo() ([]MountInfo, error) {
	b, err := os.ReadFile(mountinfoPath)
	if err != nil {
		return nil, err
	}
	return parseMountInfo(string(b)), nil
}

// parseMountInfo parses mountinfo text; malformed lines are skipped.
func parseMountInfo(text string) []MountInfo {
	var out []MountInfo
	for _, e := range mountinfo.ParseAll(text) {
		out = append(out, MountInfo{ID: e.ID, Parent: e.Parent, Dev: e.Dev, Mountpoint: e.Point, FSType: e.FSType, Source: e.Source})
	}
	return out
}

// mountAt returns the topmost mount whose mountpoint is abs (an absolute
// path with symbolic links resolved), if any.
func mountAt(abs string) (MountInfo, bool, error) {
	mis, err := readMountInfo()
	if err != nil {
		return MountInfo{}, false, err
	}
	mi, ok := topmostAt(mis, abs)
	return mi, ok, nil
}

// topmostAt picks, among the mounts at abs, the one stacked last: a mount
// made over another is its child, so it comes later in mountinfo.
func topmostAt(mis []MountInfo, abs string) (MountInfo, bool) {
	var found MountInfo
	ok := false
	for _, mi := range mis {
		if mi.Mountpoint == abs {
			if !ok || isAbove(mis, mi, found) {
				found, ok = mi, true
			}
		}
	}
	return found, ok
}

// isAbove tells whether a is b or stacked over it (b is among a's
// ancestors).
func isAbove(mis []MountInfo, a, b MountInfo) bool {
	byID := make(map[int]MountInfo, len(mis))
	for _, mi := range mis {
		byID[mi.ID] = mi
	}
	seen := map[int]bool{}
	for cur := a; !seen[cur.ID]; {
		if cur.ID == b.ID {
			return true
		}
		seen[cur.ID] = true
		p, ok := byID[cur.Parent]
		if !ok {
			break
		}
		cur = p
	}
	return false
}

// isMountpoint tells whether the existing directory abs is a mount point:
// listed in mountinfo, or on another device than its parent.
func isMountpoint(abs string) (MountInfo, bool, error) {
	mi, ok, err := mountAt(abs)
	if err != nil || ok {
		return mi, ok, err
	}
	parent := filepath.Dir(abs)
	if parent == abs {
		return MountInfo{Mountpoint: abs}, true, nil
	}
	var st, pst syscall.Stat_t
	if err := syscall.Lstat(abs, &st); err != nil {
		return mi, false, err
	}
	if err := syscall.Lstat(parent, &pst); err != nil {
		return mi, false, err
	}
	if st.Dev != pst.Dev {
		return MountInfo{Mountpoint: abs, FSType: "unknown", Source: "another device"}, true, nil
	}
	return mi, false, nil
}

// resolveMountpointPath makes p absolute and resolves symbolic links in
// its parent only, so that the mount at p itself (which may be dead or
// hung) is never touched.
func resolveMountpointPath(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	if abs == "/" {
		return abs, nil
	}
	dir, err := filepath.EvalSymlinks(filepath.Dir(abs))
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, filepath.Base(abs)), nil
}

// deadMountTimeout bounds how long deadMount waits for an answer.
const deadMountTimeout = 2 * time.Second

// deadMount tells whether the FUSE mount at p has lost its daemon: statfs
// answers ENOTCONN. A daemon that does not answer within deadMountTimeout
// is taken as alive (hung), never as dead.
func deadMount(p string) bool { return probeMount(p) == mountDead }

// Results of probeMount.
const (
	mountAlive = iota // answers
	mountDead         // ENOTCONN: its daemon is gone
	mountHung         // no answer within deadMountTimeout
)

// probeMount asks the daemon of the mount at p, without waiting more
// than deadMountTimeout for one that does not answer. statfs, because
// the kernel always asks the daemon for it: a stat may be answered from
// the attributes it keeps (a view lets it keep them for minutes), and
// would make a dead view look alive.
func probeMount(p string) int {
	ch := make(chan error, 1)
	go func() {
		var st syscall.Statfs_t
		ch <- syscall.Statfs(p, &st)
	}()
	select {
	case err := <-ch:
		if errors.Is(err, syscall.ENOTCONN) {
			return mountDead
		}
		return mountAlive
	case <-time.After(deadMountTimeout):
		return mountHung
	}
}

// bootID identifies the current boot: a start time only means something
// within one boot.
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// processAlive tells whether a process with this pid exists.
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// closeOnExecFUSE marks every open /dev/fuse descriptor of this process
// close-on-exec.
func closeOnExecFUSE() error {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil || target != "/dev/fuse" {
			continue
		}
		var fd int
		if _, err := fmt.Sscanf(e.Name(), "%d", &fd); err == nil {
			syscall.CloseOnExec(fd)
		}
	}
	return nil
}
