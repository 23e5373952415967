package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/internal/mountinfo"
)

// StatusOK is what Enter writes on its status descriptor once the
// command runs; anything else is the reason the sandbox could not be
// built.
const StatusOK = "ok"

// Enter builds the sandbox of spec and runs its command. The calling
// process must be the first process of new mount, PID, IPC and UTS
// namespaces (and network, for Net "none" and "allow"), and root. It writes
// StatusOK, or why it failed, to status, and returns the command's exit
// status (128+n for a signal n), or 127 when the sandbox could not be
// built.
func Enter(spec Spec, status *os.File) int {
	// Everything below happens on this one thread: no_new_privs, Landlock
	// and the seccomp filter are set on it, and the command is forked
	// from it. It is never unlocked.
	runtime.LockOSThread()
	lifeline = status
	// Signals are caught from the start: Go's default for SIGTERM is to
	// die by it, which the first process of a PID namespace cannot, so it
	// would exit 2 instead of passing the signal on to the command. One
	// that comes before the command runs is passed on when it does.
	sig := make(chan os.Signal, 8)
	signal.Notify(sig, forwarded...)
	pid, err := start(spec)
	if err != nil {
		fmt.Fprintf(status, "%v\n", err)
		status.Close()
		return 127
	}
	fmt.Fprintln(status, StatusOK)
	status.Close()
	return reap(pid, sig)
}

// start does the linear sequence: mounts, pivot_root, Landlock, seccomp,
// then the command. It returns the command's pid.
func start(spec Spec) (int, error) {
	useEnv(spec)
	guarded, err := locateGuarded(spec)
	if err != nil {
		return 0, err
	}
	proxy, err := openProxy(spec)
	if err != nil {
		return 0, err
	}
	if err := buildRoot(spec); err != nil {
		return 0, err
	}
	if err := enterRoot(spec.Root); err != nil {
		return 0, err
	}
	if err := checkMounts(spec, guarded); err != nil {
		return 0, err
	}
	if spec.Net != NetHost {
		if err := loopbackUp(); err != nil {
			return 0, err
		}
	}
	if proxy >= 0 {
		if err := bridgeProxy(proxy); err != nil {
			return 0, err
		}
	}
	dir, note := workdir(spec)
	if note != "" {
		fmt.Fprintln(os.Stderr, note)
	}
	var path string
	asAgent(spec, func() { path, err = lookPath(spec.Args[0]) })
	if err != nil {
		return 0, err
	}
	env := commandEnv(spec, dir)
	llc, err := landlockConfig(spec.Net == NetHost)
	if err != nil {
		return 0, err
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return 0, fmt.Errorf("no_new_privs: %w", err)
	}
	// Uid 0 of a user namespace is no root of the host's: it keeps no
	// capability either (SchemeSingle runs the command as that uid).
	if spec.UID != 0 || spec.UserNS != "" {
		if err := dropBoundingSet(); err != nil {
			return 0, err
		}
	}
	// The rules' paths are opened as the agent: the view serves no one
	// else.
	asAgent(spec, func() { err = restrictLandlock(llc, landlockRules(spec)) })
	if err != nil {
		return 0, err
	}
	if err := installSeccomp(spec.Net == NetHost); err != nil {
		return 0, err
	}
	// Descriptors this process inherited without close-on-exec (from
	// whatever started acpfs run) must not reach the command: a pipe or a
	// directory of the host is a way out.
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return 0, fmt.Errorf("close inherited descriptors: %w", err)
	}
	attr := &syscall.ProcAttr{
		Dir:   dir,
		Env:   env,
		Files: []uintptr{0, 1, 2},
		Sys: &syscall.SysProcAttr{
			// Its own session: no controlling terminal, so no TIOCSTI
			// into the caller's, and no signals from its keyboard.
			Setsid:     true,
			Pdeathsig:  syscall.SIGKILL,
			Credential: agentCredential(spec),
		},
	}
	pid, err := syscall.ForkExec(path, spec.Args, attr)
	if err != nil {
		return 0, fmt.Errorf("start %s: %w", spec.Args[0], err)
	}
	return pid, nil
}

