package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/acpfs/acpfs/grants"
	"github.com/acpfs/acpfs/internal/fsid"
	"github.com/acpfs/acpfs/ledger"
	"github.com/acpfs/acpfs/mount"
	"github.com/acpfs/acpfs/protocol"
	"github.com/acpfs/acpfs/view"
)

func init() {
	commands = append(commands, newMountCmd, newUmountCmd, newDoctorCmd)
}

// mountFlags are shared by mount, run and up.
type mountFlags struct {
	// forRun is set by acpfs run, which needs no fusermount3.
	forRun     bool
	folder     string
	runs       string
	grant      string
	ledgerPath string
	ledgerSync string
	opts       mount.Options
	viewRoot   string
}

// View roots (--view-root).
const (
	viewRootFolder = "folder"
	viewRootRepo   = "repo"
)

// registerViewRoot adds --view-root.
func registerViewRoot(cmd *cobra.Command, v *string) {
	cmd.Flags().StringVar(v, "view-root", viewRootFolder, `what a view is rooted at: "folder", or "repo", the repository root of a folder whose deliverables are external (--deliverables-mode external): they are then judged by the grant, recorded and frozen as the folder's own, named beside it ("../docs/report.md")`)
}

// viewRootDir is the directory views are rooted at for --view-root: ""
// for the folder itself, or the repository root protocol.json names for
// external deliverables.
func viewRootDir(mode, folder string) (string, error) {
	switch mode {
	case "", viewRootFolder:
		return "", nil
	case viewRootRepo:
	default:
		return "", fmt.Errorf("--view-root %q: want %s or %s", mode, viewRootFolder, viewRootRepo)
	}
	p, err := protocol.LoadProtocol(folder)
	if err != nil {
		return "", fmt.Errorf("--view-root repo: %w", err)
	}
	rr, ok := p.RepoRoot()
	if !ok || filepath.IsAbs(rr) {
		return "", errors.New("--view-root repo needs a folder initialized with --deliverables-mode external and a relative --repo-root")
	}
	root, err := filepath.EvalSymlinks(filepath.Join(folder, rr))
	if err != nil {
		return "", fmt.Errorf("--view-root repo: the repository root %s: %w", rr, err)
	}
	real, err := filepath.EvalSymlinks(folder)
	if err != nil {
		return "", err
	}
	if rel, err := filepath.Rel(root, real); err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("--view-root repo: the repository root %s does not hold the folder", root)
	}
	return root, nil
}

// quotaHelp says what the quota flags do.
const quotaHelp = " for a grant that sets none (max_write_bytes, max_files): past it, writes and creates fail with EDQUOT; -1 for no cap"

// passthroughHelp warns about the one trade-off of --passthrough.
const passthroughHelp = "let the kernel read files the grant can only read straight from the folder (near-native reads); " +
	"a descriptor opened before the grant narrows then keeps reading, and the ledger records that it can"

// auditHelp says what each --audit level records.
const auditHelp = `"" (default) records the first read of each file version and each distinct refusal in full and counts repeats; "opens" records every open; "reads" also every read request (offset, length) and disables passthrough`

// registerViewFlags adds the flags of o, the options of every view, to
// mount, up and run: a view option is one field of view.Settings (or
// mount.Options) and one line here. mounts names what --allow-other
// opens ("mount", or "mounts" for up).
func registerViewFlags(cmd *cobra.Command, o *mount.Options, mounts string) {
	fl := cmd.Flags()
	fl.StringVar(&o.Audit, "audit", view.AuditCompact, auditHelp)
	fl.BoolVar(&o.Passthrough, "passthrough", false, passthroughHelp)
	fl.BoolVar(&o.AllowOther, "allow-other", false, "let other uids use the "+mounts+" (with default_permissions)")
	fl.Int64Var(&o.MaxWriteBytes, "max-write-bytes", 0, fmt.Sprintf("bytes an agent may add to files through its view (default %d)", view.DefaultMaxWriteBytes)+quotaHelp)
	fl.Int64Var(&o.MaxFiles, "max-files", 0, fmt.Sprintf("files and directories an agent may create through its view (default %d)", view.DefaultMaxFiles)+quotaHelp)
}

