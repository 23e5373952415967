package main

import (
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/acpfs/acpfs/mount"
)

func init() {
	register(newSuperviseCmd)
}

// superviseName is the hidden command of a daemon's supervisor.
const superviseName = "supervise"

func newSuperviseCmd() *cobra.Command {
	return hiddenCmd(superviseName, "internal: aborts a dead daemon's FUSE connections (connections on descriptor 3)", func(*cobra.Command) error {
		// A Ctrl-C or hang-up meant for the daemon is for the daemon: the
		// supervisor ends when the daemon does.
		signal.Ignore(syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT)
		in := os.NewFile(3, "connections")
		if in == nil {
			return errors.New("supervise: no connections descriptor")
		}
		return mount.Supervise(in)
	})
}

// startSupervisor starts the daemon's supervisor (see
// mount.StartSupervisor); it must run before the first view is mounted.
// A supervisor that cannot start costs only the protection it gives: the
// views are served anyway, and the operator is told what a crash would
// then need.
func startSupervisor() error {
	if err := mount.StartSupervisor(superviseName); err != nil {
		slog.Warn("no supervisor: if this daemon dies with a thread stuck in the kernel, its views hang until `acpfs umount --force`", "err", err)
	}
	return nil
}
