package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/mount"
	"github.com/acpfs/acpfs/protocol"
	"github.com/acpfs/acpfs/store"
)

func init() {
	register(newUpCmd, newStatusCmd)
}

// upFlags are the flags of acpfs up.
type upFlags struct {
	runs, folder, root, sync string
	viewRoot                 string
	opts                     mount.Options
	store                    storeFlags
	storeWait                time.Duration
}

func newUpCmd() *cobra.Command {
	var f upFlags
	cmd := &cobra.Command{
		Use:   "up --runs DIR --folder F --root R",
		Short: "Coordinator: mount every grant of a run directory at R/<agent_id> and follow grant changes",
		Long: `up mounts one view per active grant in DIR/context_grants at R/<agent_id>.
The views share one protocol state and one ledger writer. A new grant is
mounted, a changed grant applies to its live view, a revoked or removed
grant is unmounted (one line on stderr each time). SIGINT or SIGTERM
unmounts everything and flushes the ledger.

One coordinator runs per run directory: up holds a lock on DIR/.acpfs-up.lock
and a second one fails at once, naming the first one's pid. After a crash
(even SIGKILL), up restarts on the same root with no cleanup: the dead views
the killed coordinator left are detached, and their empty directories reused.

With --store URL --collab NAME the collaboration is served from several
hosts through a NATS JetStream server (docs/multihost.md): this host's
folder is a copy kept up to date from the store, appends are taken by the
store before they reach it, the grants this host mounts are those the
store assigns to --host, and while the store cannot be reached every view
is read-only (EROFS). A host whose folder is empty waits (--store-wait,
60s by default, saying so on stderr) until the host that initialized the
collaboration has published its protocol.json and history, so hosts can
be started in any order.`,
		Example: "  acpfs up --runs agent_runs --folder collab --root /mnt/agents",
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, args []string) error { return runUp(cmd, f) },
	}
	cmd.Flags().StringVar(&f.runs, "runs", "agent_runs", "run directory (context_grants/, handoffs/, ledger)")
	cmd.Flags().StringVar(&f.folder, "folder", "", "collaboration folder (required)")
	cmd.Flags().StringVar(&f.root, "root", "", "directory under which each agent's view is mounted (required, empty)")
	cmd.Flags().StringVar(&f.sync, "ledger-sync", "batch", "when the ledger is fsynced: always, batch or off")
	registerViewFlags(cmd, &f.opts, "mounts")
	registerViewRoot(cmd, &f.viewRoot)
	f.store.register(cmd)
	cmd.Flags().DurationVar(&f.storeWait, "store-wait", 60*time.Second, "with --store, on a host whose folder lacks protocol.json or events.jsonl: how long to wait for another host to publish them (0: fail at once)")
	_ = cmd.MarkFlagRequired("folder")
	_ = cmd.MarkFlagRequired("root")
	return cmd
}

// runUp serves every grant of the run directory until SIGINT or SIGTERM.
func runUp(cmd *cobra.Command, f upFlags) error {
	if err := mount.Check().Usable(); err != nil {
		return withCode(exitNoFUSE, err)
	}
	folderAbs, viewRoot, rootAbs, err := f.places()
	if err != nil {
		return err
	}
	rd := grants.NewRunDir(f.runs)
	if err := initRunDir(cmd.ErrOrStderr(), rd); err != nil {
		return err
	}
	lw, err := openLedger(rd.LedgerPath(), f.sync)
	if err != nil {
		return err
	}
	defer lw.Close()
	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()
	st, hs, err := f.joinStore(ctx, cmd, folderAbs, rd, lw)
	if st != nil {
		defer st.Close()
	}
	if err != nil {
		return err
	}
	if hs != nil {
		// Last in, first out: after the views and the log, before the
		// connection closes.
		defer func() {
			if err := hs.stop(lw); err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "acpfs up: store sync: %v\n", err)
			}
		}()
	}
	proto, err := protocol.LoadProtocol(folderAbs)
	if err != nil {
		return fmt.Errorf("read %s: %w", protocol.ProtocolFile, err)
	}
	log, err := protocol.OpenLog(folderAbs)
	if err != nil {
		return err
	}
	defer log.Close()
	if st != nil {
		if err := followStore(ctx, st, log); err != nil {
			return err
		}
		hs.log.Store(log)
	}
	defer startHeapProfiler()()
	cfg := mount.CoordinatorConfig{
		Options: f.opts, Runs: rd, Folder: folderAbs, ViewRoot: viewRoot, Root: rootAbs, Log: log, Ledger: lw,
		Participants: proto.ParticipantIDs(), Notify: cmd.ErrOrStderr(),
	}
	if st != nil {
		cfg.Gate = st.Check
	}
	return serveUp(cmd, cfg)
}

