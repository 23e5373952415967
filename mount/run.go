package mount

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/internal/egress"
	"github.com/acpfs/acpfs/internal/limits"
	"github.com/acpfs/acpfs/internal/sandbox"
	"github.com/acpfs/acpfs/internal/scratch"
	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/protocol"
)

// RunConfig describes `acpfs run`: one command in a sandbox that shows
// the collaboration folder only through a grant's view.
type RunConfig struct {
	// Options are the view's, but for AllowOther and Passthrough, which
	// Run never applies: the view serves the sandbox's command alone, and
	// every read reaches the daemon.
	Options
	Folder string `json:"folder"` // absolute, symlinks resolved
	// ViewRoot, when set, is the directory holding Folder that the view
	// is rooted at (see Config.ViewRoot); absolute, symlinks resolved.
	ViewRoot   string          `json:"view_root,omitempty"`
	GrantPath  string          `json:"grant_path"`
	LedgerPath string          `json:"ledger_path"`
	LedgerSync ledger.SyncMode `json:"ledger_sync"`
	// Hidden lists what no view may show (run directory, ledger, grant).
	Hidden []string `json:"hidden"`
	// Sandbox is the sandbox to start, all but its Root and View (and
	// Proxy), which Run makes.
	Sandbox sandbox.Spec `json:"sandbox"`
	// Egress is what the proxy of Sandbox.Net "allow" lets through.
	Egress egress.Policy `json:"egress"`
	// Limits are the command's control-group limits; NoLimits runs it
	// without a control group of its own.
	Limits   limits.Limits `json:"limits"`
	NoLimits bool          `json:"no_limits"`
	// CgroupParent, when set, is the cgroup v2 group the control group is
	// made under (a rootless run's delegated subtree) instead of the
	// daemon's own.
	CgroupParent string `json:"cgroup_parent,omitempty"`
	// UserNS, when set, is the user namespace a rootless run's daemon
	// was started in (see StartRootless); ParentPID is acpfs run's pid,
	// which the daemon must not outlive.
	UserNS    *sandbox.UserNS `json:"userns,omitempty"`
	ParentPID int             `json:"parent_pid,omitempty"`
	// GiveHome, when set, is the agent's home that a rootless run's
	// daemon gives to the command's uid and gid before anything else: in
	// its user namespace both the caller's ids and the agent's are mapped,
	// which they are nowhere else.
	GiveHome string `json:"give_home,omitempty"`
}

// RunScratchPrefix begins the name of the directory a run makes under
// the temporary directory for its sandbox's empty root and view mount
// points (and its proxy's socket); see internal/scratch, which names it
// after the run's daemon and removes it once that process is gone.
const RunScratchPrefix = "acpfs-run-"

// SweepRunScratch removes the scratch directories of runs whose daemon
// is gone (killed before it could remove its own), and says so.
func SweepRunScratch() {
	removed, err := scratch.Sweep("", RunScratchPrefix)
	if len(removed) > 0 {
		slog.Info("removed the scratch directories of runs that are gone", "dirs", removed)
	}
	if err != nil {
		slog.Warn("remove the scratch directories of runs that are gone", "err", err)
	}
}

// LimitHit is returned by Run when the command ended after running into
// one of its limits: it names them, and the CLI exits with its own status.
type LimitHit struct {
	Limits []string
	Status int // the command's own exit status
}

func (e *LimitHit) Error() string {
	return fmt.Sprintf("the command ran into its %s limit (exit status %d)", strings.Join(e.Limits, " and "), e.Status)
}