func (mf *mountFlags) register(cmd *cobra.Command, withGrant bool) {
	cmd.Flags().StringVar(&mf.folder, "folder", "", "collaboration folder to expose (required)")
	cmd.Flags().StringVar(&mf.runs, "runs", "", "run directory holding context_grants/, handoffs/ and the ledger (never visible in a view)")
	if withGrant {
		cmd.Flags().StringVar(&mf.grant, "grant", "", "grant: its agent, its id or its file (required; names are looked up in --runs, default agent_runs)")
	}
	cmd.Flags().StringVar(&mf.ledgerPath, "ledger", "", "ledger file (default: RUNS/communication_ledger.jsonl)")
	cmd.Flags().StringVar(&mf.ledgerSync, "ledger-sync", "batch", "when the ledger is fsynced: always, batch or off")
	registerViewFlags(cmd, &mf.opts, "mount")
	cmd.Flags().BoolVar(&mf.opts.Debug, "debug", false, "log every FUSE request")
	registerViewRoot(cmd, &mf.viewRoot)
	_ = cmd.MarkFlagRequired("folder")
}

// resolve checks the flags and opens what every view needs.
func (mf *mountFlags) resolve() (folder, ledgerPath string, err error) {
	if folder, err = filepath.Abs(mf.folder); err != nil {
		return "", "", err
	}
	if st, err := os.Stat(folder); err != nil || !st.IsDir() {
		return "", "", fmt.Errorf("folder %s is not a directory", folder)
	}
	if err := checkAudit(mf.opts.Audit); err != nil {
		return "", "", err
	}
	ledgerPath = mf.ledgerPath
	if ledgerPath == "" {
		if mf.runs == "" {
			return "", "", errors.New("--ledger or --runs is required")
		}
		ledgerPath = filepath.Join(mf.runs, "communication_ledger.jsonl")
	}
	if ledgerPath, err = filepath.Abs(ledgerPath); err != nil {
		return "", "", err
	}
	return folder, ledgerPath, nil
}

// hiddenDirs is what no view may show: the run directory and its parts,
// the ledger and the grant file, and their directories. When one of them lies directly in
// the folder, its directory is the folder itself, which cannot be hidden;
// the file itself is then.
func (mf *mountFlags) hiddenDirs(ledgerPath, grantPath string) []string {
	h := []string{filepath.Dir(ledgerPath), ledgerPath}
	if grantPath != "" {
		if g, err := filepath.Abs(grantPath); err == nil {
			h = append(h, filepath.Dir(g), g)
		}
	}
	for _, r := range mf.runDirs(grantPath) {
		// Its parts too, by what they are: one may be a symlink to a
		// directory elsewhere (inside the folder, say).
		rd := grants.NewRunDir(r)
		h = append(h, r, rd.GrantsDir(), rd.HandoffsDir(), rd.ArtifactsDir())
	}
	return h
}

// runDirs are the run directories a view of grantPath uses: --runs, and
// the run directory whose context_grants holds the grant (its artifacts,
// handoffs, other grants are the coordinator's too, --runs or not),
// found by what the grant's directory is, whatever it is called on the
// way (a symlink to it).
func (mf *mountFlags) runDirs(grantPath string) []string {
	var runs []string
	if grantPath != "" {
		if g, err := filepath.Abs(grantPath); err == nil {
			if r, err := grants.RunDirOfGrant(g); err == nil && r != "" {
				runs = append(runs, r)
			}
		}
	}
	if mf.runs != "" {
		if r, err := filepath.Abs(mf.runs); err == nil {
			runs = append(runs, r)
		}
	}
	return runs
}

// tightened remembers the run directories said to be made private, so
// that each is said once.
var tightened sync.Map

