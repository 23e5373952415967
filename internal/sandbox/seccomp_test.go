//go:build linux && (amd64 || arm64)

package sandbox

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// runBPF interprets the subset of classic BPF the filter uses, on one
// struct seccomp_data.
func runBPF(t *testing.T, prog []unix.SockFilter, arch uint32, nr uint32, args ...uint64) uint32 {
	t.Helper()
	data := make([]byte, 64)
	binary.LittleEndian.PutUint32(data[offNr:], nr)
	binary.LittleEndian.PutUint32(data[offArch:], arch)
	for i, a := range args {
		binary.LittleEndian.PutUint64(data[offArg0+8*i:], a)
	}
	var acc uint32
	for pc := 0; pc < len(prog); pc++ {
		in := prog[pc]
		switch in.Code {
		case ldAbs:
			acc = binary.LittleEndian.Uint32(data[in.K:])
		case unix.BPF_ALU | unix.BPF_AND | unix.BPF_K:
			acc &= in.K
		case jeq, jge, jset:
			var hit bool
			switch in.Code {
			case jeq:
				hit = acc == in.K
			case jge:
				hit = acc >= in.K
			default:
				hit = acc&in.K != 0
			}
			if hit {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		case ret:
			return in.K
		default:
			t.Fatalf("instruction %d: unexpected code %#x", pc, in.Code)
		}
	}
	t.Fatal("the filter fell off its end")
	return 0
}

func TestFilterDecisions(t *testing.T) {
	eproto := unix.SECCOMP_RET_ERRNO | uint32(unix.EPROTONOSUPPORT)
	tests := []struct {
		name    string
		netHost bool
		arch    uint32
		nr      uintptr
		args    []uint64
		want    uint32
	}{
		{name: "read", nr: unix.SYS_READ, want: allow},
		{name: "openat", nr: unix.SYS_OPENAT, want: allow},
		{name: "another architecture", arch: 0x40000003, nr: unix.SYS_READ, want: kill},
		{name: "mount", nr: unix.SYS_MOUNT, want: eperm},
		{name: "umount2", nr: unix.SYS_UMOUNT2, want: eperm},
		{name: "pivot_root", nr: unix.SYS_PIVOT_ROOT, want: eperm},
		{name: "move_mount", nr: unix.SYS_MOVE_MOUNT, want: eperm},
		{name: "ptrace", nr: unix.SYS_PTRACE, want: eperm},
		{name: "keyctl", nr: unix.SYS_KEYCTL, want: eperm},
		{name: "bpf", nr: unix.SYS_BPF, want: eperm},
		{name: "setns", nr: unix.SYS_SETNS, want: eperm},
		{name: "open_by_handle_at", nr: unix.SYS_OPEN_BY_HANDLE_AT, want: eperm},
		{name: "clone3 falls back to clone", nr: unix.SYS_CLONE3, want: enosys},
		{name: "clone of a thread", nr: unix.SYS_CLONE, args: []uint64{unix.CLONE_VM | unix.CLONE_THREAD | unix.CLONE_FS}, want: allow},
		{name: "clone of a process", nr: unix.SYS_CLONE, args: []uint64{unix.CLONE_VFORK | unix.CLONE_VM | uint64(unix.SIGCHLD)}, want: allow},
		{name: "clone into a user namespace", nr: unix.SYS_CLONE, args: []uint64{unix.CLONE_NEWUSER | uint64(unix.SIGCHLD)}, want: eperm},
		{name: "clone into a network namespace", nr: unix.SYS_CLONE, args: []uint64{unix.CLONE_NEWNET}, want: eperm},
		{name: "unshare of a user namespace", nr: unix.SYS_UNSHARE, args: []uint64{unix.CLONE_NEWUSER}, want: eperm},
		{name: "unshare of the file table", nr: unix.SYS_UNSHARE, args: []uint64{unix.CLONE_FILES}, want: allow},
		{name: "TIOCSTI", nr: unix.SYS_IOCTL, args: []uint64{0, unix.TIOCSTI}, want: eperm},
		{name: "TIOCLINUX", nr: unix.SYS_IOCTL, args: []uint64{0, unix.TIOCLINUX}, want: eperm},
		{name: "TCGETS", nr: unix.SYS_IOCTL, args: []uint64{0, unix.TCGETS}, want: allow},
		{name: "TIOCSTI with high bits set", nr: unix.SYS_IOCTL, args: []uint64{0, 1<<32 | unix.TIOCSTI}, want: eperm},
		{name: "TCP socket, host network", netHost: true, nr: unix.SYS_SOCKET, args: []uint64{unix.AF_INET, unix.SOCK_STREAM | unix.SOCK_CLOEXEC, 0}, want: allow},
		{name: "UDP socket, host network", netHost: true, nr: unix.SYS_SOCKET, args: []uint64{unix.AF_INET6, unix.SOCK_DGRAM, unix.IPPROTO_UDP}, want: allow},
		{name: "MPTCP socket, host network", netHost: true, nr: unix.SYS_SOCKET, args: []uint64{unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_MPTCP}, want: eproto},
		{name: "SCTP socket, host network", netHost: true, nr: unix.SYS_SOCKET, args: []uint64{unix.AF_INET6, unix.SOCK_STREAM, unix.IPPROTO_SCTP}, want: eproto},
		{name: "SEQPACKET IP socket, host network", netHost: true, nr: unix.SYS_SOCKET, args: []uint64{unix.AF_INET, unix.SOCK_SEQPACKET | unix.SOCK_NONBLOCK, 0}, want: eproto},
		{name: "unix SEQPACKET socket, host network", netHost: true, nr: unix.SYS_SOCKET, args: []uint64{unix.AF_UNIX, unix.SOCK_SEQPACKET, 0}, want: allow},
		{name: "MPTCP socket, own network", nr: unix.SYS_SOCKET, args: []uint64{unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_MPTCP}, want: allow},
		{name: "vsock socket, own network", nr: unix.SYS_SOCKET, args: []uint64{unix.AF_VSOCK, unix.SOCK_STREAM, 0}, want: unix.SECCOMP_RET_ERRNO | uint32(unix.EAFNOSUPPORT)},
		{name: "vsock socket, host network", netHost: true, nr: unix.SYS_SOCKET, args: []uint64{unix.AF_VSOCK, unix.SOCK_DGRAM, 0}, want: unix.SECCOMP_RET_ERRNO | uint32(unix.EAFNOSUPPORT)},
		{name: "TCP socket, host network", netHost: true, nr: unix.SYS_SOCKET, args: []uint64{unix.AF_INET6, unix.SOCK_STREAM, 0}, want: allow},
		{name: "unix socket, own network", nr: unix.SYS_SOCKET, args: []uint64{unix.AF_UNIX, unix.SOCK_STREAM, 0}, want: allow},
		{name: "listen, host network", netHost: true, nr: unix.SYS_LISTEN, args: []uint64{3, 16}, want: eacces},
		{name: "listen, own network", nr: unix.SYS_LISTEN, args: []uint64{3, 16}, want: allow},
		{name: "open_tree_attr", nr: unix.SYS_OPEN_TREE_ATTR, want: eperm},
		{name: "fchmod 0755", nr: unix.SYS_FCHMOD, args: []uint64{3, 0o755}, want: allow},
		{name: "fchmod set-uid", nr: unix.SYS_FCHMOD, args: []uint64{3, 0o4755}, want: eperm},
		{name: "fchmodat set-gid", nr: unix.SYS_FCHMODAT, args: []uint64{0, 0, 0o2755}, want: eperm},
		{name: "fchmodat2 0644", nr: unix.SYS_FCHMODAT2, args: []uint64{0, 0, 0o644, 0}, want: allow},
		{name: "openat creating 0755", nr: unix.SYS_OPENAT, args: []uint64{0, 0, unix.O_CREAT | unix.O_WRONLY, 0o755}, want: allow},
		{name: "openat creating set-uid", nr: unix.SYS_OPENAT, args: []uint64{0, 0, unix.O_CREAT | unix.O_WRONLY, 0o4755}, want: eperm},
		{name: "openat creating set-gid", nr: unix.SYS_OPENAT, args: []uint64{0, 0, unix.O_CREAT | unix.O_WRONLY, 0o2755}, want: eperm},
		{name: "mknodat set-uid", nr: unix.SYS_MKNODAT, args: []uint64{0, 0, unix.S_IFREG | 0o4755, 0}, want: eperm},
		{name: "mknodat a fifo", nr: unix.SYS_MKNODAT, args: []uint64{0, 0, unix.S_IFIFO | 0o644, 0}, want: allow},
		{name: "openat2 falls back to openat", nr: unix.SYS_OPENAT2, want: enosys},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			arch := tt.arch
			if arch == 0 {
				arch = auditArch
			}
			assert.Equal(t, tt.want, runBPF(t, filter(tt.netHost), arch, uint32(tt.nr), tt.args...))
		})
	}
	for _, nr := range deniedSyscalls {
		assert.Equal(t, eperm, runBPF(t, filter(true), auditArch, uint32(nr)), "syscall %d", nr)
	}
}

func TestFilterJumpsStayInside(t *testing.T) {
	for _, netHost := range []bool{false, true} {
		p := filter(netHost)
		require.Less(t, len(p), 256*4, "BPF_MAXINSNS")
		for i, in := range p {
			if in.Code&0x07 == unix.BPF_JMP {
				assert.Less(t, i+1+int(in.Jt), len(p), "instruction %d", i)
				assert.Less(t, i+1+int(in.Jf), len(p), "instruction %d", i)
			}
		}
	}
}
