package sandbox

import "golang.org/x/sys/unix"

const auditArch = unix.AUDIT_ARCH_AARCH64

var (
	archDenied   []uintptr
	archPrologue []unix.SockFilter
)

// archModeCalls: arm64 has only the calls every architecture has.
var archModeCalls []modeCall
