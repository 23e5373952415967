package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/acpfs/acpfs/grants"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/internal/limits"
	"github.com/acpfs/acpfs/internal/sandbox"
	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/mount"
)

func init() {
	commands = append(commands, newRunCmd, newRunDaemonCmd, newRunInitCmd)
}

// allowRootHelp says what running the command as root gives up.
const allowRootHelp = "run the command as root (uid 0) inside the sandbox. Root keeps every capability there: it reads every file " +
	"the sandbox shows whatever its mode (/etc/shadow included), owns what it creates, can reconfigure the host's network " +
	"with --net host, and is one kernel bug away from the host; Landlock and the seccomp filter still hold, but " +
	"nothing separates it from other root processes. Use it only for a command you trust"

// runLong is the help of acpfs run (a variable: it names the system
// directories).
var runLong = `run starts CMD in an allow-list sandbox: new mount, PID, IPC and UTS
namespaces (and network with --net none or allow=), a root that holds only the
system directories (` + strings.Join(sandbox.SystemDirs, " ") + `) read-only, the
--ro and --rw paths, the grant's view at the folder's own path, a fresh
/proc that shows only the sandbox's processes, a minimal /dev and empty,
private /tmp, /var/tmp and /dev/shm. Other FUSE mounts, the run
directory, the ledger and the grant are unreachable.

The command runs as its grant's own uid (allocated once per grant from
61184-65519 by a registry of the whole host, /var/lib/acpfs, so that no
two grants of any run directories share one, and recorded in the run
directory's uids.json), or --uid (refused while another grant holds it);
files of the view appear owned by it, and the grant alone decides what
it may do there. It runs in a new session, with no_new_privs, Landlock
(reads only from what the sandbox shows, writes only to the view, the
private temporary directories and --rw paths; with --net host no TCP
port may be bound) and a seccomp filter (no mount, namespaces, ptrace,
keyrings, BPF, modules, io_uring or TIOCSTI), and it dies with acpfs run.
A working directory the sandbox does not show becomes the folder.

The command gets a minimal environment: PATH, HOME, LANG, LANGUAGE,
LC_*, TERM, COLORTERM, TZ and SHELL from the caller, USER and LOGNAME the
agent's name, TMPDIR=/tmp; then the --env-file lines and the --env
values (NAME: the caller's value; NAME=VALUE). --inherit-env gives it
the caller's whole environment, credentials included.

--net allow=HOST[:PORT],... gives the command a network of its own
(loopback only) and a proxy at 127.0.0.1:3128 (HTTP CONNECT, http://
requests, SOCKS5; HTTP_PROXY, HTTPS_PROXY and ALL_PROXY point to it) that
reaches the named hosts only (port 443 unless given), resolved on the
host side; a name that leads to a loopback or private address is
refused unless a rule names it exactly. Each connection, allowed or
refused, is a ledger record (net_allowed, net_refused).

HOME is the agent's own home (--home), shown at the caller's HOME path
and kept between runs in RUNS/homes/<grant id>, which no other agent can
reach. A --rw directory of the caller's that the agent's uid does not own
is shown owned by the agent (an idmapped mount): what the agent creates
there is the caller's on the host.

The command runs in a control group of its own (cgroup v2 where it is
delegated, else the v1 pids, memory and cpu hierarchies): --memory
(default 4G), --pids (default 512: a fork bomb stops there) and --cpu (a
number of CPUs, e.g. 1.5; default no cap). cgroup v2 charges socket
buffers to --memory; v1 does not, so there they are capped separately
(TCP and UDP, --socket-memory, default as --memory) and run says so on
stderr. A limit that cannot be applied
is an error unless --no-limits. When the command fails after running into
a limit, run says which on stderr and exits with status 6.

Without root, run builds the same sandbox in a user namespace (when
/dev/fuse is usable and user namespaces are on; acpfs doctor tells). Its
first line on stderr names the uid scheme: subuid (a subordinate uid of
yours, from /etc/subuid through newuidmap, handed out per grant by your
own registry, ~/.local/state/acpfs/uids) or single (your own uid on the
host, as uid 0 without capabilities in the namespace; --uid-scheme single
chooses it). The agent's home is kept in RUNS/homes/<grant id> in both; in
the subuid scheme a --rw or --home directory of yours is refused (showing
it as the agent's takes an idmapped mount, which needs root). Limits then
need a delegated cgroup v2 subtree: without one, --memory, --pids and
--cpu are refused (pass --no-limits) and the defaults are dropped with one
line.

run exits with the command's status (128+n for signal n); SIGINT,
SIGTERM and SIGHUP reach the command. See docs/sandbox.md.`

