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
	register(newRunUserNSCmd)
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

// rootlessUID chooses, for a run without root, the uid scheme (scheme:
// --uid-scheme, "" for the best the host offers) and the command's uid
// and gid in the user namespace. In the subuid scheme the agent's host
// uid is leased from the caller's own registry of its subordinate uids,
// so that no two grants of any of the caller's collaborations share one;
// the lease, nil in the single scheme, is the caller's to release.
func rootlessUID(uid, scheme string, allowRoot bool, runDir, grantID string) (sandbox.UserNS, *sandbox.Lease, error) {
	if allowRoot {
		return sandbox.UserNS{}, nil, errors.New("--allow-root: a sandbox built without root has no root to give (its uid 0 has no capability)")
	}
	inU, inG := sandbox.UIDSlot(grantID), sandbox.UIDSlot(grantID)
	if uid != "" {
		u, g, err := parseUID(uid)
		if err != nil {
			return sandbox.UserNS{}, nil, err
		}
		if u == 0 {
			return sandbox.UserNS{}, nil, errors.New("--uid 0: a sandbox built without root runs no command as root")
		}
		inU, inG = u, g
	}
	ns, err := sandbox.ProbeUserNS(scheme)
	if err != nil {
		return ns, nil, err
	}
	if ns.Scheme == sandbox.SchemeSingle {
		if uid != "" {
			return ns, nil, fmt.Errorf("--uid %s: without subordinate uids the command can only run as your own uid (%s)", uid, ns.Why)
		}
		return ns, nil, nil
	}
	reg, err := ns.Registry()
	if err != nil {
		return ns, nil, withCode(exitMount, err)
	}
	h, err := sandbox.HolderOf(runDir, grantID)
	if err != nil {
		return ns, nil, withCode(exitMount, err)
	}
	var lease *sandbox.Lease
	if uid != "" {
		host := ns.ChosenHostUID(inU)
		if lease, err = reg.AcquireUID(h, host); err != nil {
			return ns, nil, withCode(exitMount, fmt.Errorf("--uid %s runs as your subordinate uid %d on the host: %w", uid, host, err))
		}
	} else {
		// The owner of the grant's home is the uid it had: asked for first,
		// so that a lost registry does not move the grant to another.
		var prefer uint32
		var st syscall.Stat_t
		if syscall.Lstat(sandbox.DefaultHome(runDir, grantID), &st) == nil && ns.OwnsSub(st.Uid) {
			prefer = st.Uid
		}
		if lease, err = reg.Acquire(h, prefer); err != nil {
			return ns, nil, withCode(exitMount, err)
		}
	}
	ns.SetAgent(inU, inG, lease.UID)
	return ns, lease, nil
}

// rootlessHome readies the agent's default home of a rootless run: made
// by the caller, and given to the agent's ids by the daemon, in its user
// namespace (it returns the directory to give, "" for none). A home left
// owned by another subordinate uid of the caller's (the grant had
// another) is mapped too, so that the daemon may take it back; one owned
// by any other uid is refused with what to do.
func rootlessHome(dir string, ns *sandbox.UserNS) (string, error) {
	if err := sandbox.MakeHome(dir); err != nil {
		return "", withCode(exitMount, err)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(dir, &st); err != nil {
		return "", withCode(exitMount, fmt.Errorf("the agent's home: %w", err))
	}
	switch {
	case ns.Scheme == sandbox.SchemeSingle && st.Uid == ns.CallerUID:
		return "", nil // the agent is the caller's uid: the home is its already
	case ns.Scheme == sandbox.SchemeSingle:
	case st.Uid == ns.HostUID || st.Uid == ns.CallerUID:
		return dir, nil
	case ns.OwnsSub(st.Uid):
		ns.FormerUID, ns.FormerGID = st.Uid, ns.SubGIDOf(st.Uid)
		return dir, nil
	}
	return "", withCode(exitMount, fmt.Errorf("the agent's home %s is owned by uid %d, which this run (uid scheme %s, agent uid %d on the host) cannot give to the agent: "+
		"remove it, or run with the scheme that made it", dir, st.Uid, ns.Scheme, agentHostUID(*ns)))
}

// agentHostUID is the agent's uid on the host in either scheme.
func agentHostUID(ns sandbox.UserNS) uint32 {
	if ns.Scheme == sandbox.SchemeSingle {
		return ns.CallerUID
	}
	return ns.HostUID
}

// refuseRootlessIDMaps refuses, before anything starts, a --rw or --home
// directory that would need an idmapped mount in a run without root: the
// kernel lets only root over the host's file system idmap a host
// directory, and showing it read-only instead would lose the agent's
// writes in silence.
func refuseRootlessIDMaps(binds []sandbox.Bind, runDir, grantID string) error {
	for _, b := range binds {
		if b.IDMap == nil {
			continue
		}
		what := "--rw " + b.Path
		if b.Source != "" {
			what = "--home " + b.Source
		}
		return withCode(exitMount, fmt.Errorf("%s: owned by you (uid %d), and the agent runs as your subordinate uid %d: showing it as the agent's takes an idmapped mount, "+
			"which a run without root may not make of a host directory; keep the agent's state in its own home (leave the flag out: $HOME is %s), "+
			"or pass --uid-scheme %s to run the agent as your own uid", what, b.IDMap.UID, b.IDMap.ToUID, sandbox.DefaultHome(runDir, grantID), sandbox.SchemeSingle))
	}
	return nil
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
