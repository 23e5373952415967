package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/internal/sandbox"
	"github.com/acpfs/acpfs/mount"
)

func init() {
	commands = append(commands, newRunUserNSCmd)
}

// runUserNSName is the first stage of a rootless run's daemon: started in
// a new user and mount namespace, it waits until acpfs run has mapped its
// uids, then executes the daemon, which gets its capabilities in the
// namespace from that exec (an exec before the map gets none). Its name
// is not sandbox.UsernsHelper's: cobra would run one of the two for both.
const runUserNSName = "run-rootless"

// fusectlDir is where systems mount fusectl, whose abort files the
// supervisor of a rootless run's daemon can only reach there.
const fusectlDir = "/sys/fs/fuse/connections"

// fusectlMagic is fusectl's file system type (FUSE_CTL_SUPER_MAGIC).
const fusectlMagic = 0x65735543

// fusectlMounted tells whether the system has mounted fusectl.
func fusectlMounted() bool {
	var st unix.Statfs_t
	return unix.Statfs(fusectlDir, &st) == nil && st.Type == fusectlMagic
}

// rootlessReady tells, in one line, why this user cannot build a
// rootless sandbox: no usable /dev/fuse, or no user namespaces.
func rootlessReady() error {
	if d := mount.Check(); d.DevFUSE != nil {
		return fmt.Errorf("acpfs run without root needs /dev/fuse usable by this user (%v): ask for root, or for a /dev/fuse of mode 0666, as desktops ship it", d.DevFUSE)
	}
	if err := sandbox.UserNSUsable(); err != nil {
		return fmt.Errorf("acpfs run without root needs unprivileged user namespaces: %w", err)
	}
	return nil
}

// rootlessUID chooses, for a run without root, the uid scheme and the
// command's uid and gid in the user namespace.
func rootlessUID(uid string, allowRoot bool, runDir, grantID string) (sandbox.UserNS, error) {
	if allowRoot {
		return sandbox.UserNS{}, errors.New("--allow-root: a sandbox built without root has no root to give (its uid 0 has no capability)")
	}
	inU, inG := sandbox.UIDSlot(grantID), sandbox.UIDSlot(grantID)
	// The grant's own host uid comes from its key; a --uid's from the uid.
	key, err := sandbox.GrantKey(runDir, grantID)
	if err != nil && uid == "" {
		return sandbox.UserNS{}, err
	}
	if uid != "" {
		u, g, err := parseUID(uid)
		if err != nil {
			return sandbox.UserNS{}, err
		}
		if u == 0 {
			return sandbox.UserNS{}, errors.New("--uid 0: a sandbox built without root runs no command as root")
		}
		inU, inG, key = u, g, ""
	}
	ns := sandbox.PlanUserNS(inU, inG, key)
	if ns.Scheme == sandbox.SchemeSingle && uid != "" {
		return ns, fmt.Errorf("--uid %s: without subordinate uids the command can only run as your own uid (%s)", uid, ns.Why)
	}
	return ns, nil
}

// rootlessLimits decides the limits of a run without root: those of a
// delegated cgroup v2 subtree, where there is one; else, limits the
// caller asked for are an error that says what to pass, and the
// defaults are dropped with one line saying so.
// It returns whether the run goes without limits, and else the group
// to make the run's control group under.
func rootlessLimits(cmd *cobra.Command, noLimits bool, stderr io.Writer) (bool, string, error) {
	if noLimits {
		return true, "", nil
	}
	parent, err := sandbox.DelegatedCgroup()
	if err == nil {
		return false, parent, nil
	}
	for _, f := range []string{"memory", "pids", "cpu", "socket-memory"} {
		if cmd.Flags().Changed(f) {
			return false, "", withCode(exitMount, fmt.Errorf("--%s: a run without root sets limits through a delegated cgroup v2 subtree, and there is none: %v; pass --no-limits to run without limits", f, err))
		}
	}
	fmt.Fprintf(stderr, "acpfs run: no limits (memory, processes, CPU): %v; pass --no-limits to say so and drop this line\n", err)
	return true, "", nil
}

// startRootlessDaemon runs the daemon of `acpfs run` in a new user and
// mount namespace whose uids ns maps, and exits with its status.
func startRootlessDaemon(cfg mount.RunConfig, ns sandbox.UserNS) error {
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return fmt.Errorf("close inherited descriptors: %w", err)
	}
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer cfgR.Close()
	defer cfgW.Close()
	goR, goW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer goR.Close()
	defer goW.Close()
	cfg.UserNS, cfg.ParentPID = &ns, os.Getpid()
	c := exec.Command("/proc/self/exe", runUserNSName)
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
	c.ExtraFiles = []*os.File{cfgR, goR}
	c.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		Pdeathsig:  syscall.SIGKILL, Setpgid: true,
	}
	defer keepTerminal()()
	code, err := mount.StartForwardingSignals(c, func(pid int) error {
		cfgR.Close()
		goR.Close()
		if err := ns.Map(pid); err != nil {
			return err
		}
		if _, err := goW.Write([]byte{1}); err != nil {
			return fmt.Errorf("start the run daemon: %w", err)
		}
		goW.Close()
		go func() {
			_ = json.NewEncoder(cfgW).Encode(cfg)
			cfgW.Close()
		}()
		return nil
	})
	if err != nil {
		return withCode(exitMount, fmt.Errorf("start the run daemon: %w", err))
	}
	return silentExit(code)
}

func newRunUserNSCmd() *cobra.Command {
	return hiddenCmd(runUserNSName, "internal: the user namespace of a rootless acpfs run (configuration on descriptor 3, go on 4)", func(*cobra.Command) error {
		gate := os.NewFile(4, "go")
		if gate == nil {
			return errors.New(runUserNSName + ": no descriptor 4")
		}
		b := make([]byte, 1)
		if n, _ := gate.Read(b); n != 1 {
			return silentExit(exitMount) // acpfs run could not map the namespace and said why
		}
		gate.Close()
		// Descriptor 3 (the configuration) is left for the daemon.
		if err := syscall.Exec("/proc/self/exe", []string{os.Args[0], runDaemonName}, os.Environ()); err != nil {
			return fmt.Errorf("%s: exec the daemon: %w", runUserNSName, err)
		}
		return nil
	})
}