// places checks the flags and returns the folder, the directory views
// are rooted at ("" for the folder) and the mount root, absolute.
func (f upFlags) places() (folderAbs, viewRoot, rootAbs string, err error) {
	if err := checkAudit(f.opts.Audit); err != nil {
		return "", "", "", err
	}
	if f.storeWait < 0 {
		return "", "", "", fmt.Errorf("--store-wait %s: give a duration of 0 or more", f.storeWait)
	}
	if folderAbs, err = filepath.Abs(f.folder); err != nil {
		return "", "", "", err
	}
	if err := refuseFolderInRunDir(folderAbs); err != nil {
		return "", "", "", err
	}
	if viewRoot, err = viewRootDir(f.viewRoot, folderAbs); err != nil {
		return "", "", "", err
	}
	if viewRoot != "" {
		if err := refuseFolderInRunDir(viewRoot); err != nil {
			return "", "", "", err
		}
		if f.store.url != "" {
			return "", "", "", errors.New("--view-root repo is for one host: the store carries the folder's documents, not the repository's")
		}
	}
	if rootAbs, err = filepath.Abs(f.root); err != nil {
		return "", "", "", err
	}
	return folderAbs, viewRoot, rootAbs, nil
}

// joinStore connects this host to the store of --store, when given, and
// brings the folder in step with it; without --store it refuses a folder
// that a store's host keeps. The caller closes st (even with an error)
// and stops hs.
func (f upFlags) joinStore(ctx context.Context, cmd *cobra.Command, folder string, rd grants.RunDir, lw *ledger.Writer) (*store.Store, *hostSync, error) {
	st, err := f.store.open(ctx, true)
	if err != nil {
		return nil, nil, err
	}
	if st == nil {
		return nil, nil, refuseStoreFolder(folder)
	}
	hs, err := joinStore(ctx, st, folder, rd, lw, f.storeWait, cmd.ErrOrStderr())
	if err != nil {
		return st, nil, err
	}
	if err := markStoreFolder(folder, st); err != nil {
		return st, nil, err
	}
	return st, hs, nil
}

// serveUp starts the coordinator of cfg, lists its views, and stops it
// at SIGINT or SIGTERM.
func serveUp(cmd *cobra.Command, cfg mount.CoordinatorConfig) error {
	// Catch signals before mounting (see acpfs mount).
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)
	if err := startSupervisor(); err != nil {
		return err
	}
	c, err := mount.StartCoordinator(cfg)
	if errors.Is(err, mount.ErrRunDirBusy) || errors.Is(err, mount.ErrShowsConcealed) {
		return err
	}
	if err != nil {
		return withCode(exitMount, err)
	}
	status := c.Status()
	fmt.Fprintf(cmd.OutOrStdout(), "acpfs up: %d view(s) of %s under %s\n", len(status.Views), cfg.Folder, cfg.Root)
	for _, v := range status.Views {
		fmt.Fprintf(cmd.OutOrStdout(), "  %s (%s) at %s\n", v.Agent, v.Grant, v.Mountpoint)
	}
	<-sig
	if err := c.Stop(); err != nil {
		return withCode(exitMount, err)
	}
	return nil
}

func newStatusCmd() *cobra.Command {
	var runs string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status --runs DIR",
		Short: "List the coordinator's mounts, agents, phase and waiting participants",
		Long: `List what the coordinator of a run directory serves: its views, the
collaboration's phase and who it waits for. Exits 2 when the coordinator is
not running (dead, or its pid reused), and when one of its views is missing
(unmounted from outside or no longer its mount at its mountpoint; marked
MISSING): the coordinator mounts a lost view again, and says on its stderr
when it cannot.`,
		Example: "  acpfs status --runs agent_runs --json",
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, args []string) error { return runStatus(cmd, runs, asJSON) },
	}
	cmd.Flags().StringVar(&runs, "runs", "agent_runs", "run directory of the coordinator")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// statusReport is what acpfs status prints: the coordinator's status,
// the collaboration's state and the health of each view.
type statusReport struct {
	mount.CoordinatorStatus
	Phase      string             `json:"phase"`
	Owner      string             `json:"proposalOwner"`
	WaitingFor []string           `json:"waitingFor"`
	LastSeq    int                `json:"lastSeq"`
	Health     []mount.ViewHealth `json:"viewHealth"`
}