// agentCredential is who the command runs as: spec's uid and gid, no
// supplementary groups. A single-mapping user namespace denies setgroups
// (the kernel's price for an unprivileged map): there the caller's own
// groups, which the namespace shows as nogroup, stay.
func agentCredential(spec Spec) *syscall.Credential {
	if spec.UserNS == SchemeSingle {
		return &syscall.Credential{Uid: spec.UID, Gid: spec.GID, NoSetGroups: true}
	}
	return &syscall.Credential{Uid: spec.UID, Gid: spec.GID, Groups: []uint32{}}
}

// dropBoundingSet empties this thread's capability bounding set, which
// the command inherits: with no_new_privs no program could regain a
// capability anyway; without a bounding set there is none to regain.
func dropBoundingSet() error {
	for c := 0; c <= unix.CAP_LAST_CAP; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	return nil
}

// lookPath finds the command as the caller's shell would, in the
// sandbox. A name with a slash is left to the exec, relative to the
// command's working directory.
func lookPath(name string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	p, err := exec.LookPath(name)
	if err != nil && !errors.Is(err, exec.ErrDot) {
		return "", fmt.Errorf("%s: not found in the sandbox (it shows %s, --ro and --rw paths, the folder and /tmp)", name, strings.Join(SystemDirs, " "))
	}
	return p, nil
}

// Mount attributes used below.
const (
	attrRO     = unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV
	attrRW     = unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV
	attrDevDir = unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NOEXEC
	attrProc   = unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC
)

// devices are the host device nodes the sandbox's /dev shows.
var devices = []string{"null", "zero", "full", "random", "urandom", "tty"}

// buildRoot makes the new root at spec.Root: a tmpfs holding only what
// the sandbox shows. Every mountpoint is made and reached beneath the
// root without following symbolic links, so nothing a hostile writer
// plants in a shown directory can send a mount elsewhere.
func buildRoot(spec Spec) error {
	// Nothing done here may reach the daemon's namespace, or the host's.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	if err := attachFS("tmpfs", map[string]string{"mode": "0755"}, attrRW, unix.AT_FDCWD, spec.Root); err != nil {
		return fmt.Errorf("new root: %w", err)
	}
	root, err := unix.Open(spec.Root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("new root: %w", err)
	}
	defer unix.Close(root)

	// The host's directories that are not below a private one, then the
	// private temporary directories (over a bind of /var, say), then the
	// binds below those.
	inTmp := func(p string) bool { return within(p, "/tmp") || within(p, "/var/tmp") }
	for _, b := range spec.Binds {
		if !inTmp(b.Path) {
			if err := bind(root, b); err != nil {
				return err
			}
		}
	}
	for _, d := range privateTmp {
		if err := attachFSBeneath(root, d, "tmpfs", map[string]string{"mode": "1777"}, attrRW); err != nil {
			return fmt.Errorf("private %s: %w", d, err)
		}
	}
	for _, b := range spec.Binds {
		if inTmp(b.Path) {
			if err := bind(root, b); err != nil {
				return err
			}
		}
	}
	// Whatever the binds brought along that lets a process reach the
	// kernel or other file systems goes: other FUSE mounts above all
	// (other agents' views), before the sandbox's own /dev and /proc
	// are made.
	if err := detachForeign(spec.Root, root, spec.UserNS != ""); err != nil {
		return err
	}
	if err := makeDev(root); err != nil {
		return err
	}
	if err := attachFSBeneath(root, "/proc", "proc", nil, attrProc); err != nil {
		return fmt.Errorf("/proc: %w", err)
	}
	if err := maskProc(root); err != nil {
		return err
	}
	// The view, at the folder's own path.
	if err := cloneBeneath(root, spec.View, spec.Folder, false, attrRW, true); err != nil {
		return fmt.Errorf("view at %s: %w", spec.Folder, err)
	}
	return maskAll(root, spec)
}