// Run mounts the grant's view, starts the sandbox around it and runs its
// command; it returns the command's exit status. The calling process
// must be root (of the host, or of the user namespace cfg.UserNS names),
// in a mount namespace of its own (the CLI re-executes
// itself with CLONE_NEWNS): the view is mounted there, where nothing on
// the host sees it, and the sandbox's namespaces are made from it.
//
// initArgs start the sandbox's first process: this same binary, told to
// call sandbox.Enter.
//
// The daemon keeps reaching the real folder through a descriptor opened
// before anything is mounted, and the sandbox shows the folder's path
// only as the view.
func Run(cfg RunConfig, initArgs []string) (int, error) {
	// Catch signals before mounting: one that arrives while the kernel
	// is still talking to a half-started daemon would kill it. Once the
	// sandbox runs, they are passed on to it.
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sig)
	if cfg.UserNS != nil {
		if err := keepParent(cfg.ParentPID); err != nil {
			return 0, err
		}
	}
	if cfg.GiveHome != "" {
		if err := sandbox.GiveHome(cfg.GiveHome, cfg.Sandbox.UID, cfg.Sandbox.GID); err != nil {
			return 0, err
		}
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return 0, fmt.Errorf("make mounts private: %w", err)
	}
	g, err := grants.Load(cfg.GrantPath)
	if err != nil {
		return 0, err
	}
	backing, viewRoot, closeDirs, err := openRunDirs(cfg)
	if err != nil {
		return 0, err
	}
	defer closeDirs()
	log, err := protocol.OpenLog(backing)
	if err != nil {
		return 0, err
	}
	defer log.Close()
	lw, err := ledger.Open(cfg.LedgerPath, ledger.Options{Sync: cfg.LedgerSync})
	if err != nil {
		return 0, err
	}
	defer lw.Close()
	tmp, err := scratch.Mkdir("", RunScratchPrefix)
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(tmp)
	view, root := filepath.Join(tmp, "view"), filepath.Join(tmp, "root")
	for _, d := range []string{view, root} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return 0, err
		}
	}
	owner := Owner{UID: cfg.Sandbox.UID, GID: cfg.Sandbox.GID, Sandbox: &SandboxNS{}}
	m, err := startRunView(cfg, Config{Folder: backing, ViewRoot: viewRoot, Mountpoint: view, Grant: g, Log: log, Ledger: lw, Owner: &owner})
	if err != nil {
		return 0, err
	}
	defer m.Stop()
	spec := cfg.Sandbox
	spec.Root, spec.View = root, view
	if spec.Net == sandbox.NetAllow {
		stop, sock, err := startEgress(cfg.Egress, g, lw, tmp)
		if err != nil {
			return 0, err
		}
		defer stop()
		spec.Proxy = sock
	}
	group, err := runGroup(cfg)
	if err != nil {
		return 0, err
	}
	defer deleteGroup(group)
	code, err := startSandbox(spec, initArgs, sig, group, owner.Sandbox)
	if err == nil && code != 0 && group != nil {
		if hit := group.Hit(); len(hit) > 0 {
			return code, &LimitHit{Limits: hit, Status: code}
		}
	}
	return code, err
}

// openRunDirs opens the folder (and the view's root, when it is not the
// folder) before anything is mounted, and returns paths that reach them
// through those descriptors, whatever is later mounted over their own
// paths; closeDirs closes the descriptors.
func openRunDirs(cfg RunConfig) (backing, viewRoot string, closeDirs func(), err error) {
	dirfd, err := unix.Open(cfg.Folder, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", "", nil, fmt.Errorf("open folder: %w", err)
	}
	backing = fmt.Sprintf("/proc/self/fd/%d", dirfd)
	if cfg.ViewRoot == "" {
		return backing, "", func() { unix.Close(dirfd) }, nil
	}
	rootfd, err := unix.Open(cfg.ViewRoot, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(dirfd)
		return "", "", nil, fmt.Errorf("open the view's root: %w", err)
	}
	viewRoot = fmt.Sprintf("/proc/self/fd/%d", rootfd)
	return backing, viewRoot, func() { unix.Close(rootfd); unix.Close(dirfd) }, nil
}

// startRunView mounts the view of a run with base (its folder, grant,
// log, ledger, mountpoint and owner) and the options of cfg. Hidden
// paths are computed against the real folder path; the view resolves
// them relative to its root, whatever path reaches it.
func startRunView(cfg RunConfig, base Config) (*Mount, error) {
	base.Options = cfg.Options
	// The view serves the sandbox's command alone and every read
	// reaches the daemon: acpfs run hides --allow-other and
	// --passthrough, and they never apply.
	base.AllowOther, base.Passthrough = false, false
	base.GrantPath, base.Hidden = cfg.GrantPath, cfg.Hidden
	return Start(base)
}

// runGroup makes the command's control group (nil with NoLimits).
func runGroup(cfg RunConfig) (*limits.Group, error) {
	if cfg.NoLimits {
		return nil, nil
	}
	name := fmt.Sprintf("acpfs-run-%d", os.Getpid())
	var group *limits.Group
	var err error
	if cfg.CgroupParent != "" {
		group, err = limits.NewUnder(cfg.CgroupParent, name, cfg.Limits)
	} else {
		group, err = limits.New(name, cfg.Limits)
	}
	if err != nil {
		return nil, fmt.Errorf("resource limits: %w", err)
	}
	return group, nil
}

// deleteGroup removes the run's control group, if it made one.
func deleteGroup(group *limits.Group) {
	if group == nil {
		return
	}
	if err := group.Delete(); err != nil {
		slog.Warn("remove the run's control group", "err", err)
	}
}

// cloneFlags are the namespaces of every sandbox.
const cloneFlags = syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS

