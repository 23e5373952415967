package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/acpfs/acpfs/drive"
	"github.com/acpfs/acpfs/mount"
)

func init() { commands = append(commands, newDriveCmd) }

// driveLong is the help of acpfs drive.
const driveLong = `drive reads a collaboration file (YAML; docs/drive.md) and checks it,
naming the line and column of every problem, before anything starts;
--check stops there.

Then it initializes the folder (or resumes the one there from its
history), creates the grants (a grant the file changed is revoked and
replaced), serves one view per grant under the mount root, as acpfs up
does, and, for as long as the collaboration is open, starts every
participant in waitingFor in its own acpfs run sandbox, several at once
when several are waiting. Each turn gets its rendered grant prompt, its
next action and, on a retry, why its last attempt was refused, as files
(ACPFS_PROMPT_FILE, ACPFS_NEXT_ACTION_FILE, ACPFS_LAST_ERROR_FILE) and
in the environment (ACPFS_NEXT_ACTION, ACPFS_LAST_ERROR). A turn ends
when its command exits or its timeout passes; a turn that appended no
accepted event is retried up to the participant's retries, then blocked
is appended on its behalf (on_exhausted: blocked) or drive stops.

Every turn leaves a receipt in RUNS/turns/ and a turn record in the
ledger. drive stops at completed or blocked, at the deadline, or on
SIGINT or SIGTERM (which stop the agents and unmount), then writes the
audit (RUNS/audit.md and RUNS/audit.html). Killed at any moment (even
SIGKILL), drive FILE again resumes: the sandboxes died with it, a turn
that was running is closed as interrupted and never run again.

Exit status: 0 completed, 2 anything else (blocked, stopped, invalid
file), 3 the views could not be served, 4 FUSE unusable.`

// driveFailpointEnv names a moment at which acpfs drive kills itself
// with SIGKILL (drive.Options.Failpoint): crash tests only.
const driveFailpointEnv = "ACPFS_DRIVE_FAILPOINT"

// driveFlags are the flags of acpfs drive.
type driveFlags struct{ check, asJSON, plain bool }

func newDriveCmd() *cobra.Command {
	var f driveFlags
	cmd := &cobra.Command{
		Use:     "drive [--check] [--json] FILE",
		Short:   "Run a whole collaboration from a collaboration file: each participant woken at its turn in its own acpfs run sandbox",
		Long:    driveLong,
		Example: "  acpfs drive --check examples/demo.yaml\n  acpfs drive examples/demo.yaml",
		Args:    cobra.ExactArgs(1),
		RunE:    func(cmd *cobra.Command, args []string) error { return runDrive(cmd, args[0], f) },
	}
	cmd.Flags().BoolVar(&f.check, "check", false, "check the file and stop")
	cmd.Flags().BoolVar(&f.asJSON, "json", false, "progress as one JSON object per line")
	cmd.Flags().BoolVar(&f.plain, "plain", false, "one line per event even on a terminal (no live status block)")
	return cmd
}

// runDrive checks the collaboration file at path and, unless --check,
// drives the collaboration to its end and says how it ended.
func runDrive(cmd *cobra.Command, path string, f driveFlags) error {
	cfg, err := drive.Load(path)
	if err != nil {
		return err
	}
	if f.check {
		fmt.Fprintf(cmd.OutOrStdout(), "%s: valid (%d participants)\n", path, len(cfg.Participants))
		return nil
	}
	if err := mount.Check().Usable(); err != nil {
		return withCode(exitNoFUSE, err)
	}
	// A reader of the progress that goes away (`| head`) must not kill
	// the driver before it stops its agents and unmounts: its writes
	// fail (EPIPE) instead.
	signal.Ignore(syscall.SIGPIPE)
	if os.Geteuid() != 0 {
		return withCode(exitMount, errors.New("acpfs drive runs each turn in acpfs run, which needs root"))
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// The driver serves the views itself: like acpfs up, it has a
	// supervisor, so that a driver killed while its views are busy never
	// leaves them hanging.
	if err := startSupervisor(); err != nil {
		return err
	}
	res, err := drive.Drive(ctx, cfg, drive.Options{Out: cmd.OutOrStdout(), Mode: f.mode(cmd), Failpoint: os.Getenv(driveFailpointEnv)})
	if err != nil {
		return withCode(exitFailed, errors.New(drive.Printable(err.Error())))
	}
	if !res.Completed() {
		// The reason may quote a refusal, whose path the agent chose.
		return withCode(exitFailed, fmt.Errorf("the collaboration did not complete: %s", drive.Printable(res.Reason)))
	}
	if f.asJSON {
		// Machines read JSON to the last line.
		return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]any{
			"type": "done", "phase": res.Phase, "turns": res.Turns, "verdict": res.Verdict, "audit": res.Audit})
	}
	fmt.Fprintf(cmd.OutOrStdout(), "acpfs drive: completed in %d turn(s); audit %s: %s\n", res.Turns, res.Verdict, res.Audit)
	return nil
}

// mode is how progress is shown: JSON with --json, a live status block
// on a terminal unless --plain, else one line per event.
func (f driveFlags) mode(cmd *cobra.Command) string {
	switch {
	case f.asJSON:
		return drive.ModeJSON
	case !f.plain && isTerminal(cmd.OutOrStdout()):
		return drive.ModeTTY
	}
	return drive.ModePlain
}

// isTerminal reports whether w is a terminal.
func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
