package integration

import (
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/ledger"
)

// escControlDirAttempts write, replace, remove and shadow the files of the
// control directory .acpfs.
func escControlDirAttempts(fg *escForgery) []escAttempt {
	a, p, ctlDenied, ctlRO := fg.a, fg.a.path, escDeniedRec, escCtlRO
	return []escAttempt{
		// The control directory.
		{name: "write .acpfs/status", do: func(*testing.T) error {
			return escWriteClose(p(".acpfs/status"), os.O_WRONLY, []byte("phase: completed\n"))
		}, errno: syscall.EACCES, record: ctlDenied(".acpfs/status", "open"), explain: "open .acpfs/status: " + ctlRO},
		{name: "forge .acpfs/last-error from the shell", do: escSh(a, "echo all good > .acpfs/last-error"),
			errno: syscall.EACCES, record: ctlDenied(".acpfs/last-error", "open"), explain: ctlRO},
		{name: "O_RDWR open of .acpfs/grant.md",
			do: func(*testing.T) error { return escOpen(p(".acpfs/grant.md"), os.O_RDWR) }, errno: syscall.EACCES,
			record: ctlDenied(".acpfs/grant.md", "open"), explain: ctlRO},
		{name: "O_RDONLY|O_TRUNC open of .acpfs/status",
			do:    func(*testing.T) error { return escOpen(p(".acpfs/status"), os.O_RDONLY|os.O_TRUNC) },
			errno: syscall.EACCES, record: ctlDenied(".acpfs/status", "open"), explain: ctlRO},
		{name: "O_CREAT open of the existing .acpfs/status",
			do:    func(*testing.T) error { return escOpen(p(".acpfs/status"), os.O_CREATE|os.O_WRONLY) },
			errno: syscall.EACCES, record: ctlDenied(".acpfs/status", "open"), explain: ctlRO},
		{name: "O_CREAT|O_EXCL of the existing .acpfs/status",
			do:    func(*testing.T) error { return escOpen(p(".acpfs/status"), os.O_CREATE|os.O_EXCL|os.O_WRONLY) },
			errno: syscall.EEXIST},
		{name: "truncate .acpfs/last-error",
			do: func(*testing.T) error { return os.Truncate(p(".acpfs/last-error"), 0) }, errno: syscall.EACCES,
			record: ctlDenied(".acpfs/last-error", "setattr"), explain: "setattr .acpfs/last-error: " + ctlRO},
		{name: "chmod .acpfs/wait", do: func(*testing.T) error { return os.Chmod(p(".acpfs/wait"), 0o666) },
			errno: syscall.EACCES, record: ctlDenied(".acpfs/wait", "setattr"), explain: ctlRO},
		{name: "touch .acpfs/status", do: escSh(a, "touch .acpfs/status"), errno: syscall.EACCES,
			record: ctlDenied(".acpfs/status", "setattr"), explain: ctlRO},
		{name: "chown .acpfs/status", do: func(*testing.T) error { return os.Chown(p(".acpfs/status"), 65534, 65534) },
			errno: syscall.EACCES, record: ctlDenied(".acpfs/status", "setattr"), explain: ctlRO},
		{name: "create a file in .acpfs",
			do:    func(*testing.T) error { return escOpen(p(".acpfs/forged"), os.O_CREATE|os.O_WRONLY) },
			errno: syscall.EACCES, record: ctlDenied(".acpfs/forged", "create"),
			explain: "create .acpfs/forged: " + ctlRO},
		{name: "mkdir in .acpfs", do: func(*testing.T) error { return os.Mkdir(p(".acpfs/d"), 0o755) },
			errno: syscall.EACCES, record: ctlDenied(".acpfs/d", "mkdir"), explain: ctlRO},
		{name: "mkfifo in .acpfs", do: func(*testing.T) error { return unix.Mkfifo(p(".acpfs/fifo"), 0o644) },
			errno: syscall.EACCES, record: ctlDenied(".acpfs/fifo", "mknod"), explain: ctlRO},
		{name: "mknod of a regular file in .acpfs",
			do:    func(*testing.T) error { return unix.Mknod(p(".acpfs/node"), unix.S_IFREG|0o644, 0) },
			errno: syscall.EACCES, record: ctlDenied(".acpfs/node", ""), explain: ctlRO},
		{name: "ln -s in .acpfs", do: escSh(a, "ln -s status .acpfs/s"), errno: syscall.EACCES,
			record: ctlDenied(".acpfs/s", "symlink"), explain: ctlRO},
		{name: "ln of a file into .acpfs",
			do:    func(*testing.T) error { return os.Link(p("scratch/fake.json"), p(".acpfs/fake.json")) },
			errno: syscall.EACCES, record: ctlDenied(".acpfs/fake.json", "link"),
			explain: "link .acpfs/fake.json: " + ctlRO},
		{name: "ln of a control file out of .acpfs",
			do:    func(*testing.T) error { return os.Link(p(".acpfs/status"), p("scratch/status")) },
			errno: syscall.EACCES, record: ctlDenied("scratch/status", "link"), explain: escNoLinks},
		{name: "mv a file over .acpfs/status",
			do:    func(*testing.T) error { return os.Rename(p("scratch/fake.json"), p(".acpfs/status")) },
			errno: syscall.EACCES, record: ctlDenied(".acpfs/status", "rename"),
			explain: "not writable under the grant"},
		{name: "mv .acpfs/wait out",
			do: func(*testing.T) error { return os.Rename(p(".acpfs/wait"), p("scratch/wait")) }, errno: syscall.EACCES,
			record: ctlDenied(".acpfs/wait", "rename"), explain: "rename .acpfs/wait: " + ctlRO},
		{name: "mv within .acpfs",
			do:    func(*testing.T) error { return os.Rename(p(".acpfs/status"), p(".acpfs/status2")) },
			errno: syscall.EACCES, record: ctlDenied(".acpfs/status", "rename"), explain: ctlRO},
		{name: "RENAME_EXCHANGE of two control files", do: func(*testing.T) error {
			return unix.Renameat2(unix.AT_FDCWD, p(".acpfs/status"), unix.AT_FDCWD, p(".acpfs/last-error"),
				unix.RENAME_EXCHANGE)
		}, errno: syscall.EACCES, record: ctlDenied(".acpfs/status", "rename"), explain: ctlRO},
		{name: "mv .acpfs away", do: func(*testing.T) error { return os.Rename(p(".acpfs"), p("scratch/ctl")) },
			errno: syscall.EACCES, record: ctlDenied(".acpfs", "rename"), explain: ".acpfs is reserved"},
		{name: "rmdir .acpfs", do: func(*testing.T) error { return unix.Rmdir(p(".acpfs")) }, errno: syscall.EACCES,
			record: ctlDenied(".acpfs", "rmdir"), explain: ".acpfs is reserved"},
		{name: "rmdir of a control file is ENOTDIR from the kernel",
			do: func(*testing.T) error { return unix.Rmdir(p(".acpfs/status")) }, errno: syscall.ENOTDIR},
		{name: "mkdir .acpfs", do: func(*testing.T) error { return os.Mkdir(p(".acpfs"), 0o755) },
			errno: syscall.EEXIST},
		{name: "the planted .acpfs/planted stays shadowed",
			do: func(*testing.T) error { return escReadErr(p(".acpfs/planted")) }, errno: syscall.ENOENT},
		{name: "create .ACPFS", do: func(*testing.T) error { return escOpen(p(".ACPFS"), os.O_CREATE|os.O_WRONLY) },
			private: ".ACPFS"},
		{name: "create '.acpfs ' with a trailing space",
			do: func(*testing.T) error { return escOpen(p(".acpfs "), os.O_CREATE|os.O_WRONLY) }, private: ".acpfs "},
		{name: "mkdir a fullwidth-dot look-alike of .acpfs",
			do: func(*testing.T) error { return os.Mkdir(p("\uff0eacpfs"), 0o755) }, errno: syscall.EACCES,
			record: escRec(ledger.KindDenied, "\uff0eacpfs", "mkdir"), explain: "not writable under the grant"},
		{name: "rm .acpfs/grant.md", do: func(*testing.T) error { return os.Remove(p(".acpfs/grant.md")) },
			errno: syscall.EACCES, record: ctlDenied(".acpfs/grant.md", "unlink"),
			explain: "unlink .acpfs/grant.md: " + ctlRO},
		{name: "rm -rf .acpfs", do: escSh(a, "rm -rf .acpfs"), errno: syscall.EACCES, record: ctlDenied("", "unlink"),
			explain: ctlRO},
		{name: "setxattr on .acpfs/status",
			do:    func(*testing.T) error { return unix.Setxattr(p(".acpfs/status"), "user.x", []byte("1"), 0) },
			errno: syscall.EACCES, record: ctlDenied(".acpfs/status", "setxattr"), explain: ctlRO},
		{name: "removexattr on .acpfs/status",
			do: func(*testing.T) error { return unix.Removexattr(p(".acpfs/status"), "user.x") }, errno: syscall.EACCES,
			record: ctlDenied(".acpfs/status", "removexattr"), explain: ctlRO},
	}
}