// privateRunDir makes the run directory root private (0700) when the
// caller owns it and others may read it (made by an older acpfs, or by
// hand), saying so once on w: its grants, its ledger key and the
// coordinator's lock are no other uid's to open. A failure is said and
// the command goes on: what it writes there is 0600 all the same.
func privateRunDir(w io.Writer, root string) {
	old, changed, err := grants.NewRunDir(root).Tighten()
	if err != nil {
		fmt.Fprintf(w, "acpfs: cannot make the run directory %s private: %v\n", root, err)
		return
	}
	if _, said := tightened.LoadOrStore(root, true); changed && !said {
		fmt.Fprintf(w, "acpfs: the run directory %s was %04o, open to other uids; made it 0700\n", root, uint32(old))
	}
}

// initRunDir makes rd private (see privateRunDir), then creates what it
// lacks.
func initRunDir(w io.Writer, rd grants.RunDir) error {
	privateRunDir(w, rd.Root)
	return rd.Init()
}

// refuseFolderInRunDir refuses a collaboration folder that is, or lies
// in, a run or ledger directory (any coordinator's): its views would show
// that directory's key, grants and agents' homes.
func refuseFolderInRunDir(folder string) error {
	d, err := grants.CoordinatorDirAt(folder)
	if err != nil {
		return err
	}
	if d != "" {
		return fmt.Errorf("folder %s is, or lies in, a run or ledger directory (%s): its views would show that directory's key and grants; use a folder outside it", folder, d)
	}
	return nil
}

// viewSetup is what mount and run need before mounting anything.
type viewSetup struct {
	folder, ledgerPath, grantPath string
	// root is the directory the view is rooted at when it is not the
	// folder (--view-root repo).
	root  string
	grant *grants.Grant
}

// prepare checks the machine and the flags, and loads the active grant;
// the run directories it uses are made private (said on stderr).
func (mf *mountFlags) prepare(stderr io.Writer) (viewSetup, error) {
	var v viewSetup
	d := mount.Check()
	usable := d.Usable
	if mf.forRun {
		usable = d.UsableForRun
	}
	if err := usable(); err != nil {
		return v, withCode(exitNoFUSE, err)
	}
	var err error
	if v.folder, v.ledgerPath, err = mf.resolve(); err != nil {
		return v, err
	}
	if err := refuseFolderInRunDir(v.folder); err != nil {
		return v, err
	}
	if v.root, err = viewRootDir(mf.viewRoot, v.folder); err != nil {
		return v, err
	}
	if v.root != "" {
		if err := refuseFolderInRunDir(v.root); err != nil {
			return v, err
		}
	}
	if v.grantPath, err = mf.grantPath(); err != nil {
		return v, err
	}
	if v.grant, err = grants.Load(v.grantPath); err != nil {
		return v, err
	}
	if err := refuseStoreFolder(v.folder); err != nil {
		return v, err
	}
	if v.grant.Revoked {
		return v, fmt.Errorf("grant %s is revoked", v.grant.GrantID)
	}
	if err := mf.refuseUnconcealable(v); err != nil {
		return v, err
	}
	// Views conceal the run directory, ledger and grant by identity
	// wherever they lie; a grant that would show one is refused first.
	if err := mount.CheckConcealed(v.folder, mf.hiddenDirs(v.ledgerPath, v.grantPath), v.grant); err != nil {
		return v, err
	}
	// Made private only once the places are known good: a --runs that
	// is the folder itself must not leave the folder 0700.
	for _, r := range mf.runDirs(v.grantPath) {
		privateRunDir(stderr, r)
	}
	return v, nil
}

