package sandbox

import (
	"errors"
	"fmt"

	ll "github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// Landlock is the second wall: even if the mount set-up showed more than
// it should, the command can read only the allow-list and write only the
// view, the private temporary directories and the --rw paths.
//
// go-landlock builds the ruleset (and drops, on an older kernel, the
// rights it does not know); the sandbox enforces it on the one thread
// that then forks the command, as go-landlock's own example for a
// ruleset enforced right before starting a program does.

// Rights, as go-landlock names them.
const (
	llRead      = llsys.AccessFSReadFile | llsys.AccessFSReadDir | llsys.AccessFSExecute
	llWriteFile = llsys.AccessFSWriteFile | llsys.AccessFSTruncate
	// llWrite is everything but making device nodes and device ioctls.
	llWrite = llRead | llWriteFile | llsys.AccessFSRemoveDir | llsys.AccessFSRemoveFile | llsys.AccessFSMakeDir |
		llsys.AccessFSMakeReg | llsys.AccessFSMakeSock | llsys.AccessFSMakeFifo | llsys.AccessFSMakeSym | llsys.AccessFSRefer
	llDevice = llsys.AccessFSReadFile | llWriteFile | llsys.AccessFSIoctlDev
	// llFileRights are the rights a rule on a file (not a directory)
	// may carry.
	llFileRights = llsys.AccessFSReadFile | llWriteFile | llsys.AccessFSExecute | llsys.AccessFSIoctlDev
)

// llRule is one path and what may be done beneath it.
type llRule struct {
	path   string
	access ll.AccessFSSet
}

// landlockConfig handles every filesystem right, TCP binding on the
// host's network (no port may be bound: a listening agent would be
// reachable by every other), and scopes abstract Unix sockets and
// signals to the sandbox. Rights the kernel lacks are dropped; Landlock
// itself is required.
func landlockConfig(netHost bool) (ll.Config, error) {
	if abi, err := llsys.LandlockGetABIVersion(); err != nil || abi < 1 {
		return ll.Config{}, errors.New("landlock is not available in this kernel; acpfs run does not start without it")
	}
	c := ll.V7
	c.HandledAccessNet = 0
	if netHost {
		c.HandledAccessNet = llsys.AccessNetBindTCP
	}
	return c.BestEffort(), nil
}

// restrictLandlock enforces rules on the calling thread, which must have
// no_new_privs set; the processes it forks afterwards inherit them.
// Paths are opened now, by the calling thread, with its identity.
func restrictLandlock(c ll.Config, rules []llRule) error {
	var rs []ll.Rule
	for _, r := range rules {
		a := r.access
		var st unix.Stat_t
		if unix.Stat(r.path, &st) == nil && st.Mode&unix.S_IFMT != unix.S_IFDIR {
			a &= llFileRights
		}
		rs = append(rs, ll.PathAccess(a, r.path))
	}
	fd, flags, err := c.NewRulesetFD(rs...)
	if err != nil {
		return fmt.Errorf("landlock: %w", err)
	}
	if fd < 0 {
		return errors.New("landlock: nothing to restrict")
	}
	defer unix.Close(fd)
	if err := llsys.LandlockRestrictSelf(fd, flags); err != nil {
		return fmt.Errorf("landlock_restrict_self: %w", err)
	}
	return nil
}
