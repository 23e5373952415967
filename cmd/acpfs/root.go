package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

// Named exit codes. The first three match the reference ACP scripts so that
// agents and coordinators can switch between them without changing checks.
const (
	exitOK       = 0 // success; validate: passed
	exitWarnings = 1 // validate: passed with warnings; wait: timed out
	exitFailed   = 2 // usage error, protocol refusal, validation failure, broken ledger
	exitMount    = 3 // a mount could not be started or stopped
	exitNoFUSE   = 4 // /dev/fuse (or fusermount3 when not root) is unusable
	exitLimit    = 6 // run: the command failed after running into a resource limit
)

// exitError carries an exit code out of a cobra RunE.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// withCode wraps err so that execute exits with code.
func withCode(code int, err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: code, err: err}
}

// exitCode returns an error only to make the exit code explicit in RunE
// when nothing needs printing (validate's warnings, wait's timeout).
type silentExit int

func (s silentExit) Error() string { return fmt.Sprintf("exit %d", int(s)) }

// commands is filled by the init functions of the cmd_*.go files
// (register, registerPerEvent), so that each command lives in its own
// file and none of them edits this one.
var commands []registered

// registered is one top-level command: what builds it and, for a
// command an agent runs for every event, one process each, its name
// (perEvent, "" for the others). execute builds only such a command when
// it is the one asked for, not the whole tree (every command and its
// flags: 200 KB allocated, a sizeable part of a start); the name is given
// apart so that finding it builds nothing.
type registered struct {
	mk       func() *cobra.Command
	perEvent string
}

// register adds top-level commands.
func register(mks ...func() *cobra.Command) {
	for _, mk := range mks {
		commands = append(commands, registered{mk: mk})
	}
}

// registerPerEvent adds a command an agent runs for every event, named
// name (its cobra name: TestPerEventCommandsAlone checks it).
func registerPerEvent(name string, mk func() *cobra.Command) {
	commands = append(commands, registered{mk: mk, perEvent: name})
}

// perEventCmd returns what builds the per-event command name, or nil.
func perEventCmd(name string) func() *cobra.Command {
	for _, c := range commands {
		if c.perEvent != "" && c.perEvent == name {
			return c.mk
		}
	}
	return nil
}

func newRootCmd() *cobra.Command { return newRootCmdFor(nil) }

// newRootCmdFor is the command tree for running args: only the command
// when args name a per-event one, none for --version, every command
// otherwise.
func newRootCmdFor(args []string) *cobra.Command {
	root := &cobra.Command{
		Use:           "acpfs",
		Short:         "Enforce the Agent Collaboration Protocol and context grants at the filesystem",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version(),
	}
	root.SetVersionTemplate("acpfs {{.Version}}\n")
	var verbose bool
	root.PersistentFlags().BoolVarP(&verbose, "verbose", "v", false, "log debug messages to stderr")
	root.PersistentPreRun = func(cmd *cobra.Command, args []string) {
		level := slog.LevelWarn
		if verbose {
			level = slog.LevelDebug
		}
		slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))
	}
	if len(args) > 0 {
		if mk := perEventCmd(args[0]); mk != nil {
			root.AddCommand(mk())
			return root
		}
		if len(args) == 1 && args[0] == "--version" {
			return root
		}
	}
	for _, c := range commands {
		root.AddCommand(c.mk())
	}
	return root
}

func execute(args []string) int {
	root := newRootCmdFor(args)
	root.SetArgs(args)
	err := root.Execute()
	var silent silentExit
	if err != nil && !errors.As(err, &silent) {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
	}
	return exitCodeOf(err)
}

// exitCodeOf maps a command's error to the process exit code.
func exitCodeOf(err error) int {
	var silent silentExit
	var ee *exitError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &silent):
		return int(silent)
	case errors.As(err, &ee):
		return ee.code
	}
	return exitFailed
}

// groupCmd is a command that only holds subcommands.
func groupCmd(use, short, long string, subs ...*cobra.Command) *cobra.Command {
	cmd := &cobra.Command{Use: use, Short: short, Long: long}
	cmd.AddCommand(subs...)
	return cmd
}

// printTable writes rows (the first one a header) aligned in columns, as
// the list commands print them.
func printTable(out io.Writer, rows [][]string) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// listed ends a list command: the error of printing, else the error of
// loading (reported after listing what did load).
func listed(printErr, loadErr error) error {
	if printErr != nil {
		return printErr
	}
	return withCode(exitFailed, loadErr)
}