// bind shows one host path (or makes one link) in the new root.
func bind(root int, b Bind) error {
	if b.Link != "" {
		parent, err := mkdirBeneath(root, filepath.Dir(b.Path))
		if err != nil {
			return fmt.Errorf("%s: %w", b.Path, err)
		}
		defer unix.Close(parent)
		if err := unix.Symlinkat(b.Link, parent, filepath.Base(b.Path)); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("%s: %w", b.Path, err)
		}
		return nil
	}
	attr := uint64(attrRO)
	if b.Write {
		attr = attrRW
	}
	src := b.Path
	if b.Source != "" {
		src = b.Source
	}
	fi, err := os.Lstat(src)
	if err != nil {
		return fmt.Errorf("%s: %w", b.Path, err)
	}
	if b.IDMap != nil {
		err = cloneIDMapped(root, src, b.Path, attr, fi.IsDir(), b.IDMap)
	} else {
		err = cloneBeneath(root, src, b.Path, true, attr, fi.IsDir())
	}
	if err != nil {
		return fmt.Errorf("show %s: %w", describeBind(b), err)
	}
	return nil
}

// cloneBeneath mounts a copy of the host's src (recursively, with rec)
// at dst beneath root, with attr on every mount of the copy.
func cloneBeneath(root int, src, dst string, rec bool, attr uint64, dir bool) error {
	// The source, reached without following any symbolic link: it was
	// checked with its links resolved, and must still be what was checked.
	sfd, err := unix.Openat2(unix.AT_FDCWD, src, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC | unix.O_NOFOLLOW,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return err
	}
	defer unix.Close(sfd)
	flags := uint(unix.OPEN_TREE_CLONE | unix.OPEN_TREE_CLOEXEC | unix.AT_EMPTY_PATH)
	setFlags := uint(unix.AT_EMPTY_PATH)
	if rec {
		flags |= unix.AT_RECURSIVE
		setFlags |= unix.AT_RECURSIVE
	}
	tree, err := unix.OpenTree(sfd, "", flags)
	if err != nil {
		return fmt.Errorf("open_tree: %w", err)
	}
	defer unix.Close(tree)
	if err := unix.MountSetattr(tree, "", setFlags, &unix.MountAttr{Attr_set: attr}); err != nil {
		return fmt.Errorf("mount_setattr: %w", err)
	}
	return moveBeneath(root, tree, dst, dir)
}

// attachFS makes a new file system and attaches it at path (relative to
// dirfd).
func attachFS(fstype string, opts map[string]string, attr uint64, dirfd int, path string) error {
	m, err := newFS(fstype, opts, attr)
	if err != nil {
		return err
	}
	defer unix.Close(m)
	return unix.MoveMount(m, "", dirfd, path, unix.MOVE_MOUNT_F_EMPTY_PATH)
}

// attachFSBeneath makes a new file system at dst beneath root.
func attachFSBeneath(root int, dst, fstype string, opts map[string]string, attr uint64) error {
	m, err := newFS(fstype, opts, attr)
	if err != nil {
		return err
	}
	defer unix.Close(m)
	return moveBeneath(root, m, dst, true)
}

// newFS returns a detached mount of a new fstype.
func newFS(fstype string, opts map[string]string, attr uint64) (int, error) {
	fsfd, err := unix.Fsopen(fstype, unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("fsopen %s: %w", fstype, err)
	}
	defer unix.Close(fsfd)
	for k, v := range opts {
		if err := unix.FsconfigSetString(fsfd, k, v); err != nil {
			return -1, fmt.Errorf("%s option %s=%s: %w", fstype, k, v, err)
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return -1, fmt.Errorf("create %s: %w", fstype, err)
	}
	m, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, int(attr))
	if err != nil {
		return -1, fmt.Errorf("fsmount %s: %w", fstype, err)
	}
	return m, nil
}

// moveBeneath attaches the detached mount m at dst beneath root, making
// the mountpoint (a directory, or an empty file) first.
func moveBeneath(root, m int, dst string, dir bool) error {
	var target int
	var err error
	if dir {
		target, err = mkdirBeneath(root, dst)
	} else {
		target, err = mkfileBeneath(root, dst)
	}
	if err != nil {
		return err
	}
	defer unix.Close(target)
	if err := unix.MoveMount(m, "", target, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount to %s: %w", dst, err)
	}
	return nil
}