// runFlags are the flags of acpfs run.
type runFlags struct {
	mf                   mountFlags
	uid, home, scheme    string
	en                   runEnvNet
	allowRoot, noLimits  bool
	ro, rw               []string
	memory, socketMemory string
	lim                  limits.Limits
}

func newRunCmd() *cobra.Command {
	f := &runFlags{lim: limits.Defaults}
	cmd := &cobra.Command{
		Use:   "run --folder F --grant G (--ledger L | --runs DIR) [--ro PATH]... [--rw PATH]... [--home DIR|none] [--net host|none|allow=HOST[:PORT],...] [--env NAME[=VALUE]]... [--uid U[:G] | --allow-root] -- CMD [ARGS...]",
		Short: "Run a command in a sandbox that shows the folder only through its grant's view",
		Long:  runLong,
		Example: `  acpfs run --folder collab --runs agent_runs --grant G-bob -- sh -c 'cat collab/proposal.md'
  acpfs run --folder collab --runs agent_runs --grant G-bob --net none --ro ~/tools -- ~/tools/review.sh
  acpfs run --folder collab --runs agent_runs --grant G-bob --net allow=api.anthropic.com --env ANTHROPIC_API_KEY -- claude`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return f.run(cmd, args) },
	}
	f.register(cmd)
	return cmd
}

func (f *runFlags) register(cmd *cobra.Command) {
	f.mf.register(cmd, true)
	f.mf.forRun = true
	// The view of a run always serves its agent alone, and every read
	// reaches the daemon: these two mount flags do not apply.
	_ = cmd.Flags().MarkHidden("allow-other")
	_ = cmd.Flags().MarkHidden("passthrough")
	cmd.Flags().StringVar(&f.uid, "uid", "", "run the command as this uid (and gid: U:G) instead of its grant's own")
	cmd.Flags().BoolVar(&f.allowRoot, "allow-root", false, allowRootHelp)
	cmd.Flags().StringVar(&f.scheme, "uid-scheme", "", uidSchemeHelp)
	cmd.Flags().StringArrayVar(&f.ro, "ro", nil, "also show this host path, read-only (repeatable)")
	cmd.Flags().StringArrayVar(&f.rw, "rw", nil, "also show this host path, writable (repeatable); one of yours that the agent's uid does not own is shown owned by it (idmapped mount), or refused before the command starts where the file system cannot")
	cmd.Flags().StringVar(&f.home, "home", "", homeHelp)
	f.en.register(cmd)
	cmd.Flags().StringVar(&f.memory, "memory", "4G", "memory the command may use (K, M, G suffixes)")
	cmd.Flags().StringVar(&f.socketMemory, "socket-memory", "", "cgroup v1 only: TCP and UDP socket buffers the command may pin, which v1 does not charge to --memory (default: as --memory)")
	cmd.Flags().Int64Var(&f.lim.Pids, "pids", f.lim.Pids, "processes and threads the command may have at once")
	cmd.Flags().Float64Var(&f.lim.CPU, "cpu", 0, "CPUs' worth of time the command may use (e.g. 1.5; 0: no cap)")
	cmd.Flags().BoolVar(&f.noLimits, "no-limits", false, "run without a control group (no memory, process or CPU limit)")
}

