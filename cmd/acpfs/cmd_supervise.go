package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/acpfs/acpfs/mount"
)

func init() {
	commands = append(commands, newSuperviseCmd)
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
func startSupervisor() error {
	if err := mount.StartSupervisor(superviseName); err != nil {
		return withCode(exitMount, fmt.Errorf("a dead daemon's views would hang: %w", err))
	}
	return nil
}