// refuseUnconcealable refuses what no view, of this coordinator or any
// other, could conceal: a ledger or run directory that is the folder or
// the view's root, or holds it (the ledger's key would be made, or the
// grants kept, where every view of the folder shows them), and a grant
// file inside the folder or the view's root that is not in a run
// directory's context_grants (which every view conceals as such).
func (mf *mountFlags) refuseUnconcealable(v viewSetup) error {
	roots := []string{v.folder}
	if v.root != "" {
		roots = append(roots, v.root)
	}
	dirs := append([]string{filepath.Dir(v.ledgerPath)}, mf.runDirs(v.grantPath)...)
	for _, d := range dirs {
		for _, r := range roots {
			holds, err := fsid.Holds(d, r)
			if err != nil {
				return err
			}
			if holds {
				return fmt.Errorf("%s is, or holds, %s, which its views show: no view could hide the ledger, its key or the grants there; put the ledger and the run directory outside it", d, r)
			}
		}
	}
	if r, err := grants.RunDirOfGrant(v.grantPath); err == nil && r != "" {
		return nil
	}
	for _, r := range roots {
		found, err := fsid.LocateIn(r, []string{v.grantPath})
		if err != nil {
			return err
		}
		if len(found) > 0 {
			return fmt.Errorf("grant file %s lies in %s, which its views show, and not in a run directory: other views would show it; keep grants in a run directory (acpfs grant create --runs)", v.grantPath, r)
		}
	}
	return nil
}

// grantPath turns --grant (any grant reference, see grants.Resolve) into
// a file path. Without --runs, a name is looked up in ./agent_runs, as
// the other commands do.
func (mf *mountFlags) grantPath() (string, error) {
	if mf.grant == "" {
		return "", errors.New("--grant is required")
	}
	if _, err := os.Stat(mf.grant); err == nil && mf.runs == "" {
		return filepath.Abs(mf.grant)
	}
	p, err := grants.NewRunDir(mf.runs).ResolveGrant(mf.grant)
	if err != nil {
		return "", err
	}
	return filepath.Abs(p)
}

func openLedger(path, sync string) (*ledger.Writer, error) {
	mode, err := ledger.ParseSyncMode(sync)
	if err != nil {
		return nil, err
	}
	// The ledger's directory holds its key: private when made here,
	// like a run directory.
	dir := filepath.Dir(path)
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, err
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, err
	}
	return ledger.Open(path, ledger.Options{Sync: mode})
}

func newMountCmd() *cobra.Command {
	var mf mountFlags
	cmd := &cobra.Command{
		Use:   "mount --folder F --grant G (--ledger L | --runs DIR) MOUNTPOINT",
		Short: "Mount one grant's view of a collaboration folder (foreground; Ctrl-C unmounts)",
		Example: `  acpfs mount --folder collab --runs agent_runs --grant G-reviewer /mnt/reviewer
  acpfs mount --folder collab --grant grants/G-owner.json --ledger ledger.jsonl --audit reads /mnt/owner`,
		Args: oneMountpoint,
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := mf.prepare(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			folder, ledgerPath, gp, g := v.folder, v.ledgerPath, v.grantPath, v.grant
			// Refuse a bad mountpoint before opening anything: not an
			// empty directory, already a mount (another view included),
			// the folder or inside it, inside the run or ledger directory.
			if err := checkMountpoint(args[0], cmp.Or(v.root, folder), mf.hiddenDirs(ledgerPath, gp)); err != nil {
				return err
			}
			log, err := protocol.OpenLog(folder)
			if err != nil {
				return err
			}
			defer log.Close()
			lw, err := openLedger(ledgerPath, mf.ledgerSync)
			if err != nil {
				return err
			}
			defer lw.Close()
			defer startHeapProfiler()()
			// Catch signals before mounting: one that arrives while the
			// kernel is still talking to a half-started daemon would kill
			// it and leave a dead (or hung) mount behind.
			sig := make(chan os.Signal, 1)
			signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
			defer signal.Stop(sig)
			if err := startSupervisor(); err != nil {
				return err
			}
			m, err := mount.Start(mount.Config{
				Options: mf.opts, Folder: folder, ViewRoot: v.root, Mountpoint: args[0], Grant: g, GrantPath: gp, Log: log, Ledger: lw,
				Hidden: mf.hiddenDirs(ledgerPath, gp),
			})
			if err != nil {
				if errors.Is(err, mount.ErrMountpoint) {
					return err
				}
				return withCode(exitMount, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "mounted %s for %s (grant %s) at %s\n", folder, g.AgentID, g.GrantID, args[0])
			done := make(chan struct{})
			go func() { m.Wait(); close(done) }()
			select {
			case <-sig:
			case <-done:
				// Unmounted from outside (acpfs umount): Stop only
				// records it; there is nothing left to unmount.
			}
			if err := m.Stop(); err != nil {
				return withCode(exitMount, err)
			}
			return nil
		},
	}
	mf.register(cmd, true)
	return cmd
}

func newUmountCmd() *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "umount [--force] MOUNTPOINT",
		Short: "Unmount an acpfs view, including a stale one whose daemon died (refuses anything else)",
		Long: `umount unmounts an acpfs view and nothing else: MOUNTPOINT must be listed in
/proc/self/mountinfo as a FUSE mount of type fuse.acpfs. A view whose daemon
died ("transport endpoint is not connected") is unmounted too. A view still in
use (an open file, a shell inside it) is refused unless --force, which aborts
its connection (blocked processes get an error) and detaches it.`,
		Example: "  acpfs umount /mnt/reviewer\n  acpfs umount --force /mnt/reviewer",
		Args:    oneMountpoint,
		RunE: func(cmd *cobra.Command, args []string) error {
			err := mount.UnmountView(args[0], force)
			switch {
			case err == nil:
				return nil
			case errors.Is(err, mount.ErrNotView):
				return withCode(exitFailed, err)
			}
			return withCode(exitMount, err)
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "abort the view's FUSE connection and detach it even while it is in use")
	return cmd
}