// run checks the flags, chooses the command's identity, plans its
// sandbox and its limits, and starts the daemon that mounts the view and
// runs the command there.
func (f *runFlags) run(cmd *cobra.Command, args []string) error {
	v, err := f.mf.prepare(cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	// Without root, the same sandbox is built in a user namespace.
	rootless := os.Geteuid() != 0
	if rootless {
		if err := rootlessReady(); err != nil {
			return withCode(exitMount, err)
		}
	}
	net, egressPolicy, env, err := f.en.build(v.grant.AgentID)
	if err != nil {
		return err
	}
	sync, err := ledger.ParseSyncMode(f.mf.ledgerSync)
	if err != nil {
		return err
	}
	folder, err := filepath.EvalSymlinks(v.folder)
	if err != nil {
		return err
	}
	// shown is where the view appears in the sandbox: the folder, or the
	// repository root holding it.
	shown := cmp.Or(v.root, folder)
	// The ledger's directory is made now: the sandbox's daemon opens the
	// ledger in it, and the uid registry knows a run directory by what it
	// is on disk.
	if err := os.MkdirAll(filepath.Dir(v.ledgerPath), 0o700); err != nil {
		return err
	}
	runDir := f.runDir(v)
	ids, lease, err := f.identity(rootless, runDir, v.grant.GrantID)
	if err != nil {
		return err
	}
	// The lease keeps the uid this run's until acpfs run ends.
	defer lease.Release()
	hidden := f.mf.hiddenDirs(v.ledgerPath, v.grantPath)
	if reg, err := ids.ns.Registry(); err == nil {
		// The caller's registry of subordinate uids is no agent's to read
		// (a --ro of ~/.local would show it).
		hidden = append(hidden, reg.Dir)
	}
	p, err := f.plan(rootless, shown, runDir, v, hidden, &ids)
	if err != nil {
		return err
	}
	lim, err := f.limits()
	if err != nil {
		return err
	}
	noLimits, cgroupParent := f.noLimits, ""
	if rootless {
		fmt.Fprintf(cmd.ErrOrStderr(), "acpfs run: %s\n", ids.ns.Describe())
		if noLimits, cgroupParent, err = rootlessLimits(cmd, noLimits, cmd.ErrOrStderr()); err != nil {
			return err
		}
	}
	cfg := mount.RunConfig{
		Options: f.mf.opts, Folder: folder, ViewRoot: v.root, GrantPath: v.grantPath, LedgerPath: v.ledgerPath, LedgerSync: sync,
		Limits: lim, NoLimits: noLimits, CgroupParent: cgroupParent, Hidden: hidden, GiveHome: p.giveHome,
		Egress:  egressPolicy,
		Sandbox: sandbox.Spec{Folder: shown, Binds: p.binds, Masks: p.masks, Net: net, Env: env, UID: ids.u, GID: ids.g, UserNS: ids.ns.Scheme, Cwd: workDir(), Args: args, Home: p.homeAt},
	}
	if !noLimits && lim.Memory > 0 && limits.V1() {
		// v1 leaves socket buffers out of --memory: say what holds them.
		fmt.Fprintf(cmd.ErrOrStderr(), "acpfs run: %s\n", limits.V1SocketNote(lim, limits.ReadSysctl("net/core/wmem_max")))
	}
	// A run killed with SIGKILL leaves its scratch directory behind:
	// the next run removes those whose daemon is gone.
	mount.SweepRunScratch()
	if rootless {
		return startRootlessDaemon(cfg, ids.ns)
	}
	return startRunDaemon(cfg)
}

// runDir is the run directory the command's uid and home belong to:
// --runs, else the grant's run directory when it lies in one, else the
// ledger's directory.
func (f *runFlags) runDir(v viewSetup) string {
	if f.mf.runs != "" {
		return f.mf.runs
	}
	runDir := filepath.Dir(v.ledgerPath)
	if d := filepath.Dir(v.grantPath); filepath.Base(d) == grants.GrantsDirName {
		runDir = filepath.Dir(d)
	}
	return runDir
}

// runIDs are the command's ids: u and g in the sandbox, hostU and hostG
// what the host knows it by, ns the user namespace of a rootless run.
type runIDs struct {
	u, g, hostU, hostG uint32
	ns                 sandbox.UserNS
}

// identity chooses the command's ids (see runUID and rootlessUID) and
// refuses a host uid that a process of the host already runs as. The
// lease, nil for a rootless run or root, is the caller's to release.
func (f *runFlags) identity(rootless bool, runDir, grantID string) (runIDs, *sandbox.Lease, error) {
	var ids runIDs
	var lease *sandbox.Lease
	var err error
	if rootless {
		if ids.ns, lease, err = rootlessUID(f.uid, f.scheme, f.allowRoot, runDir, grantID); err != nil {
			return ids, nil, err
		}
		ids.u, ids.g = ids.ns.AgentUID, ids.ns.AgentGID
		ids.hostU, ids.hostG = ids.ns.HostUID, ids.ns.HostGID
		if ids.ns.Scheme == sandbox.SchemeSingle {
			ids.hostU, ids.hostG = ids.ns.CallerUID, ids.ns.CallerGID
		}
	} else {
		if f.scheme != "" {
			return ids, nil, errors.New("--uid-scheme: a run as root gives each grant a uid of its own; the uid schemes are those of a run without root")
		}
		if ids.u, ids.g, lease, err = runUID(f.uid, f.allowRoot, runDir, grantID); err != nil {
			return ids, nil, err
		}
		ids.hostU, ids.hostG = ids.u, ids.g
	}
	if ids.hostU != 0 && ids.ns.Scheme != sandbox.SchemeSingle {
		if pid := sandbox.HostProcessWithUID(ids.hostU); pid != 0 {
			lease.Release()
			return ids, nil, withCode(exitMount, fmt.Errorf("uid %d is in use on the host (pid %d): that process could read the sandbox and be taken for the agent; give --uid another uid", ids.hostU, pid))
		}
	}
	return ids, lease, nil
}

// runPlan is what the sandbox shows beside the view: binds (--ro, --rw,
// the agent's home), masks, where the home is shown ("" for none), and
// the home a rootless run's daemon gives to the agent ("" for none).
type runPlan struct {
	binds            []sandbox.Bind
	masks            []string
	homeAt, giveHome string
}

// plan lays out what the sandbox shows beside the view and refuses a
// layout that would show a run directory or that the agent's host ids
// could not reach. A rootless run's plan may map one more id in ids.ns
// (see rootlessHome).
func (f *runFlags) plan(rootless bool, shown, runDir string, v viewSetup, hidden []string, ids *runIDs) (runPlan, error) {
	var p runPlan
	var err error
	if p.binds, p.masks, err = sandbox.Plan(sandbox.PlanOptions{Folder: shown, RO: f.ro, RW: f.rw, Masks: hidden}); err != nil {
		return p, err
	}
	if p.binds, p.homeAt, p.giveHome, err = planRunHome(f.home, runDir, v.grant.GrantID, shown, p.masks, p.binds, ids, rootless); err != nil {
		return p, err
	}
	if err := refuseRunDirsShown(f.ro, f.rw, f.home, runDir, filepath.Dir(v.ledgerPath)); err != nil {
		return p, err
	}
	if err := sandbox.CheckReach(shown, p.binds, ids.hostU, ids.hostG); err != nil {
		return p, err
	}
	return p, nil
}

// workDir is the caller's working directory, symbolic links resolved;
// the sandbox makes it the folder when it does not show it.
func workDir() string {
	cwd, _ := os.Getwd()
	if real, err := filepath.EvalSymlinks(cwd); err == nil {
		cwd = real
	}
	return cwd
}

// limits are the command's control-group limits from --memory,
// --socket-memory, --pids and --cpu.
func (f *runFlags) limits() (limits.Limits, error) {
	lim := f.lim
	var err error
	if lim.Memory, err = limits.ParseBytes(f.memory); err != nil {
		return lim, fmt.Errorf("--memory %w", err)
	}
	if f.socketMemory != "" {
		if lim.SocketMemory, err = limits.ParseBytes(f.socketMemory); err != nil {
			return lim, fmt.Errorf("--socket-memory %w", err)
		}
		if !limits.V1() {
			return lim, errors.New("--socket-memory: cgroup v2 charges socket buffers to --memory; the flag applies to cgroup v1 only")
		}
	}
	if lim.Pids < 0 || lim.CPU < 0 {
		return lim, errors.New("--pids and --cpu must not be negative")
	}
	return lim, nil
}

// runUID is the command's uid and gid: --allow-root's 0, --uid's, or
// the grant's own; a uid other than 0 comes with its lease of the host
// registry, which no other grant of any run directory gets while this
// run holds it.
func runUID(uid string, allowRoot bool, runDir, grantID string) (uint32, uint32, *sandbox.Lease, error) {
	switch {
	case allowRoot && uid != "" && uid != "0" && !strings.HasPrefix(uid, "0:"):
		return 0, 0, nil, errors.New("--allow-root and --uid: give one of them")
	case allowRoot:
		return 0, 0, nil, nil
	case uid != "":
		u, g, err := parseUID(uid)
		if err != nil {
			return 0, 0, nil, err
		}
		if u == 0 {
			return 0, 0, nil, errors.New("--uid 0 runs the command as root: say --allow-root (see --help for what it gives up)")
		}
		l, err := sandbox.ChosenUID(sandbox.HostRegistry(), runDir, grantID, u)
		if err != nil {
			return 0, 0, nil, withCode(exitMount, err)
		}
		return u, g, l, nil
	}
	l, err := sandbox.GrantUID(sandbox.HostRegistry(), runDir, grantID)
	if err != nil {
		return 0, 0, nil, withCode(exitMount, err)
	}
	return l.UID, l.UID, l, nil
}

func parseUID(s string) (uint32, uint32, error) {
	us, gs, hasG := strings.Cut(s, ":")
	u, err := strconv.ParseUint(us, 10, 32)
	if err != nil {
		return 0, 0, fmt.Errorf("--uid %q: want a numeric uid or uid:gid", s)
	}
	g := u
	if hasG {
		if g, err = strconv.ParseUint(gs, 10, 32); err != nil {
			return 0, 0, fmt.Errorf("--uid %q: want a numeric uid or uid:gid", s)
		}
	}
	return uint32(u), uint32(g), nil
}

// startRunDaemon runs the daemon of `acpfs run` (the hidden run-daemon
// command) in a new mount namespace and exits with its status. Unsharing
// in the child before it starts is the only reliable way for a Go
// program, whose threads would otherwise not all share the namespace.
func startRunDaemon(cfg mount.RunConfig) error {
	// Descriptors acpfs run inherited without close-on-exec (a pipe of
	// whatever started it) reach none of its children.
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return fmt.Errorf("close inherited descriptors: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	c := exec.Command("/proc/self/exe", runDaemonName)
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
	c.ExtraFiles = []*os.File{r}
	// Its own process group: a Ctrl-C reaches acpfs run alone, which
	// passes it on once, down to the command.
	c.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL, Setpgid: true}
	go func() {
		_ = json.NewEncoder(w).Encode(cfg)
		w.Close()
	}()
	defer keepTerminal()()
	code, err := mount.RunForwardingSignals(c)
	if err != nil {
		return withCode(exitMount, fmt.Errorf("start the run daemon: %w", err))
	}
	return silentExit(code)
}

// keepTerminal saves the settings and size of the terminals the command
// is handed, and returns a function that puts them back: whatever the
// command did to them (no echo, raw mode, another size) does not outlive
// it.
func keepTerminal() func() {
	type saved struct {
		fd int
		t  *unix.Termios
		ws *unix.Winsize
	}
	var all []saved
	for _, fd := range []int{0, 1, 2} {
		t, err := unix.IoctlGetTermios(fd, unix.TCGETS)
		if err != nil {
			continue
		}
		ws, _ := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ)
		all = append(all, saved{fd, t, ws})
	}
	return func() {
		for _, s := range all {
			_ = unix.IoctlSetTermios(s.fd, unix.TCSETS, s.t)
			if s.ws != nil {
				_ = unix.IoctlSetWinsize(s.fd, unix.TIOCSWINSZ, s.ws)
			}
		}
	}
}

