package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/mount"
)

func init() {
	commands = append(commands, newRunCmd)
}

// runInnerEnv marks the re-executed child that already lives in its own
// mount namespace.
const runInnerEnv = "ACPFS_RUN_INNER"

func newRunCmd() *cobra.Command {
	var mf mountFlags
	var uid string
	cmd := &cobra.Command{
		Use:   "run --folder F --grant G (--ledger L | --runs DIR) [--uid U[:G]] -- CMD [ARGS...]",
		Short: "Run a command that sees the folder only through its grant's view",
		Long: `run starts CMD in a private mount namespace where the grant's view is bound
over the collaboration folder's own path, so the command uses its usual
paths and cannot reach the real files by them; the run directory and the
ledger's directory are masked. The command runs with no_new_privs and,
with --uid, as an unprivileged user (recommended: a root command could
undo the mounts). run exits with the command's status and the view goes
away with it.`,
		Example: `  acpfs run --folder collab --runs agent_runs --grant G-reviewer --uid 65534 -- bash -c 'cat collab/proposal.md'`,
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := mf.prepare()
			if err != nil {
				return err
			}
			if os.Geteuid() != 0 {
				return withCode(exitMount, fmt.Errorf("acpfs run needs root to create a mount namespace"))
			}
			u, gid := -1, -1
			if uid != "" {
				if u, gid, err = parseUID(uid); err != nil {
					return err
				}
			}
			if os.Getenv(runInnerEnv) != "1" {
				return reexecInNamespace()
			}
			sync, err := ledger.ParseSyncMode(mf.ledgerSync)
			if err != nil {
				return err
			}
			masked := []string{filepath.Dir(v.ledgerPath)}
			if mf.runs != "" {
				r, _ := filepath.Abs(mf.runs)
				masked = append(masked, r)
			}
			code, err := mount.Sandbox(mount.RunConfig{
				Folder: v.folder, Grant: v.grant, GrantPath: v.grantPath, LedgerPath: v.ledgerPath, LedgerSync: sync,
				Masked: masked, UID: u, GID: gid, AuditReads: mf.audit == "reads", Args: args,
			})
			if err != nil {
				return withCode(exitMount, err)
			}
			return silentExit(code)
		},
	}
	mf.register(cmd, true)
	cmd.Flags().StringVar(&uid, "uid", "", "run the command as this uid (and gid: U:G)")
	return cmd
}

// reexecInNamespace runs this same command line again in a new mount
// namespace and exits with its status. Unsharing in the child before it
// starts is the only reliable way for a Go program, whose threads would
// otherwise not all share the new namespace.
func reexecInNamespace() error {
	c := exec.Command("/proc/self/exe", os.Args[1:]...)
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
	c.Env = append(os.Environ(), runInnerEnv+"=1")
	c.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	err := mount.RunForwardingSignals(c)
	if ee, ok := err.(*exec.ExitError); ok {
		return silentExit(ee.ExitCode())
	}
	if err != nil {
		return withCode(exitMount, fmt.Errorf("start namespace: %w", err))
	}
	return nil
}

func parseUID(s string) (int, int, error) {
	us, gs, hasG := strings.Cut(s, ":")
	u, err := strconv.Atoi(us)
	if err != nil || u < 0 {
		return 0, 0, fmt.Errorf("--uid %q: want a numeric uid or uid:gid", s)
	}
	g := u
	if hasG {
		if g, err = strconv.Atoi(gs); err != nil || g < 0 {
			return 0, 0, fmt.Errorf("--uid %q: want a numeric uid or uid:gid", s)
		}
	}
	return u, g, nil
}