// escControlDirChecks: the control files are acpfs's own and survive every
// attempt.
func escControlDirChecks(t *testing.T, fg *escForgery) {
	p, ctlRO := fg.a.path, escCtlRO
	t.Run("control files survive every attempt", func(t *testing.T) {
		names, err := os.ReadDir(p(".acpfs"))
		require.NoError(t, err)
		var got []string
		for _, n := range names {
			got = append(got, n.Name())
		}
		assert.Subset(t, got, []string{"grant.md", "last-error", "status"})
		// wait is not listed (its reads block, and globs must not open
		// it), but it is there.
		assert.NotContains(t, got, "wait")
		var st unix.Stat_t
		require.NoError(t, unix.Lstat(p(".acpfs/wait"), &st))
		assert.EqualValues(t, unix.S_IFREG, st.Mode&unix.S_IFMT)
		assert.Contains(t, readFile(t, p(".acpfs/grant.md")), "G-")
		assert.Contains(t, readFile(t, p(".acpfs/last-error")), ctlRO)
	})

	t.Run("the control files are acpfs's own, not the planted ones", func(t *testing.T) {
		st := readFile(t, p(".acpfs/status"))
		assert.Contains(t, st, "phase: drafting")
		assert.Contains(t, st, "agent: alice")
		names, err := os.ReadDir(p(".acpfs"))
		require.NoError(t, err)
		var got []string
		for _, n := range names {
			got = append(got, n.Name())
		}
		assert.NotContains(t, got, "planted")
		// A .acpfs below the root is an ordinary directory.
		assert.Equal(t, "ready\n", readFile(t, p("scratch/.acpfs/wait")))
	})
}
