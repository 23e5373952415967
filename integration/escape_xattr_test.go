package integration

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// escHiddenHandleAttempts reach the oracle by file handles and extended
// attributes.
func escHiddenHandleAttempts(h *escHidden) []escAttempt {
	c, v, p, oracleIno, deniedLookup := h.c, h.v, h.v.path, h.oracleIno, escDeniedLookup
	return []escAttempt{
		// File handles and xattrs.
		{name: "name_to_handle_at on the hidden file", do: func(*testing.T) error {
			_, _, err := unix.NameToHandleAt(unix.AT_FDCWD, p("oracle/answer.md"), 0)
			return err
		}, errno: syscall.ENOENT, record: deniedLookup("oracle")},
		{name: "open_by_handle_at with the backing file's own handle", do: func(*testing.T) error {
			h, _, err := unix.NameToHandleAt(unix.AT_FDCWD, filepath.Join(c.folder, "oracle/answer.md"), 0)
			if err != nil {
				return fmt.Errorf("backing handle: %v", err)
			}
			return escOpenByHandle(v.dir, h)
		}, errno: syscall.ESTALE},
		{name: "open_by_handle_at with a forged node id", do: func(t *testing.T) error {
			h, _, err := unix.NameToHandleAt(unix.AT_FDCWD, p("proposal.md"), 0)
			require.NoError(t, err)
			return escOpenByHandle(v.dir, escHandle(oracleIno, binary.LittleEndian.Uint32(h.Bytes()[8:])))
		}, errno: syscall.ESTALE},
		{name: "getxattr on the hidden file", do: func(*testing.T) error {
			_, err := unix.Getxattr(p("oracle/answer.md"), "user.x", make([]byte, 64))
			return err
		}, errno: syscall.ENOENT, record: deniedLookup("oracle")},
		{name: "listxattr on the hidden directory",
			do:    func(*testing.T) error { _, err := unix.Listxattr(p("oracle"), make([]byte, 256)); return err },
			errno: syscall.ENOENT, record: deniedLookup("oracle")},
	}
}
