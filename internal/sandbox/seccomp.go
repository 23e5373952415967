//go:build linux && (amd64 || arm64)

package sandbox

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The seccomp filter is a deny list on top of everything else: the
// namespaces, the uid, no_new_privs and Landlock already keep an agent
// in; the filter takes away the system calls that could change the
// sandbox itself (mounts, namespaces), reach another process (ptrace),
// reach kernel state shared with the host (keyrings, BPF, modules,
// clocks, io_uring, which the filter cannot see into) or push input into
// a terminal. Everything else is allowed, as in the filters of
// bubblewrap-based agent sandboxes.

// deniedSyscalls answer EPERM.
var deniedSyscalls = append([]uintptr{
	// The mount table, old and new API.
	unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT, unix.SYS_CHROOT,
	unix.SYS_MOVE_MOUNT, unix.SYS_OPEN_TREE, unix.SYS_FSOPEN, unix.SYS_FSCONFIG,
	unix.SYS_FSMOUNT, unix.SYS_FSPICK, unix.SYS_MOUNT_SETATTR, unix.SYS_OPEN_TREE_ATTR,
	// Namespaces (unshare and clone are judged by their flags below).
	unix.SYS_SETNS,
	// Other processes.
	unix.SYS_PTRACE, unix.SYS_PROCESS_VM_READV, unix.SYS_PROCESS_VM_WRITEV, unix.SYS_PIDFD_GETFD,
	// Kernel state shared with the host.
	unix.SYS_KEYCTL, unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY,
	unix.SYS_BPF, unix.SYS_PERF_EVENT_OPEN, unix.SYS_USERFAULTFD, unix.SYS_FANOTIFY_INIT,
	unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER,
	unix.SYS_KEXEC_LOAD, unix.SYS_KEXEC_FILE_LOAD, unix.SYS_INIT_MODULE, unix.SYS_FINIT_MODULE,
	unix.SYS_DELETE_MODULE, unix.SYS_REBOOT, unix.SYS_SWAPON, unix.SYS_SWAPOFF, unix.SYS_ACCT,
	unix.SYS_QUOTACTL, unix.SYS_QUOTACTL_FD, unix.SYS_SYSLOG, unix.SYS_VHANGUP,
	unix.SYS_SETTIMEOFDAY, unix.SYS_CLOCK_SETTIME, unix.SYS_CLOCK_ADJTIME, unix.SYS_ADJTIMEX,
	// Files by handle, around every path check.
	unix.SYS_OPEN_BY_HANDLE_AT,
}, archDenied...)

// nsFlags are the clone and unshare flags that make a namespace. An
// unprivileged process can make a user namespace, and in it all the
// others, with the mount and network powers they bring.
const nsFlags = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWTIME

// deniedIoctls push input into a terminal (TIOCSTI) or reach the console
// (TIOCLINUX). The command runs in its own session, so TIOCSTI already
// fails on a terminal it inherited; the filter says so for every kernel.
var deniedIoctls = []uint32{unix.TIOCSTI, unix.TIOCLINUX}

// modeCall is a call that sets a file mode, and where its mode is.
type modeCall struct {
	nr  uintptr
	arg uint32
}

// Offsets in struct seccomp_data.
const (
	offNr   = 0
	offArch = 4
	offArg0 = 16 // low 32 bits on little-endian machines
	offArg1 = 24
	offArg2 = 32
	offArg3 = 40
)

func stmt(code uint16, k uint32) unix.SockFilter { return unix.SockFilter{Code: code, K: k} }
func jump(code uint16, k uint32, jt, jf uint8) unix.SockFilter {
	return unix.SockFilter{Code: code, Jt: jt, Jf: jf, K: k}
}

const (
	ldAbs  = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
	jeq    = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
	jge    = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
	jset   = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
	ret    = unix.BPF_RET | unix.BPF_K
	allow  = unix.SECCOMP_RET_ALLOW
	eperm  = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	enosys = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	eacces = unix.SECCOMP_RET_ERRNO | uint32(unix.EACCES)
	kill   = unix.SECCOMP_RET_KILL_PROCESS
)