// oneMountpoint is the Args check of mount and umount: exactly one
// MOUNTPOINT, with a message that says which argument is missing.
func oneMountpoint(cmd *cobra.Command, args []string) error {
	switch {
	case len(args) == 0:
		return fmt.Errorf("%s: missing MOUNTPOINT (usage: acpfs %s)", cmd.Name(), cmd.Use)
	case len(args) > 1:
		return fmt.Errorf("%s: one MOUNTPOINT expected, got %d arguments (usage: acpfs %s)", cmd.Name(), len(args), cmd.Use)
	}
	return nil
}

// checkMountpoint applies mount.CheckMountpointPlace and
// mount.CheckMountpoint, with the exit code of each refusal: a dead
// view (fixed by acpfs umount) is a mount failure, the rest are refused.
func checkMountpoint(p, folder string, hidden []string) error {
	err := mount.CheckMountpointPlace(p, folder, hidden)
	if err == nil {
		err = mount.CheckMountpoint(p)
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, mount.ErrStale):
		return withCode(exitMount, err)
	}
	return withCode(exitFailed, err)
}

func newDoctorCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "doctor",
		Short: "Tell whether this machine can mount acpfs views and start acpfs run sandboxes, and why not",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			d := mount.Check()
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "root: %v\n", d.Root)
			if d.DevFUSE != nil {
				fmt.Fprintf(out, "/dev/fuse: unusable (%v)\n", d.DevFUSE)
			} else {
				fmt.Fprintln(out, "/dev/fuse: ok")
			}
			if d.Fusermount != "" {
				fmt.Fprintf(out, "fusermount3: %s\n", d.Fusermount)
			} else {
				fmt.Fprintln(out, "fusermount3: not found (only needed when not root)")
			}
			fmt.Fprintf(out, "passthrough for read-only files: %v\n", d.Passthrough)
			doctorRun(out, d)
			if err := d.Usable(); err != nil {
				fmt.Fprintf(out, "verdict: cannot mount: %v\n", err)
				return silentExit(exitNoFUSE)
			}
			fmt.Fprintln(out, "verdict: ready to mount")
			return nil
		},
	}
}

// checkAudit accepts the --audit levels.
func checkAudit(level string) error {
	switch level {
	case "", "opens", "reads":
		return nil
	}
	return fmt.Errorf(`--audit: unknown level %q (want "opens" or "reads", or leave it out for compact records)`, level)
}