// beneath is how every path inside the new root is resolved: never
// above it, never through a symbolic link.
var beneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// openBeneath opens rel (absolute in the sandbox) beneath root as an
// O_PATH descriptor.
func openBeneath(root int, rel string, extra int) (int, error) {
	rel = strings.TrimPrefix(filepath.Clean(rel), "/")
	if rel == "" {
		rel = "."
	}
	return unix.Openat2(root, rel, &unix.OpenHow{Flags: uint64(unix.O_PATH | unix.O_CLOEXEC | unix.O_NOFOLLOW | extra), Resolve: uint64(beneath)})
}

// mkdirBeneath makes the directory p (absolute in the sandbox) and its
// parents beneath root, and returns an O_PATH descriptor of it. Parents
// that exist (inside a bind) are used as they are.
func mkdirBeneath(root int, p string) (int, error) {
	cur, err := unix.Dup(root)
	if err != nil {
		return -1, err
	}
	for _, name := range strings.Split(strings.TrimPrefix(filepath.Clean(p), "/"), "/") {
		if name == "" {
			continue
		}
		if err := unix.Mkdirat(cur, name, 0o755); err != nil && !errors.Is(err, unix.EEXIST) && !errors.Is(err, unix.EROFS) {
			unix.Close(cur)
			return -1, fmt.Errorf("mkdir %s: %w", p, err)
		}
		next, err := unix.Openat2(cur, name, &unix.OpenHow{
			Flags: uint64(unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC | unix.O_NOFOLLOW), Resolve: uint64(beneath)})
		unix.Close(cur)
		if err != nil {
			return -1, fmt.Errorf("%s: %w", p, err)
		}
		cur = next
	}
	return cur, nil
}