// runStatus prints the status of the coordinator of runs and fails (exit
// 2) when what it serves is not whole.
func runStatus(cmd *cobra.Command, runs string, asJSON bool) error {
	st, err := mount.ReadStatus(grants.NewRunDir(runs))
	if err != nil {
		return err
	}
	o := statusReport{CoordinatorStatus: st, Health: mount.CheckViews(st)}
	if log, err := protocol.OpenLog(st.Folder); err == nil {
		s := log.Snapshot()
		o.Phase, o.Owner, o.WaitingFor, o.LastSeq = s.Phase, s.Owner, s.WaitingFor, s.LastSeq
		log.Close()
	}
	// A coordinator that died (or whose pid now names another process)
	// left this status behind: say so, say what became of its views and
	// what clears them, and fail.
	var dead error
	if !st.Running() {
		dead = deadCoordinatorError(st, o.Health)
	} else {
		dead = liveCoordinatorError(&o)
	}
	w := cmd.OutOrStdout()
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(o); err != nil {
			return err
		}
		return dead
	}
	printStatus(w, o)
	return dead
}

// liveCoordinatorError says what is wrong with a running coordinator: a
// view that went away (the agent's writes would land in the bare
// mountpoint; marked Lost in o), grants refused, or the coordinator
// stopped (o.State "stopped"). Nil when nothing is.
func liveCoordinatorError(o *statusReport) error {
	var dead error
	var missing []string
	for i, v := range o.Views {
		if why := v.Missing(); why != "" {
			o.Views[i].Lost = why
			missing = append(missing, fmt.Sprintf("%s at %s (%s)", v.Agent, v.Mountpoint, why))
		}
	}
	if len(missing) > 0 {
		dead = fmt.Errorf("%d view(s) missing: %s; the coordinator mounts a lost view again and says on its stderr when it cannot", len(missing), strings.Join(missing, "; "))
	}
	if len(o.Problems) > 0 && dead == nil {
		// Agents without a view: their grants were refused.
		dead = fmt.Errorf("%d grant(s) refused (their agents have no view until fixed): %s", len(o.Problems), strings.Join(o.Problems, "; "))
	}
	if o.Stopped() {
		// Its status says it runs, yet every view hangs.
		o.State = "stopped"
		msg := fmt.Sprintf("coordinator pid %d is stopped (SIGSTOP or a debugger): every view hangs until it runs again: `kill -CONT %d`, or end it with `kill -KILL %d` and run `acpfs up` again", o.PID, o.PID, o.PID)
		if dead != nil {
			msg += "; " + dead.Error()
		}
		dead = errors.New(msg)
	}
	return dead
}

// printStatus prints o as text: the coordinator, the collaboration's
// state, one line per view and one per refused grant.
func printStatus(w io.Writer, o statusReport) {
	fmt.Fprintf(w, "coordinator pid %d since %s: %s\nfolder: %s\nphase: %s\nproposal owner: %s\nwaiting for: %s\nlast seq: %d\n",
		o.PID, o.Started, o.State, o.Folder, o.Phase, o.Owner, strings.Join(o.WaitingFor, ", "), o.LastSeq)
	for i, v := range o.Views {
		if v.Lost != "" {
			fmt.Fprintf(w, "  %-16s %-16s %s  MISSING: %s\n", v.Agent, v.Grant, v.Mountpoint, v.Lost)
			continue
		}
		line := fmt.Sprintf("  %-16s %-16s %s", v.Agent, v.Grant, v.Mountpoint)
		if h := o.Health[i]; h.State != mount.ViewServing {
			line += "  [" + h.State + "]"
		}
		fmt.Fprintln(w, line)
	}
	for _, p := range o.Problems {
		fmt.Fprintf(w, "  refused: %s\n", p)
	}
}

// deadCoordinatorError says what became of the views of a coordinator
// that is not running, and what to run: views that hang (their daemon is
// dying with its connections alive) need `acpfs umount --force` before
// anything else; dead ones (ENOTCONN) are cleared by `acpfs up` itself.
func deadCoordinatorError(st mount.CoordinatorStatus, health []mount.ViewHealth) error {
	if st.Running() {
		return nil
	}
	var hung, deadViews []string
	for _, h := range health {
		switch h.State {
		case mount.ViewHung:
			hung = append(hung, h.Mountpoint)
		case mount.ViewDead:
			deadViews = append(deadViews, h.Mountpoint)
		}
	}
	what := fmt.Sprintf("coordinator %s: %s", st.State, st.StateDetail)
	if st.DaemonDying() {
		what = fmt.Sprintf("coordinator pid %d is dying but cannot finish (its supervisor should have aborted its views within a second)", st.PID)
	}
	switch {
	case len(hung) > 0:
		return fmt.Errorf("%s; %d view(s) hang (every caller blocks until their connection is aborted): run `acpfs umount --force` on %s, then `acpfs up` again",
			what, len(hung), strings.Join(hung, " "))
	case len(deadViews) > 0:
		return fmt.Errorf("%s; %d view(s) are dead (ENOTCONN): run `acpfs up` again: it clears them", what, len(deadViews))
	}
	return fmt.Errorf("%s; none of its views is mounted any more: run `acpfs up` again", what)
}