// filter is the BPF program. Each rule is a short block that either
// returns or falls through to the next with the syscall number still in
// the accumulator (blocks that load an argument always return).
func filter(netHost bool) []unix.SockFilter {
	p := []unix.SockFilter{
		// Another architecture's system call numbers (a 32-bit int 0x80
		// on x86-64) mean other calls: kill.
		stmt(ldAbs, offArch),
		jump(jeq, auditArch, 1, 0),
		stmt(ret, kill),
		stmt(ldAbs, offNr),
	}
	p = append(p, archPrologue...)
	for _, nr := range deniedSyscalls {
		p = append(p, jump(jeq, uint32(nr), 0, 1), stmt(ret, eperm))
	}
	// clone3 passes its flags in memory the filter cannot read: ENOSYS
	// makes libc and Go fall back to clone, whose flags it can.
	p = append(p, jump(jeq, unix.SYS_CLONE3, 0, 1), stmt(ret, enosys))
	for _, nr := range []uintptr{unix.SYS_CLONE, unix.SYS_UNSHARE} {
		p = append(p,
			jump(jeq, uint32(nr), 0, 4),
			stmt(ldAbs, offArg0),
			jump(jset, nsFlags, 0, 1),
			stmt(ret, eperm),
			stmt(ret, allow))
	}
	p = append(p, socketRule(netHost)...)
	if netHost {
		// listen() on a socket never bound makes the kernel bind a free
		// port, which Landlock (it judges bind) does not see.
		p = append(p, jump(jeq, unix.SYS_LISTEN, 0, 1), stmt(ret, eacces))
	}
	// Set-ID bits: a program the agent marks set-uid in a --rw directory
	// would run as the agent's uid for any host user. Files made with
	// such a mode too: in an idmapped --rw directory they are the
	// caller's on the host, and a later write by root keeps the bits.
	// openat2 passes its mode in memory the filter cannot read: ENOSYS
	// makes programs fall back to openat.
	p = append(p, jump(jeq, unix.SYS_OPENAT2, 0, 1), stmt(ret, enosys))
	for _, c := range append([]modeCall{{unix.SYS_FCHMOD, offArg1}, {unix.SYS_FCHMODAT, offArg2}, {unix.SYS_FCHMODAT2, offArg2},
		{unix.SYS_OPENAT, offArg3}, {unix.SYS_MKNODAT, offArg2}}, archModeCalls...) {
		p = append(p,
			jump(jeq, uint32(c.nr), 0, 4),
			stmt(ldAbs, c.arg),
			jump(jset, unix.S_ISUID|unix.S_ISGID, 0, 1),
			stmt(ret, eperm),
			stmt(ret, allow))
	}
	n := len(deniedIoctls)
	p = append(p, jump(jeq, unix.SYS_IOCTL, 0, uint8(2*n+2)), stmt(ldAbs, offArg1))
	for _, cmd := range deniedIoctls {
		p = append(p, jump(jeq, cmd, 0, 1), stmt(ret, eperm))
	}
	p = append(p, stmt(ret, allow))
	return append(p, stmt(ret, allow))
}

// socketRule refuses vsock sockets, a way to the hypervisor and to other
// machines that no network namespace covers, and, on the host's
// network, the IP transports Landlock cannot keep from listening (it
// restricts TCP only): MPTCP and SCTP. EPROTONOSUPPORT makes programs
// that try MPTCP first (Go's net.Listen) fall back to TCP.
func socketRule(netHost bool) []unix.SockFilter {
	const eproto = unix.SECCOMP_RET_ERRNO | uint32(unix.EPROTONOSUPPORT)
	const eafno = unix.SECCOMP_RET_ERRNO | uint32(unix.EAFNOSUPPORT)
	body := []unix.SockFilter{
		stmt(ldAbs, offArg0), // domain
		jump(jeq, unix.AF_VSOCK, 0, 1),
		stmt(ret, eafno),
	}
	if netHost {
		body = append(body,
			jump(jeq, unix.AF_INET, 1, 0),
			jump(jeq, unix.AF_INET6, 0, 6),
			stmt(ldAbs, offArg2), // protocol
			jump(jeq, unix.IPPROTO_MPTCP, 5, 0),
			jump(jeq, unix.IPPROTO_SCTP, 4, 0),
			stmt(ldAbs, offArg1), // type, with SOCK_CLOEXEC and SOCK_NONBLOCK
			stmt(unix.BPF_ALU|unix.BPF_AND|unix.BPF_K, 0xf),
			jump(jeq, unix.SOCK_SEQPACKET, 1, 0),
			stmt(ret, allow),
			stmt(ret, eproto))
	} else {
		body = append(body, stmt(ret, allow))
	}
	return append([]unix.SockFilter{jump(jeq, unix.SYS_SOCKET, 0, uint8(len(body)))}, body...)
}

// installSeccomp loads the filter on the calling thread, which must have
// no_new_privs set; the processes it forks afterwards inherit it.
func installSeccomp(netHost bool) error {
	f := filter(netHost)
	prog := unix.SockFprog{Len: uint16(len(f)), Filter: &f[0]}
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&prog)), 0, 0); err != nil {
		return fmt.Errorf("seccomp: %w", err)
	}
	return nil
}
