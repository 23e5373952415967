package sandbox

import "golang.org/x/sys/unix"

const auditArch = unix.AUDIT_ARCH_X86_64

// archDenied are the x86-64 calls that touch I/O ports or load a.out
// libraries.
var archDenied = []uintptr{unix.SYS_IOPL, unix.SYS_IOPERM, unix.SYS_USELIB}

// archPrologue refuses the x32 ABI, whose calls share the x86-64 audit
// architecture but carry bit 30 in their number and would miss every
// rule below.
var archPrologue = []unix.SockFilter{
	jump(jge, 0x40000000, 0, 1),
	stmt(ret, eperm),
}

// archModeCalls are the x86-64 mode-setting calls arm64 does not have.
var archModeCalls = []modeCall{{unix.SYS_CHMOD, offArg1}, {unix.SYS_OPEN, offArg2}, {unix.SYS_CREAT, offArg1}, {unix.SYS_MKNOD, offArg1}}
