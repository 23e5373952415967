package sandbox

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Landlock is the second wall: even if the mount set-up showed more than
// it should, the command can read only the allow-list and write only the
// view, the private temporary directories and the --rw paths.
//
// The rules are made with the raw system calls, on the one thread that
// then forks the command: that is all the sandbox needs, and it keeps
// the binary free of go-landlock's all-threads machinery (libcap's psx,
// which under cgo rewraps pthread_create for the whole program).

// Landlock rights by ABI version (see landlock(7)).
const (
	llReadFile  = unix.LANDLOCK_ACCESS_FS_READ_FILE
	llReadDir   = unix.LANDLOCK_ACCESS_FS_READ_DIR
	llExecute   = unix.LANDLOCK_ACCESS_FS_EXECUTE
	llWriteFile = unix.LANDLOCK_ACCESS_FS_WRITE_FILE
	llTruncate  = unix.LANDLOCK_ACCESS_FS_TRUNCATE  // ABI 3
	llIoctlDev  = unix.LANDLOCK_ACCESS_FS_IOCTL_DEV // ABI 5
	llMakeChar  = unix.LANDLOCK_ACCESS_FS_MAKE_CHAR
	llMakeBlock = unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK

	// llFileRights are the rights a rule on a file (not a directory) may
	// carry.
	llFileRights = llReadFile | llWriteFile | llExecute | llTruncate | llIoctlDev
)

// handledFS is every filesystem right the kernel's ABI knows.
func handledFS(abi int) uint64 {
	h := uint64(1<<13 - 1) // ABI 1: execute ... make_sym
	if abi >= 2 {
		h |= unix.LANDLOCK_ACCESS_FS_REFER
	}
	if abi >= 3 {
		h |= llTruncate
	}
	if abi >= 5 {
		h |= llIoctlDev
	}
	if abi >= 9 {
		h |= unix.LANDLOCK_ACCESS_FS_RESOLVE_UNIX
	}
	return h
}

// llRule is one path and what may be done beneath it.
type llRule struct {
	fd     int // O_PATH
	access uint64
}

// landlockABI is the kernel's Landlock ABI version, 0 without Landlock.
func landlockABI() int {
	v, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if e != 0 {
		return 0
	}
	return int(v)
}

// llNetPort is struct landlock_net_port_attr, which x/sys lacks.
type llNetPort struct {
	Access uint64
	Port   uint64
}

// restrictLandlock enforces rules on the calling thread, which must have
// no_new_privs set. With netHost, binding TCP ports is refused (the
// network is the host's: a listening agent would be reachable by every
// other); connecting stays allowed. Abstract unix sockets and signals
// are scoped to the sandbox.
func restrictLandlock(abi int, rules []llRule, netHost bool) error {
	if abi < 1 {
		return errors.New("landlock is not available in this kernel; acpfs run does not start without it")
	}
	h := handledFS(abi)
	attr := struct {
		fs, net, scoped uint64
	}{fs: h}
	size := unsafe.Sizeof(attr.fs)
	if abi >= 4 {
		size = 2 * unsafe.Sizeof(attr.fs)
		if netHost {
			attr.net = unix.LANDLOCK_ACCESS_NET_BIND_TCP
		}
	}
	if abi >= 6 {
		size = unsafe.Sizeof(attr)
		attr.scoped = unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | unix.LANDLOCK_SCOPE_SIGNAL
	}
	rs, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), size, 0)
	if e != 0 {
		return fmt.Errorf("landlock_create_ruleset: %w", e)
	}
	defer unix.Close(int(rs))
	for _, r := range rules {
		pb := unix.LandlockPathBeneathAttr{Allowed_access: r.access & h, Parent_fd: int32(r.fd)}
		if pb.Allowed_access == 0 {
			continue
		}
		if _, _, e := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, rs, unix.LANDLOCK_RULE_PATH_BENEATH, uintptr(unsafe.Pointer(&pb)), 0, 0, 0); e != 0 {
			return fmt.Errorf("landlock_add_rule: %w", e)
		}
	}
	if _, _, e := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, rs, 0, 0); e != 0 {
		return fmt.Errorf("landlock_restrict_self: %w", e)
	}
	return nil
}