// startSandbox starts the sandbox's first process in new namespaces,
// hands it its spec, and waits for it.
//
// The first process waits for its spec before it does anything, so that
// it is in the control group before it can start another process.
func startSandbox(spec sandbox.Spec, initArgs []string, sig <-chan os.Signal, group *limits.Group, ns *SandboxNS) (int, error) {
	specR, specW, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	defer specR.Close()
	statusR, statusW, err := os.Pipe()
	if err != nil {
		specW.Close()
		return 0, err
	}
	defer statusR.Close()
	cmd, userns, err := sandboxCommand(&spec, initArgs, specR, statusW)
	if err != nil {
		specW.Close()
		statusW.Close()
		return 0, err
	}
	defer func() {
		for _, f := range userns {
			f.Close()
		}
	}()
	// Pdeathsig follows the thread that forks: keep it alive as long as
	// the child.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	err = cmd.Start()
	statusW.Close()
	if err != nil {
		specW.Close()
		return 0, fmt.Errorf("start the sandbox: %w", err)
	}
	if err := placeSandbox(cmd, spec, specW, group, ns); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return 0, err
	}
	status := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(statusR).ReadString('\n')
		status <- strings.TrimSpace(line)
	}()
	err = waitForwarding(cmd, sig)
	if st := <-status; st != sandbox.StatusOK {
		if st == "" {
			st = fmt.Sprintf("its first process ended before the command started (%v)", err)
		}
		return 0, fmt.Errorf("sandbox: %s", st)
	}
	return ExitStatus(err)
}

// sandboxCommand is the sandbox's first process, not started: this
// binary again, by /proc/self/exe, in new namespaces, with the spec's
// pipe on descriptor 3, the status pipe on 4 and the user namespaces of
// idmapped binds from 5, which the caller closes once it started.
func sandboxCommand(spec *sandbox.Spec, initArgs []string, specR, statusW *os.File) (*exec.Cmd, []*os.File, error) {
	flags := uintptr(cloneFlags)
	if spec.Net != sandbox.NetHost {
		flags |= syscall.CLONE_NEWNET
	}
	// No path inside the view is resolved while this process, which
	// serves the view, shares its memory with the child (Go starts
	// children with vfork).
	cmd := exec.Command("/proc/self/exe", initArgs...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.ExtraFiles = []*os.File{specR, statusW}
	userns, err := sandbox.OpenUserns(spec, 3+len(cmd.ExtraFiles))
	if err != nil {
		return nil, nil, err
	}
	cmd.ExtraFiles = append(cmd.ExtraFiles, userns...)
	cmd.Dir = "/"
	// The first process gets no environment: the command's is in the
	// spec, and nothing of the caller's is left in /proc/1/environ.
	cmd.Env = []string{}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: flags, Pdeathsig: syscall.SIGKILL}
	return cmd, userns, nil
}

// placeSandbox records the PID namespace of the started first process
// (the owner guard's sandbox), puts it in its control group, then hands
// it its spec (closing specW): it waits for the spec before anything
// else, so it cannot start another process outside the group. The
// caller kills it on an error.
func placeSandbox(cmd *exec.Cmd, spec sandbox.Spec, specW *os.File, group *limits.Group, ns *SandboxNS) error {
	defer specW.Close()
	if err := ns.Set(cmd.Process.Pid); err != nil {
		return err
	}
	if group != nil {
		if err := group.Add(cmd.Process.Pid); err != nil {
			return fmt.Errorf("resource limits: put the sandbox in its control group: %w", err)
		}
	}
	if err := json.NewEncoder(specW).Encode(spec); err != nil {
		return fmt.Errorf("hand the sandbox its spec: %w", err)
	}
	return nil
}

// waitForwarding waits for the started cmd and passes on to it every
// signal that arrives on sig meanwhile; it returns what Wait returned.
func waitForwarding(cmd *exec.Cmd, sig <-chan os.Signal) error {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for {
		select {
		case s := <-sig:
			_ = cmd.Process.Signal(s)
		case err := <-done:
			return err
		}
	}
}

// ExitStatus turns an exec Wait error into an exit status (128+n for
// signal n); an error that is not a process's exit is returned as is.
func ExitStatus(err error) (int, error) {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return ee.ExitCode(), nil
	}
	return 0, err
}

// RunForwardingSignals runs cmd and passes SIGINT, SIGTERM and SIGHUP on
// to it, so that stopping `acpfs run` stops the command first and the
// view is then unmounted and recorded normally. It returns cmd's exit
// status.
func RunForwardingSignals(cmd *exec.Cmd) (int, error) {
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sig)
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	return ExitStatus(waitForwarding(cmd, sig))
}
