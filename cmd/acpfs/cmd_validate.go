package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/acpfs/acpfs/protocol"
	"github.com/spf13/cobra"
)

func init() { registerPerEvent("validate", newValidateCmd) }

// protoValidateReport is the --json form of `acpfs validate`.
type protoValidateReport struct {
	Folder   string   `json:"folder"`
	Status   string   `json:"status"`
	ExitCode int      `json:"exitCode"`
	Errors   []string `json:"errors"`
	Warnings []string `json:"warnings"`
}

func newValidateCmd() *cobra.Command {
	var folder string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "validate",
		Short: "Validate an ACP collaboration folder (exit 0 passed, 1 warnings, 2 failed)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			dir, err := protoFolder(folder)
			if err != nil {
				return withCode(exitFailed, err)
			}
			if err := validateFolderExists(folder, dir); err != nil {
				if asJSON {
					rep := protoValidateReport{Folder: dir, Status: "failed", ExitCode: exitFailed, Errors: []string{err.Error()}, Warnings: []string{}}
					if perr := protoPrintJSON(cmd.OutOrStdout(), rep); perr != nil {
						return withCode(exitFailed, perr)
					}
				}
				return withCode(exitFailed, err)
			}
			res := protocol.Validate(dir)
			code := res.ExitCode()
			status := map[int]string{exitOK: "passed", exitWarnings: "passed with warnings", exitFailed: "failed"}[code]
			out := cmd.OutOrStdout()
			if asJSON {
				rep := protoValidateReport{Folder: dir, Status: status, ExitCode: code, Errors: res.Errors, Warnings: res.Warnings}
				if rep.Errors == nil {
					rep.Errors = []string{}
				}
				if rep.Warnings == nil {
					rep.Warnings = []string{}
				}
				if err := protoPrintJSON(out, rep); err != nil {
					return withCode(exitFailed, err)
				}
			} else {
				fmt.Fprintf(out, "ACP validation %s\n", status)
				for _, e := range res.Errors {
					fmt.Fprintf(out, "ERROR: %s\n", e)
				}
				for _, w := range res.Warnings {
					fmt.Fprintf(out, "WARNING: %s\n", w)
				}
			}
			if code != exitOK {
				return silentExit(code)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&folder, "folder", "", "collaboration folder")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	_ = cmd.MarkFlagRequired("folder")
	return cmd
}

// validateFolderExists gives one clear error for a --folder that is not
// a directory, instead of one per missing file.
func validateFolderExists(given, dir string) error {
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("no such folder: %s", given)
	case err != nil:
		return fmt.Errorf("cannot read folder %s: %w", given, err)
	case !st.IsDir():
		return fmt.Errorf("not a folder: %s", given)
	}
	return nil
}
