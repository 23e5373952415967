package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// UsernsHelper is the hidden command of the acpfs binary that OpenUserns
// starts in a new user namespace: it only waits for its stdin to close,
// so that the namespace lives until its descriptor is open.
const UsernsHelper = "run-userns"

// HoldUserns is UsernsHelper's body.
func HoldUserns() {
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// OpenUserns opens, for each idmapped bind of spec, a user namespace
// holding its mapping, and sets the bind's IDMap.FD to the descriptor
// the file will have in the sandbox's first process when the files are
// passed to it in order from descriptor firstFD on. The caller closes
// the files once that process has started.
//
// The namespaces are made here, in the daemon, and not in the sandbox's
// first process: that one is in a new PID namespace whose /proc is not
// mounted yet, so it could not name its helper's namespace.
func OpenUserns(spec *Spec, firstFD int) ([]*os.File, error) {
	var files []*os.File
	for i := range spec.Binds {
		m := spec.Binds[i].IDMap
		if m == nil {
			continue
		}
		f, err := openUserns(*m)
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			return nil, fmt.Errorf("%s: a user namespace for its idmapped mount: %w", describeBind(spec.Binds[i]), err)
		}
		m.FD = firstFD + len(files)
		files = append(files, f)
	}
	return files, nil
}

func openUserns(m IDMap) (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer w.Close()
	cmd := exec.Command("/proc/self/exe", UsernsHelper)
	cmd.Stdin = r
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: int(m.UID), HostID: int(m.ToUID), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: int(m.GID), HostID: int(m.ToGID), Size: 1}},
		Pdeathsig:   syscall.SIGKILL,
	}
	err = cmd.Start()
	r.Close()
	if err != nil {
		return nil, err
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid))
	w.Close()
	if werr := cmd.Wait(); err == nil && werr != nil {
		f.Close()
		return nil, fmt.Errorf("helper: %w", werr)
	}
	return f, err
}

// cloneIDMapped is cloneBeneath for an idmapped bind: the copy is
// mounted through the user namespace of m.FD. A file system that does
// not support idmapped mounts fails here, before the command starts,
// with a line that says so.
func cloneIDMapped(root int, src, dst string, attr uint64, dir bool, m *IDMap) error {
	defer unix.Close(m.FD)
	sfd, err := unix.Openat2(unix.AT_FDCWD, src, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC | unix.O_NOFOLLOW,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return err
	}
	defer unix.Close(sfd)
	tree, err := unix.OpenTree(sfd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH|unix.AT_RECURSIVE)
	if err != nil {
		return fmt.Errorf("open_tree: %w", err)
	}
	defer unix.Close(tree)
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: attr}); err != nil {
		return fmt.Errorf("mount_setattr: %w", err)
	}
	// The idmapping goes on the directory's own mount only: mounts below
	// it keep their owners (and other FUSE mounts, which are detached
	// afterwards, could not take one).
	set := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(m.FD)}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, set); err != nil {
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.EOPNOTSUPP) {
			as := fmt.Sprintf("--uid %d", m.UID)
			if m.UID == 0 {
				as = "--allow-root"
			}
			why := "its file system does not support idmapped mounts"
			if errors.Is(err, unix.EPERM) {
				why = "the kernel refuses this run an idmapped mount of it (idmapping a host directory needs root on the host)"
			}
			return fmt.Errorf("%s (%v), so the agent (uid %d) could not write there as its owner, uid %d, does: "+
				"give the agent the directory (chown -R %d:%d), show it with --ro, or run the command as its owner (%s)", why, err, m.ToUID, m.UID, m.ToUID, m.ToGID, as)
		}
		return fmt.Errorf("mount_setattr: %w", err)
	}
	return moveBeneath(root, tree, dst, dir)
}