// Hidden commands: the parts of `acpfs run` that run in new namespaces.
// Each reads its configuration, as JSON, from descriptor 3.
const (
	runDaemonName = "run-daemon"
	runInitName   = "run-init"
)

func newRunDaemonCmd() *cobra.Command {
	return hiddenCmd(runDaemonName, "internal: the daemon of acpfs run (configuration on descriptor 3)", func(cmd *cobra.Command) error {
		var cfg mount.RunConfig
		if err := readConfig(&cfg); err != nil {
			return err
		}
		if cfg.UserNS != nil && !fusectlMounted() {
			// The root of a user namespace may not mount fusectl: without
			// the system's mount the supervisor could abort nothing, and
			// would only warn at every view (docs/sandbox.md, "Without root").
			slog.Debug("no supervisor: a rootless run aborts FUSE connections through the system's fusectl, which is not mounted", "fusectl", fusectlDir)
		} else if err := startSupervisor(); err != nil {
			return err
		}
		code, err := mount.Run(cfg, []string{runInitName})
		var hit *mount.LimitHit
		if errors.As(err, &hit) {
			fmt.Fprintf(cmd.ErrOrStderr(), "acpfs run: %v\n", hit)
			return silentExit(exitLimit)
		}
		if err != nil {
			return withCode(exitMount, err)
		}
		return silentExit(code)
	})
}

func newRunInitCmd() *cobra.Command {
	return hiddenCmd(runInitName, "internal: the first process of an acpfs run sandbox (spec on descriptor 3, status on 4)", func(*cobra.Command) error {
		var spec sandbox.Spec
		if err := readConfig(&spec); err != nil {
			return err
		}
		status := os.NewFile(4, "status")
		if status == nil {
			return errors.New("run-init: no status descriptor")
		}
		return silentExit(sandbox.Enter(spec, status))
	})
}

// hiddenCmd is a command that acpfs runs itself: no arguments, left out
// of the help.
func hiddenCmd(use, short string, run func(cmd *cobra.Command) error) *cobra.Command {
	return &cobra.Command{
		Use:    use,
		Short:  short,
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE:   func(cmd *cobra.Command, _ []string) error { return run(cmd) },
	}
}

// readConfig decodes the JSON a parent wrote on descriptor 3.
func readConfig(v any) error {
	f := os.NewFile(3, "config")
	if f == nil {
		return errors.New("internal command: no configuration on descriptor 3")
	}
	defer f.Close()
	if err := json.NewDecoder(f).Decode(v); err != nil {
		return fmt.Errorf("internal command: configuration: %w", err)
	}
	return nil
}