// mkfileBeneath makes the empty file p beneath root (its parents too)
// and returns an O_PATH descriptor of it.
func mkfileBeneath(root int, p string) (int, error) {
	parent, err := mkdirBeneath(root, filepath.Dir(p))
	if err != nil {
		return -1, err
	}
	defer unix.Close(parent)
	// O_PATH descriptors cannot create: reopen the parent for that.
	pd, err := unix.Openat(parent, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	defer unix.Close(pd)
	name := filepath.Base(p)
	fd, err := unix.Openat(pd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err == nil {
		unix.Close(fd)
	} else if !errors.Is(err, unix.EROFS) && !errors.Is(err, unix.EEXIST) {
		return -1, fmt.Errorf("create %s: %w", p, err)
	}
	return unix.Openat2(pd, name, &unix.OpenHow{Flags: uint64(unix.O_PATH | unix.O_CLOEXEC | unix.O_NOFOLLOW), Resolve: uint64(beneath)})
}

// makeDev builds a minimal /dev: the harmless device nodes, the usual
// links, its own devpts and /dev/shm. No /dev/fuse (a process holding
// it could answer a view's requests), no disks, no /dev/mem.
func makeDev(root int) error {
	if err := attachFSBeneath(root, "/dev", "tmpfs", map[string]string{"mode": "0755", "size": "64k"}, attrDevDir); err != nil {
		return fmt.Errorf("/dev: %w", err)
	}
	for _, d := range devices {
		if err := cloneBeneath(root, "/dev/"+d, "/dev/"+d, false, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC, false); err != nil {
			return fmt.Errorf("/dev/%s: %w", d, err)
		}
	}
	dev, err := openBeneath(root, "/dev", unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	defer unix.Close(dev)
	for name, target := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1",
		"stderr": "/proc/self/fd/2", "ptmx": "pts/ptmx"} {
		if err := unix.Symlinkat(target, dev, name); err != nil {
			return fmt.Errorf("/dev/%s: %w", name, err)
		}
	}
	if err := attachFSBeneath(root, "/dev/pts", "devpts", map[string]string{"ptmxmode": "0666", "mode": "0620"}, attrDevDir); err != nil {
		return fmt.Errorf("/dev/pts: %w", err)
	}
	if err := attachFSBeneath(root, "/dev/shm", "tmpfs", map[string]string{"mode": "1777"}, attrRW); err != nil {
		return fmt.Errorf("/dev/shm: %w", err)
	}
	return nil
}

// procMasks are the files of /proc that show the kernel's memory or
// state of the whole machine (root may read them); they are covered as
// container runtimes cover them.
var procMasks = []string{"/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug", "/proc/sysrq-trigger",
	"/proc/acpi", "/proc/scsi", "/proc/kallsyms"}

// maskProc covers procMasks: files with /dev/null, directories with an
// empty read-only tmpfs.
func maskProc(root int) error {
	for _, p := range procMasks {
		st, found, err := statBeneath(root, p)
		if !found || err != nil {
			continue
		}
		if err := cover(root, p, &st, "0555"); err != nil {
			return fmt.Errorf("mask %s: %w", p, err)
		}
	}
	return nil
}

// statBeneath stats p beneath root; found is false when p is not there.
func statBeneath(root int, p string) (st unix.Stat_t, found bool, err error) {
	fd, err := openBeneath(root, p, 0)
	if err != nil {
		return st, false, nil
	}
	err = unix.Fstat(fd, &st)
	unix.Close(fd)
	return st, true, err
}

// cover mounts over p beneath root (st is what p is): an empty read-only
// tmpfs with the given mode over a directory, /dev/null over anything
// else.
func cover(root int, p string, st *unix.Stat_t, mode string) error {
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return attachFSBeneath(root, p, "tmpfs", map[string]string{"mode": mode, "size": "4k"}, attrRO|unix.MOUNT_ATTR_NOEXEC)
	}
	return cloneBeneath(root, "/dev/null", p, false, attrRO|unix.MOUNT_ATTR_NOEXEC, false)
}

// maskAll hides the run directory, the ledger and the grant where a bind
// shows them: an empty, unreadable directory, or /dev/null for a file.
// Those inside the folder are the view's to hide (and it does).
func maskAll(root int, spec Spec) error {
	for _, m := range spec.Masks {
		if m == spec.Folder || within(m, spec.Folder) || within(spec.Folder, m) {
			// Inside the folder, the view hides it. Above the folder, no
			// bind shows it (Plan refuses that): only the directories
			// leading to the folder are there, which hold nothing else.
			continue
		}
		st, found, err := statBeneath(root, m)
		if !found {
			continue // not in the sandbox
		}
		if err == nil {
			err = cover(root, m, &st, "0000")
		}
		if err != nil {
			return fmt.Errorf("mask %s: %w", m, err)
		}
	}
	return nil
}

// foreignTypes are file systems a bind may bring along that the sandbox
// must not show: other FUSE mounts (other agents' views, whatever a user
// mounted) and the kernel's own.
func foreign(fstype string) bool {
	if fstype == "fuse" || fstype == "fuseblk" || strings.HasPrefix(fstype, "fuse.") || strings.HasPrefix(fstype, "fuseblk.") {
		return true
	}
	switch fstype {
	case "proc", "sysfs", "devtmpfs", "devpts", "mqueue", "cgroup", "cgroup2", "securityfs", "debugfs", "tracefs",
		"bpf", "configfs", "fusectl", "binfmt_misc", "pstore", "efivarfs", "hugetlbfs", "autofs", "nsfs", "rpc_pipefs":
		return true
	}
	return false
}

// detachForeign detaches, under root, every mount of a foreign type.
// checkMounts verifies afterwards, from the sandbox's own /proc, that
// none is left.
//
// In a user namespace, mounts a bind brought along from the host's mount
// namespace are locked to their parents: they cannot be detached alone
// (EINVAL), and are covered instead (see coverLocked).
func detachForeign(root string, rootfd int, userNS bool) error {
	mis, err := readMounts("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	for _, mi := range mis {
		if within(mi.point, root) && foreign(mi.fstype) {
			err := unix.Unmount(mi.point, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
			if errors.Is(err, unix.EINVAL) && userNS {
				err = coverLocked(rootfd, strings.TrimPrefix(mi.point, root))
			}
			if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
				return fmt.Errorf("hide %s (%s): %w", mi.point, mi.fstype, err)
			}
		}
	}
	return nil
}

// enterRoot makes root the root and forgets the old one.
func enterRoot(root string) error {
	if err := unix.Chdir(root); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the old root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	// The root itself holds only the skeleton: nothing may be added.
	if err := unix.MountSetattr(unix.AT_FDCWD, "/", 0, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
		return fmt.Errorf("read-only root: %w", err)
	}
	if err := unix.MountSetattr(unix.AT_FDCWD, "/dev", 0, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
		return fmt.Errorf("read-only /dev: %w", err)
	}
	return nil
}

// guardedPath is a path of the host that the sandbox may show only
// where it is, and there only as the view or a mask: the folder, the run
// directory, the ledger, the grant. dev and fs say where it lives: the
// device (major:minor) and its path inside that file system.
type guardedPath struct{ path, dev, fs string }

// locateGuarded finds, in the mount table the sandbox starts from (the
// host's), where the folder and the masks live.
func locateGuarded(spec Spec) ([]guardedPath, error) {
	mis, err := readMounts("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []guardedPath
	for _, p := range append([]string{spec.Folder}, spec.Masks...) {
		var found mountEntry
		ok := false
		for _, mi := range mis {
			// The last of the longest: a mount made over another comes later.
			if (mi.point == p || within(p, mi.point)) && (!ok || len(mi.point) >= len(found.point)) {
				found, ok = mi, true
			}
		}
		if !ok {
			continue
		}
		out = append(out, guardedPath{path: p, dev: found.dev, fs: filepath.Join(found.root, strings.TrimPrefix(p, found.point))})
	}
	return out, nil
}

// checkMounts verifies the finished sandbox from its own /proc: the view
// is the one FUSE mount, no kernel file system but its own /proc,
// /dev/pts and /dev/shm is there, and no mount shows the folder, the run
// directory, the ledger or the grant at another path (a bind mount of
// the folder elsewhere in a --ro directory, say), where neither the view
// nor a mask covers them.
func checkMounts(spec Spec, guarded []guardedPath) error {
	mis, err := readMounts("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	// The sandbox's own: /proc, /dev/pts, the device nodes of /dev and
	// the /dev/null binds that mask files.
	own := map[string]bool{"/proc": true, "/dev/pts": true}
	for _, d := range devices {
		own["/dev/"+d] = true
	}
	for _, m := range append(spec.Masks, procMasks...) {
		own[m] = true
	}
	// The agent's home lies in the run directory by design.
	if spec.Home != "" {
		own[spec.Home] = true
	}
	views := 0
	for _, mi := range mis {
		switch {
		case mi.point == spec.Folder && strings.HasPrefix(mi.fstype, "fuse"):
			views++
			continue
		case own[mi.point]:
			continue
		case foreign(mi.fstype) && spec.UserNS != "" && coveredAt(mis, mi.point):
			continue
		case foreign(mi.fstype):
			return fmt.Errorf("the sandbox would show %s (%s); refusing to start", mi.point, mi.fstype)
		}
		for _, g := range guarded {
			if mi.dev != g.dev {
				continue
			}
			switch {
			case g.fs == mi.root || within(g.fs, mi.root):
				if alias := filepath.Join(mi.point, strings.TrimPrefix(g.fs, mi.root)); alias != g.path {
					return fmt.Errorf("%s would also be reachable at %s, through the mount at %s; refusing to start", g.path, alias, mi.point)
				}
			case within(mi.root, g.fs):
				return fmt.Errorf("the mount at %s shows part of %s; refusing to start", mi.point, g.path)
			}
		}
	}
	if views != 1 {
		return fmt.Errorf("the view is not mounted at %s in the sandbox", spec.Folder)
	}
	return nil
}

type mountEntry struct{ dev, root, point, fstype string }

// readMounts reads the mount points and types of a mountinfo file.
func readMounts(path string) ([]mountEntry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []mountEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if e, ok := mountinfo.Parse(sc.Text()); ok {
			out = append(out, mountEntry{dev: e.Dev, root: e.Root, point: e.Point, fstype: e.FSType})
		}
	}
	return out, sc.Err()
}

// loopbackUp brings up lo in a new network namespace, so that the
// command can still talk to itself over 127.0.0.1.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	return nil
}

// lifeline is the write end of the status pipe, whose read end the
// daemon holds: it reports an error once the daemon is gone.
var lifeline *os.File

// asAgent runs fn with this thread's file-system identity set to the
// command's, so that what fn touches is judged (by the kernel and by the
// view, which serves no one else) as the command would be.
//
// A change of credentials clears the parent-death signal: it is set
// again afterwards, and if the daemon died meanwhile, this process ends
// now rather than outlive it.
func asAgent(spec Spec, fn func()) {
	unix.Setfsgid(int(spec.GID))
	unix.Setfsuid(int(spec.UID))
	defer func() {
		unix.Setfsuid(0)
		unix.Setfsgid(0)
		if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
			os.Exit(127)
		}
		if lifeline != nil {
			fds := []unix.PollFd{{Fd: int32(lifeline.Fd())}}
			if n, _ := unix.Poll(fds, 0); n > 0 && fds[0].Revents&(unix.POLLERR|unix.POLLHUP) != 0 {
				os.Exit(127)
			}
		}
	}()
	fn()
}

