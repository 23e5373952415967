package mount

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// StartForwardingSignals starts cmd, calls afterStart with its pid
// (before anything is written to it: a rootless run maps its user
// namespace there), and waits for it, passing SIGINT, SIGTERM and SIGHUP
// on as RunForwardingSignals does. A failing afterStart kills cmd.
func StartForwardingSignals(cmd *exec.Cmd, afterStart func(pid int) error) (int, error) {
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sig)
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	if err := afterStart(cmd.Process.Pid); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return 0, err
	}
	return ExitStatus(waitForwarding(cmd, sig))
}

// keepParent makes this process die with acpfs run again. The exec that
// gave the daemon its capabilities in the user namespace cleared the
// parent-death signal; if acpfs run died meanwhile, the daemon has been
// handed to another parent, and ends now.
func keepParent(parent int) error {
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return fmt.Errorf("parent-death signal: %w", err)
	}
	if parent == 0 {
		return errors.New("rootless run: no parent pid in the configuration")
	}
	if os.Getppid() != parent {
		return errors.New("acpfs run ended before its daemon started")
	}
	return nil
}