// workdir is where the command starts: the caller's working directory
// when the sandbox shows it to the command, the folder otherwise (with a
// note saying so). It is never a directory of the host the sandbox does
// not show.
func workdir(spec Spec) (string, string) {
	ok := false
	if spec.Cwd != "" {
		asAgent(spec, func() {
			var st unix.Stat_t
			ok = unix.Stat(spec.Cwd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR &&
				unix.Faccessat2(unix.AT_FDCWD, spec.Cwd, unix.X_OK, unix.AT_EACCESS) == nil
		})
	}
	if ok {
		return spec.Cwd, ""
	}
	return spec.Folder, fmt.Sprintf("acpfs run: the working directory %s is not in the sandbox; the command starts in the folder, %s", spec.Cwd, spec.Folder)
}

// commandEnv is the chosen environment (Spec.Env), with PWD the directory
// the command starts in, and HOME the agent's own home (spec.Home), else
// the private /tmp when the sandbox does not show the caller's (so that
// programs keeping state there still run).
func commandEnv(spec Spec, dir string) []string {
	home := os.Getenv("HOME")
	shown := false
	if spec.Home == "" && home != "" {
		asAgent(spec, func() {
			var st unix.Stat_t
			shown = unix.Stat(home, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR
		})
	}
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PWD=") || !shown && strings.HasPrefix(kv, "HOME=") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "PWD="+dir)
	if spec.Home != "" {
		env = append(env, "HOME="+spec.Home)
	} else if !shown {
		env = append(env, "HOME=/tmp")
	}
	return env
}

// landlockRules are the paths the command may use, and how.
func landlockRules(spec Spec) []llRule {
	var rules []llRule
	for _, b := range spec.Binds {
		switch {
		case b.Link != "":
		case b.Write:
			rules = append(rules, llRule{b.Path, llWrite})
		default:
			rules = append(rules, llRule{b.Path, llRead})
		}
	}
	rules = append(rules,
		llRule{spec.Folder, llWrite}, llRule{"/tmp", llWrite}, llRule{"/var/tmp", llWrite}, llRule{"/dev/shm", llWrite},
		llRule{"/proc", llsys.AccessFSReadFile | llsys.AccessFSReadDir}, llRule{"/dev", llsys.AccessFSReadDir},
		llRule{"/dev/pts", llDevice | llsys.AccessFSReadDir})
	for _, d := range devices {
		rules = append(rules, llRule{"/dev/" + d, llDevice})
	}
	// The terminal the caller handed over (stdin, stdout, stderr) may be
	// opened again, as /dev/stderr say, though no path of the sandbox
	// leads to it.
	for fd := 0; fd <= 2; fd++ {
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFCHR {
			rules = append(rules, llRule{fmt.Sprintf("/proc/self/fd/%d", fd), llDevice})
		}
	}
	return rules
}

// forwarded are the signals `acpfs run` passes on to the command.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// reap passes signals on to the command, reaps every process that ends
// in the sandbox (as the first process of a PID namespace must) and
// returns the command's status once it exits. The others die with this
// process: the kernel kills what is left of a PID namespace whose first
// process is gone.
func reap(pid int, sig <-chan os.Signal) int {
	go func() {
		for s := range sig {
			_ = syscall.Kill(pid, s.(syscall.Signal))
		}
	}()
	for {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return 127
		}
		if got != pid {
			continue
		}
		if ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ws.ExitStatus()
	}
}
